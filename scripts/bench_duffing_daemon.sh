#!/usr/bin/env bash
# Benchmark: 20 000 Duffing pairs (sigma 0.5, the default model otherwise) through a real
# cmestreamd (default --wal-sync always), ingest + refresh wall time, the per-view build times
# of that refresh, and the numpy recursion (scripts/cme_numpy_baseline.py --stream) on the same
# CSV in the same run. docs/benchmarks.md "Refresh cost per view" and "Through the daemon".
#   scripts/bench_duffing_daemon.sh [BUILD_DIR]          (default build)
# Env: CMESTREAMD / CMESTREAM override the binaries (e.g. another build), N pairs (default 20000),
#      NUMPY=0 skips the numpy run, DAEMON_FLAGS extra daemon flags, REFRESH_INTERVAL the model's.
# Prints wall and daemon CPU time (from /proc): on a shared machine read the CPU figures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
CMESTREAMD="${CMESTREAMD:-$BUILD/service/cmestreamd}"
CLI="${CMESTREAM:-$BUILD/client/cmestream}"
N="${N:-20000}"
dir="$(mktemp -d /tmp/cmestream-duffing-XXXXXX)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$CLI" simulate duffing --n "$N" --seed 1 > "$dir/d.csv"
# shellcheck disable=SC2086
"$CMESTREAMD" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$dir/data" ${DAEMON_FLAGS:-} \
    > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 200); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.05; done
addr="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$dir/out")"
cli() { "$CLI" --server "$addr" "$@"; }
# REFRESH_INTERVAL (default 2 s, the daemon's): periodic refreshes run during the ingest too.
cli model create duf --dim 2 --sigma 0.5 --dt 0.25 --refresh-interval "${REFRESH_INTERVAL:-2}" > /dev/null
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }  # daemon user + system CPU, clock ticks
c0=$(cpu); t0=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$dir/client_cpu" "$CLI" --server "$addr" ingest duf --csv "$dir/d.csv" --quiet
c1=$(cpu); t1=$(date +%s.%N)
cli refresh duf --wait > /dev/null
c2=$(cpu); t2=$(date +%s.%N)
desc="$(cli model describe duf --json)"
hz=$(getconf CLK_TCK)
/usr/bin/python3 - "$t0" "$t1" "$t2" "$N" "$desc" "$c0" "$c1" "$c2" "$hz" <<'PY'
import json, sys
t0, t1, t2, n = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
d = json.loads(sys.argv[5])
c0, c1, c2, hz = (float(v) for v in sys.argv[6:10])
views = d.get("view_build_seconds_by_view", {})
print(f"daemon: {n} pairs, ingest {t1 - t0:.3f} s wall / {(c1 - c0) / hz:.2f} s daemon CPU ({n / (t1 - t0):.0f} pairs/s wall), "
      f"refresh --wait {t2 - t1:.3f} s wall / {(c2 - c1) / hz:.2f} s CPU, ingest+refresh {t2 - t0:.3f} s wall / "
      f"{(c2 - c0) / hz:.2f} s CPU; m_x {d.get('dictionary_size')}; last view built in "
      f"{d.get('view_build_seconds', float('nan')):.3f} s" + (": " + ", ".join(f"{k} {v:.3f}" for k, v in views.items()) if views else ""))
PY
# Mean build seconds per sub-view over every refresh of the run (the view_build histogram).
maddr="$(sed -n 's/.*metrics=\([^ ]*\).*/\1/p' "$dir/out")"
curl -s "http://$maddr/metrics" | /usr/bin/python3 -c '
import re, sys
s, c = {}, {}
for line in sys.stdin:
    m = re.match(r"cmestream_view_build_seconds_(sum|count)\{.*view=\"([^\"]+)\".*\} (\S+)", line)
    if m:
        (s if m.group(1) == "sum" else c)[m.group(2)] = float(m.group(3))
print("mean view build seconds over %d refreshes: " % max(c.values(), default=0) +
      ", ".join("%s %.4f" % (v, s[v] / c[v]) for v in sorted(s, key=lambda v: -s[v] / c[v]) if c.get(v)))'
# Where the ingest wall time went: the client's own CPU (simulate CSV parse, encode), the Ingest
# RPC (server side: queue + WAL write + fdatasync + learning, summed over batches), the fsyncs.
curl -s "http://$maddr/metrics" | /usr/bin/python3 -c '
import re, sys
v = {}
for line in sys.stdin:
    m = re.match(r"(cmestream_rpc_duration_seconds|cmestream_wal_fsync_seconds)_(sum|count)(?:\{([^}]*)\})? (\S+)", line)
    if m and ("wal" in m.group(1) or "Ingest\"" in (m.group(3) or "")):
        v[m.group(1) + "_" + m.group(2)] = float(m.group(4))
cpu = open(sys.argv[1]).read().split()
print("client CPU %.2f s user + %.2f s sys; Ingest RPCs %d, %.3f s server time in all; fdatasyncs %d, %.3f s in all" % (
    float(cpu[0]), float(cpu[1]), v.get("cmestream_rpc_duration_seconds_count", 0), v.get("cmestream_rpc_duration_seconds_sum", 0),
    v.get("cmestream_wal_fsync_seconds_count", 0), v.get("cmestream_wal_fsync_seconds_sum", 0)))' "$dir/client_cpu"
# Both numpy formulations of the recursion: explicit Gram inverses (the learner's before the
# whitened bases) and whitened bases (the learner's now, docs/algorithms.md §1.3.1).
if [ "${NUMPY:-1}" != 0 ]; then
  for variant in "" --whitened; do
  /usr/bin/python3 scripts/cme_numpy_baseline.py --pairs "$dir/d.csv" --stream 0.5 $variant | tail -1 | \
    awk -F, -v n="$N" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v c0="$c0" -v c1="$c1" -v hz="$hz" -v v="${variant:-(explicit inverses)}" '{
      printf "numpy recursion %s: %.3f s CPU, %.3f s wall (%.0f pairs/s CPU), m_x %d\n", v, $2, $3, $4, $5;
      printf "ratios: numpy CPU / daemon ingest CPU %.2fx; daemon ingest pairs/s (wall) / numpy pairs/s (CPU) %.2fx; numpy wall / daemon ingest+refresh wall %.2fx\n",
             $2 / ((c1 - c0) / hz), (n / (t1 - t0)) / $4, $3 / (t2 - t0) }'
  done
fi
