#!/usr/bin/env bash
# The demo (README's first command): installs dependencies, builds what it runs (cmestreamd, the
# CLI, the Python stubs; Release into build/, which scripts/test.sh then completes), starts
# cmestreamd with its default configuration (loopback, port 0, data under ./demo-out), streams a
# simulated Duffing oscillator into it, and shows what it learned: dictionary size vs samples
# seen, the bandwidth sigma chosen automatically, the leading Koopman eigenvalues with implied
# timescales, and demo-out/duffing_koopman.png (leading eigenfunctions, dictionary atoms, the
# basins of attraction they reveal next to the true basins). It ends with the answer (timescales,
# basin accuracy). The daemon is stopped (SIGTERM) at the end, also on failure.
#   SKIP_BUILD=1 scripts/demo.sh   reuses an existing build in ${BUILD_DIR:-build}
#   SEED=3 scripts/demo.sh         another simulated trajectory (default seed 1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-demo-out}"
N="${N:-20000}"
CHUNKS=10
# What the demo runs, and all it builds: the daemon, the CLI and the Python stubs the plot uses.
DEMO_TARGETS="cmestreamd cmestream cmestream_proto_python"
t_start=$(date +%s)

echo "== cmestream demo: builds the daemon (cmestreamd) and the CLI (cmestream), starts the daemon,"
echo "   streams $N simulated Duffing transitions into it and prints what it learned:"
echo "   the leading Koopman timescales and the basins of attraction ($OUT/duffing_koopman.png)."
if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh
  # Release into build/, the directory and flags scripts/test.sh uses, so the tests reuse it.
  CONFIGURE_ONLY=1 scripts/build.sh
  # shellcheck disable=SC2086
  steps=$(ninja -C "$BUILD_DIR" -t commands $DEMO_TARGETS 2>/dev/null | wc -l || true)
  echo "== building $DEMO_TARGETS (Release, 2 jobs; $steps steps, fewer if some are up to date):"
  echo "   about 6 minutes on 2 idle cores from an empty compiler cache (11 minutes of CPU; longer"
  echo "   on a busy machine), under a minute with a warm ccache, seconds when nothing changed."
  echo "   Progress: [done/total, seconds elapsed]."
  t_build=$(date +%s)
  TARGETS="$DEMO_TARGETS" scripts/build.sh
  echo "== built in $(( $(date +%s) - t_build )) s"
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
  --out "$OUT/duffing_koopman.png" | tee "$OUT/basins.txt"

"$CLI" koopman duffing --top 6 --json >"$OUT/koopman.json"
stop_daemon

# The answer, last, so that it is what stays on the screen.
echo
echo "== result ($(( $(date +%s) - t_start )) s in all)"
"$PY" -c '
import json, sys
k = json.load(sys.stdin)
rows = [(t, p) for t, p, s in zip(k["timescales"], k["periods"], k["stationary"]) if t is not None and not s]
seen = []
for t, p in rows:  # a complex pair has one timescale and period: print it once
    if not any(abs(t - u) < 1e-9 and (p or 0) == (q or 0) for u, q in seen):
        seen.append((t, p))
print("   leading Koopman timescales (s): " + ", ".join(
    "%.4g" % t + (" (oscillation period %.4g)" % p if p else "") for t, p in seen[:3]))
h = k.get("headline") or {}
if h.get("nonstationary"):
    print("   (the stream is a transient: trajectories started in a box; modes with |mu| > 1 have no timescale)")' <"$OUT/koopman.json"
sed -n 's/^basin accuracy \([0-9.]*\) on a \([^ ]*\) grid.*/   basins of attraction from the eigenfunctions: \1 of the \2 grid points right/p' "$OUT/basins.txt"
echo "   figure: $OUT/duffing_koopman.png"
