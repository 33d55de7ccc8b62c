#!/usr/bin/python3
"""Where the fixed cost of an ingest call goes (docs/benchmarks.md "Fleets: memory and cost per
model"). Run from the repository root after building cmestreamd and cmestream:

    PYTHONPATH=build/python:client/python /usr/bin/python3 scripts/dev/call_cost.py [--dim 512]

1. Medians of 15 CLI calls against a daemon with one 1-channel model (fixed sigma): process start
   (`--version`), `health`, `model describe`, `ingest` of 1 and 200 pairs; then 50 IngestOne calls
   of the same 200 pairs on an open channel, with --wal-sync always and never.
2. A `--dim`-channel model (default 512, the daemon's defaults, warmed up on 2,000 rows): 8,000
   rows as one CLI call against forty 200-row episode calls: wall time, the CLI's CPU, and the
   daemon's CPU from /proc/PID/stat (so the machine's load does not enter), and the mean
   fdatasync from cmestream_wal_fsync_seconds.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from cmestream.client import Client
from cmestream.testing import Daemon, Stubs
from cmestream.v1 import cmestream_pb2 as pb

DAEMON, CLI = "build/service/cmestreamd", "build/client/cmestream"


def median_ms(cmd, n=15):
    ts = []
    for _ in range(n):
        s = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ts.append(time.monotonic() - s)
    return statistics.median(ts) * 1e3, min(ts) * 1e3


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def fsync(metrics_target):
    s = c = 0.0
    for line in urllib.request.urlopen(f"http://{metrics_target}/metrics").read().decode().splitlines():
        if line.startswith("cmestream_wal_fsync_seconds_sum"):
            s = float(line.split()[-1])
        if line.startswith("cmestream_wal_fsync_seconds_count"):
            c = float(line.split()[-1])
    return s, c


def small_calls(root):
    rng = np.random.default_rng(1)
    for sync in ("always", "never"):
        with Daemon(DAEMON, os.path.join(root, sync), extra_args=["--wal-sync", sync]) as d:
            srv = [CLI, "--server", d.grpc_target]
            c = Client(d.grpc_target)
            c.create_model("m", dim=1, sigma=1.0)
            f1, f200 = os.path.join(root, "r2.csv"), os.path.join(root, "r200.csv")
            np.savetxt(f1, rng.normal(size=(2, 1)), delimiter=",")
            np.savetxt(f200, rng.normal(size=(201, 1)), delimiter=",")
            print(f"--wal-sync {sync}")
            if sync == "always":
                print("  cmestream --version           %.1f ms (min %.1f)" % median_ms([CLI, "--version"]))
                print("  cmestream health              %.1f ms (min %.1f)" % median_ms(srv + ["health"]))
                print("  cmestream model describe m    %.1f ms (min %.1f)" % median_ms(srv + ["model", "describe", "m"]))
                print("  ingest 1 pair                 %.1f ms (min %.1f)" %
                      median_ms(srv + ["ingest", "m", "--csv", f1, "--trajectory", "--quiet"]))
                print("  ingest 200 pairs              %.1f ms (min %.1f)" %
                      median_ms(srv + ["ingest", "m", "--csv", f200, "--trajectory", "--quiet"]))
            st = Stubs(d.grpc_target)
            rows = np.loadtxt(f200).ravel()
            ts = []
            for _ in range(50):
                s = time.monotonic()
                st.ingest.IngestOne(pb.IngestBatch(model="m", states=rows))
                ts.append(time.monotonic() - s)
            print("  IngestOne 200 pairs, open channel  %.2f ms (min %.2f)" % (statistics.median(ts) * 1e3, min(ts) * 1e3))
            st.close()
            c.close()


def wide_calls(root, dim):
    rng = np.random.default_rng(1)
    t = np.arange(8001)[:, None]
    data = np.sin(2 * np.pi * t / 50 + rng.uniform(0, 6, size=(1, dim))) + 0.1 * rng.normal(size=(8001, dim))
    warm = np.sin(2 * np.pi * np.arange(2000)[:, None] / 50 + rng.uniform(0, 6, size=(1, dim)))
    files = []
    for k in range(40):
        f = os.path.join(root, f"e{k}.csv")
        np.savetxt(f, data[k * 200:(k + 1) * 200 + 1], delimiter=",", fmt="%.17g")
        files.append(f)
    whole = os.path.join(root, "whole.csv")
    np.savetxt(whole, data, delimiter=",", fmt="%.17g")
    for mode in ("one call", "forty calls"):
        with Daemon(DAEMON, os.path.join(root, mode.replace(" ", "_")), refresh_interval=3600) as d:
            c = Client(d.grpc_target)
            c.create_model("m", dim=dim, refresh_interval_seconds=3600)
            c.ingest_trajectory("m", warm, batch=500, episode="w")
            pid = d.process.pid
            r0, c0, f0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(pid), fsync(d.metrics_target), time.monotonic()
            cmd = [CLI, "--server", d.grpc_target, "ingest", "m", "--trajectory", "--quiet", "--batch", "8000"]
            if mode == "one call":
                subprocess.run(cmd + ["--csv", whole, "--episode", "one"], check=True, stdout=subprocess.DEVNULL)
            else:
                for k, f in enumerate(files):
                    subprocess.run(cmd + ["--csv", f, "--episode", f"e{k}"], check=True, stdout=subprocess.DEVNULL)
            w1, c1, f1, r1 = time.monotonic(), cpu_seconds(pid), fsync(d.metrics_target), resource.getrusage(resource.RUSAGE_CHILDREN)
            cli = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            print(f"dim {dim}, 8,000 rows as {mode}: wall {w1 - w0:.2f} s ({8000 / (w1 - w0):.0f} pairs/s), CLI CPU {cli:.2f} s, "
                  f"daemon CPU {c1 - c0:.2f} s, fdatasync {1e3 * (f1[0] - f0[0]) / max(1, f1[1] - f0[1]):.1f} ms "
                  f"mean over {f1[1] - f0[1]:.0f}")
            c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dim", type=int, default=512)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix=f"call-cost-{os.getpid()}-")
    try:
        small_calls(root)
        wide_calls(root, args.dim)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
