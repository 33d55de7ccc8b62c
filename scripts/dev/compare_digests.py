#!/usr/bin/env python3
"""Feeds the same fixed-seed streams to two cmestreamd binaries and compares every model's
learner state bit for bit: the state digest (ModelInfo.state_digest) and the exported MODL
bytes, and each binary imports the other's export to the same digest. For refactors that must
not change what is learned ("behaviour unchanged": compare before and after).

    PYTHONPATH=build/python:client/python /usr/bin/python3 scripts/dev/compare_digests.py \\
        BEFORE/cmestreamd AFTER/cmestreamd [--expect-different MODEL ...]

The models cover the learner's paths: sigma auto with a window and several lags (trajectories,
two producers, episodes, odd batch sizes, pair batches mixed in); a fixed sigma in 3-D with
forgetting (pairs); a discrete model (pairs and id trajectories); a model still in its sigma
warm-up; a latent-state model on a trajectory (`latent`). A model named with
--expect-different is reported but not required to match (a change meant to alter it); the
newer binary must still import the older one's export of it (the older binary need not read
the newer format). Exit status 0 iff every other
model is identical.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

from cmestream.client import Client
from cmestream.testing import Daemon


def four_well_like(rng, n):
    """A cheap 2-D diffusion with a few wells: a deterministic stream for a given seed."""
    x = np.zeros((n, 2))
    for t in range(1, n):
        p = x[t - 1]
        grad = np.array([4 * p[0] ** 3 - 4 * p[0], 2 * p[1]])
        x[t] = p - 0.01 * grad + 0.15 * rng.standard_normal(2)
    return x


def feed(client: Client):
    rng = np.random.default_rng(20261125)
    # 1. sigma auto, window, latent states, lags: trajectories from two producers and episodes.
    client.create_model("auto_traj", dim=2, sigma="auto", auto_sigma_warmup=600, window=2,
                        rff_features=64, lags=[1, 2, 5], max_dict=120)
    traj = four_well_like(rng, 5000)
    client.ingest_trajectory("auto_traj", traj[:2300], producer="p1", episode="e1", batch=333)
    client.ingest_trajectory("auto_traj", traj[2300:3900], producer="p2", episode="e1", batch=101)
    x = rng.standard_normal((700, 2))
    client.ingest_pairs("auto_traj", x, 0.9 * x + 0.1 * rng.standard_normal((700, 2)), producer="p3",
                        batch=250)
    client.ingest_trajectory("auto_traj", traj[3900:], producer="p1", episode="e2", offset=2299, batch=77)
    # 2. fixed sigma, 3-D, forgetting, pairs only.
    client.create_model("fixed3", dim=3, sigma=0.7, forgetting=0.999, max_dict=80, rff_features=32)
    x = rng.standard_normal((3000, 3))
    y = np.tanh(x) @ np.array([[0.9, 0.1, 0], [0, 0.8, 0.2], [0.1, 0, 0.7]]) + 0.05 * rng.standard_normal((3000, 3))
    client.ingest_pairs("fixed3", x, y, producer="q", batch=499)
    # 3. discrete: pairs and an id trajectory.
    client.create_model("discrete", num_states=7, meta_states=2, lags=[1, 3])
    ids = rng.integers(0, 7, 4000)
    client.ingest_ids("discrete", ids[:-1], ids[1:], producer="d", batch=999)
    client.ingest_state_ids("discrete", rng.integers(0, 7, 1500), producer="d2", episode="z", batch=128)
    # 4. still in its sigma warm-up.
    client.create_model("warming", dim=1, sigma="auto", auto_sigma_warmup=5000)
    z = rng.standard_normal((1234, 1))
    client.ingest_pairs("warming", z, 0.5 * z, producer="w", batch=300)
    # 5. latent states on a trajectory.
    client.create_model("latent", dim=2, sigma=0.5, latent_states=2, rff_features=48, max_dict=60)
    client.ingest_trajectory("latent", four_well_like(rng, 2500), producer="l", batch=400)
    return ["auto_traj", "fixed3", "discrete", "warming", "latent"]


# An export file is a 44-byte header (magic, kind, format version, model count, number, the
# write time in ns, covered sequence), the MODL object, and a 4-byte CRC (storage/snapshot.cc):
# the time differs from run to run, so the object alone is compared.
_HEADER, _FOOTER = 44, 4


def model_object(export: bytes) -> bytes:
    return export[_HEADER:-_FOOTER]


def state_of(binary: str, workdir: str):
    with Daemon(binary, os.path.join(workdir, "data"), refresh_interval=3600) as d:
        with Client(d.grpc_target) as c:
            names = feed(c)
            out = {}
            for n in names:
                info = c.describe(n, state_digest=True)
                out[n] = (info.state_digest, c.export_model(n), info.samples)
            return out


def import_digest(binary: str, workdir: str, name: str, data: bytes) -> int:
    with Daemon(binary, os.path.join(workdir, "import-" + name)) as d:
        with Client(d.grpc_target) as c:
            c.import_model(data, name=name)
            return c.describe(name, state_digest=True).state_digest


def main(argv):
    args = argv[1:]
    expect_different = set()
    while "--expect-different" in args:
        i = args.index("--expect-different")
        expect_different.add(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    before, after = args
    with tempfile.TemporaryDirectory(prefix="cmestream-digests-") as tmp:
        a = state_of(before, os.path.join(tmp, "a"))
        b = state_of(after, os.path.join(tmp, "b"))
        ok = True
        print(f"{'model':<10} {'samples':>8} {'digest before':>18} {'digest after':>18} {'export bytes':>12} "
              f"{'same bytes':>10} {'cross-import':>12}")
        for name in a:
            da, ea, na = a[name]
            db, eb, nb = b[name]
            same_bytes = model_object(ea) == model_object(eb)
            same = da == db and same_bytes and na == nb
            if name in expect_different:
                # The newer binary must still read the older one's export (the upgrade path).
                upgraded = import_digest(after, os.path.join(tmp, "u"), name, ea) != 0
                ok &= upgraded
                print(f"{name:<10} {na:>8} {da:>#18x} {db:>#18x} {len(ea):>12} {str(same_bytes):>10} "
                      f"{'expected to differ; older export imports: ' + str(upgraded)}")
                continue
            cross = (import_digest(after, os.path.join(tmp, "x"), name, ea) == da and
                     import_digest(before, os.path.join(tmp, "y"), name, eb) == db)
            ok &= same and cross
            print(f"{name:<10} {na:>8} {da:>#18x} {db:>#18x} {len(ea):>12} {str(same_bytes):>10} {str(cross):>12}")
        print("identical" if ok else "DIFFERENT")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
