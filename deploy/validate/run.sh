#!/usr/bin/env bash
# Validates the Kubernetes manifests offline: renders every kustomize overlay of
# deploy/kubernetes/overlays with `kubectl kustomize` (no API server needed) and checks each
# rendered object against the Kubernetes schemas (npm packages kubernetes-models and yaml,
# installed into a cache directory outside the repo; ES modules resolve packages next to the
# script, so the script is copied there). validate.mjs also applies the project's own rules
# (Pod Security "restricted", probes, resources, selectors matching the pod labels).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CACHE:-/var/tmp/cmestream-k8s-validate}"
if [ ! -d "$CACHE/node_modules/kubernetes-models" ]; then
  mkdir -p "$CACHE"
  (cd "$CACHE" && npm init -y >/dev/null && npm install --no-audit --no-fund kubernetes-models yaml >/dev/null)
fi
cp deploy/validate/validate.mjs "$CACHE/validate.mjs"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
if ! command -v kubectl >/dev/null 2>&1; then
  echo "validate: kubectl not found (its built-in kustomize renders the overlays)" >&2
  exit 1
fi
files=()
for overlay in deploy/kubernetes/overlays/*/; do
  name="$(basename "$overlay")"
  kubectl kustomize "$overlay" >"$OUT/$name.yaml"
  files+=("$OUT/$name.yaml")
done
node "$CACHE/validate.mjs" "${files[@]}"
