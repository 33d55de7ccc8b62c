"""End-to-end test of the Python client (cmestream) against a real cmestreamd.

Environment: CMESTREAMD (daemon binary), CMESTREAM (CLI binary, for `simulate`), PYTHONPATH with
<build>/python and client/python. Ground truth: the Duffing basins from long integration
(`cmestream simulate duffing-grid`), the one-step flow, exact deduplication counts.
"""
import ast
import dataclasses
import json
import os
import re
import subprocess
import tempfile
import unittest

import grpc
import numpy as np
from google.protobuf.message import Message

import cmestream
from cmestream import Client, CmestreamError, info, results
from cmestream.basins import classify_basins
from cmestream.testing import Daemon, Stubs
from cmestream.v1 import cmestream_pb2 as pb

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")


def no_protobuf_inside(value, path="result"):
    """Paths inside a result (dataclass fields, lists, dicts) that hold a protobuf message."""
    if isinstance(value, Message):
        return [path]
    if dataclasses.is_dataclass(value):
        return [p for f in dataclasses.fields(value)
                for p in no_protobuf_inside(getattr(value, f.name), f"{path}.{f.name}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in no_protobuf_inside(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in no_protobuf_inside(v, f"{path}[{k!r}]")]
    return []


def ar_trajectory(n, seed):
    """A 2-d linear AR(1) trajectory x' = A x + 0.3 noise (rotation by 0.3 rad, radius 0.9)."""
    rng = np.random.default_rng(seed)
    c, s = 0.9 * np.cos(0.3), 0.9 * np.sin(0.3)
    a = np.array([[c, -s], [s, c]])
    out = np.zeros((n, 2))
    for t in range(1, n):
        out[t] = a @ out[t - 1] + 0.3 * rng.standard_normal(2)
    return out


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
        self.assertEqual(k.eigenfunctions.shape, (900, 4))  # samples first: one row per point
        # Mode amplitudes (docs/algorithms.md §7.3): one per eigenpair, shares in [0, 1], the
        # stationary mode's 0; the headline's cycles are dataclasses with their harmonics.
        self.assertEqual(k.amplitudes.shape, (4,))
        self.assertEqual(k.shares.shape, (4,))
        self.assertTrue(np.all((k.shares >= 0) & (k.shares <= 1)), k.shares)
        self.assertEqual(k.shares[0], 0.0)
        for cy in k.headline.cycles:
            self.assertIsInstance(cy, cmestream.Cycle)
            self.assertTrue(all(isinstance(h, cmestream.Cycle) for h in cy.harmonics))
            self.assertGreaterEqual(cy.group_peak, cy.peak)
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
            if name == "wells-wide":  # the same data, 20x the auto bandwidth (in the data's units:
                # sigma auto is chosen on the scaled channel, docs/algorithms.md §1.13)
                info = c.describe("wells-auto")
                chosen = info.sigma_selection.chosen * info.input_scaling.scale[0]
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
            np.testing.assert_allclose(k.eigenfunctions[:, 0], 1.0, atol=1e-12)
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

    def test_delays_learn_on_windows_of_raw_rows(self):
        # delays 3, stride 2: windows span 5 raw rows; a gap starts a new episode.
        c = self.client
        t = np.arange(600.0)
        x = np.stack([np.sin(2 * np.pi * t / 30), 0.5 * np.cos(2 * np.pi * t / 30)], axis=1)
        c.create_model("dly", dim=2, delays=3, delay_stride=2, auto_sigma_warmup=100, dt=0.5)
        r = c.ingest_trajectory("dly", x[:300], producer="p")
        self.assertEqual(r.pairs_applied, 299)  # the wire's pairs
        c.ingest_trajectory("dly", x[300:], producer="p", offset=299, gap=True)
        c.refresh("dly")
        info = c.describe("dly")
        self.assertEqual((info.state_dim, info.config.delays, info.config.delay_stride), (6, 3, 2))
        self.assertEqual(info.samples, 2 * (300 - 5))  # 296 windows, 295 pairs per episode
        xa, ya, _ = c.dictionary("dly")
        self.assertEqual((xa.shape[1], ya.shape[1]), (6, 6))
        f = c.forecast_series("dly", x[:50], horizon=2)
        self.assertEqual((f.start, f.dim, f.forecasts.shape), (4, 2, (46, 2, 2)))
        self.assertLess(np.abs(f.forecasts[:-2, 0, :] - x[5:49]).max(), 0.05)
        # The candidates' live skill per horizon, 1..max(12, delays) (docs/algorithms.md §11):
        # each step's method is its horizon's, the first is `method`; a sine is far from
        # persistence at every horizon.
        self.assertEqual([h.horizon for h in f.horizon_skill], list(range(1, 13)))
        self.assertEqual(f.step_methods, [h.method for h in f.horizon_skill[:2]])
        self.assertEqual(f.method, f.step_methods[0])
        self.assertIn(f.method, ("regression", "linear"))
        h1 = f.horizon_skill[0]
        self.assertEqual(h1.pairs, f.skill.pairs)
        self.assertAlmostEqual(h1.rmse_regression, f.skill.rmse, places=12)
        self.assertLess(min(h1.rmse_regression, h1.rmse_linear), 0.1 * h1.rmse_persistence)
        self.assertEqual(c.predict("dly", x[:7]).shape, (3, 6))  # one window per complete window
        with self.assertRaises(ValueError):  # pairs carry no history
            c.ingest_pairs("dly", x[:4], x[1:5])

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
        with self.assertRaises(ValueError) as e:  # found by the client, nothing sent
            c.ingest_pairs("strict", bad, good, producer="p")
        self.assertIn("x: row 3, column 1 is nan", str(e.exception))
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

    # -- inputs are checked whole before anything is sent ------------------------------------

    def assertNothingApplied(self, model, producer=None):
        d = self.client.describe(model)
        self.assertEqual(d.samples + d.pending_warmup, 0)
        self.assertEqual(d.batches_applied, 0)
        if producer:
            self.assertEqual(self.client.producer_offset(model, producer), 0)

    def test_a_nan_at_a_late_row_is_refused_before_anything_is_applied(self):
        """A NaN at row 4,500 of 5,000 (batches of 1,000) used to apply 4,000 pairs and then fail
        with a batch-relative position; re-sending then doubled them."""
        c = self.client
        m = c.create("late-nan", dim=2, sigma=0.5)
        x = ar_trajectory(5001, seed=8)
        xs, ys = x[:-1], x[1:]
        for what, bad_x, bad_y, needle in (
                ("x", np.nan, None, "x: row 4500, column 1 is nan"),
                ("y", None, np.inf, "y: row 4500, column 1 is inf"),
                ("x", -np.inf, None, "x: row 4500, column 1 is -inf")):
            bx, by = xs.copy(), ys.copy()
            if bad_x is not None:
                bx[4500, 1] = bad_x
            if bad_y is not None:
                by[4500, 1] = bad_y
            for send in (lambda: c.ingest_pairs("late-nan", bx, by, producer="p"),
                         lambda: c.ingest_pairs("late-nan", bx, by),
                         lambda: m.ingest(bx, by),
                         lambda: m.partial_fit(bx, by, batch=100)):
                with self.assertRaises(ValueError, msg=what) as e:
                    send()
                self.assertIn(needle, str(e.exception))
                self.assertIn("nothing was sent", str(e.exception))
                self.assertNothingApplied("late-nan", producer="p")
        traj = x.copy()
        traj[4500, 0] = np.nan
        with self.assertRaises(ValueError) as e:
            m.ingest(trajectory=traj, producer="p")
        self.assertIn("states: row 4500, column 0 is nan", str(e.exception))
        self.assertNothingApplied("late-nan", producer="p")
        # The clean data then goes in once: exactly 5,000 pairs, no duplicates.
        r = m.ingest(xs, ys)
        self.assertEqual((r.pairs_applied, r.model_samples), (5000, 5000))
        self.assertEqual(m.samples, 5000)

    def test_a_state_id_out_of_range_at_a_late_row_is_refused_before_anything_is_applied(self):
        c = self.client
        c.create_model("late-id", num_states=4)
        ids = np.arange(5001) % 4
        bad = ids.copy()
        bad[4500] = 9
        with self.assertRaises(ValueError) as e:
            c.ingest_ids("late-id", bad[:-1], ids[1:], producer="p")
        self.assertIn("x_ids: row 4500 is 9, expected a state id in [0, 4)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.ingest_state_ids("late-id", bad, producer="p")
        self.assertIn("row 4500 is 9", str(e.exception))
        with self.assertRaises(ValueError) as e:
            c.model("late-id").ingest(ids[:-1], np.where(ids[1:] == 0, np.nan, ids[1:]))
        self.assertIn("y_ids: expected integer state ids, got non-integral values (row 3 is nan",
                      str(e.exception))
        self.assertNothingApplied("late-id", producer="p")
        self.assertEqual(c.ingest_state_ids("late-id", ids).pairs_applied, 5000)

    def test_a_wrong_dtype_is_refused_before_anything_is_applied(self):
        c = self.client
        c.create_model("dtypes", dim=2, sigma=0.5)
        c.create_model("dtypes-d", num_states=3)
        good = np.zeros((5000, 2))
        objects = good.astype(object)
        objects[4500, 1] = None
        cases = [
            # numpy counts timedelta64 as an integer type: it used to be sent as numbers.
            (good.astype("timedelta64[s]"), "dtype timedelta64[s]"),
            (good.astype("datetime64[s]"), "dtype datetime64[s]"),
            (objects, "dtype object ([4500, 1] holds None)"),
            (good.astype(bool), "dtype bool"),
            (good.astype(complex), "dtype complex128"),
            (good.astype(str), "expected real numbers"),
            ([[0.0, 0.0], [0.0]], "expected an array of real numbers"),
        ]
        for bad, needle in cases:
            with self.assertRaises(ValueError, msg=needle) as e:
                c.ingest_pairs("dtypes", bad, good)
            self.assertIn(needle, str(e.exception))
            with self.assertRaises(ValueError, msg=needle):
                c.ingest_trajectory("dtypes", bad)
        for bad, needle in ((np.arange(10).astype("timedelta64[s]"), "dtype timedelta64[s]"),
                            (np.array([0, 1, 2, True], dtype=object), "holds True"),
                            (np.ones(10, dtype=bool), "dtype bool"),
                            (["0", "1"], "dtype <U1")):
            with self.assertRaises(ValueError, msg=needle) as e:
                c.ingest_state_ids("dtypes-d", bad)
            self.assertIn(needle, str(e.exception))
        self.assertNothingApplied("dtypes")
        self.assertNothingApplied("dtypes-d")

    def test_unknown_keyword_arguments_raise_type_error(self):
        c = self.client
        with self.assertRaises(TypeError) as e:
            c.create_model("kwargs", dim=2, sigma=0.5, rnak=3)
        self.assertIn("create_model() got an unexpected keyword argument 'rnak'", str(e.exception))
        self.assertIn("did you mean rank", str(e.exception))
        with self.assertRaises(TypeError) as e:
            c.create("kwargs", dim=2, name="other")  # ModelConfig fields set by the signature
        with self.assertRaises(TypeError) as e:
            c.create_model("kwargs", dim=2, rank="4")  # a wrong type, named
        self.assertIn("rank: expected an integer, got str", str(e.exception))
        with self.assertRaises(CmestreamError) as e:
            c.describe("kwargs")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)  # nothing was created
        m = c.create("kwargs", dim=2, sigma=0.5)
        x = np.zeros((10, 2))
        with self.assertRaises(TypeError):
            m.partial_fit(x, x, sample_weight=np.ones(10))
        with self.assertRaises(TypeError):
            m.ingest(x, x, episode_id="e")
        self.assertNothingApplied("kwargs")

    def test_a_client_key_that_is_not_its_certificates_is_refused_naming_both_files(self):
        # gRPC would only fail the connection ("empty address list"); the client names the files.
        with tempfile.TemporaryDirectory(prefix="cmestream-tls-") as d:
            for name in ("one", "two"):
                subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                                "-subj", f"/CN={name}", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.pem"],
                               check=True, capture_output=True)
            with self.assertRaises(ValueError) as e:
                Client(self.daemon.grpc_target, tls_ca=f"{d}/one.pem", tls_cert=f"{d}/one.pem",
                       tls_key=f"{d}/two.key")
            self.assertEqual(str(e.exception),
                             f"tls_cert and tls_key do not match: the private key in '{d}/two.key' is not the key "
                             f"of the certificate in '{d}/one.pem'")
            with self.assertRaises(ValueError) as e:
                Client(self.daemon.grpc_target, tls_ca=f"{d}/one.pem", tls_cert=f"{d}/one.pem",
                       tls_key=f"{d}/missing.key")
            self.assertIn(f"cannot read '{d}/missing.key'", str(e.exception))
            Client(self.daemon.grpc_target, tls_ca=f"{d}/one.pem", tls_cert=f"{d}/one.pem",
                   tls_key=f"{d}/one.key").close()

    def test_out_of_range_arguments_raise_value_error_naming_them(self):
        c = self.client
        m = c.create("ranges", dim=2, sigma=0.5)
        x = np.zeros((10, 2))
        refusals = [
            # (call, what the message says: the argument's name first)
            (lambda: c.create_model("ranges-bad", dim=-1), "dim: expected an integer in [0, "),
            (lambda: c.create_model("ranges-bad", dim=2, max_dict=2 ** 40), "max_dict: expected"),
            (lambda: c.create_model("ranges-bad", dim=2, sigma=-1.0), "sigma: expected a bandwidth > 0"),
            (lambda: c.create_model("ranges-bad", dim=2, sigma="wide"), "sigma: expected a bandwidth > 0"),
            (lambda: c.create_model("ranges-bad", dim=2, eta=float("nan")), "eta: expected a finite"),
            (lambda: c.create_model("ranges-bad", dim=2, lags=[1, 2 ** 40]), "lags[1]: expected"),
            # Ranges only the daemon knows: its INVALID_ARGUMENT is a ValueError naming the field.
            (lambda: c.create_model("ranges-bad", dim=2, rank=0), "field rank is 0, expected 1.."),
            (lambda: c.create_model("ranges-bad", dim=2, lags=[0]), "lags"),
            (lambda: m.koopman(top=-1), "top: expected an integer in [0, "),
            (lambda: c.cktest("ranges", lag=-1), "lag: expected an integer in [0, "),
            (lambda: c.cktest("ranges", clusters=2 ** 33), "clusters: expected an integer"),
            (lambda: m.forecast(x[:2], horizon=0), "horizon: expected an integer in [1, "),
            (lambda: m.ingest(x, x, batch=0), "batch: expected an integer in [1, "),
            (lambda: m.ingest(x, x, producer="p", offset=-1), "offset: expected an integer in [0, "),
            (lambda: m.refresh(timeout=-5), "timeout: expected a number > 0"),
            (lambda: Client(self.daemon.grpc_target, timeout=0), "timeout: expected a number > 0"),
            (lambda: Client(self.daemon.grpc_target, max_retries=-1), "max_retries: expected"),
        ]
        for call, needle in refusals:
            with self.assertRaises(ValueError, msg=needle) as e:
                call()
            self.assertIn(needle, str(e.exception))
            self.assertNotIn("Value out of range", str(e.exception))  # protobuf's own words
        refused = refusals[6][0]
        with self.assertRaises(cmestream.InvalidArgumentError) as e:
            refused()
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)  # still a CmestreamError
        self.assertIsInstance(e.exception, CmestreamError)
        self.assertNotIn("ranges-bad", [i.config.name for i in c.list_models()])
        self.assertNothingApplied("ranges")

    def test_model_list_pages(self):
        # ListModels in pages (a fleet's listing): pages of 2 in name order, each after the
        # previous page's last name, cover exactly the one-reply listing; the last page has no
        # token; list_models pages by itself.
        c = self.client
        for name in ("page-a", "page-b", "page-c", "page-d", "page-e"):
            c.create_model(name, dim=1)
        stubs = Stubs(self.daemon.grpc_target)
        stub = stubs.models
        whole = [m.config.name for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models]
        self.assertEqual(whole, sorted(whole))
        paged, token, calls = [], "", 0
        while True:
            reply = stub.ListModels(pb.ListModelsRequest(page_size=2, page_token=token), timeout=30)
            calls += 1
            self.assertLessEqual(len(reply.models), 2)
            paged += [m.config.name for m in reply.models]
            token = reply.next_page_token
            if not token:
                break
            self.assertEqual(token, paged[-1])
        self.assertEqual(paged, whole)
        self.assertEqual(calls, (len(whole) + 1) // 2)
        self.assertTrue({"page-a", "page-b", "page-c", "page-d", "page-e"} <= set(whole))
        self.assertEqual([m.config.name for m in c.list_models(page_size=2)], whole)
        after = stub.ListModels(pb.ListModelsRequest(page_size=2, page_token="page-c"), timeout=30)
        self.assertEqual([m.config.name for m in after.models], ["page-d", "page-e"])
        stubs.close()
        for name in ("page-a", "page-b", "page-c", "page-d", "page-e"):
            c.delete_model(name)

    # -- results: samples first, documented dataclasses ------------------------------------------

    def test_every_result_is_samples_first_and_protobuf_free(self):
        c = self.client
        name = "shapes"
        m = c.create(name, dim=2, sigma=0.7, rank=2, clusters=3, meta_states=2, latent_states=2,
                     window=2, lags=[1, 2], seed=5, rff_features=64, reservoir=2000)
        traj = ar_trajectory(4001, seed=3)
        m.ingest(trajectory=traj, producer="p", episode="e")
        view = m.refresh()
        self.assertIsInstance(view, cmestream.ViewInfo)
        self.assertEqual(view.samples, 4000)
        self.assertGreaterEqual(view.version, 1)
        n = 7  # query points; differs from every k, r, K below so no axis can be mistaken
        pts = traj[100:100 + n]

        k = m.koopman(points=pts, top=3)
        self.assertEqual(k.eigenfunctions.shape, (n, 3))
        for f in ("eigenvalues", "rates", "timescales", "stationary", "excess"):
            self.assertEqual(getattr(k, f).shape, (3,), f)
        # Orientation by value: column 0 is the stationary mode, the constant 1 at every point.
        self.assertTrue(k.stationary[0])
        np.testing.assert_allclose(k.eigenfunctions[:, 0], 1.0, atol=1e-12)
        self.assertEqual(m.koopman(top=3).eigenfunctions.shape, (0, 3))
        self.assertIsInstance(k.spectrum, cmestream.SpectrumInfo)
        self.assertEqual(m.predict(pts).shape, (n, 2))

        e = m.embedding(pts)
        self.assertEqual(e.embedding.shape, (n, 2))
        np.testing.assert_array_equal(m.transform(pts), e.embedding)
        np.testing.assert_allclose(e.singular_value_gaps, -np.diff(e.singular_values), rtol=1e-12)

        cl = m.clusters(pts)
        reps = cl.ids.shape[0]
        self.assertEqual(cl.point_labels.shape, (n,))
        self.assertEqual(cl.coordinates.shape, (reps, 2))
        for f in ("weights", "labels"):
            self.assertEqual(getattr(cl, f).shape, (reps,), f)
        self.assertEqual(cl.transition_matrix.shape, (3, 3))
        np.testing.assert_allclose(cl.transition_matrix.sum(axis=1), 1.0, atol=1e-9)
        self.assertEqual(cl.masses.shape, (3,))

        counts = m.counts()
        p = counts.num_states
        self.assertEqual(counts.states.shape, (p, 2))
        self.assertEqual(counts.entries.shape[1], 3)
        self.assertEqual(counts.dense().shape, (p, p))

        ag = m.aggregation()
        rows = ag.state_ids.shape[0]
        self.assertEqual((ag.V.shape, ag.U.shape, ag.coordinates.shape, ag.partition.shape),
                         ((rows, 2), (rows, 2), (rows, 2), (rows,)))
        np.testing.assert_allclose(ag.V.sum(axis=0), 1.0, atol=1e-9)  # columns of V sum to 1

        lat = m.latent(pts)
        self.assertEqual(lat.weights.shape, (2,))
        self.assertEqual(lat.densities.shape, (n, 2))
        self.assertEqual(lat.posteriors.shape, (n, 2))
        # Orientation by value: P(h | x_i) = w_h max(p(x_i | h), 0) / sum over h
        # (docs/algorithms.md (5.10)), row by row.
        w = lat.weights * np.maximum(lat.densities, 0)
        np.testing.assert_allclose(lat.posteriors, w / w.sum(axis=1, keepdims=True), atol=1e-9)

        fc = m.forecast(traj[-2:], horizon=4)
        self.assertEqual((fc.forecast.shape, fc.distribution.shape), ((4, 2), (4, 0)))
        self.assertEqual(fc.state.ndim, 1)

        ts = m.timescales()
        scan = ts.primary
        self.assertEqual(scan.lags.tolist(), [1, 2])
        self.assertEqual(scan.timescales.shape[0], 2)
        self.assertEqual(scan.stderr.shape, scan.timescales.shape)
        self.assertEqual(scan.samples.shape, (2,))
        ck = c.cktest(name)
        s = ck.primary.steps.shape[0]
        for f in ("predicted", "estimated", "stderr", "predicted_stderr"):
            self.assertEqual(getattr(ck.primary, f).shape, (s, ck.primary.clusters,
                                                            ck.primary.clusters), f)

        x_atoms, y_atoms, _ = m.dictionary()
        self.assertEqual((x_atoms.shape[1], y_atoms.shape[1]), (2, 2))

        for result in (view, k, e, cl, counts, ag, lat, fc, ts, ck, m.info(), c.list_models()):
            self.assertEqual(no_protobuf_inside(result), [], type(result).__name__)

    def test_describe_returns_a_model_info_equal_to_the_wire(self):
        c = self.client
        m = c.create("described", dim=2, sigma=0.5, lags=[1, 3], lambda_=2e-3, averaging=True)
        m.ingest(trajectory=ar_trajectory(3001, seed=4))
        c.refresh("described")
        d = c.describe("described", state_digest=True)
        self.assertIsInstance(d, cmestream.ModelInfo)
        self.assertIsInstance(d.config, cmestream.ModelConfig)
        self.assertIsInstance(d.view, cmestream.ViewInfo)
        self.assertIsInstance(d.sigma_selection, cmestream.SigmaSelection)
        self.assertIsInstance(d.spectrum, cmestream.SpectrumInfo)
        self.assertIsInstance(d.spectrum.comparison, cmestream.TimescaleComparison)
        self.assertTrue(d.sub_views)
        for sv in d.sub_views:
            self.assertIsInstance(sv, cmestream.SubViewStatus)
            self.assertTrue(sv.summary is None or isinstance(sv.summary, cmestream.FitSummary))
        self.assertEqual(no_protobuf_inside(d), [])
        self.assertIsInstance(m.info(), cmestream.ModelInfo)
        self.assertIsNone(c.describe("described").state_digest)  # only when asked for

        # Field for field what the daemon sent (the raw stub reads the same model).
        stubs = Stubs(self.daemon.grpc_target)
        try:
            raw = stubs.models.GetModel(pb.GetModelRequest(name="described", with_state_digest=True))
        finally:
            stubs.close()
        self.assertEqual(d.state_digest, raw.state_digest)
        self.assertNotEqual(d.state_digest, 0)
        self.assertEqual((d.samples, d.dictionary_size, d.dictionary_size_y, d.batches_applied),
                         (raw.samples, raw.dictionary_size, raw.dictionary_size_y, raw.batches_applied))
        self.assertEqual(d.samples, 3000)
        self.assertEqual((d.config.dim, d.config.sigma, d.config.lambda_, d.config.averaging,
                          d.config.lags), (2, 0.5, 2e-3, True, [1, 3]))
        self.assertEqual(d.config.eta, raw.config.eta)  # a default the daemon filled in
        self.assertEqual(d.view.version, raw.view.version)
        self.assertEqual(d.view.build_seconds_by_view, dict(raw.view.build_seconds_by_view))
        self.assertEqual(d.sigma_selection.chosen, raw.sigma_selection.chosen)
        np.testing.assert_array_equal(d.spectrum.ridge_grid, np.array(raw.spectrum.ridge_grid))
        self.assertEqual(d.spectrum.comparison.koopman, raw.spectrum.comparison.koopman)
        self.assertEqual([(s.name, s.available, s.error) for s in d.sub_views],
                         [(s.name, s.available, s.error) for s in raw.sub_views])
        # Before the first view there is no spectrum.
        self.assertIsNone(c.create_model("described-empty", dim=1, sigma=0.5).spectrum)


class PackageStructureTest(unittest.TestCase):
    """Checks of the package's source that need no daemon."""

    PACKAGE = os.path.dirname(cmestream.__file__)

    @classmethod
    def import_graph(cls):
        """module -> the package's modules it imports: at module level, inside functions and
        under TYPE_CHECKING alike (a type-only import is still a cycle for readers and tools)."""
        names = {f[:-3] for f in os.listdir(cls.PACKAGE) if f.endswith(".py")}
        graph = {}
        for name in names:
            with open(os.path.join(cls.PACKAGE, name + ".py")) as f:
                tree = ast.parse(f.read())
            deps = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level == 1:  # from .x import y / from . import x
                        path = (node.module or "").split(".")[:1]
                    elif (node.module or "").startswith("cmestream"):  # from cmestream.x import y
                        path = node.module.split(".")[1:2]
                    else:
                        continue
                    if path and path[0]:
                        deps.add(path[0])
                    else:  # from . import x / from cmestream import x
                        deps.update(a.name for a in node.names)
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        parts = a.name.split(".")
                        if parts[0] == "cmestream" and len(parts) > 1:
                            deps.add(parts[1])
            graph[name] = (deps & names) - {name}
        return graph

    def test_the_modules_import_each_other_without_a_cycle(self):
        graph = self.import_graph()
        self.assertIn("model", graph["client"])  # the graph is read, not empty
        self.assertIn("client", graph["sharded"])

        def cycle_from(node, path):
            for dep in sorted(graph[node]):
                if dep in path:
                    return path[path.index(dep):] + [dep]
                found = cycle_from(dep, path + [dep])
                if found:
                    return found
            return None

        for start in sorted(graph):
            cycle = cycle_from(start, [start])
            self.assertIsNone(cycle, f"import cycle: {' -> '.join(cycle or [])}")

    def test_the_description_dataclasses_mirror_the_proto_field_for_field(self):
        pairs = [(info.ModelInfo, pb.ModelInfo), (info.ModelConfig, pb.ModelConfig),
                 (info.ViewInfo, pb.ViewInfo), (info.SigmaSelection, pb.SigmaSelection),
                 (info.SpectrumInfo, pb.SpectrumInfo),
                 (info.TimescaleComparison, pb.TimescaleComparison),
                 (info.SubViewStatus, pb.SubViewStatus), (info.FitSummary, pb.FitSummary),
                 (info.InputScaling, pb.InputScaling),
                 (info.KoopmanHeadline, pb.KoopmanHeadline), (info.ModelMemory, pb.ModelMemory)]
        for cls, message in pairs:
            ours = {"lambda" if f.name == "lambda_" else f.name for f in dataclasses.fields(cls)}
            self.assertEqual(ours, {f.name for f in message.DESCRIPTOR.fields}, cls.__name__)

    def test_every_result_dataclass_documents_every_field_and_array_shape(self):
        classes = [c for module in (results, info) for c in vars(module).values()
                   if isinstance(c, type) and dataclasses.is_dataclass(c)
                   and c.__module__ == module.__name__]
        self.assertGreaterEqual(len(classes), 20)
        for cls in classes:
            doc = cls.__doc__ or ""
            for f in dataclasses.fields(cls):
                if str(f.type) == "np.ndarray":  # a shape: "name: (n, k) ..."
                    self.assertRegex(doc, rf"(?m)^\s+{re.escape(f.name)}: \(",
                                     f"{cls.__name__}.{f.name}: no shape documented")
                elif cls is not info.ModelConfig:  # ModelConfig: one line per field in the proto
                    self.assertIn(f.name, doc, f"{cls.__name__}.{f.name}: not documented")


if __name__ == "__main__":
    unittest.main(verbosity=2)
