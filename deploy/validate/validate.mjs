// Offline schema validation of the Kubernetes manifests (no API server needed):
// every document is instantiated as its kubernetes-models class and validated.
//   node deploy/validate/validate.mjs deploy/kubernetes/*.yaml
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as core from "kubernetes-models/v1";
import * as apps from "kubernetes-models/apps/v1";

const kinds = { "v1": core, "apps/v1": apps };
let failed = 0, checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const obj = doc.toJS();
    if (!obj) continue;
    const group = kinds[obj.apiVersion];
    const Kind = group && group[obj.kind];
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    if (!Kind) { console.error(`${where}: unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`); failed++; continue; }
    try { new Kind(obj).validate(); checked++; console.log(`${where}: valid`); }
    catch (e) { console.error(`${where}: ${e.message}`); failed++; }
  }
}
console.log(`${checked} valid, ${failed} invalid`);
process.exit(failed ? 1 : 0);
