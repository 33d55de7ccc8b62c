#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies, build, run ctest
# (C++ unit tests, daemon integration tests, Python client tests against the real daemon).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
# CI: a short libFuzzer run of every target in tests/fuzz (clang + ASan build in build-fuzz).
if [ "${CMESTREAM_CI_FUZZ:-0}" = "1" ]; then
  scripts/fuzz.sh "${CMESTREAM_FUZZ_SECONDS:-10}"
fi
