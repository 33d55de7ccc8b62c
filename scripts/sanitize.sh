#!/usr/bin/env bash
# ThreadSanitizer + UndefinedBehaviorSanitizer run of the tests that exercise threads, in one
# clang build (build-sanitize/, or $SANITIZE_BUILD_DIR; CMESTREAM_SANITIZE=ON, which also makes
# clang check the lock annotations with -Wthread-safety -Werror=thread-safety).
#   Built for x86-64-v2 (the portable baseline, as the container image), not the project default:
#   correctness, not speed, and the non-AVX code paths (e.g. the SSE vector cos) get exercised.
#
#   scripts/sanitize.sh                   build, then run every test binary below
#   scripts/sanitize.sh test_wal          only these binaries
#   SANITIZE_GTEST_FILTER='Wal*' scripts/sanitize.sh test_wal
#
# The subset (the engine's shared state between threads; ~20 s under TSan once built):
#   test_wal        WAL group commit (leader/follower fdatasync), rotation under concurrent
#                   appends, replay through the registry, the registry lock tests
#                   (RegistryLock.*), and EngineThreads.*: producers through the Ingestor's
#                   pool, the refresh scheduler and its waiters, registry creates/cuts/deletes,
#                   all at once on a group-committing WAL
#   test_snapshot   snapshot writer vs ingestion (the cut, WaitAppliedThrough), import/export
#   test_periodic_thread  the one background loop (refresh ticks, periodic snapshots, WAL
#                   interval fsync): wake, coalescing, stop while running
#   test_side_lane  one model's learner on two threads (core/common/side_lane.h): its side
#                   lanes run by a helper thread while the owner learns the CME, across calls
#   test_forks      alarms starting forks (a model's sequencer, then the registry, then the
#                   fork's locks) while another thread lists, hashes, describes and deletes
# Not in the subset: the in-process gRPC daemon tests (test_daemon, test_limits, ...). Debian's
# gRPC is not instrumented, so its hand-offs between threads (completion queue, callback
# reactors in the grpcpp headers) are reported as races; a TSan suppression matches any frame
# of a stack and every handler's stack holds gRPC's callback frames, so suppressing them would
# also hide races in our handlers. They can be run by name (scripts/sanitize.sh test_daemon)
# for a look.
# A report fails the run (halt_on_error); suppressions are for third-party code only and are
# documented in tests/sanitize/tsan.supp. Debian's Abseil is not instrumented:
# tests/sanitize/absl_mutex_tsan.cc makes absl::Mutex visible to TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BUILD="${SANITIZE_BUILD_DIR:-build-sanitize}"
TESTS=("$@")
[ ${#TESTS[@]} -eq 0 ] && TESTS=(test_wal test_snapshot test_periodic_thread test_side_lane test_forks)
CXX_CLANG="$(command -v clang++ || command -v clang++-14 || true)"
if [ -z "$CXX_CLANG" ]; then
  echo "sanitize: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
SYMBOLIZER="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
start=$(date +%s)
if [ ! -f "$BUILD/build.ninja" ]; then
  # Benchmarks and the Python/CLI end-to-end tests are not part of this run.
  # Line tables only: file:line in every frame of a report, at 18 % less compile CPU than -g
  # (core/koopman/koopman.cc under TSan+UBSan, clang 14) and an eighth of the object size.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMESTREAM_SANITIZE=ON -DCMESTREAM_BUILD_BENCHMARKS=OFF -DCMESTREAM_ARCH=x86-64-v2 \
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
  bin="$BUILD/tests/service/$t"
  [ -x "$bin" ] || bin="$BUILD/tests/integration/$t"
  [ -x "$bin" ] || bin="$BUILD/tests/core/$t"
  if "$bin" --gtest_brief=1 ${SANITIZE_GTEST_FILTER:+--gtest_filter="$SANITIZE_GTEST_FILTER"} >"$log" 2>&1; then
    echo "sanitize: $t passed in $(( $(date +%s) - t0 )) s"
  else
    echo "sanitize: $t FAILED after $(( $(date +%s) - t0 )) s; full log: $log" >&2
    grep -n -m1 -A60 -E "WARNING: ThreadSanitizer|runtime error:|FAILED|Failure" "$log" >&2 || tail -60 "$log" >&2
    status=1
  fi
done
echo "sanitize: total $(( $(date +%s) - start )) s"
exit $status
