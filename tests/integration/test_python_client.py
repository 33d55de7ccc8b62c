"""End-to-end test of the Python client (cmestream) against a real cmestreamd.

Environment: CMESTREAMD (daemon binary), CMESTREAM (CLI binary, for `simulate`), PYTHONPATH with
<build>/python and client/python. Ground truth: the Duffing basins from long integration
(`cmestream simulate duffing-grid`), the one-step flow, exact deduplication counts.
"""
import json
import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

from cmestream import Client, CmestreamError
from cmestream.basins import classify_basins
from cmestream.testing import Daemon

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")


def simulate(*args):
    out = subprocess.run([CLI, "simulate", *args], capture_output=True, text=True,
                         check=True).stdout
    return np.loadtxt(out.splitlines(), delimiter=",")


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-py-test-")
        cls.daemon = Daemon(DAEMON, os.path.join(cls.tmp.name, "data"),
                            refresh_interval=3600).start()
        cls.client = Client(cls.daemon.grpc_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.daemon.stop()
        cls.tmp.cleanup()
        assert code == 0, f"cmestreamd exited with {code} after SIGTERM"

    def test_duffing_basins_from_leading_eigenfunctions(self):
        c = self.client
        data = simulate("duffing", "--n", "10000", "--seed", "11")
        info = c.create_model("duffing", dim=2, sigma=0.5, dt=0.25)
        self.assertEqual(info.config.dim, 2)
        r = c.ingest_pairs("duffing", data[:, :2], data[:, 2:], producer="p")
        self.assertEqual((r.pairs_sent, r.pairs_applied, r.producer_offset), (10000, 10000, 10000))
        self.assertEqual(r.batches, 10)
        view = c.refresh("duffing", wait=True)
        self.assertEqual(view.samples, 10000)

        grid = simulate("duffing-grid", "--n-side", "30")
        k = c.koopman("duffing", points=grid[:, :2], top=4)
        self.assertEqual(k.eigenvalues.shape, (4,))
        self.assertEqual(k.eigenfunctions.shape, (4, 900))
        self.assertAlmostEqual(abs(k.eigenvalues[0]), 1.0, delta=0.05)
        self.assertEqual(k.samples, 10000)
        # Basins: the basin indicator's level set through the saddle at the origin (default), and
        # the nearest attractor (+-1, 0) in the space of the two leading eigenfunctions. This
        # setting is the one measured where the nearest attractor wins (cmestream/basins.py).
        labels_saddle, _ = classify_basins(c, "duffing", grid[:, :2])
        acc_saddle = float(np.mean(labels_saddle == grid[:, 2]))
        labels, _ = classify_basins(c, "duffing", grid[:, :2], saddle=None)
        acc = float(np.mean(labels == grid[:, 2]))
        print(f"\nbasin accuracy: saddle level set {acc_saddle:.3f}, nearest attractor {acc:.3f} "
              "(30x30 grid, 10000 samples, sigma 0.5)")
        self.assertGreater(acc, 0.97)        # measured 0.984
        self.assertGreater(acc_saddle, 0.92)  # measured 0.948

        x_atoms, y_atoms, sigma = c.dictionary("duffing")
        self.assertEqual(x_atoms.shape[1], 2)
        self.assertEqual(sigma, 0.5)
        d = c.describe("duffing")
        self.assertEqual(x_atoms.shape[0], d.dictionary_size)
        self.assertEqual(y_atoms.shape[0], d.dictionary_size_y)
        self.assertLess(d.dictionary_size, 1000)  # far smaller than the sample count

        # Predictions: one d-vector per point, near the integrated flow.
        truth = simulate("duffing", "--n", "200", "--seed", "99", "--box", "1.2")
        pred = c.predict("duffing", truth[:, :2])
        self.assertEqual(pred.shape, (200, 2))
        rmse = np.sqrt(np.mean(np.sum((pred - truth[:, 2:]) ** 2, axis=1)))
        self.assertLess(rmse, 0.1)

    def test_four_well_koopman_spectrum_against_the_transfer_operator(self):
        """The Koopman reply through the Python client: the stationary mode, the slowest timescales, the
        cross-view comparison and the prequential score, read from the real daemon on a
        four-well trajectory whose transfer-operator eigenvalues are known (--truth)."""
        c = self.client
        truth_file = os.path.join(self.tmp.name, "four-well-truth.json")
        states = simulate("four-well", "--n", "30000", "--seed", "5", "--trajectory", "--truth", truth_file)
        states = states.reshape(-1, 1)
        with open(truth_file) as f:
            truth = json.load(f)
        tau = truth["tau"]
        true_ts = [-tau / np.log(mu) for mu in truth["eigenvalues"][1:4]]
        print(f"\nfour-well truth: timescales {np.round(true_ts, 3)} (tau {tau})")
        self.assertAlmostEqual(true_ts[0], 5.80, delta=0.01)

        c.create_model("wells-auto", dim=1, sigma="auto", dt=tau)
        chosen = None
        scores = {}
        for name in ("wells-auto", "wells-wide"):
            if name == "wells-wide":  # the same data, 20x the auto bandwidth
                chosen = c.describe("wells-auto").sigma_selection.chosen
                c.create_model(name, dim=1, sigma=20 * chosen, dt=tau)
            # Test-then-train: the view after 20k pairs is scored on the next 10k, which it has
            # not seen; the second refresh reports that window.
            c.ingest_trajectory(name, states[:20001], producer="p", episode="e")
            c.refresh(name, wait=True)
            first = c.koopman(name, top=4)
            self.assertTrue(np.isnan(first.spectrum.heldout_score))  # no window completed yet
            self.assertEqual(first.spectrum.heldout_pairs, 0)
            c.ingest_trajectory(name, states[20000:], producer="p", offset=20000, episode="e")
            c.refresh(name, wait=True)
            k = c.koopman(name, points=np.array([[-1.5], [0.5]]), top=4)
            sp = k.spectrum
            self.assertEqual(k.samples, 30000)
            self.assertEqual(sp.heldout_view_version, first.view_version)
            self.assertEqual(sp.heldout_pairs, 10000)
            self.assertTrue(np.isfinite(sp.selection_score))
            scores[name] = sp.heldout_score
            if name == "wells-wide":
                continue
            # The stationary mode: flagged, eigenvalue exactly 1, infinite timescale, g = 1.
            self.assertEqual(list(k.stationary), [True, False, False, False])
            self.assertEqual(k.eigenvalues[0], 1.0 + 0.0j)
            self.assertTrue(np.isinf(k.timescales[0]))
            np.testing.assert_allclose(k.eigenfunctions[0], 1.0, atol=1e-12)
            self.assertEqual(list(k.excess), [0.0, 0.0, 0.0, 0.0])
            # The three slowest timescales within 10 % of the truth (30k pairs).
            for l in range(3):
                self.assertAlmostEqual(k.timescales[l + 1] / true_ts[l], 1.0, delta=0.10, msg=f"timescale {l + 1}")
            self.assertEqual(sp.estimator, "spectral-moments")
            # One truth across views: the comparison quotes the Koopman timescale, and the count
            # chain and embedding agree with it within the 25 % threshold here.
            cmp = sp.comparison
            self.assertEqual(cmp.koopman, k.timescales[1])
            for t in (cmp.count_chain, cmp.embedding):
                self.assertAlmostEqual(t / true_ts[0], 1.0, delta=0.25)
            lo, hi = min(cmp.koopman, cmp.count_chain, cmp.embedding), max(cmp.koopman, cmp.count_chain, cmp.embedding)
            self.assertAlmostEqual(cmp.relative_disagreement, (hi - lo) / lo, places=12)
            self.assertEqual(cmp.threshold, 0.25)
            self.assertFalse(cmp.warning)
            # The lag view's figure and its jackknife s.e. (the data's sampling error): the truth
            # and the Koopman estimate both lie within 3 s.e. of it, and the s.e. is a few per cent.
            self.assertEqual(cmp.lag_scan_lag, 1)
            self.assertGreaterEqual(cmp.lag_scan_blocks, 8)
            self.assertLess(abs(cmp.lag_scan - true_ts[0]), 3 * cmp.lag_scan_stderr)
            self.assertLess(abs(cmp.lag_scan - cmp.koopman), 3 * cmp.lag_scan_stderr)
            self.assertGreater(cmp.lag_scan_stderr / cmp.lag_scan, 0.005)
            self.assertLess(cmp.lag_scan_stderr / cmp.lag_scan, 0.15)
            # The headline: the Koopman timescale with the lag scan's relative s.e.; a stationary
            # stream; periods null (NaN) for the real eigenvalues of this reversible system.
            h = k.headline
            self.assertEqual(h.view, "koopman")
            self.assertEqual(h.timescale, k.timescales[1])
            self.assertAlmostEqual(h.stderr / h.timescale, cmp.lag_scan_stderr / cmp.lag_scan, places=12)
            self.assertFalse(h.nonstationary, h.nonstationary_reason)
            self.assertEqual(len(k.periods), len(k.eigenvalues))
            for mu, p in zip(k.eigenvalues, k.periods):
                self.assertEqual(np.isnan(p), mu.imag == 0)
            self.assertGreaterEqual(sp.data_share, 0.8)
            self.assertGreaterEqual(sp.epochs, 1)
            # describe carries the same spectrum.
            self.assertEqual(c.describe(name).spectrum.heldout_score, sp.heldout_score)
            print(f"four-well koopman: timescales {np.round(k.timescales[1:], 3)}, counts {cmp.count_chain:.3f}, "
                  f"embedding {cmp.embedding:.3f}, lag scan {cmp.lag_scan:.3f} +/- {cmp.lag_scan_stderr:.3f} "
                  f"({cmp.lag_scan_blocks} blocks), prequential VAMP-E {sp.heldout_score:.4f} on {sp.heldout_pairs} "
                  f"pairs, cross-validated {sp.selection_score:.4f}")
        print(f"prequential VAMP-E: auto sigma {chosen:.3f} -> {scores['wells-auto']:.4f}, "
              f"20x -> {scores['wells-wide']:.4f}")
        # VAMP-E <= 1 + the sum of the five leading squared eigenvalues (3.73), and the 20x too
        # wide bandwidth scores clearly lower on the same unseen pairs.
        self.assertLess(scores["wells-auto"], 3.8)
        self.assertGreater(scores["wells-auto"], 2.5)
        self.assertGreater(scores["wells-auto"], scores["wells-wide"] + 0.3)

    def test_exactly_once_with_overlapping_batches(self):
        c = self.client
        data = simulate("duffing", "--n", "3000", "--seed", "4")
        x, y = data[:, :2], data[:, 2:]
        c.create_model("dedup", dim=2, sigma=0.5)
        r = c.ingest_pairs("dedup", x[:2000], y[:2000], producer="a", batch=300)
        self.assertEqual((r.pairs_applied, r.producer_offset), (2000, 2000))
        # Re-send from offset 1500 to 3000: only the last 1000 are new.
        r = c.ingest_pairs("dedup", x[1500:], y[1500:], producer="a", offset=1500, batch=300)
        self.assertEqual(r.pairs_sent, 1500)
        self.assertEqual((r.pairs_applied, r.producer_offset, r.model_samples), (1000, 3000, 3000))
        self.assertEqual(c.producer_offset("dedup", "a"), 3000)
        # A gap (offset beyond the applied offset) is refused.
        with self.assertRaises(CmestreamError) as e:
            c.ingest_pairs("dedup", x[:10], y[:10], producer="a", offset=3500)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        # Another producer is independent; no producer applies everything.
        self.assertEqual(c.ingest_pairs("dedup", x[:100], y[:100], producer="b").pairs_applied, 100)
        self.assertEqual(c.ingest_pairs("dedup", x[:100], y[:100]).pairs_applied, 100)
        self.assertEqual(c.describe("dedup").samples, 3200)

    def test_trajectory_equals_pairs(self):
        c = self.client
        pairs = simulate("double-well", "--n", "1500", "--seed", "2")
        states = np.append(pairs[:, 0], pairs[-1, 1]).reshape(-1, 1)
        for name in ("traj", "pairs"):
            c.create_model(name, dim=1, sigma=0.3, dt=0.1, seed=3)
        r = c.ingest_trajectory("traj", states, producer="t", episode="e1", batch=64)
        self.assertEqual((r.pairs_sent, r.pairs_applied), (1500, 1500))
        c.ingest_pairs("pairs", pairs[:, :1], pairs[:, 1:], batch=500)
        for name in ("traj", "pairs"):
            c.refresh(name)
        a, b = c.koopman("traj", top=3), c.koopman("pairs", top=3)
        np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, atol=1e-9)

    def test_errors_are_typed_and_bad_batches_change_nothing(self):
        c = self.client
        with self.assertRaises(CmestreamError) as e:
            c.describe("missing")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("missing", e.exception.message)
        c.create_model("strict", dim=2, sigma=0.5)
        good = np.zeros((5, 2))
        bad = good.copy()
        bad[3, 1] = np.nan
        with self.assertRaises(CmestreamError) as e:
            c.ingest_pairs("strict", bad, good, producer="p")
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        # Wrong dimension: caught before sending, naming the expected shape (a (3, 3) array is
        # not reinterpreted as 4.5 or 3 pairs of 2-d states).
        with self.assertRaises(ValueError) as e:
            c.ingest_pairs("strict", np.zeros((3, 3)), np.zeros((3, 3)))
        self.assertIn("expected shape (n, 2)", str(e.exception))
        self.assertIn("got (3, 3)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.ingest_pairs("strict", np.zeros((2, 3)), np.zeros((2, 3)))
        self.assertIn("expected shape (n, 2) or (2,) for model 'strict' (dim 2), got (2, 3)",
                      str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.koopman("strict", points=np.zeros((4, 3)))
        self.assertIn("expected shape (n, 2)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.predict("strict", np.zeros(5))
        self.assertIn("got (5,)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.ingest_pairs("strict", np.zeros((2, 2), complex), np.zeros((2, 2)))
        self.assertIn("dtype complex128", str(e.exception))
        d = c.describe("strict")
        self.assertEqual(d.samples + d.pending_warmup, 0)
        self.assertEqual(c.producer_offset("strict", "p"), 0)
        with self.assertRaises(CmestreamError) as e:
            c.koopman("strict")
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)


if __name__ == "__main__":
    unittest.main(verbosity=2)
