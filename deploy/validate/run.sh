#!/usr/bin/env bash
# Validates deploy/kubernetes/*.yaml against the Kubernetes schemas offline (npm packages
# kubernetes-models and yaml, installed into a cache directory outside the repo; ES modules
# resolve packages next to the script, so the script is copied there).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CACHE:-/var/tmp/cmestream-k8s-validate}"
if [ ! -d "$CACHE/node_modules/kubernetes-models" ]; then
  mkdir -p "$CACHE"
  (cd "$CACHE" && npm init -y >/dev/null && npm install --no-audit --no-fund kubernetes-models yaml >/dev/null)
fi
cp deploy/validate/validate.mjs "$CACHE/validate.mjs"
node "$CACHE/validate.mjs" deploy/kubernetes/*.yaml
