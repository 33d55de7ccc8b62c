"""Change alarms end to end with the real cmestreamd (docs/algorithms.md §12.8, docs/user-guide.md
"Change alarms"): an OU stream whose rate changes twice raises alarms near both changes (index,
onset), armed within 300 pairs; `watch` delivers them live; after kill -9 and a restart the
alarms are the same (times included: replay reads them from the log) and a resumed watch gets
each new alarm exactly once; the CLI's JSON has the documented keys; the metrics count them; a
clean shutdown with a watch open exits 0; a client cannot forge the arrival time.

Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH as the others.
"""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
import numpy as np

from cmestream import Client
from cmestream.client import CmestreamError
from cmestream.testing import Daemon
from cmestream.v1 import cmestream_pb2 as pb

CMESTREAMD = os.environ.get("CMESTREAMD", "build/service/cmestreamd")
CMESTREAM = os.environ.get("CMESTREAM", "build/client/cli/cmestream")


def ou(n, rates, seed):
    """n rows of an OU with unit stationary variance, dt 0.1; rates: [(first row, theta), ...]."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for t in range(1, n):
        theta = [r for start, r in rates if start <= t][-1]
        a = np.exp(-0.1 * theta)
        x[t] = a * x[t - 1] + np.sqrt(1 - a * a) * rng.normal()
    return x.reshape(-1, 1)


class AlarmsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.data = os.path.join(self.tmp.name, "data")
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        self.tmp.cleanup()

    def start(self):
        d = Daemon(CMESTREAMD, self.data, refresh_interval=3600).start()
        self.daemons.append(d)
        return d

    def ingest(self, c, rows, first, last, producer="p"):
        # Rows first..last (inclusive) as trajectory batches of 250 pairs; offsets in pairs.
        # Returns the alarms the acks say the batches raised.
        raised = 0
        for i in range(first, last, 250):
            j = min(i + 250, last)
            raised += c.ingest_trajectory("ou", rows[i:j + 1], producer=producer, offset=i).alarms_raised
        return raised

    def test_alarms_live_across_kill9_and_restart(self):
        rows = ou(9001, [(0, 1.0), (3000, 5.0), (6000, 1.0)], seed=3)
        d = self.start()
        with Client(d.grpc_target) as c:
            info = c.create_model("ou", dim=1, max_dict=60, rff_features=32)
            self.assertEqual(info.config.alarms, "on")
            self.assertEqual(info.config.alarm_rate, 1.0)
            self.assertEqual(info.alarms.armed_at, -1)
            # A watch from the start receives the alarms as they are raised.
            seen = []
            watching = threading.Thread(
                target=lambda: seen.extend(c.watch_alarms("ou", since=0, timeout=20)))
            watching.start()
            raised = self.ingest(c, rows, 0, 4500)
            listed = c.list_alarms("ou")
            self.assertEqual(raised, len(listed.alarms))  # the ingest acks' effects
            self.assertGreaterEqual(listed.armed_at, 64 + 200 - 1)
            self.assertLessEqual(listed.armed_at, 300)
            self.assertGreaterEqual(len(listed.alarms), 1)
            # Pair i is (row i, row i+1): the change is at pair 3000 (2999 ends in regime A). A
            # stationary false alarm before it is possible (R = 1 per 10^4 pairs over ~2,700 armed
            # pairs, more while the forecast's early refits settle: this stream has one, at pair
            # 1883, of the size test's slow CUSUMs); the change is the first alarm from 3000 on.
            before_change = [a for a in listed.alarms if a.index < 3000]
            self.assertLessEqual(len(before_change), 1, listed.alarms)
            first = listed.alarms[len(before_change)]
            self.assertLess(first.index, 3500)
            self.assertLess(abs(first.onset - 3000), 100)
            self.assertEqual(first.channels, [0])
            self.assertIn(first.kind, ("dynamics", "noise"))
            deadline = time.monotonic() + 10
            while len(seen) < len(listed.alarms) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual([a.index for a in seen[:len(listed.alarms)]],
                             [a.index for a in listed.alarms])
            described = c.describe("ou")
            self.assertEqual(described.alarms.alarms_total, len(listed.alarms))
            self.assertEqual(described.alarms.threshold, first.threshold)
            self.assertGreater(first.score, first.threshold)
            self.assertTrue(0 <= described.alarms.score < 1)
            # The metrics count them.
            text = urllib.request.urlopen(f"http://{d.metrics_target}/metrics", timeout=10).read().decode()
            line = [l for l in text.splitlines() if l.startswith('cmestream_change_alarms_total{model="ou"}')]
            self.assertEqual(len(line), 1, text[:500])
            self.assertEqual(float(line[0].split()[-1]), len(listed.alarms))
            self.assertIn('cmestream_change_score{model="ou"}', text)
            digest = c.describe("ou", state_digest=True).state_digest
            watching.join()
        # kill -9: everything acknowledged comes back, alarms with their logged times.
        d.process.send_signal(signal.SIGKILL)
        d.process.wait()
        d.stop()
        d = self.start()
        with Client(d.grpc_target) as c:
            again = c.list_alarms("ou")
            self.assertEqual(again, listed)
            self.assertEqual(c.describe("ou", state_digest=True).state_digest, digest)
            # A resumed watch: only what comes after the last alarm received, each once.
            resume = listed.alarms[-1].index + 1
            seen = []
            watching = threading.Thread(
                target=lambda: seen.extend(c.watch_alarms("ou", since=resume, timeout=15)))
            watching.start()
            self.ingest(c, rows, 4500, 9000)
            watching.join()
            after = c.list_alarms("ou", since=resume).alarms
            self.assertGreaterEqual(len(after), 1)
            self.assertTrue(any(abs(a.onset - 6000) < 150 for a in after), after)
            self.assertEqual([a.index for a in seen], [a.index for a in after])
            self.assertEqual(len({a.index for a in seen}), len(seen))
            # The CLI's JSON.
            out = subprocess.run([CMESTREAM, "--server", d.grpc_target, "alarms", "ou", "--json"],
                                 capture_output=True, text=True, check=True).stdout
            reply = json.loads(out)
            self.assertEqual(reply["model"], "ou")
            self.assertEqual(reply["armed_at"], listed.armed_at)
            self.assertEqual([a["index"] for a in reply["alarms"]],
                             [a.index for a in listed.alarms + after])
            self.assertEqual(set(reply["alarms"][0]),
                             {"index", "time", "score", "threshold", "channels", "kind", "onset"})
            # `cmestream watch`: one JSON object per line, from --since on, until --seconds pass.
            since = listed.alarms[-1].index
            out = subprocess.run([CMESTREAM, "--server", d.grpc_target, "watch", "ou", "--since", str(since),
                                  "--seconds", "1"], capture_output=True, text=True, check=True).stdout
            lines = [json.loads(l) for l in out.splitlines()]
            self.assertEqual([l["index"] for l in lines], [a.index for a in listed.alarms + after if a.index >= since])
            self.assertEqual(lines[0]["model"], "ou")
            # A clean shutdown with a watch open.
            stop_watch = threading.Thread(target=lambda: list(c.watch_alarms("ou", timeout=30)))
            stop_watch.start()
            time.sleep(0.5)
        self.assertEqual(d.stop(timeout=20), 0)
        stop_watch.join(timeout=30)
        self.assertFalse(stop_watch.is_alive())

    def test_per_pair_anomaly_scores(self):
        # docs/algorithms.md §12.15: with anomaly_scores=True the acks carry one score in [0, 1] a
        # scored pair, 1 exactly on the pairs whose alarms ListAlarms lists; pairs a producer
        # re-sends are not applied and get none; with delays D the first D - 1 rows of an episode
        # end no pair, and the indexes follow Alarm.index.
        rows = ou(6001, [(0, 1.0), (3500, 6.0)], seed=7)
        rows[2000] += 10.0  # a spike
        d = self.start()
        with Client(d.grpc_target) as c:
            c.create_model("s", dim=1)
            r = c.ingest_trajectory("s", rows, producer="p", batch=400, anomaly_scores=True)
            self.assertEqual(r.pairs_applied, 6000)
            np.testing.assert_array_equal(r.anomaly_index, np.arange(6000))
            self.assertTrue(np.all((r.anomaly_scores >= 0) & (r.anomaly_scores <= 1)))
            alarms = c.list_alarms("s").alarms
            self.assertGreaterEqual(len(alarms), 2)
            self.assertEqual(sorted(np.flatnonzero(r.anomaly_scores == 1.0)), sorted(a.index for a in alarms))
            self.assertTrue(any(abs(a.index - 1999) <= 1 for a in alarms), [a.index for a in alarms])
            self.assertLess(float(np.median(r.anomaly_scores[500:1900])), 0.5)
            # Re-sent pairs: nothing applied, no score; without the option, no scores at all.
            again = c.ingest_trajectory("s", rows[5000:], producer="p", offset=5000, anomaly_scores=True)
            self.assertEqual((again.pairs_applied, len(again.anomaly_scores)), (0, 0))
            self.assertIsNone(c.ingest_trajectory("s", rows[:11], producer="q").anomaly_scores)
            # Delays: pair i ends at row i + D; the first batch scores D - 1 fewer pairs than it has.
            c.create_model("w", dim=1, delays=3)
            w = c.ingest_trajectory("w", rows[:1001], producer="p", batch=250, anomaly_scores=True)
            np.testing.assert_array_equal(w.anomaly_index, np.arange(998))

    def test_on_change_reset(self):
        # Every statistic restarts at the alarming pair; views and Refresh(wait) follow the new
        # statistics although their sample count dropped.
        rows = ou(7001, [(0, 1.0), (4000, 6.0)], seed=5)
        d = self.start()
        with Client(d.grpc_target) as c:
            info = c.create_model("ou", dim=1, max_dict=60, rff_features=32, auto_sigma_warmup=200,
                                  on_change="reset")
            self.assertEqual(info.config.on_change, "reset")
            self.ingest(c, rows, 0, 3500)
            before = c.refresh("ou", wait=True, timeout=60)
            self.assertEqual(c.list_alarms("ou").alarms, [])
            self.ingest(c, rows, 3500, 7000)
            alarms = c.list_alarms("ou").alarms
            self.assertGreaterEqual(len(alarms), 1)
            self.assertTrue(any(4000 <= a.index < 4500 for a in alarms), alarms)
            now = c.describe("ou")
            self.assertEqual(now.samples + now.pending_warmup, 7000 - alarms[-1].index)
            self.assertLess(now.samples, before.samples)
            after = c.refresh("ou", wait=True, timeout=60)
            self.assertEqual(after.samples, now.samples)
            self.assertGreater(after.version, before.version)

    def digests(self, c):
        return {m.config.name: c.describe(m.config.name, state_digest=True).state_digest for m in c.list_models()}

    def check_forks(self, c, alarms, pairs):
        # Fork k ("ou.k") holds the pairs from alarm k to alarm k+1 (the last: to the end); the
        # parent holds every pair. Returns every model's state digest.
        forks = {m.config.name for m in c.list_models()} - {"ou"}
        self.assertEqual(forks, {f"ou.{k}" for k in range(1, len(alarms) + 1)})
        for k, a in enumerate(alarms, start=1):
            info = c.describe(f"ou.{k}")
            self.assertEqual((info.config.fork_of, info.config.fork_index), ("ou", a.index))
            self.assertIsNone(info.config.on_change)
            end = alarms[k].index if k < len(alarms) else pairs
            self.assertEqual(info.samples + info.pending_warmup, end - a.index, k)
        parent = c.describe("ou")
        self.assertEqual(parent.samples + parent.pending_warmup, pairs)
        return self.digests(c)

    def test_on_change_fork(self):
        # Alarm k starts the model "ou.k", fed from the alarming pair on until alarm k+1; the
        # parent learns on as with "keep". The forks come back the same, state digests included,
        # after kill -9 before any snapshot (replay starts them again), after a clean restart (a
        # snapshot), and after kill -9 with a snapshot and later batches (restore, then replay
        # into the restored forks).
        rows = ou(9001, [(0, 1.0), (3000, 5.0), (6000, 1.0)], seed=3)
        d = self.start()
        with Client(d.grpc_target) as c:
            info = c.create_model("ou", dim=1, max_dict=60, rff_features=32, auto_sigma_warmup=200,
                                  on_change="fork")
            self.assertEqual(info.config.on_change, "fork")
            self.assertIsNone(info.config.fork_of)
            self.ingest(c, rows, 0, 4500)
            alarms = c.list_alarms("ou").alarms
            self.assertTrue(any(3000 <= a.index < 3500 for a in alarms), alarms)
            digests = self.check_forks(c, alarms, 4500)
        self.kill9(d)
        d = self.start()
        with Client(d.grpc_target) as c:
            self.assertEqual(self.digests(c), digests)
        self.assertEqual(d.stop(timeout=30), 0)
        d = self.start()
        with Client(d.grpc_target) as c:
            self.assertEqual(self.digests(c), digests)
            self.ingest(c, rows, 4500, 9000)
            alarms = c.list_alarms("ou").alarms
            self.assertTrue(any(6000 <= a.index < 6500 for a in alarms), alarms)
            digests = self.check_forks(c, alarms, 9000)
            # A fork inside the fast regime (rate 5 from pair 3000 to 6000, dt 0.1) learned it
            # (nearly) alone: its slowest relaxation is near exp(-0.5) = 0.61, not the slow
            # regime's exp(-0.1) = 0.90 that the parent's mixes in. A fork ends at the next alarm:
            # the one that finds the return at 6000 comes a detection delay after it.
            inside = [k for k, a in enumerate(alarms, start=1)
                      if a.index >= 3000 and (alarms[k].index if k < len(alarms) else 9000) <= 6100
                      and (alarms[k].index if k < len(alarms) else 9000) - a.index >= 300]
            self.assertGreaterEqual(len(inside), 1, alarms)
            for k in inside:
                c.refresh(f"ou.{k}", wait=True, timeout=60)
                mu = sorted(abs(np.asarray(c.koopman(f"ou.{k}", top=3).eigenvalues)))[-2]
                self.assertLess(abs(mu - np.exp(-0.5)), abs(mu - np.exp(-0.1)), (k, mu))
            digests = self.digests(c)  # refreshes change no state
        self.kill9(d)
        d = self.start()
        last = f"ou.{len(alarms)}"
        with Client(d.grpc_target) as c:
            self.assertEqual(self.digests(c), digests)
            # A fork is fed only through its parent; otherwise it is a model like any other.
            with self.assertRaises(CmestreamError) as e:
                c.ingest_trajectory(last, rows[:10], producer="q")
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("is a fork of 'ou'", str(e.exception))
            self.assertEqual(c.refresh(last, wait=True, timeout=60).samples, c.describe(last).samples)
            self.assertGreater(len(c.koopman(last, top=2).eigenvalues), 0)
            c.delete_model("ou.1")
            del digests["ou.1"]
        out = subprocess.run([CMESTREAM, "--server", d.grpc_target, "model", "describe", last, "--json"],
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual((json.loads(out)["config"]["fork_of"], json.loads(out)["config"]["fork_index"]),
                         ("ou", alarms[-1].index))
        self.kill9(d)
        d = self.start()
        with Client(d.grpc_target) as c:
            self.assertEqual(self.digests(c), digests)  # the deletion replays after the forks' start

    def kill9(self, d):
        d.process.send_signal(signal.SIGKILL)
        d.process.wait()
        d.stop()

    def test_refusals(self):
        d = self.start()
        with Client(d.grpc_target) as c:
            c.create_model("quiet", dim=1, alarms="off")
            with self.assertRaises(CmestreamError) as e:
                c.list_alarms("quiet")
            self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIsNone(c.describe("quiet").alarms)
            for bad in (dict(alarms="maybe"), dict(alarm_rate=0.0), dict(alarm_rate=30.0),
                        dict(alarms="off", alarm_rate=2.0), dict(on_change="fork", alarms="off"),
                        dict(on_change="split"), dict(fork_of="x", fork_index=3),
                        dict(alarms="off", on_change="reset")):
                with self.assertRaises(CmestreamError) as e:
                    c.create_model("bad", dim=1, **bad)
                self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT, bad)
            with self.assertRaises(CmestreamError) as e:
                list(c.watch_alarms("nope", timeout=2))
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
            # A watch on a model that is deleted ends with NOT_FOUND.
            c.create_model("gone", dim=1)
            ended = []

            def watch_gone():
                try:
                    list(c.watch_alarms("gone", timeout=20))
                    ended.append("ok")
                except CmestreamError as err:
                    ended.append(err.code)
            t = threading.Thread(target=watch_gone)
            t.start()
            time.sleep(0.5)
            c.delete_model("gone")
            t.join(timeout=10)
            self.assertEqual(ended, [grpc.StatusCode.NOT_FOUND])
            # Only the daemon's log writes the arrival time.
            c.create_model("ou", dim=1)
            channel = grpc.insecure_channel(d.grpc_target)
            from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
            stub = pb_grpc.IngestServiceStub(channel)
            with self.assertRaises(grpc.RpcError) as e:
                stub.IngestOne(pb.IngestBatch(model="ou", states=[0.0, 1.0, 2.0], received_unix_seconds=5.0),
                               timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("received_unix_seconds", e.exception.details())
            self.assertEqual(c.describe("ou").samples + c.describe("ou").pending_warmup, 0)
            channel.close()


if __name__ == "__main__":
    unittest.main()
