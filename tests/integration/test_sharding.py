"""Several daemons, one client: ShardedClient places 30 models on three real cmestreamd
processes by rendezvous hashing of the model names over the pod identities, every model is
reachable through the client and lives only on its owner, one daemon is restarted (SIGTERM,
same port and data directory) and nothing is lost. The placement function itself: stable,
balanced, and growing the pod set moves only models onto the new pod.

The CLI does the same with `--server ID=HOST:PORT,...`.

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH=<build>/python.
"""
import collections
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

from cmestream import Client, CmestreamError, ShardedClient, placement
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
CLI = os.environ.get("CMESTREAM", "cmestream")
IDS = ["cmestreamd-0", "cmestreamd-1", "cmestreamd-2"]


class PlacementTest(unittest.TestCase):
    def test_reference_values_and_properties(self):
        # Published test vectors of the two primitives: FNV-1a 64 ("", "a", "foobar") and the
        # first splitmix64 output for seed 0 (its finalizer applied to the golden gamma).
        self.assertEqual(placement.fnv1a64(b""), 0xcbf29ce484222325)
        self.assertEqual(placement.fnv1a64(b"a"), 0xaf63dc4c8601ec8c)
        self.assertEqual(placement.fnv1a64(b"foobar"), 0x85944171f73967e8)
        self.assertEqual(placement.mix64(0x9e3779b97f4a7c15), 0xe220a8397b1dcdaf)
        # Reference values of the score, for other languages' implementations.
        self.assertEqual(placement.score("cmestreamd-0", "duffing"), 186938994056951563)
        self.assertEqual(placement.owner("duffing", IDS), "cmestreamd-2")
        self.assertEqual(placement.owner("duffing", list(reversed(IDS))), "cmestreamd-2")
        names = [f"model-{i}" for i in range(3000)]
        three = {n: placement.owner(n, IDS) for n in names}
        counts = collections.Counter(three.values())
        self.assertEqual(set(counts), set(IDS))
        for c in counts.values():  # balanced: 1000 +- 10 %
            self.assertLess(abs(c - 1000), 100, counts)
        four = {n: placement.owner(n, IDS + ["cmestreamd-3"]) for n in names}
        moved = [n for n in names if three[n] != four[n]]
        self.assertTrue(all(four[n] == "cmestreamd-3" for n in moved))   # only onto the new pod
        self.assertLess(abs(len(moved) - 750), 75, len(moved))          # about 1/4 of them
        with self.assertRaises(ValueError):
            placement.owner("x", [])


class ShardingTest(unittest.TestCase):
    def test_thirty_models_three_daemons_one_restart(self):
        with tempfile.TemporaryDirectory(prefix="cmestream-shard-test-") as tmp:
            daemons = {i: Daemon(DAEMON, os.path.join(tmp, i), refresh_interval=3600).start()
                       for i in IDS}
            try:
                pods = {i: d.grpc_target for i, d in daemons.items()}
                rng = np.random.default_rng(5)
                names = [f"m{k:02d}" for k in range(30)]
                data = {}
                with ShardedClient(pods) as c:
                    for k, name in enumerate(names):
                        m = c.create(name, dim=1, sigma=0.5, seed=k)
                        x = rng.uniform(-1, 1, size=(100 + 10 * k, 1))
                        data[name] = x
                        r = m.ingest(x, 0.5 * x, producer="p")
                        self.assertEqual(r.pairs_applied, x.shape[0])
                    self.assertEqual(sorted(i.config.name for i in c.list_models()), names)
                    # Every model only on its owner; the three daemons share the 30.
                    per_pod = collections.Counter()
                    for i, target in pods.items():
                        with Client(target) as direct:
                            here = {info.config.name for info in direct.list_models()}
                        self.assertEqual(here, {n for n in names if c.owner(n) == i})
                        per_pod[i] = len(here)
                    print(f"models per daemon: {dict(per_pod)}")
                    self.assertEqual(sum(per_pod.values()), 30)
                    self.assertGreaterEqual(min(per_pod.values()), 5, per_pod)

                    # Restart the daemon holding the most models on the same port and data dir.
                    victim = max(per_pod, key=per_pod.get)
                    d = daemons[victim]
                    self.assertEqual(d.stop(), 0)
                    daemons[victim] = Daemon(DAEMON, d.data_dir, refresh_interval=3600,
                                             listen=d.grpc_target).start()
                    # Nothing lost: every model answers through the client with all its pairs,
                    # its producer offset, and a view built from them predicts y = 0.5 x.
                    for name in names:
                        m = c.model(name)
                        n = data[name].shape[0]
                        self.assertEqual(m.info().samples, n, name)
                        self.assertEqual(m.producer_offset("p"), n, name)
                        m.refresh()
                        y = m.predict(np.array([[0.2]]))
                        self.assertLess(abs(y[0, 0] - 0.1), 0.1, (name, y))
                    # The CLI routes the same way through a --server list.
                    servers = ",".join(f"{i}={t}" for i, t in pods.items())

                    def cli(*args):
                        p = subprocess.run([CLI, "--server", servers, *args], capture_output=True,
                                           text=True, timeout=60)
                        self.assertEqual(p.returncode, 0, (args, p.stderr))
                        return p.stdout
                    listed = json.loads(cli("model", "list", "--json"))["models"]
                    self.assertEqual(sorted(m["name"] for m in listed), names)
                    for name in names:
                        info = json.loads(cli("model", "describe", name, "--json"))
                        self.assertEqual(info["samples"], data[name].shape[0], name)
                    cli("model", "create", "via-cli", "--dim", "1", "--sigma", "0.5")
                    with Client(pods[c.owner("via-cli")]) as direct:
                        self.assertEqual(direct.describe("via-cli").config.dim, 1)
                    p = subprocess.run([CLI, "--server", servers, "snapshot"], capture_output=True,
                                       text=True)
                    self.assertEqual(p.returncode, 2)
                    self.assertIn("takes one --server", p.stderr)

                    # A call sent to a pod that does not own the model is NOT_FOUND there.
                    name = names[0]
                    other = next(i for i in IDS if i != c.owner(name))
                    with Client(pods[other]) as direct, self.assertRaises(CmestreamError) as e:
                        direct.describe(name)
                    self.assertEqual(e.exception.code.name, "NOT_FOUND")
            finally:
                for d in daemons.values():
                    d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
