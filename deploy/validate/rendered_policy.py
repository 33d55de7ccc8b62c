#!/usr/bin/env python3
"""Checks the selectors of the rendered Kubernetes manifests without kubectl or a cluster.

Renders every overlay of deploy/kubernetes/overlays with a small kustomize emulation (only the
kustomization fields the project uses; any other field is an error, so the emulation cannot
silently drift from what kustomize would do), or reads manifests kubectl already rendered
(--rendered FILE...), and then evaluates the NetworkPolicy the way the API defines it:

  - a pod labelled cmestream-client=true in the daemon's namespace reaches gRPC (50051) and
    not the metrics port; an unlabelled pod reaches neither;
  - a pod in the namespace `monitoring` reaches the metrics port (9464) and not gRPC;
  - the policy, the Services and the PodDisruptionBudget select the StatefulSet's pods, and the
    StatefulSet's selector matches its own pod template.

Why the emulation: kustomize's `labels` with includeSelectors (and `commonLabels`) also write
their pairs into every NetworkPolicy peer selector (spec.ingress[].from[].podSelector), which
made the policy admit only clients carrying the daemon's own label. This check renders the
same field specifications, so such a change fails here, offline and with Debian's tools only
(python3-yaml); `kubectl kustomize` needs kubectl >= 1.24 for these overlays (deploy/README.md).

  deploy/validate/rendered_policy.py                   render the overlays and check them
  deploy/validate/rendered_policy.py --rendered F...   check kubectl-rendered manifests
"""
import argparse
import copy
import os
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KUSTOMIZE_DIR = os.path.join(ROOT, "deploy", "kubernetes")

GRPC_PORT, METRICS_PORT = 50051, 9464
NAMESPACE = "cmestream"          # any namespace: the overlays do not set one
MONITORING = "monitoring"


class RenderError(Exception):
    pass


# kustomize's field specifications for the kinds the manifests use (sigs.k8s.io/kustomize
# api/konfig/builtinpluginconsts: commonlabels.go for includeSelectors / commonLabels, and the
# template labels for includeTemplates). (path, create): with create False a label is only
# added where the map already exists. Lists on the way are walked element by element.
SELECTOR_SPECS = {
    "Service": [("spec/selector", True)],
    "StatefulSet": [("spec/selector/matchLabels", True), ("spec/template/metadata/labels", True),
                    ("spec/volumeClaimTemplates/metadata/labels", True)]
                   + [(f"spec/template/spec/affinity/{a}/{t}/labelSelector/matchLabels", False)
                      for a in ("podAffinity", "podAntiAffinity")
                      for t in ("preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm",
                                "requiredDuringSchedulingIgnoredDuringExecution")],
    "PodDisruptionBudget": [("spec/selector/matchLabels", False)],
    "NetworkPolicy": [("spec/podSelector/matchLabels", False),
                      ("spec/ingress/from/podSelector/matchLabels", False),
                      ("spec/egress/to/podSelector/matchLabels", False)],
    "Secret": [], "ConfigMap": [],
}
TEMPLATE_SPECS = {
    "StatefulSet": [("spec/template/metadata/labels", True),
                    ("spec/volumeClaimTemplates/metadata/labels", True)],
}


def _add_at(node, parts, pairs, create):
    if isinstance(node, list):
        for item in node:
            _add_at(item, parts, pairs, create)
        return
    if not isinstance(node, dict):
        return
    key, rest = parts[0], parts[1:]
    if key not in node or node[key] is None:
        if not create:
            return
        node[key] = {}
    if rest:
        _add_at(node[key], rest, pairs, create)
    else:
        node[key].update(pairs)


def apply_labels(objs, pairs, selectors, templates):
    for obj in objs:
        kind = obj.get("kind")
        if kind not in SELECTOR_SPECS:
            raise RenderError(f"the emulation has no label field specs for kind {kind}: add them "
                              "(kustomize's commonlabels.go) before using it")
        specs = [("metadata/labels", True)]
        if selectors:
            specs += SELECTOR_SPECS[kind]
        elif templates:
            specs += TEMPLATE_SPECS.get(kind, [])
        for path, create in specs:
            _add_at(obj, path.split("/"), pairs, create)


def _json_patch(obj, ops, where):
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = obj
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind in ("add", "replace") and isinstance(parent, list):
            if last == "-":
                parent.append(copy.deepcopy(op["value"]))
            elif kind == "add":
                parent.insert(int(last), copy.deepcopy(op["value"]))
            else:
                parent[int(last)] = copy.deepcopy(op["value"])
        elif kind == "add" or (kind == "replace" and last in parent):
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise RenderError(f"{where}: JSON patch op {kind} on {op['path']} not supported")


def _targets(objs, target, where):
    unknown = set(target) - {"kind", "name"}
    if unknown:
        raise RenderError(f"{where}: patch target fields {sorted(unknown)} not supported")
    return [o for o in objs if o["kind"] == target.get("kind", o["kind"])
            and o["metadata"]["name"] == target.get("name", o["metadata"]["name"])]


def apply_patches(objs, patches, where):
    for entry in patches:
        if "path" in entry:
            with open(os.path.join(where, entry["path"])) as f:
                text = f.read()
        else:
            text = entry["patch"]
        body = yaml.safe_load(text)
        targets = _targets(objs, entry.get("target", {}), where)
        if isinstance(body, list):
            for obj in targets:
                _json_patch(obj, body, where)
        elif isinstance(body, dict) and body.get("$patch") == "delete":
            gone = {id(o) for o in targets if o["metadata"]["name"] == body["metadata"]["name"]
                    and o["kind"] == body["kind"]}
            objs[:] = [o for o in objs if id(o) not in gone]
        else:
            raise RenderError(f"{where}: strategic-merge patches other than $patch: delete are "
                              "not supported by the emulation")


KNOWN_FIELDS = {"apiVersion", "kind", "resources", "components", "labels", "commonLabels",
                "replicas", "patches"}


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` would print, as far as labels, selectors,
    the set of objects and the patched fields go."""
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    unknown = set(k) - KNOWN_FIELDS
    if unknown:
        raise RenderError(f"{directory}: kustomization fields {sorted(unknown)} are not emulated")
    objs = []
    for res in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            objs += render(path)
        else:
            with open(path) as f:
                objs += [d for d in yaml.safe_load_all(f) if d]
    for comp in k.get("components", []):
        objs = render_component(os.path.normpath(os.path.join(directory, comp)), objs)
    apply_patches(objs, k.get("patches", []), directory)
    if k.get("commonLabels"):
        apply_labels(objs, k["commonLabels"], selectors=True, templates=True)
    for spec in k.get("labels", []):
        unknown = set(spec) - {"pairs", "includeSelectors", "includeTemplates"}
        if unknown:
            raise RenderError(f"{directory}: labels fields {sorted(unknown)} not emulated")
        apply_labels(objs, spec["pairs"], spec.get("includeSelectors", False),
                     spec.get("includeTemplates", False))
    for r in k.get("replicas", []):
        for o in objs:
            if o["metadata"]["name"] == r["name"] and "replicas" in o.get("spec", {}):
                o["spec"]["replicas"] = r["count"]
    return objs


def render_component(directory, objs):
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    unknown = set(k) - {"apiVersion", "kind", "patches"}
    if unknown:
        raise RenderError(f"{directory}: component fields {sorted(unknown)} are not emulated")
    apply_patches(objs, k.get("patches", []), directory)
    return objs


# --- Label selectors and NetworkPolicy semantics (k8s.io/api networking/v1) -------------------

def selects(selector, labels):
    """A LabelSelector ({matchLabels, matchExpressions}); an empty selector selects everything
    (as the API defines), a missing one (None) nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def admits(policy, pod, peer_labels, peer_namespace, port, container_ports):
    """Whether the NetworkPolicy lets a pod (labels peer_labels, in namespace peer_namespace
    labelled only with its name) open TCP `port` on `pod` (labels), in NAMESPACE."""
    spec = policy["spec"]
    if not selects(spec.get("podSelector", {}), pod):
        return True                      # the policy does not isolate this pod
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        return True
    ns_labels = {"kubernetes.io/metadata.name": peer_namespace}
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == "TCP" and
                             container_ports.get(p.get("port"), p.get("port")) == port
                             for p in ports):
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            if "ipBlock" in peer:
                continue
            ns_ok = (selects(peer["namespaceSelector"], ns_labels) if "namespaceSelector" in peer
                     else peer_namespace == NAMESPACE)
            pod_ok = selects(peer["podSelector"], peer_labels) if "podSelector" in peer else True
            if ns_ok and pod_ok:
                return True
    return False


# (who, peer labels, peer namespace, port, expected): the access the NetworkPolicy's comment
# and deploy/README.md document.
ACCESS = [
    ("a cmestream-client=true pod", {"cmestream-client": "true"}, NAMESPACE, GRPC_PORT, True),
    ("a cmestream-client=true pod", {"cmestream-client": "true"}, NAMESPACE, METRICS_PORT, False),
    ("an unlabelled pod", {"app": "other"}, NAMESPACE, GRPC_PORT, False),
    ("an unlabelled pod", {"app": "other"}, NAMESPACE, METRICS_PORT, False),
    ("Prometheus in namespace monitoring", {"app.kubernetes.io/name": "prometheus"}, MONITORING,
     METRICS_PORT, True),
    ("Prometheus in namespace monitoring", {"app.kubernetes.io/name": "prometheus"}, MONITORING,
     GRPC_PORT, False),
]


def check(objs, where):
    """Failures (strings) of the rendered objects of one overlay."""
    failures = []
    sets = [o for o in objs if o["kind"] == "StatefulSet"]
    if len(sets) != 1:
        return [f"{where}: expected one StatefulSet, found {len(sets)}"]
    sts = sets[0]
    pod = sts["spec"]["template"]["metadata"].get("labels") or {}
    ports = {p["name"]: p["containerPort"] for c in sts["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", []) if "name" in p}
    if not sts["spec"].get("selector", {}).get("matchLabels") or not selects(sts["spec"]["selector"], pod):
        failures.append(f"{where}: StatefulSet selector does not match its pod template")
    for o in objs:
        name = f"{where}: {o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service" and not (o["spec"].get("selector") and
                                           selects({"matchLabels": o["spec"]["selector"]}, pod)):
            failures.append(f"{name}: selector {o['spec'].get('selector')} does not select the pods")
        if o["kind"] == "PodDisruptionBudget" and not (
                o["spec"].get("selector", {}).get("matchLabels") and selects(o["spec"]["selector"], pod)):
            failures.append(f"{name}: selector does not select the pods")
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    if not policies:
        failures.append(f"{where}: no NetworkPolicy")
    for policy in policies:
        name = f"{where}: NetworkPolicy/{policy['metadata']['name']}"
        if not policy["spec"].get("podSelector", {}).get("matchLabels") or \
                not selects(policy["spec"]["podSelector"], pod):
            failures.append(f"{name}: podSelector does not select the daemon's pods")
            continue
        for who, labels, ns, port, expected in ACCESS:
            got = admits(policy, pod, labels, ns, port, ports)
            if got != expected:
                peers = [p for r in policy["spec"].get("ingress") or [] for p in r.get("from") or []]
                failures.append(f"{name}: {who} is {'admitted to' if got else 'denied'} port {port}, "
                                f"expected {'admitted' if expected else 'denied'} (rendered peers: {peers})")
    return failures


def overlays(base=KUSTOMIZE_DIR):
    d = os.path.join(base, "overlays")
    return sorted(os.path.join(d, n) for n in os.listdir(d)
                  if os.path.isfile(os.path.join(d, n, "kustomization.yaml")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rendered", nargs="+", metavar="FILE",
                    help="check these rendered manifests (kubectl kustomize output) instead")
    a = ap.parse_args()
    failures, checked = [], 0
    if a.rendered:
        for path in a.rendered:
            with open(path) as f:
                failures += check([d for d in yaml.safe_load_all(f) if d], path)
            checked += 1
    else:
        for overlay in overlays():
            failures += check(render(overlay), os.path.relpath(overlay, ROOT))
            checked += 1
    for f in failures:
        print(f, file=sys.stderr)
    print(f"rendered policy: {checked} overlays checked, {len(failures)} problems")
    return 1 if failures or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
