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
phases=()
t0=$(date +%s)
phase() {  # phase NAME: records the seconds since the previous phase ended
  local now; now=$(date +%s)
  phases+=("$1 $((now - t0)) s")
  t0=$now
}
scripts/install-deps.sh
phase install-deps
# The same build as scripts/demo.sh (Release, warnings as errors, build/): the demo's objects are
# reused, and this builds the rest (unit and integration tests, benchmarks, the load generator).
scripts/build.sh -DCMESTREAM_WERROR=ON
phase "build (gcc, build/)"
if [ "${CMESTREAM_SKIP_FUZZ:-0}" != "1" ]; then
  FUZZ_RUNS="${CMESTREAM_FUZZ_RUNS:-100000}" scripts/fuzz.sh
  phase "fuzz (clang+ASan build-fuzz/, build and run)"
fi
if [ "${CMESTREAM_SKIP_SANITIZE:-0}" != "1" ]; then
  scripts/sanitize.sh
  phase "sanitize (clang TSan+UBSan build-sanitize/, build and run)"
fi
status=0
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2 "$@" || status=$?
phase ctest
echo "test.sh: wall time per phase: $(IFS=';'; echo "${phases[*]}" | sed 's/;/, /g')"
exit $status
