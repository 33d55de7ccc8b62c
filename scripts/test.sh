#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies, build (warnings are
# errors: CMESTREAM_WERROR), a short deterministic libFuzzer smoke run of the input decoders
# (clang + ASan build in build-fuzz), the threaded tests under ThreadSanitizer + UBSan (clang,
# with the lock annotations checked: scripts/sanitize.sh, build-sanitize), then ctest (C++ unit
# tests, daemon integration and fault tests, CLI and Python client tests against the real
# daemon). ctest runs last so that its summary closes the output.
#   CMESTREAM_SKIP_FUZZ=1 scripts/test.sh      skips the fuzz smoke run
#   CMESTREAM_SKIP_SANITIZE=1 scripts/test.sh  skips the sanitizer build and run
#   scripts/test.sh -R Daemon                  extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DCMESTREAM_WERROR=ON
if [ "${CMESTREAM_SKIP_FUZZ:-0}" != "1" ]; then
  FUZZ_RUNS="${CMESTREAM_FUZZ_RUNS:-100000}" scripts/fuzz.sh
fi
if [ "${CMESTREAM_SKIP_SANITIZE:-0}" != "1" ]; then
  scripts/sanitize.sh
fi
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
