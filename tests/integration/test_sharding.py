"""Several daemons, one client: three real cmestreamd processes started with
--shard-self/--shard-peers, 30 models placed by rendezvous hashing of their names over the pod
identities; every model is reachable through a ShardedClient and through the CLI given all
three, lives only on its owner, one daemon is restarted (SIGTERM, same port and data dir) and
nothing is lost. A daemon refuses a model it does not own with FAILED_PRECONDITION naming the
owner (trailer cmestream-owner) and changes nothing; a plain client sees that refusal, a
ShardedClient with a wrong pod list and the CLI (C++ client) follow it once.
Rebalancing 3 -> 4 daemons with `python3 -m cmestream.rebalance` moves exactly the models whose
owner changed (as many as placement predicts, all onto the new pod), every model keeps its
state digest and samples. The placement function itself: reference values, balance, and
growing the pod set moves only models onto the new pod.

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH=<build>/python.
"""
import collections
import json
import os
import socket
import sys
import subprocess
import tempfile
import unittest

import numpy as np

from cmestream import Client, CmestreamError, ShardedClient, placement
from cmestream import rebalance
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
CLI = os.environ.get("CMESTREAM", "cmestream")
IDS = ["cmestreamd-0", "cmestreamd-1", "cmestreamd-2"]


def free_ports(n):
    """n distinct loopback ports free right now (the peers' addresses must be known before the
    daemons start, so port 0 cannot be used here)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def peers_arg(pods):
    return ",".join(f"{i}={t}" for i, t in pods.items())


def start_pod(tmp, pod, pods):
    """A daemon for `pod` of the placement `pods` (id -> target), listening on its target."""
    return Daemon(DAEMON, os.path.join(tmp, pod), refresh_interval=3600, listen=pods[pod],
                  extra_args=["--shard-self", pod, "--shard-peers", peers_arg(pods)]).start()


def start_cluster(tmp, ids):
    pods = {i: f"127.0.0.1:{p}" for i, p in zip(ids, free_ports(len(ids)))}
    return pods, {i: start_pod(tmp, i, pods) for i in ids}


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
    def cli(self, servers, *args, code=0):
        p = subprocess.run([CLI, "--server", servers, *args], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, code, (args, p.stdout, p.stderr))
        return p

    def test_thirty_models_three_daemons_one_restart(self):
        with tempfile.TemporaryDirectory(prefix="cmestream-shard-test-") as tmp:
            pods, daemons = start_cluster(tmp, IDS)
            try:
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
                    self.assertEqual(c.redirects_followed, 0)  # the client's placement = the daemons'
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
                    self.assertEqual(daemons[victim].stop(), 0)
                    daemons[victim] = start_pod(tmp, victim, pods)
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

                    # The CLI routes the same way through a --server list (C++ ShardedClient).
                    servers = peers_arg(pods)
                    listed = json.loads(self.cli(servers, "model", "list", "--json").stdout)["models"]
                    self.assertEqual(sorted(m["name"] for m in listed), names)
                    for name in names:
                        info = json.loads(self.cli(servers, "model", "describe", name, "--json").stdout)
                        self.assertEqual(info["samples"], data[name].shape[0], name)
                    self.cli(servers, "model", "create", "via-cli", "--dim", "1", "--sigma", "0.5")
                    with Client(pods[c.owner("via-cli")]) as direct:
                        self.assertEqual(direct.describe("via-cli").config.dim, 1)
                    p = self.cli(servers, "snapshot", code=2)
                    self.assertIn("takes one --server", p.stderr)
                    self.check_redirects(pods, names, data, c)
            finally:
                for d in daemons.values():
                    d.stop()

    def check_redirects(self, pods, names, data, c):
        name = names[0]
        owner = c.owner(name)
        other = next(i for i in IDS if i != owner)
        # A plain client at a pod that does not own the model: FAILED_PRECONDITION naming the
        # owner in the message and in the trailer, for lifecycle calls, ingestion and every kind of
        # query (view queries share one preamble in query_service.cc).
        with Client(pods[other]) as direct:
            calls = {"describe": lambda: direct.describe(name),
                     "ingest": lambda: direct.ingest_pairs(name, [[0.1]], [[0.05]]),
                     "predict": lambda: direct.predict(name, [[0.2]]),
                     "clusters": lambda: direct.clusters(name),
                     "timescales": lambda: direct.timescales(name),
                     "cktest": lambda: direct.cktest(name),
                     "producer": lambda: direct.producer_offset(name, "p"),
                     "delete": lambda: direct.delete_model(name),
                     "export": lambda: direct.export_model(name)}
            for what, call in calls.items():
                with self.assertRaises(CmestreamError, msg=what) as e:
                    call()
                self.assertEqual(e.exception.code.name, "FAILED_PRECONDITION", what)
                self.assertEqual(e.exception.owner, (owner, pods[owner]), what)
                self.assertIn(f"owned by pod {owner} ({pods[owner]})", e.exception.message)
            # A create for a name another pod owns is refused and registers nothing.
            foreign = next(f"x{k}" for k in range(100) if placement.owner(f"x{k}", pods) != other)
            with self.assertRaises(CmestreamError) as e:
                direct.create_model(foreign, dim=1, sigma=0.5)
            self.assertEqual(e.exception.code.name, "FAILED_PRECONDITION")
            self.assertEqual(e.exception.owner[0], placement.owner(foreign, pods))
            self.assertNotIn(foreign, {i.config.name for i in direct.list_models()})
        # The refused calls changed nothing on the owner either.
        self.assertEqual(c.describe(name).samples, data[name].shape[0])
        # A sharded client given only the wrong pod follows the redirect (once per call).
        with ShardedClient({other: pods[other]}) as wrong:
            self.assertEqual(wrong.describe(name).samples, data[name].shape[0])
            wrong.ingest_pairs(name, [[0.1], [0.2]], [[0.05], [0.1]])
            self.assertEqual(wrong.redirects_followed, 2)
        data[name] = np.vstack([data[name], [[0.1], [0.2]]])
        self.assertEqual(c.describe(name).samples, data[name].shape[0])
        # The CLI (C++ client) pointed at the wrong daemon alone follows it too: describe,
        # ingest (the stream opens on the owner) and a query.
        info = json.loads(self.cli(pods[other], "model", "describe", name, "--json").stdout)
        self.assertEqual(info["samples"], data[name].shape[0])
        p = subprocess.run([CLI, "--server", pods[other], "ingest", name, "--csv", "-"],
                           input="0.3,0.15\n0.4,0.2\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(c.describe(name).samples, data[name].shape[0] + 2)
        self.cli(pods[other], "refresh", name, "--wait")
        # One redirect, then the error: a daemon E whose list says "F is at pod 0's address"
        # sends a model to pod 0, which (with the real list) refuses it too, naming its owner.
        e_target = f"127.0.0.1:{free_ports(1)[0]}"
        stale = {"E": e_target, "F": pods[IDS[0]]}
        m = next(f"y{k}" for k in range(1000)
                 if placement.owner(f"y{k}", stale) == "F" and placement.owner(f"y{k}", pods) != IDS[0])
        with tempfile.TemporaryDirectory(prefix="cmestream-shard-e-") as e_dir:
            e = Daemon(DAEMON, e_dir, listen=e_target,
                       extra_args=["--shard-self", "E", "--shard-peers", peers_arg(stale)]).start()
            try:
                with ShardedClient({"E": e_target}) as via_e, self.assertRaises(CmestreamError) as err:
                    via_e.describe(m)
                self.assertEqual(err.exception.code.name, "FAILED_PRECONDITION")
                self.assertEqual(err.exception.owner, (placement.owner(m, pods), pods[placement.owner(m, pods)]))
                self.assertEqual(via_e.redirects_followed, 1)
                p = self.cli(e_target, "model", "describe", m, code=1)
                self.assertIn("FAILED_PRECONDITION", p.stderr)
                self.assertIn(f"owned by pod {placement.owner(m, pods)}", p.stderr)
            finally:
                e.stop()


class RebalanceTest(unittest.TestCase):
    def test_three_to_four_daemons(self):
        with tempfile.TemporaryDirectory(prefix="cmestream-rebalance-test-") as tmp:
            pods, daemons = start_cluster(tmp, IDS)
            try:
                names = [f"r{k:02d}" for k in range(30)]
                rng = np.random.default_rng(11)
                before = {}
                with ShardedClient(pods) as c:
                    for k, name in enumerate(names):
                        m = c.create(name, dim=1, sigma=0.5, seed=k)
                        x = rng.uniform(-1, 1, size=(50 + 5 * k, 1))
                        m.ingest(x, 0.5 * x, producer="p")
                    for name in names:
                        info = c.describe(name, state_digest=True)
                        before[name] = (info.state_digest, info.samples)
                new_pods = dict(pods)
                new_pods["cmestreamd-3"] = f"127.0.0.1:{free_ports(1)[0]}"
                predicted = [n for n in names
                             if placement.owner(n, pods) != placement.owner(n, new_pods)]
                print(f"3 -> 4 pods: placement moves {len(predicted)} of 30 models")
                self.assertGreater(len(predicted), 0)
                self.assertLess(len(predicted), 30)

                # The new pod joins and every pod restarts with the four-pod list.
                daemons["cmestreamd-3"] = start_pod(tmp, "cmestreamd-3", new_pods)
                for i in IDS:
                    self.assertEqual(daemons[i].stop(), 0)
                    daemons[i] = start_pod(tmp, i, new_pods)
                args = ["--from-servers", peers_arg(pods), "--to-servers", peers_arg(new_pods), "--json"]
                run = lambda *extra: subprocess.run(
                    [sys.executable, "-m", "cmestream.rebalance", *args, *extra],
                    capture_output=True, text=True, timeout=120)
                p = run("--dry-run")
                self.assertEqual(p.returncode, 0, p.stderr)
                plan = json.loads(p.stdout)
                self.assertEqual(sorted(m[0] for m in plan["moves"]), sorted(predicted))
                self.assertEqual(plan["predicted"], len(predicted))
                self.assertEqual(plan["done"], [])
                # Before the move, a moved model is not served: its new owner does not have it.
                with ShardedClient(new_pods) as c, self.assertRaises(CmestreamError) as e:
                    c.describe(predicted[0])
                self.assertEqual(e.exception.code.name, "NOT_FOUND")

                p = run()
                self.assertEqual(p.returncode, 0, p.stderr)
                report = json.loads(p.stdout)
                print(p.stderr.splitlines()[0])
                self.assertEqual(len(report["done"]), len(predicted))
                self.assertEqual(sorted(d[0] for d in report["done"]), sorted(predicted))
                self.assertTrue(all(d[2] == "cmestreamd-3" and d[3] == "moved" for d in report["done"]))
                self.assertEqual(report["kept"], 30 - len(predicted))

                # Every model reachable on its new owner only, with its digest and samples.
                with ShardedClient(new_pods) as c:
                    for name in names:
                        info = c.describe(name, state_digest=True)
                        self.assertEqual((info.state_digest, info.samples), before[name], name)
                        self.assertEqual(c.producer_offset(name, "p"), before[name][1], name)
                    self.assertEqual(c.redirects_followed, 0)
                    for i, target in new_pods.items():
                        with Client(target) as direct:
                            here = {info.config.name for info in direct.list_models()}
                        self.assertEqual(here, {n for n in names if placement.owner(n, new_pods) == i}, i)
                # A second run finds nothing to move.
                p = run()
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(json.loads(p.stdout)["moves"], [])
                # The tool's plan function agrees with placement on a larger population.
                many = {i: [f"n{k}" for k in range(3000) if placement.owner(f"n{k}", pods) == i]
                        for i in pods}
                moves, predicted_many = rebalance.plan(many, pods, new_pods)
                self.assertEqual(len(moves), predicted_many)
                self.assertLess(abs(len(moves) - 750), 75)
            finally:
                for d in daemons.values():
                    d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
