#!/usr/bin/env bash
# Where the daemon's CPU goes on the Duffing benchmark (scripts/bench_duffing_daemon.sh):
# runs that script with the daemon under `perf record` (sampling at 1999 Hz, DWARF call graphs)
# and prints CPU seconds per stage: the ingest path (Model::Ingest) split into the CME's
# matrix-vector products, its W update, the embedding / spectral moments, lags, prequential
# score, counts; the refreshes (RefreshModel) per view; gRPC; the snapshot at shutdown (after
# the timed part). docs/benchmarks.md "Where the daemon's ingest CPU goes".
#   scripts/profile_duffing_daemon.sh [BUILD_DIR]     (default build; needs perf: linux-perf)
# Env: as bench_duffing_daemon.sh (N, REFRESH_INTERVAL, DAEMON_FLAGS); CMESTREAMD the daemon
# to profile (default BUILD_DIR/service/cmestreamd). NUMPY is forced to 0.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
DAEMON="$(realpath "${CMESTREAMD:-$BUILD/service/cmestreamd}")"
command -v perf > /dev/null || { echo "profile_duffing_daemon: perf not found (apt-get install linux-perf)" >&2; exit 1; }
dir="$(mktemp -d /tmp/cmestream-profile-XXXXXX)"
trap 'rm -rf "$dir"' EXIT
# The wrapper starts perf on its own pid, then becomes the daemon (exec keeps the pid), so the
# profile covers the daemon from its first instruction to its exit.
cat > "$dir/daemon" <<EOF
#!/usr/bin/env bash
perf record -F 1999 --call-graph dwarf,16384 -o "$dir/perf.data" -p \$\$ 2> "$dir/perf.err" &
sleep 0.5
exec "$DAEMON" "\$@"
EOF
chmod +x "$dir/daemon"
CMESTREAMD="$dir/daemon" NUMPY=0 scripts/bench_duffing_daemon.sh "$BUILD"
for _ in $(seq 100); do grep -q "perf record: Captured" "$dir/perf.err" 2>/dev/null && break; sleep 0.2; done
perf script -i "$dir/perf.data" 2> /dev/null | /usr/bin/python3 -c '
import collections, sys
samples, cur = [], None
for line in sys.stdin:
    if not line.strip():
        if cur is not None: samples.append(" | ".join(cur))
        cur = None
    elif not line[0].isspace():
        cur = []
    elif cur is not None:
        parts = line.strip().split(" ", 1)
        if len(parts) > 1: cur.append(parts[1])
def stage(s):
    if "Daemon::Shutdown" in s: return "shutdown snapshot (after the timed part)"
    if "RefreshModel" in s:
        for k in ("BuildKoopman", "BuildEmbedding", "BuildClusters", "BuildLags", "Model::Snapshot"):
            if k in s: return "refresh: " + k
        return "refresh: other"
    if "Model::Ingest" in s:
        if "CompressedCme::Observe" in s:
            for k in ("DecayAndSubtractOuter", "CompressW", "AppendRowOfW", "GrowInverse",
                      "CheckDriftAndRefactorize", "KernelColumn", "UpdateAverage"):
                if k in s: return "ingest: CME " + k
            return "ingest: CME matrix-vector products" if "general_matrix_vector" in s else "ingest: CME other"
        for k in ("EmbeddingMoments", "SpectralMoments", "PrequentialVampE", "LagStatistics", "TransitionCounts",
                  "WriteBatch", "WaitDurable"):
            if k in s: return "ingest: " + k
        return "ingest: other"
    if "grpc" in s.lower(): return "gRPC"
    return "other (unwinding incomplete, kernel, allocator)"
count = collections.Counter(stage(s) for s in samples)
print("daemon CPU by stage (%d samples at 1999 Hz = %.2f s):" % (len(samples), len(samples) / 1999))
for k, v in sorted(count.items(), key=lambda kv: -kv[1]):
    print("  %7.3f s  %5.1f %%  %s" % (v / 1999, 100 * v / max(1, len(samples)), k))'
