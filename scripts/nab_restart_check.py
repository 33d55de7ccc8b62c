#!/usr/bin/python3
"""Streams every file of the Numenta Anomaly Benchmark's corpus (a `data/` folder of CSV files
with `timestamp,value` columns) through one real cmestreamd, one `--dim 1` model per file with
default options, kills the daemon with SIGKILL halfway, restarts it and streams the rest.

Checks, and prints per file and in total: the daemon never exits on its own (no abort), no model
fails (ModelInfo.failure unset), every model is back after the restart with every acknowledged
pair (samples + warm-up = pairs sent), and the stream goes on after it.

    /usr/bin/python3 scripts/nab_restart_check.py PATH/TO/nab/data [--daemon build/service/cmestreamd]

Exit code 0 when every check holds. Needs build/python on PYTHONPATH (the generated stubs) and
client/python (the Python client), as the tests do.
"""
import argparse
import csv
import glob
import os
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "build", "python"), os.path.join(ROOT, "client", "python")]

import numpy as np  # noqa: E402

from cmestream import Client  # noqa: E402
from cmestream.testing import Daemon  # noqa: E402


def model_name(path):
    base = os.path.splitext(os.path.basename(path))[0]
    category = os.path.basename(os.path.dirname(path))
    return f"{category}.{base}".replace("_", "-")[:120]


def read_values(path):
    with open(path, newline="") as f:
        return np.array([float(row["value"]) for row in csv.DictReader(f)]).reshape(-1, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="the NAB data folder (one sub-folder per category)")
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "service", "cmestreamd"))
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.data, "*", "*.csv")))
    if not files:
        sys.exit(f"no CSV files under {args.data}/*/")
    tmp = tempfile.mkdtemp(prefix="cmestream-nab-restart-")
    data_dir = os.path.join(tmp, "data")
    problems = []
    try:
        d = Daemon(args.daemon, data_dir, refresh_interval=3600).start()
        c = Client(d.grpc_target, timeout=120)
        series = {model_name(p): read_values(p) for p in files}
        t0 = time.monotonic()
        for name, v in series.items():
            c.create_model(name, dim=1)
            c.ingest_trajectory(name, v[: len(v) // 2], producer="nab")
            if d.process.poll() is not None:
                problems.append(f"{name}: the daemon exited ({d.process.returncode}) during ingest")
                break
        sent = {name: len(v) // 2 - 1 for name, v in series.items()}
        c.close()
        d.process.send_signal(signal.SIGKILL)
        d.process.wait()
        d.stop()
        first_half = time.monotonic() - t0
        t1 = time.monotonic()
        d = Daemon(args.daemon, data_dir, refresh_interval=3600).start(timeout=600)
        restart = time.monotonic() - t1
        c = Client(d.grpc_target, timeout=120)
        for name, v in series.items():
            info = c.describe(name)
            if info.failure is not None:
                problems.append(f"{name}: failed after the restart: {info.failure.reason}")
            if info.samples + info.pending_warmup != sent[name]:
                problems.append(f"{name}: {info.samples + info.pending_warmup} pairs after the restart, "
                                f"{sent[name]} acknowledged")
            half = len(v) // 2
            c.ingest_trajectory(name, v[half - 1:], producer="nab", offset=half - 1)
            info = c.describe(name)
            if info.failure is not None:
                problems.append(f"{name}: failed: {info.failure.reason}")
            if info.samples + info.pending_warmup != len(v) - 1:
                problems.append(f"{name}: {info.samples + info.pending_warmup} pairs, {len(v) - 1} sent")
            if d.process.poll() is not None:
                problems.append(f"{name}: the daemon exited ({d.process.returncode})")
                break
        c.close()
        code = d.stop()
        if code != 0:
            problems.append(f"the daemon exited with {code} at SIGTERM")
        pairs = sum(len(v) - 1 for v in series.values())
        print(f"{len(series)} files, {pairs} pairs: first halves in {first_half:.1f} s, restart after kill -9 "
              f"in {restart:.1f} s, {len(problems)} problem(s)")
        for p in problems:
            print("  " + p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
