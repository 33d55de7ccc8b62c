#!/usr/bin/env bash
# Query latency under 50 concurrent ingest streams, with the query client in its own process
# (as in production, where producers and dashboards are different programs): a load generator
# runs 50 streams into 10 models, and a probe-only load generator (--streams 0) calls GetModel and
# a Koopman query of 1000 points on one of them in a loop for 8 s meanwhile.
# docs/benchmarks.md "Query tails".
#   scripts/bench_query_tail.sh [BUILD_DIR]     (default build)
# Env: INGEST_NICE (daemon --ingest-nice, default 10), LOAD_NICE (nice of the whole 50-stream
#      load generator process, default 0), N pairs per stream (default 60000).
set -euo pipefail
cd "$(dirname "$0")/.."
B="${1:-build}"
dir="$(mktemp -d /tmp/cmestream-tail-XXXXXX)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$B/service/cmestreamd" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$dir/data" \
    --snapshot-interval 0 --ingest-nice "${INGEST_NICE:-10}" > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 200); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
addr="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$dir/out")"
LOADGEN="$B/client/cmestream_ingest_loadgen"
MODEL=(--dim 2 --sigma 1 --max-dict 64 --batch 1000)
"$LOADGEN" --server "$addr" --create --model r --models 10 --streams 10 --n 2000 "${MODEL[@]}" > /dev/null
nice -n "${LOAD_NICE:-0}" "$LOADGEN" --server "$addr" --model r --models 10 --streams 50 --n "${N:-60000}" \
    "${MODEL[@]}" --producer p > "$dir/load" &
load=$!
sleep 0.5
probe="$("$LOADGEN" --server "$addr" --model r --streams 0 --probe r-0 --probe-seconds 8 "${MODEL[@]}")"
wait "$load"
echo "ingest-nice ${INGEST_NICE:-10}, load generator nice ${LOAD_NICE:-0}: $(grep -o 'pairs_per_s=[^ ]*' "$dir/load"), $(grep -o 'probes=.*' <<< "$probe")"
