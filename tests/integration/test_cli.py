"""End-to-end test of the `cmestream` tool against a real cmestreamd on a loopback port.

Environment (set by ctest, see tests/integration/CMakeLists.txt):
  CMESTREAMD  path of the daemon binary      CMESTREAM  path of the CLI binary
  PYTHONPATH  <build>/python:client/python
The daemon runs with a long --refresh-interval so that views change only on `refresh --wait`.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from cmestream.testing import Daemon

CLI = os.environ.get("CMESTREAM", "cmestream")
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")


def duffing_flow(points, t=0.25, delta=0.5, beta=-1.0, alpha=1.0, steps=100):
    """Reference flow of x'' = -delta x' - x (beta + alpha x^2) by RK4 (independent of core/)."""
    def f(s):
        x, v = s[:, 0], s[:, 1]
        return np.stack([v, -delta * v - x * (beta + alpha * x * x)], axis=1)
    s = np.array(points, dtype=float)
    h = t / steps
    for _ in range(steps):
        k1 = f(s); k2 = f(s + h / 2 * k1); k3 = f(s + h / 2 * k2); k4 = f(s + h * k3)
        s = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return s


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-cli-test-")
        cls.dir = cls.tmp.name
        cls.daemon = Daemon(DAEMON, os.path.join(cls.dir, "data"), refresh_interval=3600).start()
        cls.duffing_csv = os.path.join(cls.dir, "duffing.csv")
        with open(cls.duffing_csv, "w") as f:
            subprocess.run([CLI, "simulate", "duffing", "--n", "6000", "--seed", "3"], stdout=f,
                           check=True)

    @classmethod
    def tearDownClass(cls):
        code = cls.daemon.stop()
        cls.tmp.cleanup()
        # SIGTERM is a clean shutdown.
        assert code == 0, f"cmestreamd exited with {code} after SIGTERM"

    def cli(self, *args, stdin=None, check=True):
        p = subprocess.run([CLI, "--server", self.daemon.grpc_target, *args], input=stdin,
                           capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            self.fail(f"cmestream {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p

    def json(self, *args, **kw):
        return json.loads(self.cli(*args, "--json", **kw).stdout)

    def write(self, name, rows):
        path = os.path.join(self.dir, name)
        np.savetxt(path, np.atleast_2d(rows), delimiter=",", fmt="%.17g")
        return path

    def create(self, name, dim, *extra):
        self.cli("model", "create", name, "--dim", str(dim), *extra)

    # ------------------------------------------------------------------------------------------

    def test_duffing_pairs_end_to_end(self):
        self.create("duffing", 2, "--sigma", "0.5", "--dt", "0.25")
        ingest = self.json("ingest", "duffing", "--csv", self.duffing_csv, "--producer", "p1")
        self.assertEqual(ingest["pairs_sent"], 6000)
        self.assertEqual(ingest["pairs_applied"], 6000)
        self.assertEqual(ingest["producer_offset"], 6000)
        self.assertEqual(ingest["batches"], 6)

        view = self.json("refresh", "duffing", "--wait")
        self.assertGreaterEqual(view["view_version"], 1)
        self.assertEqual(view["samples"], 6000)

        # Koopman: structure and the leading eigenvalue (constant function) ~ 1.
        grid = np.array([[a, b] for a in np.linspace(-1.5, 1.5, 7) for b in (-0.5, 0.0, 0.5)])
        points = self.write("grid.csv", grid)
        k = self.json("koopman", "duffing", "--top", "4", "--points", points)
        self.assertEqual(len(k["eigenvalues"]), 4)
        self.assertEqual(len(k["timescales"]), 4)
        self.assertEqual(len(k["rates"]), 4)
        self.assertEqual(len(k["eigenfunctions"]), 4)
        # Mode amplitudes and shares per eigenpair; the headline's cycles (docs/algorithms.md §7.3).
        self.assertEqual(len(k["amplitudes"]), 4)
        self.assertEqual(len(k["shares"]), 4)
        self.assertTrue(all(0 <= s <= 1 for s in k["shares"]), k["shares"])
        for cy in k["headline"]["cycles"]:
            self.assertTrue({"period", "timescale", "share", "amplitude", "peak", "harmonics"} <= set(cy), cy)
        for ef in k["eigenfunctions"]:
            self.assertEqual(len(ef), len(grid))
            for v in ef:
                self.assertEqual(set(v), {"re", "im"})
        # The stationary mode first (eigenvalue exactly 1), then |mu| descending; a
        # mode beyond the unit circle (Duffing's basin indicator) carries its excess.
        mods = [abs(complex(e["re"], e["im"])) for e in k["eigenvalues"]]
        self.assertEqual(k["stationary"], [True, False, False, False])
        self.assertEqual(mods[0], 1.0)
        self.assertEqual(mods[1:], sorted(mods[1:], reverse=True))
        for mu, excess in zip(mods[1:], k["excess"][1:]):
            self.assertAlmostEqual(excess, max(0.0, mu - 1), delta=1e-12)
        self.assertEqual(k["spectrum"]["estimator"], "spectral-moments")
        self.assertIn("slowest_timescales", k["spectrum"])
        self.assertEqual(k["samples"], 6000)
        self.assertEqual(k["view_version"], view["view_version"])
        self.assertAlmostEqual(k["dt"], 0.25)
        # timescale = -dt / log|mu| (null when |mu| >= 1)
        for mu, ts in zip(mods, k["timescales"]):
            if mu < 1:
                self.assertAlmostEqual(ts, -0.25 / np.log(mu), delta=1e-6 * abs(ts))
            else:
                self.assertIsNone(ts)

        # Predict: E[Y|x] close to the true flow over dt, far better than "no motion".
        inner = np.array([[a, b] for a in np.linspace(-1.2, 1.2, 9) for b in np.linspace(-1, 1, 5)])
        p = self.json("predict", "duffing", "--points", self.write("inner.csv", inner))
        pred = np.array(p["predictions"])
        self.assertEqual(pred.shape, inner.shape)
        truth = duffing_flow(inner)
        rmse = np.sqrt(np.mean(np.sum((pred - truth) ** 2, axis=1)))
        rmse_static = np.sqrt(np.mean(np.sum((inner - truth) ** 2, axis=1)))
        print(f"\npredict rmse {rmse:.4f} vs no-motion {rmse_static:.4f}", file=sys.stderr)
        self.assertLess(rmse, 0.06)
        self.assertLess(rmse, 0.25 * rmse_static)

        # describe --json: the contract's keys.
        d = self.json("model", "describe", "duffing")
        for key in ("samples", "dictionary_size", "forced_compressions", "view_version", "sigma",
                    "sigma_selection", "config"):
            self.assertIn(key, d)
        self.assertEqual(d["samples"], 6000)
        self.assertEqual(d["sigma"], 0.5)
        self.assertGreater(d["dictionary_size"], 10)
        self.assertLess(d["dictionary_size"], 6000 / 5)
        self.assertEqual(d["config"]["dt"], 0.25)
        # Its share of the memory budget (service/README.md "Memory"): charged at least its floor,
        # never capped under the default budget, counted among the daemon's models.
        mem = d["memory"]
        self.assertGreater(mem["charged_bytes"], 1e6)
        self.assertEqual(mem["dictionary_cap"], 0)
        self.assertEqual(mem["growth_denied"], 0)
        self.assertGreaterEqual(mem["committed_bytes"], mem["charged_bytes"])
        self.assertGreater(mem["budget_bytes"], mem["committed_bytes"])
        self.assertGreaterEqual(mem["models"], 1)

        # Re-running the same file with the same producer applies nothing.
        again = self.json("ingest", "duffing", "--csv", self.duffing_csv, "--producer", "p1")
        self.assertEqual(again["pairs_sent"], 6000)
        self.assertEqual(again["pairs_applied"], 0)
        self.assertEqual(again["producer_offset"], 6000)
        self.assertEqual(self.json("model", "describe", "duffing")["samples"], 6000)
        prod = self.json("producer", "duffing", "--producer", "p1")
        self.assertEqual(prod["applied_offset"], 6000)

        # Human-readable forms work too.
        self.assertIn("timescale", self.cli("koopman", "duffing").stdout)
        self.assertIn("duffing", self.cli("model", "list").stdout)

    def test_trajectory_and_stdin_equal_pairs(self):
        # One double-well trajectory: x column of consecutive pairs plus the last y.
        sim = subprocess.run([CLI, "simulate", "double-well", "--n", "2500", "--seed", "5"],
                             capture_output=True, text=True, check=True).stdout
        pairs = np.loadtxt(sim.splitlines(), delimiter=",")
        np.testing.assert_array_equal(pairs[1:, 0], pairs[:-1, 1])  # it is one trajectory
        states = np.append(pairs[:, 0], pairs[-1, 1])
        traj = self.write("traj.csv", states.reshape(-1, 1))
        common = ("--dim", "1", "--sigma", "0.3", "--dt", "0.1", "--seed", "7")
        self.cli("model", "create", "dw_traj", *common)
        self.cli("model", "create", "dw_pairs", *common)
        # Odd batch size: many batch boundaries, each must carry its straddling pair.
        t = self.json("ingest", "dw_traj", "--csv", traj, "--trajectory", "--batch", "7",
                      "--producer", "t")
        self.assertEqual(t["pairs_sent"], 2500)
        self.assertEqual(t["pairs_applied"], 2500)
        s = self.json("ingest", "dw_pairs", "--csv", "-", "--batch", "100", stdin=sim)
        self.assertEqual(s["pairs_applied"], 2500)
        for name in ("dw_traj", "dw_pairs"):
            self.cli("refresh", name, "--wait")
        a = self.json("koopman", "dw_traj", "--top", "3")
        b = self.json("koopman", "dw_pairs", "--top", "3")
        # Same pairs in the same order, same seed: the two learners are identical.
        self.assertEqual(a["samples"], 2500)
        for ea, eb in zip(a["eigenvalues"], b["eigenvalues"]):
            self.assertAlmostEqual(ea["re"], eb["re"], places=9)
            self.assertAlmostEqual(ea["im"], eb["im"], places=9)
        da = self.json("model", "describe", "dw_traj")
        db = self.json("model", "describe", "dw_pairs")
        self.assertEqual(da["dictionary_size"], db["dictionary_size"])
        # Double well at beta = 3: one slow mode (well hopping), eigenvalue in (0.5, 1).
        mu1 = abs(complex(a["eigenvalues"][1]["re"], a["eigenvalues"][1]["im"]))
        self.assertGreater(mu1, 0.5)
        self.assertLess(mu1, 1.0)

    def test_bad_csv_is_rejected_with_the_line_and_nothing_applied(self):
        self.create("badcsv", 2, "--sigma", "0.5")
        wrong_cols = os.path.join(self.dir, "wrong_cols.csv")
        with open(wrong_cols, "w") as f:
            f.write("# header\n0,0,0.1,0.1\n\n0.5,0.5,0.6\n1,1,1,1\n")
        p = self.cli("ingest", "badcsv", "--csv", wrong_cols, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"{wrong_cols}:4: expected 4 comma-separated numbers", p.stderr)
        self.assertIn("got 3 fields", p.stderr)

        not_number = os.path.join(self.dir, "not_number.csv")
        with open(not_number, "w") as f:
            f.write("0,0,0.1,0.1\n0.5,abc,0.6,0.6\n")
        p = self.cli("ingest", "badcsv", "--csv", not_number, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"{not_number}:2: field 2: 'abc' is not a number", p.stderr)

        # A file is validated before sending: nothing of either file was applied.
        self.assertEqual(self.json("model", "describe", "badcsv")["samples"], 0)

        # Standard input: batches before the bad line stay applied, the message says so.
        good = "".join(f"{i * 1e-3},0,{i * 1e-3},0.1\n" for i in range(10))
        p = self.cli("ingest", "badcsv", "--csv", "-", "--batch", "4", stdin=good + "1,2\n",
                     check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("<stdin>:11: expected 4 comma-separated numbers", p.stderr)
        self.assertIn("8 pairs sent before this line", p.stderr)
        self.assertEqual(self.json("model", "describe", "badcsv")["samples"], 8)

    def test_unknown_model_and_usage_errors(self):
        p = self.cli("ingest", "nosuchmodel", "--csv", self.duffing_csv, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cmestream: ingest:", p.stderr)
        self.assertIn("NOT_FOUND", p.stderr)
        self.assertIn("nosuchmodel", p.stderr)
        for args in (("koopman", "nosuchmodel", "--json"), ("model", "describe", "nosuchmodel"),
                     ("refresh", "nosuchmodel", "--wait")):
            p = self.cli(*args, check=False)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn("NOT_FOUND", p.stderr)
        # Usage errors: exit 2 with a message naming the problem.
        p = self.cli("model", "create", "x", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--dim D is required", p.stderr)
        p = self.cli("model", "create", "x", "--dim", "2", "--eta", "fast", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--eta: expected a finite number, got 'fast'", p.stderr)
        p = self.cli("koopman", "x", "--bogus", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option --bogus", p.stderr)
        # Server-side validation surfaces with its code.
        p = self.cli("model", "create", "bad", "--dim", "0", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", p.stderr)
        # Duplicate name.
        self.create("dup", 1, "--sigma", "1")
        p = self.cli("model", "create", "dup", "--dim", "1", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("ALREADY_EXISTS", p.stderr)
        # Unreachable server: a clear error, not a hang.
        p = subprocess.run([CLI, "--server", "127.0.0.1:1", "--timeout", "2", "model", "list"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("UNAVAILABLE", p.stderr)

    def test_query_before_first_view_is_failed_precondition(self):
        self.create("noview", 2, "--sigma", "0.5")
        p = self.cli("koopman", "noview", "--json", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("FAILED_PRECONDITION", p.stderr)

    def test_delete_model(self):
        self.create("todelete", 1, "--sigma", "1")
        self.cli("model", "delete", "todelete")
        names = [m["name"] for m in self.json("model", "list")["models"]]
        self.assertNotIn("todelete", names)

    def test_every_command_has_its_own_help(self):
        main = subprocess.run([CLI, "--help"], capture_output=True, text=True).stdout
        self.assertIn("usage: cmestream [--server", main)
        commands = [["model"], ["model", "create"], ["model", "describe"], ["model", "list"],
                    ["model", "delete"], ["snapshot"], ["export"], ["import"], ["ingest"],
                    ["refresh"], ["koopman"], ["predict"], ["dictionary"], ["producer"],
                    ["counts"], ["embedding"], ["clusters"], ["aggregation"], ["latent"],
                    ["forecast"], ["simulate"], ["health"]]
        seen = set()
        for cmd in commands:
            for flag in ("--help", "-h"):
                p = subprocess.run([CLI, *cmd, flag], capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 0, (cmd, flag, p.stderr))
                self.assertTrue(p.stdout.startswith("usage: cmestream " + " ".join(cmd)),
                                (cmd, p.stdout[:80]))
                self.assertNotEqual(p.stdout, main, cmd)
            seen.add(p.stdout)
        self.assertEqual(len(seen), len(commands))  # one text per command
        # A wrong use prints that command's usage on stderr, exit 2.
        p = subprocess.run([CLI, "model", "describe"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("expected exactly one model NAME", p.stderr)
        self.assertIn("usage: cmestream model describe NAME", p.stderr)
        p = subprocess.run([CLI, "model", "frobnicate"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown subcommand", p.stderr)
        self.assertIn("usage: cmestream model (create|describe|list|delete)", p.stderr)

    def test_version_of_both_binaries(self):
        cmake = open(os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")).read()
        version = re.search(r"project\(cmestream VERSION ([0-9.]+)", cmake).group(1)
        for binary, name in ((CLI, "cmestream"), (DAEMON, "cmestreamd")):
            p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout.strip(),
                             r"^%s %s \(([0-9a-f]{12}(-dirty)?|unknown)\)$" % (name, re.escape(version)))

    def test_health(self):
        p = self.cli("health")
        self.assertEqual(p.stdout, "SERVING\n")
        p = self.cli("health", "cmestream.v1.QueryService", check=False)
        self.assertIn(p.returncode, (0, 1), p.stderr)  # registered or not: a clear answer
        p = self.cli("health", "no.such.Service", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("NOT_FOUND", p.stderr)

    def test_server_without_port_means_50051(self):
        # Nothing here listens on 443, so a client that picked gRPC's default port would fail
        # naming 443; ours goes to 50051 (served or refused: either way it is named or works).
        p = subprocess.run([CLI, "--server", "127.0.0.1", "--timeout", "2", "model", "list"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("127.0.0.1:50051", p.stderr)
            self.assertNotIn(":443", p.stderr)

    def test_simulate_grid_labels_match_the_attractors(self):
        out = subprocess.run([CLI, "simulate", "duffing-grid", "--n-side", "9"],
                             capture_output=True, text=True, check=True).stdout
        g = np.loadtxt(out.splitlines(), delimiter=",")
        self.assertEqual(g.shape, (81, 3))
        label = {(round(a, 3), round(b, 3)): int(c) for a, b, c in g}
        self.assertEqual(label[(1.0, 0.0)], 1)    # at the attractors themselves
        self.assertEqual(label[(-1.0, 0.0)], -1)
        self.assertEqual(set(g[:, 2]), {-1.0, 1.0})
        # The Duffing flow is odd: basin(-x) = -basin(x) away from the separatrix.
        flipped = {(round(-a, 3), round(-b, 3)): int(c) for a, b, c in g}
        agree = np.mean([label[k] == -flipped[k] for k in label])
        self.assertGreater(agree, 0.9)


if __name__ == "__main__":
    unittest.main(verbosity=2)
