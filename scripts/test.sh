#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies, build, a short
# deterministic libFuzzer smoke run of the input decoders (clang + ASan build in build-fuzz),
# then ctest (C++ unit tests, daemon integration and fault tests, CLI and Python client tests
# against the real daemon). ctest runs last so that its summary closes the output.
#   CMESTREAM_SKIP_FUZZ=1 scripts/test.sh      skips the fuzz smoke run
#   scripts/test.sh -R Daemon                  extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
if [ "${CMESTREAM_SKIP_FUZZ:-0}" != "1" ]; then
  FUZZ_RUNS="${CMESTREAM_FUZZ_RUNS:-100000}" scripts/fuzz.sh
fi
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
