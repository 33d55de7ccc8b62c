#!/usr/bin/python3
"""What a shorter sigma warm-up (and input scaling) costs on the simulated systems with known
truth: the figures behind the default `auto_sigma_warmup` (docs/algorithms.md §1.13).

For each warm-up length W and seed, against a fresh cmestreamd:
  four-well  1-D diffusion, 30000 pairs (trajectory), dt 0.1: slowest Koopman timescale vs the
             transfer operator's (relative error), sigma chosen;
  duffing    20000 pairs, dt 0.25: basin accuracy on the 40 x 40 grid (classify_basins),
             sigma chosen; with --scale auto and none.

usage: PYTHONPATH=build/python:client/python scripts/dev/measure_warmup.py \
           --daemon build/service/cmestreamd --cli build/client/cli/cmestream [--warmups 100,200,300,1000]
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

from cmestream import Client
from cmestream.basins import classify_basins
from cmestream.testing import Daemon


def simulate(cli, *args):
    out = subprocess.run([cli, "simulate", *args], capture_output=True, text=True, check=True).stdout
    return np.loadtxt([l for l in out.splitlines() if not l.startswith("#")], delimiter=",", ndmin=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--warmups", default="100,200,300,500,1000")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--systems", default="four-well,duffing")
    a = ap.parse_args()
    warmups = [int(w) for w in a.warmups.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    systems = a.systems.split(",")
    grid = simulate(a.cli, "duffing-grid", "--n-side", "40")
    with tempfile.TemporaryDirectory() as tmp:
        d = Daemon(a.daemon, os.path.join(tmp, "data"), refresh_interval=3600,
                   extra_args=["--snapshot-interval", "0"])
        d.start()
        try:
            with Client(d.grpc_target) as c:
                n = 0
                for seed in seeds:
                    if "four-well" in systems:
                        truth_path = os.path.join(tmp, "truth.json")
                        states = simulate(a.cli, "four-well", "--n", "30001", "--seed", str(seed), "--trajectory",
                                          "--truth", truth_path)
                        ev = json.load(open(truth_path))["eigenvalues"]
                        truth = -0.1 / np.log(ev[1])
                        for w in warmups:
                            n += 1
                            name = f"fw{n}"
                            c.create_model(name, dim=1, dt=0.1, auto_sigma_warmup=w)
                            c.ingest_trajectory(name, states, batch=5000)
                            c.refresh(name)
                            k = c.koopman(name, top=4)
                            info = c.describe(name)
                            slow = [t for t, s in zip(k.timescales, k.stationary) if not s][0]
                            print(f"four-well seed {seed} warmup {w:5d}: sigma {info.sigma_selection.chosen:.4f} "
                                  f"slowest {slow:.4f} truth {truth:.4f} error {slow / truth - 1:+.4f} "
                                  f"({k.spectrum.estimator})", flush=True)
                            c.delete_model(name)
                    if "duffing" in systems:
                        pairs = simulate(a.cli, "duffing", "--n", "20000", "--seed", str(seed))
                        for w in warmups:
                            for scale in ("auto", "none"):
                                n += 1
                                name = f"du{n}"
                                c.create_model(name, dim=2, dt=0.25, auto_sigma_warmup=w, scale=scale)
                                c.ingest_pairs(name, pairs[:, :2], pairs[:, 2:], batch=5000)
                                c.refresh(name)
                                labels, _ = classify_basins(c, name, grid[:, :2], top=6)
                                info = c.describe(name)
                                print(f"duffing seed {seed} warmup {w:5d} scale {scale}: sigma "
                                      f"{info.sigma_selection.chosen:.4f} accuracy "
                                      f"{np.mean(labels == grid[:, 2]):.4f} atoms {info.dictionary_size}",
                                      flush=True)
                                c.delete_model(name)
        finally:
            d.stop()


if __name__ == "__main__":
    main()
