#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang + ASan in build-fuzz (or $FUZZ_BUILD_DIR)
# and runs each from its seed corpus tests/fuzz/corpus/<target>/: for N seconds (exploration),
# or with FUZZ_RUNS=K for exactly K inputs from the fixed seed FUZZ_SEED (default 1), which
# is repeatable and is what scripts/test.sh (and so CI) runs.
# New inputs go to a scratch corpus under the build dir, never into the repository; a crash
# leaves its reproducer in build-fuzz/artifacts/ and fails the script.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-20}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=()
  for f in tests/fuzz/fuzz_*.cc; do TARGETS+=("$(basename "$f" .cc)"); done
fi
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
CXX_CLANG="$(command -v clang++ || command -v clang++-14 || true)"
if [ -z "$CXX_CLANG" ]; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  # Line tables only (-gline-tables-only): the file:line of every frame of a crash report, at 18 %
  # less compile CPU than -g and an eighth of the object size (core/koopman/koopman.cc, clang 14
  # with the sanitizers); the generated code is the same, so are the inputs a -runs= run tries.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMESTREAM_FUZZ=ON -DCMESTREAM_BUILD_TESTS=OFF -DCMESTREAM_BUILD_BENCHMARKS=OFF -DCMESTREAM_ARCH=x86-64-v2 >/dev/null
fi
cmake --build "$BUILD" --target "${TARGETS[@]}" -j "${FUZZ_JOBS:-2}"
mkdir -p "$BUILD/artifacts"
status=0
for t in "${TARGETS[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  work="$BUILD/corpus/$t"
  mkdir -p "$work"
  # -rss_limit_mb bounds memory; -max_len keeps inputs small enough to run fast.
  if [ -n "${FUZZ_RUNS:-}" ]; then
    budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
    rm -rf "$work" && mkdir -p "$work"   # a repeatable run starts from the seeds only
    echo "fuzz: $t, $FUZZ_RUNS inputs from seed ${FUZZ_SEED:-1} (seeds: $seeds)"
  else
    budget=(-max_total_time="$SECONDS_PER_TARGET")
    echo "fuzz: $t for ${SECONDS_PER_TARGET}s (seeds: $seeds)"
  fi
  if ! "$BUILD/tests/fuzz/$t" "${budget[@]}" -rss_limit_mb=1024 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" "$work" "$seeds" 2>"$BUILD/$t.log"; then
    echo "fuzz: $t FAILED, see $BUILD/$t.log and $BUILD/artifacts/" >&2
    tail -40 "$BUILD/$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$BUILD/$t.log" | sed "s/^/fuzz: $t /"
  fi
done
exit $status
