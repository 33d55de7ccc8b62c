"""Monitoring artifacts against a real daemon: every metric name the Grafana dashboard
(deploy/grafana/cmestream.json) and the alert rules (deploy/prometheus/alerts.yaml) reference
exists in cmestreamd's /metrics exposition, `promtool check rules` accepts the rules (skipped
with a message when promtool is not installed), and the series the alerts rely on behave:
rejection counters exist at 0 from a model's creation, a model without a view reports its age
since creation (not 0), the dictionary budget is max_dict, RSS matches /proc/PID/status.

Environment (ctest): CMESTREAMD, PYTHONPATH=<build>/python.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

import numpy as np

import grpc

from cmestream import Client, CmestreamError
from cmestream.metrics_text import parse_exposition
from cmestream.testing import Daemon, Stubs
from cmestream.v1 import cmestream_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "cmestream.json")
ALERTS = os.path.join(ROOT, "deploy", "prometheus", "alerts.yaml")

# Series Prometheus itself synthesizes for every target (not in any exposition).
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "bool", "offset", "inf", "nan"}


def metric_names(expr):
    """Metric names referenced by a PromQL expression (Grafana variables allowed): strings,
    label matchers {..}, ranges [..] and grouping clauses by (..) / on (..) are dropped first;
    then every identifier not followed by '(' (a function) and not a keyword is a metric."""
    names = set(m.group(1) for m in re.finditer(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*,", expr))
    expr = re.sub(r"label_values\([^)]*\)", " ", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', " ", expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    for m in re.finditer(r"(?<![\w$.])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        if m.group(2) is None and m.group(1).lower() not in _KEYWORDS:
            names.add(m.group(1))
    return names


def dashboard_exprs():
    with open(DASHBOARD) as f:
        d = json.load(f)
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in d["templating"]["list"] if v.get("type") == "query"]
    return exprs


def alert_exprs():
    # Plain-text extraction (no PyYAML dependency): `expr:` lines, and folded `>-` blocks.
    with open(ALERTS) as f:
        lines = f.read().splitlines()
    exprs = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(1).startswith(">"):
            indent, block = None, []
            for nxt in lines[i + 1:]:
                cur = len(nxt) - len(nxt.lstrip())
                if indent is None:
                    indent = cur
                if not nxt.strip() or cur < indent:
                    break
                block.append(nxt.strip())
            exprs.append(" ".join(block))
        else:
            exprs.append(m.group(1))
    return exprs


class MetricsNamesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cmestream-metrics-test-")
        cls.daemon = Daemon(DAEMON, os.path.join(cls.tmp.name, "data"), refresh_interval=3600).start()
        cls.client = Client(cls.daemon.grpc_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.daemon.stop()
        cls.tmp.cleanup()
        assert code == 0, f"cmestreamd exited with {code}"

    def scrape(self):
        with urllib.request.urlopen(f"http://{self.daemon.metrics_target}/metrics", timeout=10) as r:
            return parse_exposition(r.read().decode())

    def test_extractor(self):
        self.assertEqual(metric_names('histogram_quantile(0.99, sum by (le, method) '
                                      '(rate(a_bucket{x=~"$i",code!="OK"}[$__rate_interval])))'),
                         {"a_bucket"})
        self.assertEqual(metric_names('up{job="c"} == 0'), {"up"})
        self.assertEqual(metric_names("(time() - b > 1800) and on (instance) (time() - c > 5)"),
                         {"b", "c"})
        self.assertEqual(metric_names("label_values(cmestream_models, instance)"),
                         {"cmestream_models"})

    def test_every_dashboard_and_alert_metric_exists(self):
        c = self.client
        m = c.create("names", dim=2, sigma=0.5, max_dict=300)
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, size=(2000, 2))
        m.ingest(x, 0.5 * x)
        m.refresh()
        m.koopman(points=x[:5])
        with self.assertRaises(CmestreamError):
            c.describe("no-such-model")
        series = self.scrape()
        exposed = {name for name, _, _ in series}
        dash = set().union(*(metric_names(e) for e in dashboard_exprs()))
        alerts = set().union(*(metric_names(e) for e in alert_exprs()))
        print(f"dashboard: {len(dash)} metric names, alerts: {len(alerts)}")
        self.assertGreaterEqual(len(dash), 15)
        self.assertGreaterEqual(len(alerts), 8)
        self.assertIn("cmestream_rpc_duration_seconds_bucket", dash)
        self.assertIn("process_resident_memory_bytes", dash)
        self.assertIn("up", alerts)
        missing = sorted(n for n in dash | alerts if n not in exposed and n not in SYNTHETIC)
        self.assertEqual(missing, [], f"referenced but not exposed; exposed: {sorted(exposed)}")

    def test_promtool_accepts_the_rules(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool not installed (Debian package prometheus): "
                          "`promtool check rules` not run")
        p = subprocess.run([promtool, "check", "rules", ALERTS], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(ROOT, "deploy", "prometheus", "alerts.yaml")) as f:
            rules = sum(1 for line in f if line.strip().startswith("- alert:"))
        self.assertGreaterEqual(rules, 9)
        self.assertIn(f"SUCCESS: {rules} rules found", p.stdout)

    def test_series_the_alerts_rely_on(self):
        c = self.client
        m = c.create("fresh", dim=2, sigma=0.5, max_dict=123)
        created = time.monotonic()

        def value(name, **labels):
            found = [v for n, l, v in self.scrape() if n == name and l == labels]
            self.assertEqual(len(found), 1, (name, labels))
            return found[0]

        # Rejections: every reason at 0 from the model's creation; unknown_model at 0 too
        # (it may be > 0 if another test sent a batch for a missing model first).
        reasons = ["payload_form", "size", "empty", "non_finite", "state_id", "batch_limit",
                   "queue_full", "offset_gap", "log_error"]
        for reason in reasons:
            self.assertEqual(value("cmestream_ingest_batches_rejected_total", model="fresh",
                                   reason=reason), 0.0, reason)
        self.assertGreaterEqual(value("cmestream_ingest_batches_rejected_total", model="",
                                      reason="unknown_model"), 0.0)
        self.assertEqual(value("cmestream_forced_compressions_total", model="fresh"), 0.0)
        self.assertEqual(value("cmestream_dictionary_budget", model="fresh"), 123.0)
        bad = np.zeros((3, 2))
        bad[1, 0] = np.nan
        with self.assertRaises(ValueError):  # the client refuses it before sending
            m.ingest(bad, np.zeros((3, 2)))
        # The daemon's own check, for clients that do not check: sent with the raw stub.
        stubs = Stubs(self.daemon.grpc_target)
        try:
            with self.assertRaises(grpc.RpcError) as e:
                stubs.ingest.IngestOne(pb.IngestBatch(model="fresh", x=bad.ravel(),
                                                      y=np.zeros(6)), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            stubs.close()
        self.assertEqual(value("cmestream_ingest_batches_rejected_total", model="fresh",
                               reason="non_finite"), 1.0)

        # No view yet: the age grows from the model's creation, it is not 0.
        time.sleep(1.0)
        age = value("cmestream_view_age_seconds", model="fresh")
        elapsed = time.monotonic() - created
        self.assertEqual(value("cmestream_view_version", model="fresh"), 0.0)
        self.assertGreater(age, 0.8)
        self.assertLessEqual(age, elapsed + 0.5)
        # After a view, the age restarts from its build.
        m.ingest(np.zeros((10, 2)) + np.arange(10)[:, None] * 0.1, np.zeros((10, 2)))
        m.refresh()
        time.sleep(0.2)
        self.assertLess(value("cmestream_view_age_seconds", model="fresh"), 0.8)
        self.assertEqual(value("cmestream_view_version", model="fresh"), 1.0)

        # RSS agrees with the kernel's VmRSS of the daemon's process (10 % apart at most).
        rss = value("process_resident_memory_bytes")
        with open(f"/proc/{self.daemon.process.pid}/status") as f:
            vmrss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
        print(f"process_resident_memory_bytes {rss:.0f}, VmRSS {vmrss}")
        self.assertGreater(rss, 1 << 20)
        self.assertLess(abs(rss - vmrss) / vmrss, 0.1)
        self.assertGreater(value("process_open_fds"), 3)
        self.assertLess(abs(value("process_start_time_seconds") - time.time()), 600)


if __name__ == "__main__":
    unittest.main(verbosity=2)
