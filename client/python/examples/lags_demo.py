#!/usr/bin/env python3
"""Lag scan and Chapman-Kolmogorov test of the four-well diffusion on a live cmestreamd
(docs/user-guide.md "Lag times and the CK test"): streams episodes, then writes
implied_timescales.png and ck_test.png.

    cmestreamd --listen 127.0.0.1:50051 --data-dir /tmp/cme &
    python3 client/python/examples/lags_demo.py --server 127.0.0.1:50051 --out /tmp

The four-well process (V(x) = 4 cos^2(pi x) + 5 (x/2)^8, beta 1, sampled every 0.1) has slow
timescales 5.80 / 1.91 / 1.33 time units (fine-grid generator, core/systems/four_well.h); they
do not depend on the lag, and the CK test of the four wells passes.
"""
import argparse
import os

import numpy as np

import cmestream
from cmestream import lagplots


def four_well(episodes, steps, seed, tau=0.1, dt=1e-3, burn_in=200):
    """Euler-Maruyama of dX = -V'(X) dt + sqrt(2) dW, all episodes at once; (episodes, steps)."""
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.5, -0.5, 0.5, 1.5], size=episodes)
    sub = int(round(tau / dt))
    out = np.empty((episodes, steps))
    for t in range(burn_in + steps):
        for _ in range(sub):
            grad = -4 * np.pi * np.sin(2 * np.pi * x) + 5 * 8 * (x / 2) ** 7 / 2
            x = x - grad * dt + np.sqrt(2 * dt) * rng.standard_normal(episodes)
        if t >= burn_in:
            out[:, t - burn_in] = x
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="127.0.0.1:50051")
    ap.add_argument("--out", default=".")
    ap.add_argument("--model", default="four-well-lags")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=500)
    args = ap.parse_args()
    with cmestream.Client(args.server) as c:
        c.create_model(args.model, dim=1, sigma=0.25, dt=0.1, clusters=4, lags=[1, 2, 5, 10])
        data = four_well(args.episodes, args.steps, seed=1)
        for e in range(args.episodes):
            c.ingest_trajectory(args.model, data[e][:, None], episode=f"episode-{e}")
        c.refresh(args.model)
        ts = c.timescales(args.model)
        for lag, t, se in zip(ts.primary.lags, ts.primary.timescales, ts.primary.stderr):
            print(f"lag {lag:3d}: " + "  ".join(f"{a:6.3f} +- {b:5.3f}" for a, b in zip(t, se)))
        ck = c.cktest(args.model)
        print(f"CK max deviation {ck.primary.max_deviation:.4f} +- {ck.primary.max_deviation_stderr:.4f}")
        its_png = lagplots.plot_implied_timescales(ts, os.path.join(args.out, "implied_timescales.png"))
        ck_png = lagplots.plot_ck_test(ck, os.path.join(args.out, "ck_test.png"))
        print("wrote", its_png, ck_png)


if __name__ == "__main__":
    main()
