#!/usr/bin/env bash
# The demo (README's first command): installs dependencies, builds, starts cmestreamd with its
# default configuration (loopback, port 0, data under ./demo-out), streams a simulated Duffing
# oscillator into it, and shows what it learned: dictionary size vs samples seen, the bandwidth
# sigma chosen automatically, the leading Koopman eigenvalues with implied timescales, and
# demo-out/duffing_koopman.png (leading eigenfunctions, dictionary atoms, the basins of
# attraction they reveal next to the true basins). The daemon is stopped (SIGTERM) at the end,
# also on failure.
#   SKIP_BUILD=1 scripts/demo.sh   reuses an existing build in ${BUILD_DIR:-build}
#   SEED=3 scripts/demo.sh         another simulated trajectory (default seed 1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-demo-out}"
N="${N:-20000}"
CHUNKS=10

if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh
  scripts/build.sh
fi
CLI="$BUILD_DIR/client/cmestream"
DAEMON="$BUILD_DIR/service/cmestreamd"
PY=/usr/bin/python3
export PYTHONPATH="$PWD/$BUILD_DIR/python:$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}"

rm -rf "$OUT"
mkdir -p "$OUT"
"$DAEMON" --listen 127.0.0.1:0 --data-dir "$OUT/data" --metrics-listen 127.0.0.1:0 \
  >"$OUT/cmestreamd.out" 2>"$OUT/cmestreamd.log" &
DAEMON_PID=$!
stop_daemon() {
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    wait "$DAEMON_PID" || true
    echo "== cmestreamd stopped (log: $OUT/cmestreamd.log)"
  fi
}
trap stop_daemon EXIT

for _ in $(seq 200); do
  grep -q 'cmestreamd listening' "$OUT/cmestreamd.out" 2>/dev/null && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$OUT/cmestreamd.log" >&2; exit 1; }
  sleep 0.1
done
SERVER=$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$OUT/cmestreamd.out")
METRICS=$(sed -n 's/.*metrics=\([^ ]*\).*/\1/p' "$OUT/cmestreamd.out")
[ -n "$SERVER" ] || { echo "demo: cmestreamd did not report its port" >&2; exit 1; }
export CMESTREAM_SERVER="$SERVER"
echo "== cmestreamd on $SERVER (metrics http://$METRICS/metrics)"

echo "== simulating $N Duffing transitions (dt 0.25, starts uniform in [-2,2]^2)"
"$CLI" simulate duffing --n "$N" --seed "${SEED:-1}" >"$OUT/duffing.csv"

echo "== creating model 'duffing' (sigma auto, dt 0.25, other settings default)"
"$CLI" model create duffing --dim 2 --sigma auto --dt 0.25 >/dev/null

echo "== streaming in $CHUNKS chunks; dictionary size vs samples seen"
printf '%10s %12s %10s %10s\n' samples dictionary forced sigma
per=$((N / CHUNKS))
for i in $(seq 0 $((CHUNKS - 1))); do
  # Each chunk is its own producer (offsets start at 0 per command; see `ingest --help`).
  grep -v '^#' "$OUT/duffing.csv" | sed -n "$((i * per + 1)),$(((i + 1) * per))p" |
    "$CLI" ingest duffing --csv - --producer "sim-chunk-$i" --quiet >/dev/null
  "$CLI" model describe duffing --json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
s = d["sigma"]
print("%10d %12d %10d %10s" % (d["samples"], d["dictionary_size"], d["forced_compressions"],
      "%.4g" % s if s is not None else "warm-up"))'
done

echo "== refreshing the view"
"$CLI" refresh duffing --wait
echo "== sigma chosen automatically (held-out VAMP-2 score per candidate bandwidth)"
"$CLI" model describe duffing | grep -E 'sigma|dictionary'
echo "== leading Koopman eigenvalues and implied timescales (seconds)"
"$CLI" koopman duffing --top 6

echo "== eigenfunctions and basins -> $OUT/duffing_koopman.png"
"$PY" client/python/examples/duffing_demo.py --server "$SERVER" --model duffing --cli "$CLI" \
  --out "$OUT/duffing_koopman.png"
