#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies, build, run ctest
# (C++ unit tests, daemon integration tests, Python client tests against the real daemon).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
