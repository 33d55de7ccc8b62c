"""One-step forecasts of public real series through a real cmestreamd and the CLI, against the
baselines of issue "Real streams" (docs/user-guide.md "Real data", scripts/real_data_report.py):
persistence, least-squares AR on the same delays, batch kernel ridge.

Asserted, over R's and statsmodels' series (Debian r-base-core, python3-statsmodels; skipped,
exit 77, when neither is installed):
  - RMSE <= 1.02 x persistence on every series, and below persistence wherever the AR beats
    persistence by 5 %;
  - geometric mean of the RMSE ratios vs the AR <= 1.05, none above MAX_RATIO_AR;
  - each horizon served by the candidate with the best live skill (issue 47);
  - on the seasonal series, at h = one season, geometric-mean RMSE <= seasonal naive and
    <= 1.05 x the iterated least-squares AR;
  - the reply's form: start 0, one entry per row, H lists of d numbers, horizon > 1 iterates
    the one-step map; `--window` carries horizon, dim, method and the live skill;
  - the headline's first cycle is the known one within 5 % on every periodic series;
  - bad input (series and window together, a series of the wrong width) is refused;
  - a restart gives the same forecasts and skill, bit for bit (the regression's sums, fit and
    skill are model state).

Environment (set by ctest): CMESTREAMD, CMESTREAM, PYTHONPATH=<build>/python:client/python.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import real_data_report as report  # noqa: E402

from cmestream.testing import Daemon  # noqa: E402

CLI = os.environ.get("CMESTREAM", "cmestream")
# The largest one-step RMSE ratio to the least-squares AR on any series (issue 47: <= 1.05).
MAX_RATIO_AR = 1.05
# Multi-step, per seasonal series at h = one season: at most this x the better of seasonal naive
# and the iterated AR (measured at most 1.054: UKDriverDeaths, Seatbelts).
SEASON_BOUND = 1.5
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")


class RealSeriesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-real-test-")
        cls.data = os.path.join(cls.tmp.name, "data")
        cls.daemon = Daemon(DAEMON, cls.data, refresh_interval=3600).start()
        cls.server = cls.daemon.grpc_target
        cls.results, _ = report.run_all(CLI, cls.server, report.available_series(), cls.tmp.name)
        print()
        print(report.table(cls.results)[0])

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.tmp.cleanup()

    def run_cli(self, *args, check=True):
        return subprocess.run([CLI, "--server", self.server, *args], capture_output=True, text=True, check=check)

    def test_multichannel_series_use_their_data_and_one_answer(self):
        # Issue "real streams": on real multichannel series, sigma chosen on scaled channels, at
        # least 80 % of the pairs inside the consistent spectral estimate, and the views either
        # within their error bars or the reply says why not (a named non-stationary stream, or a
        # diagnostic beside the warning).
        multi = [r for r in self.results if r["channels"] > 1]
        if not multi:
            self.skipTest("no multichannel series installed (R's Seatbelts, EuStockMarkets)")
        for r in multi:
            with self.subTest(series=r["series"]):
                self.assertTrue(r["scaled"], r)
                self.assertTrue(r["ready"], r)
                self.assertGreaterEqual(r["data_share"], 0.8, r)
                if r["views_warning"]:
                    self.assertTrue(r["nonstationary"] or r["views_diagnostic"], r)
                print(f"{r['series']}: {r['channels']} channels, share {r['data_share']:.3f} in {r['epochs']} "
                      f"epochs, views warning {r['views_warning']}, non-stationary {r['nonstationary']}")

    def test_never_worse_than_persistence(self):
        for r in self.results:
            with self.subTest(series=r["series"]):
                self.assertLessEqual(r["rmse"], 1.02 * r["persistence"], r)
                if r["ar"] < 0.95 * r["persistence"]:
                    self.assertLess(r["rmse"], r["persistence"], r)

    def test_the_candidate_with_the_best_live_skill_is_served(self):
        # Issue 47: at each horizon the candidate with the smallest live error (the regression,
        # the least-squares AR on the same delays, persistence) over >= 8 scored forecasts of
        # that horizon serves it (docs/algorithms.md §11 "Served forecast"); with fewer, the
        # one-step rule: persistence while the regression's ratio is above 1 over >= 8 pairs.
        served = {}
        for r in self.results:
            with self.subTest(series=r["series"]):
                hs = r["horizon_skill"]
                self.assertGreaterEqual(len(hs), 12, r["series"])
                self.assertEqual([h["horizon"] for h in hs], list(range(1, len(hs) + 1)))
                for h in hs:
                    if h["pairs"] >= 8:
                        errors = [h["rmse_regression"], h["rmse_linear"], h["rmse_persistence"]]
                        best = ["regression", "linear", "persistence"][int(np.argmin(errors))]
                        if errors.count(min(errors)) == 1:
                            if best == "regression" and h["method"] == "linear":
                                # The one-standard-error rule: the AR in the regression's place
                                # (the spread of their paired difference is not in the reply).
                                self.assertLessEqual(h["rmse_linear"], h["rmse_persistence"], (r["series"], h))
                            else:
                                self.assertEqual(h["method"], best, (r["series"], h))
                    else:
                        s = r["skill"]
                        legacy = "persistence" if s["pairs"] >= 8 and s["ratio"] > 1 else "regression"
                        self.assertEqual(h["method"], legacy, (r["series"], h))
                self.assertEqual(r["method"], hs[0]["method"])
                self.assertEqual(r["step_methods"], [h["method"] for h in hs[:len(r["step_methods"])]])
                # The one-step regression and persistence figures are the live skill's.
                self.assertAlmostEqual(hs[0]["rmse_regression"], r["skill"]["rmse"], places=12)
                self.assertEqual(hs[0]["pairs"], r["skill"]["pairs"])
                served[r["series"]] = r["method"]
                if r["method"] == "persistence":
                    self.assertAlmostEqual(r["rmse"], r["persistence"], places=12)
        if "discoveries" in served:
            self.assertEqual(served["discoveries"], "persistence")

    def test_about_as_good_as_least_squares_ar(self):
        ratios = [r["ratio_ar"] for r in self.results]
        self.assertLessEqual(math.exp(np.mean(np.log(ratios))), 1.05, ratios)
        self.assertLessEqual(max(ratios), MAX_RATIO_AR, ratios)

    def test_multi_step_against_seasonal_naive_and_the_iterated_ar(self):
        # Issue 47: `forecast --horizon H` per horizon 1..one season on the seasonal series
        # (12 monthly, 4 quarterly), against seasonal naive and the least-squares AR iterated,
        # from the same origins (scripts/real_data_report.py multi_step). At h = one season the
        # geometric-mean RMSE ratio is <= 1 to seasonal naive and <= 1.05 to the iterated AR
        # (docs/benchmarks.md "Multi-step forecasts of real series"). Loosely: per series, at
        # h = one season, at most SEASON_BOUND x the better of the two (in between, Seatbelts'
        # regression, chosen by its live skill on the years before the 1983 seat-belt law, is up
        # to 2x the iterated AR: not bounded here).
        seasonal = [r for r in self.results if r.get("multi_step")]
        if len(seasonal) < 3:
            self.skipTest("fewer than 3 seasonal series installed")
        text, g_sn, g_ar = report.horizon_table(self.results)
        print()
        print(text)
        self.assertLessEqual(g_sn, 1.0, text)
        self.assertLessEqual(g_ar, 1.05, text)
        for r in seasonal:
            m = r["multi_step"]
            with self.subTest(series=r["series"]):
                self.assertEqual(m["horizon"], list(range(1, r["season"] + 1)))
                self.assertEqual(len(r["step_methods"]), r["season"])
                h = r["season"] - 1
                self.assertLessEqual(m["model"][h], SEASON_BOUND * min(m["seasonal_naive"][h], m["ar_iterated"][h]),
                                     (r["series"], h + 1, m))

    def test_live_skill_is_reported(self):
        for r in self.results:
            with self.subTest(series=r["series"]):
                s = r["skill"]
                self.assertGreater(s["pairs"], 0)
                self.assertAlmostEqual(s["ratio"], s["rmse"] / s["rmse_persistence"], places=12)

    def test_spectral_estimate_is_ready_on_every_series(self):
        for r in self.results:
            with self.subTest(series=r["series"]):
                self.assertEqual((r["estimator"], r["ready"]), ("spectral-moments", True), r)

    def test_periodic_series_show_their_cycle(self):
        # The slowest oscillatory mode the data can show (period <= half the rows learned) has
        # the series' known cycle within 10 %, on every periodic series, also those the reply
        # names non-stationary (a trend under a growing seasonal swing: AirPassengers, co2). A
        # 100-pair stream's dictionary holds a handful of atoms; the warm-up's landmarks in the
        # spectral basis (docs/algorithms.md §7.2) are what lets its cycle show.
        checked = []
        for r in self.results:
            if not r["cycle"]:
                continue
            checked.append(r["series"])
            with self.subTest(series=r["series"]):
                self.assertLessEqual(abs(r["period"] / r["cycle"] - 1), 0.10, r)
        self.assertGreaterEqual(len(checked), 4, checked)
        if any(r["series"] == "AirPassengers" for r in self.results):
            self.assertIn("AirPassengers", checked)

    def test_headline_first_cycle_is_the_known_one(self):
        # Issue "Which cycle": the headline's first cycle (the oscillation carrying the largest
        # share of the observed variance, harmonics grouped under their fundamental:
        # docs/algorithms.md §7.3) is the series' known cycle within 5 %, on every periodic
        # series (annual for the monthly and quarterly ones, ~11 years for sunspots, ~10 for lynx).
        checked = []
        for r in self.results:
            if not r["cycle"]:
                continue
            checked.append(r["series"])
            with self.subTest(series=r["series"]):
                self.assertLessEqual(abs(r["first_cycle"] / r["cycle"] - 1), 0.05, r)
                self.assertGreater(r["first_cycle_share"], 0.0, r)
        self.assertGreaterEqual(len(checked), 4, checked)

    def test_server_side_delays_reply_form(self):
        # --delays D: raw rows in, one forecast per row from row D-1 on, of the next raw rows.
        t = np.arange(400, dtype=np.float64)
        values = np.stack([10 + np.sin(2 * np.pi * t / 25), np.cos(2 * np.pi * t / 25)], axis=1)
        path = os.path.join(self.tmp.name, "raw.csv")
        report.write_csv(path, values)
        self.run_cli("model", "create", "raw", "--dim", "2", "--delays", "4", "--delay-stride", "2",
                     "--warmup", "100")
        self.run_cli("ingest", "raw", "--csv", path, "--trajectory", "--quiet")
        self.run_cli("refresh", "raw", "--wait")
        info = json.loads(self.run_cli("model", "describe", "raw", "--json").stdout)
        self.assertEqual((info["config"]["dim"], info["state_dim"]), (2, 8))
        self.assertEqual(info["samples"], 400 - 7)  # 394 windows end at rows 6..399: 393 pairs
        f = json.loads(self.run_cli("forecast", "raw", "--series", path, "--horizon", "2", "--json").stdout)
        self.assertEqual((f["start"], f["dim"]), (6, 2))
        arr = np.array(f["forecasts"])
        self.assertEqual(arr.shape, (400 - 6, 2, 2))
        err = np.abs(arr[:-1, 0, :] - values[7:])
        self.assertLess(err.max(), 1e-2)
        # A window forecast from the last 7 rows equals the series forecast at the last row.
        win = os.path.join(self.tmp.name, "raw-win.csv")
        report.write_csv(win, values[-7:])
        w = json.loads(self.run_cli("forecast", "raw", "--window", win, "--horizon", "2", "--json").stdout)
        np.testing.assert_allclose(np.array(w["forecast"]), arr[-1], rtol=0, atol=1e-12)
        # Atoms are windows of 8 values; fewer rows than a window are refused by name.
        d = json.loads(self.run_cli("dictionary", "raw", "--json").stdout)
        self.assertEqual(d["dim"], 8)
        short = os.path.join(self.tmp.name, "raw-short.csv")
        report.write_csv(short, values[:3])
        out = self.run_cli("forecast", "raw", "--series", short, check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("at least 7", out.stderr)
        # A blank line in a trajectory CSV is a gap: no window joins the rows around it.
        gapped = os.path.join(self.tmp.name, "raw-gapped.csv")
        with open(gapped, "w") as f:
            for i, row in enumerate(values[:100]):
                if i == 50:
                    f.write("\n")
                f.write(",".join(repr(float(v)) for v in row) + "\n")
        self.run_cli("model", "create", "gapped", "--dim", "2", "--delays", "4", "--delay-stride", "2", "--warmup", "50")
        self.run_cli("ingest", "gapped", "--csv", gapped, "--trajectory", "--quiet")
        self.run_cli("refresh", "gapped", "--wait")
        g = json.loads(self.run_cli("model", "describe", "gapped", "--json").stdout)
        self.assertEqual(g["samples"], 2 * (50 - 7))  # two episodes of 50 rows: 44 windows, 43 pairs each
        # Pairs carry no history: refused.
        pairs = os.path.join(self.tmp.name, "raw-pairs.csv")
        report.write_csv(pairs, np.hstack([values[:5], values[1:6]]))
        out = self.run_cli("ingest", "raw", "--csv", pairs, check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("delays", out.stderr)

    def _model(self, name, values, delays=3):
        states = report.delay_states(values, delays)
        path = os.path.join(self.tmp.name, name + ".csv")
        report.write_csv(path, states)
        self.run_cli("model", "create", name, "--dim", str(delays), "--warmup", "100")
        self.run_cli("ingest", name, "--csv", path, "--trajectory", "--quiet")
        self.run_cli("refresh", name, "--wait")
        return states, path

    def test_reply_form_horizon_and_window(self):
        t = np.arange(400, dtype=np.float64)
        values = (10 + np.sin(2 * np.pi * t / 25))[:, None]
        states, path = self._model("form", values)
        one = json.loads(self.run_cli("forecast", "form", "--series", path, "--json").stdout)
        three = json.loads(self.run_cli("forecast", "form", "--series", path, "--horizon", "3", "--json").stdout)
        self.assertEqual((one["model"], one["horizon"], one["dim"], one["start"]), ("form", 1, 3, 0))
        self.assertEqual(np.array(one["forecasts"]).shape, (len(states), 1, 3))
        f3 = np.array(three["forecasts"])
        self.assertEqual(f3.shape, (len(states), 3, 3))
        np.testing.assert_array_equal(f3[:, 0, :], np.array(one["forecasts"])[:, 0, :])
        # Step 2 from row r is step 1 from step 1's forecast: window = that forecast.
        win = os.path.join(self.tmp.name, "win.csv")
        report.write_csv(win, f3[5:6, 0, :])
        w = json.loads(self.run_cli("forecast", "form", "--window", win, "--json").stdout)
        np.testing.assert_allclose(np.array(w["forecast"])[0], f3[5, 1, :], rtol=0, atol=1e-9)
        self.assertEqual((w["horizon"], w["dim"]), (1, 3))
        self.assertEqual(w["method"], w["horizon_skill"][0]["method"])
        self.assertIn(w["method"], ("regression", "linear"))
        self.assertEqual(w["skill"], one["skill"])
        # The sine is predictable: the one-step forecasts are close, the live skill far better
        # than persistence.
        err = np.abs(np.array(one["forecasts"])[:-1, 0, 2] - states[1:, 2])
        self.assertLess(err.max(), 1e-3)
        self.assertLess(one["skill"]["ratio"], 0.1)

    def test_bad_input_is_refused(self):
        values = np.cumsum(np.random.default_rng(1).normal(size=300))[:, None]
        states, path = self._model("bad", values)
        win = os.path.join(self.tmp.name, "bad-win.csv")
        report.write_csv(win, states[:2])
        out = subprocess.run([CLI, "--server", self.server, "forecast", "bad", "--series", path, "--window", win],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2, out.stderr)
        wide = os.path.join(self.tmp.name, "wide.csv")
        report.write_csv(wide, np.ones((3, 4)))
        out = self.run_cli("forecast", "bad", "--series", wide, check=False)
        self.assertNotEqual(out.returncode, 0, out.stdout)

    def test_restart_replays_the_regression_bit_exact(self):
        values = (np.sin(np.arange(700) / 7.0) + 0.1 * np.random.default_rng(2).normal(size=700))[:, None]
        states, path = self._model("restart", values)
        before = json.loads(self.run_cli("forecast", "restart", "--series", path, "--json").stdout)
        self.daemon.stop()
        self.daemon.start()
        self.server = self.__class__.server = self.daemon.grpc_target
        self.run_cli("refresh", "restart", "--wait")
        after = json.loads(self.run_cli("forecast", "restart", "--series", path, "--json").stdout)
        self.assertEqual(before["forecasts"], after["forecasts"])
        self.assertEqual(before["skill"], after["skill"])
        self.assertEqual(before["horizon_skill"], after["horizon_skill"])


if __name__ == "__main__":
    if not report.available_series():
        print("skipped: neither R (r-base-core) nor statsmodels (python3-statsmodels) is installed")
        sys.exit(77)
    unittest.main(verbosity=2)
