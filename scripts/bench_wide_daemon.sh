#!/usr/bin/env bash
# Benchmark: the 512-channel four-well stream of tests/integration/test_wide_stream.py (the
# hidden 1-D four-well diffusion through a random two-layer ReLU map, plus noise) through a real
# cmestreamd with a default model (`--dim 512 --dt 0.1`, reduced to 32 directions). The first
# 8,000 rows fill the dictionary to its cap; the next 12,000 are timed, with each daemon thread's
# CPU over them (threads are named: cme-ingest, cme-helper, cme-refresh, ...).
# docs/benchmarks.md "The alarms' forecast in blocks, and the CME's y side on a lane".
#   scripts/bench_wide_daemon.sh [BUILD_DIR]          (default build)
# Env: DAEMON_FLAGS extra daemon flags (e.g. --helper-threads 0).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
CMESTREAMD="${CMESTREAMD:-$BUILD/service/cmestreamd}"
CLI="${CMESTREAM:-$BUILD/client/cmestream}"
dir="$(mktemp -d /tmp/cmestream-wide-XXXXXX)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
CMESTREAM="$CLI" PYTHONPATH="tests/integration:$BUILD/python:client/python:${PYTHONPATH:-}" /usr/bin/python3 - "$dir" <<'PY'
import os, sys
import numpy as np
import test_wide_stream as t
t.CMESTREAM = os.environ["CMESTREAM"]
s, truth = t.four_well(20000, 3, sys.argv[1])
rows = t.game_layer(s)
np.savetxt(os.path.join(sys.argv[1], "fill.csv"), rows[:8001], delimiter=",", fmt="%.6g")
np.savetxt(os.path.join(sys.argv[1], "timed.csv"), rows[8001:], delimiter=",", fmt="%.6g")
print(f"hidden four-well slowest timescale {truth:.4f}")
PY
# shellcheck disable=SC2086
"$CMESTREAMD" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$dir/data" ${DAEMON_FLAGS:-} \
    > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 200); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
addr="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$dir/out")"
cli() { "$CLI" --server "$addr" "$@"; }
cli model create g --dim 512 --dt 0.1 > /dev/null
cli ingest g --csv "$dir/fill.csv" --trajectory --quiet > /dev/null
threads() {  # tid name user+system ticks, per thread
  for t in /proc/"$pid"/task/*; do echo "$(basename "$t") $(cat "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done | sort
}
threads > "$dir/before"
t0=$(date +%s.%N)
cli ingest g --csv "$dir/timed.csv" --trajectory --quiet --episode timed
t1=$(date +%s.%N)
threads > "$dir/after"
hz=$(getconf CLK_TCK)
wall=$(echo "$t1 - $t0" | bc)
echo "timed: 11,999 pairs in ${wall} s wall"
join "$dir/before" "$dir/after" | awk -v hz="$hz" -v w="$wall" '
  { cpu[$2] += ($5 - $3) / hz }
  END { for (n in cpu) if (cpu[n] > 0.005) printf "  %-14s %6.2f s CPU (%3.0f %% of the wall time)\n", n, cpu[n], 100 * cpu[n] / w }' | sort
cli model describe g | grep -E "dictionary|per pair|spectral-moments"
