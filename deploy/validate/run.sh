#!/usr/bin/env bash
# Validates the Kubernetes manifests offline: renders every kustomize overlay of
# deploy/kubernetes/overlays with `kubectl kustomize` (no API server needed; kubectl >= 1.24,
# see deploy/README.md), checks the rendered NetworkPolicy, Service and PodDisruptionBudget
# selectors (rendered_policy.py), then checks each rendered object against the Kubernetes
# schemas (npm packages kubernetes-models and yaml, installed into a cache directory outside
# the repo; ES modules resolve packages next to the script, so the script is copied there).
# validate.mjs also applies the project's own rules (Pod Security "restricted", probes,
# resources, selectors matching the pod labels).
# Exit 77 (skipped, reason printed) when kubectl is missing or too old, or when the npm
# packages are neither cached nor installable (no network); rendered_policy.py without
# arguments checks the selectors with neither kubectl nor npm.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CACHE:-/var/tmp/cmestream-k8s-validate}"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "validate: kubectl not found (its built-in kustomize renders the overlays)" >&2
  exit 77
fi
minor="$(kubectl version --client -o json 2>/dev/null |
  /usr/bin/python3 -c 'import json,re,sys; print(re.match(r"\d+", json.load(sys.stdin)["clientVersion"]["minor"]).group())' || echo 0)"
if [ "$minor" -lt 24 ]; then
  echo "validate: kubectl 1.$minor cannot render the overlays (kustomize labels/includeTemplates need kubectl >= 1.24)" >&2
  exit 77
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
files=()
for overlay in deploy/kubernetes/overlays/*/; do
  name="$(basename "$overlay")"
  kubectl kustomize "$overlay" >"$OUT/$name.yaml"
  files+=("$OUT/$name.yaml")
done
/usr/bin/python3 deploy/validate/rendered_policy.py --rendered "${files[@]}"
if [ ! -d "$CACHE/node_modules/kubernetes-models" ]; then
  mkdir -p "$CACHE"
  if ! (cd "$CACHE" && npm init -y >/dev/null && npm install --no-audit --no-fund kubernetes-models yaml >/dev/null); then
    echo "validate: npm packages kubernetes-models and yaml not installable (offline?): schemas not checked" >&2
    exit 77
  fi
fi
cp deploy/validate/validate.mjs "$CACHE/validate.mjs"
node "$CACHE/validate.mjs" "${files[@]}"
