#!/usr/bin/env bash
# ThreadSanitizer + UndefinedBehaviorSanitizer run of the tests that exercise threads, in one
# clang build (build-sanitize/, or $SANITIZE_BUILD_DIR; CMESTREAM_SANITIZE=ON, which also makes
# clang check the lock annotations with -Wthread-safety -Werror=thread-safety).
#
#   scripts/sanitize.sh                   build, then run every test binary below
#   scripts/sanitize.sh test_wal          only these binaries
#   SANITIZE_GTEST_FILTER='Wal*' scripts/sanitize.sh test_wal
#
# The subset (the code that shares state between threads; together a few minutes under TSan):
#   test_wal        WAL group commit (leader/follower fdatasync), interval sync thread,
#                   rotation under concurrent appends, registry replay
#   test_snapshot   snapshot writer vs ingestion (the cut, WaitAppliedThrough), periodic loop,
#                   import/export through the registry
#   test_daemon     the in-process daemon: gRPC handlers, ingest pool, per-model ordering,
#                   refresh scheduler and waiters, concurrent deletes/creates, metrics
#   test_limits     per-model admission queue under concurrent producers
# A report fails the run (halt_on_error); suppressions are for third-party code only and are
# documented in tests/sanitize/tsan.supp. Debian's Abseil is not instrumented:
# tests/sanitize/absl_mutex_tsan.cc makes absl::Mutex visible to TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BUILD="${SANITIZE_BUILD_DIR:-build-sanitize}"
TESTS=("$@")
[ ${#TESTS[@]} -eq 0 ] && TESTS=(test_wal test_snapshot test_daemon test_limits)
CXX_CLANG="$(command -v clang++ || command -v clang++-14 || true)"
if [ -z "$CXX_CLANG" ]; then
  echo "sanitize: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
SYMBOLIZER="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
start=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  # Benchmarks and the Python/CLI end-to-end tests are not part of this run.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
    -DCMESTREAM_SANITIZE=ON -DCMESTREAM_BUILD_BENCHMARKS=OFF \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST >/dev/null
fi
cmake --build "$BUILD" --target cmestreamd "${TESTS[@]}" -j "${SANITIZE_JOBS:-2}"
echo "sanitize: built in $(( $(date +%s) - start )) s"

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 suppressions=$ROOT/tests/sanitize/tsan.supp${SYMBOLIZER:+ external_symbolizer_path=$SYMBOLIZER}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
mkdir -p "$BUILD/sanitize-logs"
status=0
for t in "${TESTS[@]}"; do
  log="$BUILD/sanitize-logs/$t.log"
  t0=$(date +%s)
  if "$BUILD/tests/integration/$t" --gtest_brief=1 ${SANITIZE_GTEST_FILTER:+--gtest_filter="$SANITIZE_GTEST_FILTER"} >"$log" 2>&1; then
    echo "sanitize: $t passed in $(( $(date +%s) - t0 )) s"
  else
    echo "sanitize: $t FAILED after $(( $(date +%s) - t0 )) s; full log: $log" >&2
    grep -n -m1 -A60 -E "WARNING: ThreadSanitizer|runtime error:|FAILED|Failure" "$log" >&2 || tail -60 "$log" >&2
    status=1
  fi
done
echo "sanitize: total $(( $(date +%s) - start )) s"
exit $status
