#!/usr/bin/env bash
# Regenerates the Duffing figures that README.md ("What the demo prints") and docs/user-guide.md
# (the --sigma row; "Warnings") quote, from one run of the demo: scripts/demo.sh as it is (20 000
# transitions of `cmestream simulate duffing --seed 1`, model `duffing` with sigma auto, dt 0.25,
# other settings default), then, on the same data, the model with sigma = the plain median
# distance (of the raw states) for the comparison the user guide makes. Prints the lines to quote; the docs must
# match them. The learner is deterministic, so every figure repeats on the same build except the
# view version and the prequential score: they depend on how many views the refresh scheduler
# built while the data streamed in (wall-clock timing).
#   SKIP_BUILD=1 scripts/docs_figures.sh     reuses an existing build (as scripts/demo.sh)
# Output: the demo's own output in $OUT/../docs-figures-demo.txt, then the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-demo-out}"
LOG="${OUT%/}-docs-figures-demo.txt"
CLI="$BUILD_DIR/client/cmestream"
DAEMON="$BUILD_DIR/service/cmestreamd"
PY=/usr/bin/python3

OUT="$OUT" scripts/demo.sh | tee "$LOG"
export PYTHONPATH="$PWD/$BUILD_DIR/python:$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}"

# The comparison model on a daemon of its own (the demo stopped its daemon at the end).
DATA="$(mktemp -d)"
"$DAEMON" --listen 127.0.0.1:0 --data-dir "$DATA/data" >"$DATA/out" 2>"$DATA/log" &
DAEMON_PID=$!
trap 'kill -TERM "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 200); do
  grep -q 'cmestreamd listening' "$DATA/out" 2>/dev/null && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$DATA/log" >&2; exit 1; }
  sleep 0.1
done
export CMESTREAM_SERVER="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$DATA/out")"
# The plain median pairwise distance of the warm-up's states in the data's own units (the demo's
# model scales its inputs, so the median it prints is in scaled units).
median="$("$PY" -c '
import sys, numpy as np
x = np.loadtxt(sys.argv[1], delimiter=",", comments="#", max_rows=1000)[:, :2]
d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
print("%.6g" % np.median(d[np.triu_indices(len(x), 1)]))' "$OUT/duffing.csv")"
[ -n "$median" ] || { echo "docs_figures: could not compute the median distance" >&2; exit 1; }
"$CLI" model create duffing-median --dim 2 --sigma "$median" --dt 0.25 >/dev/null
grep -v '^#' "$OUT/duffing.csv" | "$CLI" ingest duffing-median --csv - --producer all --quiet >/dev/null
"$CLI" refresh duffing-median --wait >/dev/null
median_basins="$("$PY" client/python/examples/duffing_demo.py --server "$CMESTREAM_SERVER" \
  --model duffing-median --cli "$CLI" --out "$DATA/median.png" | grep '^basin accuracy')"

echo
echo "== figures (scripts/docs_figures.sh; demo output in $LOG)"
grep -E '^ +sigma |^ +dictionary ' "$LOG" | tail -2
sed -n '/^== leading Koopman eigenvalues/,/^== eigenfunctions/p' "$LOG" | sed '$d'
grep '^basin accuracy' "$LOG"
echo "plain median sigma $median: $median_basins"
