"""A 512-dimensional stream with default options (docs/algorithms.md §1.15, docs/user-guide.md
"Wide streams"): the hidden state is the 1-D four-well diffusion (`cmestream simulate four-well`,
whose eigenvalues are known), seen through a random two-layer ReLU map into 512 channels plus
noise, the shape of a game agent's hidden layer. A model created with `dim=512` and nothing else
reduces to 32 principal directions on its (unscaled) warm-up; its Koopman headline must give the
hidden diffusion's slowest timescale within 5 % of the truth and of the default model fed the
hidden 1-D state itself, and every reply that holds states must hold 512-value rows (the user's
units). Also: the refusals, and a restart that keeps the reduction bit for bit.

Environment (ctest): CMESTREAMD, CMESTREAM (the CLI, for `simulate`), PYTHONPATH as the others.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

from cmestream import Client
from cmestream.client import InvalidArgumentError
from cmestream.testing import Daemon

CMESTREAMD = os.environ.get("CMESTREAMD", "build/service/cmestreamd")
CMESTREAM = os.environ.get("CMESTREAM", "build/client/cmestream")
TAU = 0.1
DIM = 512


def four_well(n, seed, tmp):
    """n + 1 states of the 1-D four-well diffusion at lag TAU, and its slowest timescale."""
    truth = os.path.join(tmp, f"truth{seed}.json")
    out = subprocess.run([CMESTREAM, "simulate", "four-well", "--trajectory", "--n", str(n), "--seed", str(seed),
                          "--tau", str(TAU), "--truth", truth], check=True, capture_output=True, text=True).stdout
    s = np.array([float(v) for v in out.splitlines() if v and not v.startswith("#")])
    with open(truth) as f:
        ev = json.load(f)["eigenvalues"]
    return s, -TAU / np.log(ev[1])


def game_layer(s, seed=0):
    """A random two-layer ReLU map of the scalar state into DIM channels, plus noise."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=64) * 2.0, rng.normal(size=64)
    hidden = np.maximum(0.0, np.outer(s, a) + b)  # (n, 64)
    w = rng.normal(size=(64, DIM)) / 8.0
    return hidden @ w + 0.1 * rng.normal(size=(len(s), DIM))


class WideStreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.daemon = Daemon(CMESTREAMD, cls.data, refresh_interval=3600).start()
        cls.client = Client(cls.daemon.grpc_target)
        s, cls.truth = four_well(20000, 3, cls.tmp.name)
        cls.rows = game_layer(s)
        cls.hidden = s

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.stop()
        cls.tmp.cleanup()

    def test_default_model_reduces_and_finds_the_hidden_timescale(self):
        c = self.client
        info = c.create_model("game", dim=DIM, dt=TAU)
        self.assertEqual(info.config.reduce, 32)
        self.assertEqual(info.config.auto_sigma_warmup, 1000)
        self.assertIsNone(info.config.scale)  # a reduced model is unscaled unless asked
        self.assertEqual(info.input_scaling.reduce, 32)
        self.assertFalse(info.input_scaling.frozen)
        for i in range(0, len(self.rows) - 1, 2000):
            c.ingest_trajectory("game", self.rows[i:i + 2001], producer="agent", offset=i)
        c.refresh("game")
        info = c.describe("game")
        self.assertEqual(info.samples, len(self.rows) - 1)
        self.assertEqual(info.state_dim, DIM)
        # describe lists what runs and its per-pair arithmetic: the kernel estimators at d = 32.
        names = [e.name for e in info.estimators]
        self.assertEqual(names, ["input", "alarms", "cme", "counts", "embedding", "spectral", "lags", "forecast",
                                 "forecast_candidates"])
        cme = next(e for e in info.estimators if e.name == "cme")
        self.assertEqual(cme.multiply_adds, 3 * info.dictionary_size ** 2 + 2 * info.dictionary_size * 32)
        self.assertIn("d = 32", cme.formula)
        scaling = info.input_scaling
        self.assertTrue(scaling.frozen)
        self.assertEqual(scaling.mode, "none")  # no scaler: only the reduction
        self.assertEqual(len(scaling.center), 0)
        self.assertEqual(len(scaling.reduce_variances), 32)
        self.assertTrue(np.all(np.diff(scaling.reduce_variances) <= 0))
        # 64 hidden ReLU units of one scalar: a few directions carry the signal, the rest is noise.
        self.assertGreater(scaling.explained_variance, 0.5)
        self.assertLessEqual(scaling.explained_variance, 1.0)

        k = c.koopman("game", top=4)
        h = k.headline
        print(f"512-dim four-well: headline {h.timescale:.3f} +/- {h.stderr:.3f} [{h.view}] "
              f"(truth {self.truth:.3f}); explained {scaling.explained_variance:.3f}; "
              f"dictionary {info.dictionary_size}; spectrum ready {k.spectrum.ready}, "
              f"share {k.spectrum.data_share:.3f}", file=sys.stderr)
        self.assertEqual(k.spectrum.estimator, "spectral-moments")
        self.assertTrue(k.spectrum.ready)
        self.assertGreaterEqual(k.spectrum.data_share, 0.8)
        self.assertAlmostEqual(h.timescale / self.truth, 1.0, delta=0.05)
        # Like for like: the default model of the hidden state itself (what reduction may lose).
        c.create_model("hidden", dim=1, dt=TAU)
        c.ingest_trajectory("hidden", self.hidden[:, None], producer="agent")
        c.refresh("hidden")
        hidden = c.koopman("hidden", top=4).headline.timescale
        print(f"the hidden state's own model: {hidden:.3f}", file=sys.stderr)
        self.assertAlmostEqual(h.timescale / hidden, 1.0, delta=0.05)

        # Replies that hold states hold the user's 512-value rows.
        x_atoms, y_atoms, _ = c.dictionary("game")
        self.assertEqual(x_atoms.shape[1], DIM)
        self.assertEqual(y_atoms.shape[1], DIM)
        pred = c.predict("game", self.rows[:5])
        self.assertEqual(pred.shape, (5, DIM))
        # A prediction lies near the stream (the kept subspace plus the mean), not at the origin.
        self.assertLess(np.linalg.norm(pred - self.rows[1:6]) / np.linalg.norm(self.rows[1:6]), 0.5)
        cl = c.clusters("game", points=self.rows[:3])
        self.assertEqual(np.asarray(cl.coordinates).shape[1], DIM)
        # The clusters' timescales are those of the coarse chain the reply reports (to 1e-9), and a
        # lower bound (a hard partition underestimates, by the variational principle: here 0.65 of
        # the Koopman view's, measured; docs/algorithms.md §3.4): not above the Koopman view by more
        # than its error bar.
        ev = np.sort(np.abs(np.linalg.eigvals(cl.transition_matrix)))[::-1]
        want = -TAU / np.log(ev[1:])
        self.assertEqual(len(cl.timescales), len(want))
        np.testing.assert_allclose(cl.timescales, want, rtol=1e-9)
        print(f"clusters: coarse {cl.transition_matrix.shape[0]}-state chain timescales {np.round(cl.timescales, 3)}; "
              f"koopman {h.timescale:.3f}", file=sys.stderr)
        self.assertLess(cl.timescales[0], h.timescale + 3 * h.stderr)
        f = c.forecast("game", window=self.rows[-1:], horizon=2)
        self.assertEqual(np.asarray(f.forecast).shape[-1], DIM)
        kp = c.koopman("game", points=self.rows[:7], top=2)
        self.assertEqual(np.asarray(kp.eigenfunctions).shape, (7, 2))  # points x modes

        # A restart keeps the reduction (and everything else) bit for bit.
        before = c.describe("game", state_digest=True).state_digest
        t0 = time.monotonic()
        self.assertEqual(self.daemon.stop(timeout=120), 0)
        t1 = time.monotonic()
        self.daemon.start(timeout=120)
        print(f"restart: stop {t1 - t0:.1f} s, start {time.monotonic() - t1:.1f} s", file=sys.stderr)
        # The shutdown snapshot held the wide model (its alarms' 512-channel state included): the
        # restart loads it instead of replaying the whole log.
        with open(self.daemon.log_path, errors="replace") as f:
            log = f.read()
        self.assertNotIn("no usable snapshot", log)
        self.assertNotIn("replaying the write-ahead log from its start", log)
        with Client(self.daemon.grpc_target) as again:
            after = again.describe("game", state_digest=True)
            self.assertEqual(after.state_digest, before)
            self.assertTrue(np.array_equal(after.input_scaling.reduce_variances, scaling.reduce_variances))
        self.__class__.client.close()
        self.__class__.client = Client(self.daemon.grpc_target)

    def test_reduction_choices_and_refusals(self):
        c = self.client
        narrow = c.create_model("narrow", dim=64).config
        self.assertIsNone(narrow.reduce)  # 64 dims: no default reduction, and scaled
        self.assertEqual(narrow.scale, "auto")
        self.assertEqual(c.create_model("scaled", dim=DIM, scale="auto").config.scale, "auto")
        self.assertIsNone(c.create_model("fixed", dim=DIM, sigma=2.0).config.reduce)  # explicit sigma: none
        self.assertIsNone(c.create_model("off", dim=DIM, reduce=0).config.reduce)
        self.assertEqual(c.create_model("eight", dim=100, reduce=8).config.auto_sigma_warmup, 1000)
        self.assertEqual(c.create_model("wide", dim=DIM, reduce=200).config.auto_sigma_warmup, 2000)
        for kwargs, says in [({"reduce": DIM}, "field reduce is 512"),
                             ({"reduce": 8, "sigma": 1.0}, "0 with an explicit sigma"),
                             ({"reduce": 8, "delays": 2}, "0 with delays"),
                             ({"reduce": 8, "auto_sigma_warmup": 79}, ">= 80 with reduce 8")]:
            with self.assertRaises(InvalidArgumentError) as e:
                c.create_model("bad", dim=DIM, **kwargs)
            self.assertIn(says, str(e.exception))
        with self.assertRaises(InvalidArgumentError) as e:
            c.create_model("bad", num_states=5, reduce=2)
        self.assertIn("0 for a discrete model", str(e.exception))


if __name__ == "__main__":
    unittest.main()
