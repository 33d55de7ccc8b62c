#!/usr/bin/env bash
# Issue 11 measurements of the ingest path (docs/benchmarks.md "Ingest off the RPC threads"):
# one daemon per run, fresh data dir, the load generator client/bench/ingest_loadgen.cc.
#   scripts/bench_ingest_parallel.sh [BUILD_DIR]        (default build)
# Env: CMESTREAMD / LOADGEN override the binaries (e.g. to compare with another build),
#      N pairs per stream (default 300000), SYNC_POLICIES (default "never always"),
#      DAEMON_FLAGS added to every daemon (e.g. "--ingest-nice 10"), PROBE_ONLY=1 runs only the
#      query-latency run (50 streams + probe), PRODUCER_NICE=N runs its producer threads at nice
#      N (as if they ran on other machines; the probe keeps nice 0 and its own client).
# Prints one loadgen line per run, prefixed with what ran. Runs take seconds each; do not loop.
set -euo pipefail
BUILD="${1:-build}"
CMESTREAMD="${CMESTREAMD:-$BUILD/service/cmestreamd}"
LOADGEN="${LOADGEN:-$BUILD/client/cmestream_ingest_loadgen}"
N="${N:-300000}"
SYNC_POLICIES="${SYNC_POLICIES:-never always}"
# Cheap model: wide kernel, small dictionary, so the figure is the pipeline and the learner's
# parallelism, not one model's O(m^2).
MODEL=(--dim 2 --sigma 1 --max-dict 64 --batch 1000)

run() {  # run LABEL "DAEMON FLAGS" LOADGEN ARGS...
  local label="$1" flags="$2"; shift 2
  local dir; dir="$(mktemp -d /tmp/cmestream-bench-XXXXXX)"
  local out="$dir/out"
  # shellcheck disable=SC2086
  "$CMESTREAMD" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$dir/data" \
      --snapshot-interval 0 $flags ${DAEMON_FLAGS:-} > "$out" 2> "$dir/err" &
  local pid=$!
  for _ in $(seq 200); do grep -q listening "$out" 2>/dev/null && break; sleep 0.05; done
  local addr; addr="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$out")"
  echo "$label: $("$LOADGEN" --server "$addr" --create "$@")"
  kill "$pid"; wait "$pid" || true
  rm -rf "$dir"
}

[ "${PROBE_ONLY:-0}" = 1 ] && SYNC_POLICIES=""
for sync in $SYNC_POLICIES; do
  run "one model, 1 stream, --wal-sync $sync" "--wal-sync $sync" --model r --n "$N" "${MODEL[@]}" --producer p
  run "two models, 2 streams, --wal-sync $sync" "--wal-sync $sync" --model r --models 2 --streams 2 --n "$N" "${MODEL[@]}" --producer p
done
# Queries under 50 concurrent ingest streams (10 models), default --wal-sync always.
run "50 streams / 10 models + GetModel/Koopman(1000 points) probe" "" --model r --models 10 --streams 50 \
    --n $((N / 10)) "${MODEL[@]}" --producer p --probe r-0 --producer-nice "${PRODUCER_NICE:-0}"
# Back-pressure: 50 streams into one model with a queue of 1 and of 4.
[ "${PROBE_ONLY:-0}" = 1 ] && exit 0
for q in 1 4; do
  run "50 streams / 1 model, --max-queued-batches $q" "--max-queued-batches $q" --model r --streams 50 \
      --n $((N / 10)) "${MODEL[@]}" --producer p
done
