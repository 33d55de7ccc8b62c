"""End-to-end test of lag scans, CK tests and error bars (docs/algorithms.md §8) through a real
cmestreamd: `model create --lags`, `cmestream timescales/cktest --json`, the Python client, the
plots, the Prometheus gauges, bad input, and bit-exact restart (snapshot-less WAL replay).

Environment (set by ctest, see tests/integration/CMakeLists.txt):
  CMESTREAMD  path of the daemon binary      CMESTREAM  path of the CLI binary
  PYTHONPATH  <build>/python:client/python
Ground truth: a closed-form 3-state Markov chain (eigenvalues of P) and P^k for the CK test.
"""
import json
import os
import subprocess
import tempfile
import unittest
import urllib.request

import numpy as np

import cmestream
from cmestream.testing import Daemon

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")

P = np.array([[0.90, 0.08, 0.02],
              [0.05, 0.90, 0.05],
              [0.02, 0.08, 0.90]])


def chain(n, seed):
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    cum = np.cumsum(P, axis=1)
    s = np.empty(n, dtype=np.int64)
    s[0] = 0
    for t in range(1, n):
        s[t] = int(np.searchsorted(cum[s[t - 1]], u[t]))
    return s


def true_timescales():
    mods = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    return -1.0 / np.log(mods[1:])


class LagsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-lags-test-")
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.daemon = Daemon(DAEMON, cls.data, refresh_interval=3600).start()
        cls.client = cmestream.Client(cls.daemon.grpc_target)
        # 40 episodes of 500 states of the 3-state chain, lags 1, 2, 5.
        cls.client.create_model("chain", num_states=3, rank=3, clusters=3, lags=[1, 2, 5])
        for e in range(40):
            cls.client.ingest_state_ids("chain", chain(500, e), episode=f"e{e}")
        cls.client.refresh("chain")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.daemon.stop()
        cls.tmp.cleanup()
        assert code == 0, f"cmestreamd exited with {code} after SIGTERM"

    def cli(self, *args, check=True):
        p = subprocess.run([CLI, "--server", self.daemon.grpc_target, *args], capture_output=True,
                           text=True, timeout=120)
        if check and p.returncode != 0:
            self.fail(f"cmestream {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p

    def test_timescales_json_match_the_closed_form_chain_at_every_lag(self):
        out = json.loads(self.cli("timescales", "chain", "--json").stdout)
        for key in ("lags", "timescales", "stderr", "samples"):
            self.assertIn(key, out)
        self.assertEqual(out["lags"], [1, 2, 5])
        truth = true_timescales()
        for k, lag in enumerate(out["lags"]):
            ts, se = out["timescales"][k], out["stderr"][k]
            self.assertEqual(len(ts), 3)
            self.assertIsNone(ts[2], "3 states: 2 non-stationary modes; the stationary one is left out")
            for i in range(2):
                self.assertLess(abs(ts[i] / truth[i] - 1), 0.15, (lag, i, ts[i], truth[i]))
                self.assertGreater(se[i], 0)
                self.assertLess(abs(ts[i] - truth[i]), 4 * se[i], (lag, i, ts[i], se[i], truth[i]))
            # Pairs per lag: each episode of 500 states has 500 - lag pairs.
            self.assertEqual(out["samples"][k], 40 * (500 - lag))

    @staticmethod
    def text_rows(text):
        """The data rows of `cmestream timescales` text: (lag, pairs, [cell tokens])."""
        rows = []
        for line in text.splitlines():
            f = line.split()
            if f and f[0].isdigit():
                rows.append((int(f[0]), float(f[1]), f[2:]))
        return rows

    def test_timescales_text_is_in_time_units(self):
        # The same data as "chain" at dt = 0.1: every timescale is 0.1 x the one in steps
        # (-lag dt / ln|mu|), and the text says "time units", not "units of dt".
        self.client.create_model("chain_dt", num_states=3, rank=3, clusters=3, lags=[1, 2, 5], dt=0.1)
        for e in range(40):
            self.client.ingest_state_ids("chain_dt", chain(500, e), episode=f"e{e}")
        self.client.refresh("chain_dt")
        steps = json.loads(self.cli("timescales", "chain", "--json").stdout)
        timed = json.loads(self.cli("timescales", "chain_dt", "--json").stdout)
        self.assertEqual(timed["dt"], 0.1)
        truth = true_timescales()
        for k in range(3):
            for i in range(2):
                self.assertAlmostEqual(timed["timescales"][k][i], 0.1 * steps["timescales"][k][i], delta=1e-9)
                self.assertLess(abs(timed["timescales"][k][i] / (0.1 * truth[i]) - 1), 0.15)
        text = self.cli("timescales", "chain_dt").stdout
        self.assertIn("implied timescales in time units (dt = 0.1 per sample step) against the lag in steps", text)
        self.assertNotIn("units of dt", text)
        self.assertNotIn("nan", text.lower())
        rows = self.text_rows(text)
        self.assertEqual([r[0] for r in rows], [1, 2, 5])
        for k, (lag, pairs, cells) in enumerate(rows):
            self.assertEqual(pairs, 40 * (500 - lag))
            # Two modes "t +- s", then the third (undefined for 3 states: one is stationary) "n/a".
            self.assertEqual(len(cells), 7, cells)
            self.assertEqual((cells[1], cells[4], cells[6]), ("+-", "+-", "n/a"), cells)
            for i, at in enumerate((0, 3)):
                self.assertAlmostEqual(float(cells[at]), timed["timescales"][k][i],
                                       delta=1e-3 * timed["timescales"][k][i])
                self.assertAlmostEqual(float(cells[at + 2]), timed["stderr"][k][i],
                                       delta=1e-2 * timed["stderr"][k][i])

    def test_timescales_text_prints_an_infinite_timescale_as_inf_without_an_error_bar(self):
        # Two states that never change: the count chain is the identity, so its second eigenvalue
        # is 1 and the timescale +inf (JSON null); its jackknife error is undefined.
        self.client.create_model("frozen", num_states=2, rank=2, clusters=2, lags=[1, 2])
        for e in range(4):
            self.client.ingest_state_ids("frozen", np.full(300, e % 2, dtype=np.int64), episode=f"f{e}")
        self.client.refresh("frozen")
        out = json.loads(self.cli("timescales", "frozen", "--json").stdout)
        self.assertIsNone(out["timescales"][0][0])
        text = self.cli("timescales", "frozen").stdout
        self.assertNotIn("nan", text.lower())
        rows = self.text_rows(text)
        self.assertEqual([r[0] for r in rows], [1, 2])
        for lag, pairs, cells in rows:
            self.assertEqual(pairs, 4 * (300 - lag))
            self.assertEqual(cells[0], "inf", cells)
            self.assertNotIn("+-", cells[:2], cells)

    def test_cktest_json_predicts_the_estimated_chain(self):
        out = json.loads(self.cli("cktest", "chain", "--json").stdout)
        for key in ("lag", "steps", "predicted", "estimated", "stderr", "max_deviation"):
            self.assertIn(key, out)
        self.assertEqual(out["lag"], 1)
        self.assertEqual(out["steps"], [2, 5])
        self.assertLess(out["max_deviation"], 0.05)
        # The sets are the three states (up to order): estimated T(5) matches P^5 as a set of rows.
        est = np.array(out["estimated"][1])
        truth = np.linalg.matrix_power(P, 5)
        np.testing.assert_allclose(np.sort(np.diag(est)), np.sort(np.diag(truth)), atol=0.05)
        self.assertTrue(np.allclose(est.sum(axis=1), 1, atol=1e-9))
        # --steps 2 restricts to k = 2; --lag 2 has no multiple among [1, 2, 5].
        two = json.loads(self.cli("cktest", "chain", "--steps", "2", "--json").stdout)
        self.assertEqual(two["steps"], [2])
        p = self.cli("cktest", "chain", "--lag", "2", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("FAILED_PRECONDITION", p.stderr)
        self.assertIn("multiples", p.stderr)

    def test_python_client_and_plots(self):
        ts = self.client.timescales("chain")
        self.assertEqual(list(ts.primary.lags), [1, 2, 5])
        ck = self.client.cktest("chain", clusters=2)
        self.assertEqual(ck.primary.clusters, 2)
        self.assertEqual(ck.primary.predicted.shape, (2, 2, 2))
        from cmestream import lagplots
        for path, draw in ((os.path.join(self.tmp.name, "its.png"), lambda p: lagplots.plot_implied_timescales(ts, p)),
                           (os.path.join(self.tmp.name, "ck.png"), lambda p: lagplots.plot_ck_test(ck, p))):
            draw(path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_gauges_are_exported(self):
        with urllib.request.urlopen(f"http://{self.daemon.metrics_target}/metrics", timeout=10) as r:
            text = r.read().decode()
        self.assertIn('cmestream_lag_timescale{lag="5",mode="1",model="chain"}', text)
        self.assertIn('cmestream_lag_timescale_stderr{lag="1",mode="1",model="chain"}', text)
        line = [l for l in text.splitlines() if l.startswith('cmestream_ck_max_deviation{model="chain"}')]
        self.assertEqual(len(line), 1)
        self.assertLess(float(line[0].split()[-1]), 0.05)

    def test_bad_lags_are_invalid_argument_and_pairs_only_is_failed_precondition(self):
        for lags, words in (("0,1", "is positive"), ("2,2", "strictly increasing"),
                            ("1,5000", "at most 1000"), ("1,x", "--lags")):
            p = self.cli("model", "create", "bad", "--states", "3", "--lags", lags, check=False)
            self.assertNotEqual(p.returncode, 0, lags)
            self.assertIn(words, p.stderr, lags)
            if words != "--lags":
                self.assertIn("INVALID_ARGUMENT", p.stderr)
        self.cli("model", "create", "pairs", "--states", "3", "--lags", "1,2")
        s = chain(2000, 99)
        self.client.ingest_ids("pairs", s[:-1], s[1:])
        self.client.refresh("pairs")
        for cmd in ("timescales", "cktest"):
            p = self.cli(cmd, "pairs", check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("FAILED_PRECONDITION", p.stderr)
            self.assertIn("only unordered pairs", p.stderr)

    def test_zz_restart_replays_the_lag_statistics_bit_exactly(self):  # last: restarts the daemon
        self.client.create_model("replay", num_states=3, rank=3, clusters=2, lags=[1, 3])
        for e in range(5):
            self.client.ingest_state_ids("replay", chain(300, 100 + e), episode=f"r{e}")
        self.client.refresh("replay")
        t_before = self.client.timescales("replay").primary
        # Restart: the model comes back from the WAL (and any snapshot) with the same state.
        code = self.daemon.stop()
        self.assertEqual(code, 0)
        type(self).daemon = Daemon(DAEMON, self.data, refresh_interval=3600).start()
        self.client.close()
        type(self).client = cmestream.Client(self.daemon.grpc_target)
        self.client.refresh("replay")
        t_after = self.client.timescales("replay").primary
        np.testing.assert_array_equal(t_before.timescales, t_after.timescales)
        np.testing.assert_array_equal(t_before.stderr, t_after.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
