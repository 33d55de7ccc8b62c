// Offline validation of rendered Kubernetes manifests (no API server needed): every document
// is instantiated as its kubernetes-models class and validated against the schema, then the
// project's own rules are checked:
//   - pods meet Pod Security "restricted": runAsNonRoot, seccompProfile RuntimeDefault,
//     allowPrivilegeEscalation false, capabilities drop ALL;
//   - every container has startup, readiness and liveness probes and memory requests/limits;
//   - selectors of Services, PodDisruptionBudgets and NetworkPolicies match the pod labels.
//   node deploy/validate/validate.mjs rendered/*.yaml
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as core from "kubernetes-models/v1";
import * as apps from "kubernetes-models/apps/v1";
import * as policy from "kubernetes-models/policy/v1";
import * as networking from "kubernetes-models/networking.k8s.io/v1";

const kinds = { "v1": core, "apps/v1": apps, "policy/v1": policy, "networking.k8s.io/v1": networking };
let failed = 0, checked = 0;
const fail = (where, msg) => { console.error(`${where}: ${msg}`); failed++; };
const matches = (selector, labels) =>
  selector && Object.keys(selector).length > 0 &&
  Object.entries(selector).every(([k, v]) => labels[k] === v);

for (const file of process.argv.slice(2)) {
  const objs = parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS()).filter(Boolean);
  const podLabels = objs.filter((o) => o.kind === "StatefulSet").map((o) => o.spec.template.metadata.labels);
  for (const obj of objs) {
    const group = kinds[obj.apiVersion];
    const Kind = group && group[obj.kind];
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    if (!Kind) { fail(where, `unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`); continue; }
    try { new Kind(obj).validate(); } catch (e) { fail(where, e.message); continue; }
    const before = failed;
    if (obj.kind === "StatefulSet") {
      const pod = obj.spec.template.spec;
      if (!matches(obj.spec.selector.matchLabels, obj.spec.template.metadata.labels)) fail(where, "selector does not match the pod labels");
      if (pod.securityContext?.runAsNonRoot !== true) fail(where, "pod securityContext.runAsNonRoot must be true");
      if (pod.securityContext?.seccompProfile?.type !== "RuntimeDefault") fail(where, "pod seccompProfile must be RuntimeDefault");
      for (const c of pod.containers) {
        const sc = c.securityContext || {};
        if (sc.allowPrivilegeEscalation !== false) fail(where, `${c.name}: allowPrivilegeEscalation must be false`);
        if (!(sc.capabilities?.drop || []).includes("ALL")) fail(where, `${c.name}: capabilities must drop ALL`);
        for (const p of ["startupProbe", "readinessProbe", "livenessProbe"]) if (!c[p]) fail(where, `${c.name}: no ${p}`);
        if (!c.resources?.requests?.memory || !c.resources?.limits?.memory) fail(where, `${c.name}: memory request and limit required`);
        const mounts = new Set((c.volumeMounts || []).map((m) => m.name));
        const volumes = new Set([...(pod.volumes || []).map((v) => v.name),
                                 ...(obj.spec.volumeClaimTemplates || []).map((v) => v.metadata.name)]);
        for (const m of mounts) if (!volumes.has(m)) fail(where, `${c.name}: volumeMount ${m} has no volume`);
      }
    }
    const selector = obj.kind === "Service" ? obj.spec.selector
      : obj.kind === "PodDisruptionBudget" ? obj.spec.selector?.matchLabels
      : obj.kind === "NetworkPolicy" ? obj.spec.podSelector?.matchLabels : undefined;
    if (["Service", "PodDisruptionBudget", "NetworkPolicy"].includes(obj.kind) &&
        !podLabels.some((labels) => matches(selector, labels))) {
      fail(where, "selector matches no pod of the StatefulSet (an empty selector would match every pod)");
    }
    if (failed === before) { checked++; console.log(`${where}: valid`); }
  }
}
console.log(`${checked} valid, ${failed} invalid`);
process.exit(failed ? 1 : 0);
