"""Monitoring artifacts against a real daemon: every metric name the Grafana dashboard
(deploy/grafana/cmestream.json) and the alert rules (deploy/prometheus/alerts.yaml) reference
exists in cmestreamd's /metrics exposition, `promtool check rules` accepts the rules (skipped
with a message when promtool is not installed), and the series the alerts rely on behave:
rejection counters exist at 0 from a model's creation, a model without a view reports its age
since creation (not 0), the dictionary budget is max_dict, RSS matches /proc/PID/status.

Without a daemon (PrometheusArtifactsTest): `promtool test rules` runs the alert unit tests
(deploy/prometheus/alerts_test.yaml) and every alert has one that fires it and one that keeps
it silent; `promtool check config` accepts deploy/prometheus/prometheus.yml with its rule file;
its Kubernetes scrape job, applied to the daemon's rendered pod, keeps exactly the metrics port
and gives the job label the alerts select; the dashboard shows the learned dynamics and
promtool parses every panel query.

Environment (ctest): CMESTREAMD, PYTHONPATH=<build>/python.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np
import yaml

import grpc

from cmestream import Client, CmestreamError
from cmestream.metrics_text import parse_exposition
from cmestream.testing import Daemon, Stubs
from cmestream.v1 import cmestream_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "cmestream.json")
PROMETHEUS_DIR = os.path.join(ROOT, "deploy", "prometheus")
ALERTS = os.path.join(PROMETHEUS_DIR, "alerts.yaml")
ALERT_TESTS = os.path.join(PROMETHEUS_DIR, "alerts_test.yaml")
PROMETHEUS_CONFIG = os.path.join(PROMETHEUS_DIR, "prometheus.yml")
# What the dashboard must show of the learned dynamics (all exported by ModelMetrics).
DYNAMICS_METRICS = {"cmestream_lag_timescale", "cmestream_lag_timescale_stderr",
                    "cmestream_ck_max_deviation", "cmestream_ck_max_deviation_stderr",
                    "cmestream_spectrum_heldout_score", "cmestream_timescale_disagreement",
                    "cmestream_view_samples", "cmestream_view_available",
                    "cmestream_view_fit_warning"}

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
        # A trajectory with two lags: the lag scan's gauges (cmestream_lag_timescale{lag,mode})
        # exist only once a lag view was built.
        lagged = c.create("lagged", dim=1, sigma=0.5, lags=[1, 2], clusters=2)
        states = np.zeros((3000, 1))
        for t in range(1, len(states)):
            states[t] = 0.9 * states[t - 1] + 0.3 * rng.standard_normal()
        lagged.ingest(trajectory=states)
        lagged.refresh()
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
        self.assertLessEqual(DYNAMICS_METRICS, dash)
        self.assertIn(("cmestream_lag_timescale", {"model": "lagged", "lag": "2", "mode": "1"}),
                      [(n, l) for n, l, _ in series])
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

        # No view yet: the age grows from the model's creation, it is not 0. The refresh
        # scheduler publishes view ages once a second (RefreshScheduler::kReportSeconds), so the
        # scrape shows an age up to about a second old: wait for one above 0.8 s (at most 10 s).
        time.sleep(1.0)
        while True:
            age = value("cmestream_view_age_seconds", model="fresh")
            elapsed = time.monotonic() - created
            if age > 0.8 or elapsed > 10:
                break
            time.sleep(0.1)
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


def relabel(labels, configs):
    """Prometheus relabelling (keep and replace; the regex is anchored at both ends): the
    target's labels, or None when a keep drops it."""
    labels = dict(labels)
    for c in configs:
        value = c.get("separator", ";").join(labels.get(n, "") for n in c.get("source_labels", []))
        m = re.fullmatch(c.get("regex", "(.*)"), value)
        action = c.get("action", "replace")
        if action == "keep":
            if not m:
                return None
        elif action == "replace":
            if m:
                labels[c["target_label"]] = m.expand(c.get("replacement", "$1").replace("$", "\\"))
        else:
            raise ValueError(f"relabel action {action} not emulated")
    return labels


def discovered_pod_targets(pod, namespace, pod_name, pod_ip):
    """The targets Prometheus' Kubernetes discovery (role: pod) makes of a pod template: one
    per declared container port, with the meta labels of the pod."""
    def sanitize(name):
        return re.sub(r"[^a-zA-Z0-9_]", "_", name)
    base = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod_name}
    base.update({f"__meta_kubernetes_pod_label_{sanitize(k)}": v
                 for k, v in pod["metadata"].get("labels", {}).items()})
    base.update({f"__meta_kubernetes_pod_annotation_{sanitize(k)}": v
                 for k, v in pod["metadata"].get("annotations", {}).items()})
    for container in pod["spec"]["containers"]:
        for port in container.get("ports", []):
            t = dict(base)
            t.update({"__address__": f"{pod_ip}:{port['containerPort']}",
                      "__meta_kubernetes_pod_container_name": container["name"],
                      "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                      "__meta_kubernetes_pod_container_port_number": str(port["containerPort"])})
            yield t


class PrometheusArtifactsTest(unittest.TestCase):
    """promtool and the Prometheus configuration; no daemon needed."""

    def promtool(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool not installed (Debian package prometheus)")
        return promtool

    def test_promtool_rule_unit_tests_pass(self):
        p = subprocess.run([self.promtool(), "test", "rules", os.path.basename(ALERT_TESTS)],
                           cwd=PROMETHEUS_DIR, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout)

    def test_every_alert_has_a_firing_and_a_silent_unit_test(self):
        with open(ALERTS) as f:
            alerts = [r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r]
        with open(ALERT_TESTS) as f:
            suite = yaml.safe_load(f)
        self.assertEqual(suite["rule_files"], ["alerts.yaml"])
        fires, silent = set(), set()
        for test in suite["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
        self.assertGreaterEqual(len(alerts), 11)
        self.assertEqual(sorted(set(alerts) - fires), [], "alerts no unit test fires")
        self.assertEqual(sorted(set(alerts) - silent), [], "alerts no unit test keeps silent")
        self.assertEqual(sorted((fires | silent) - set(alerts)), [], "tests of unknown alerts")

    def test_promtool_accepts_the_config(self):
        promtool = self.promtool()
        with open(PROMETHEUS_CONFIG) as f:
            config = yaml.safe_load(f)
        self.assertEqual(config["rule_files"], ["alerts.yaml"])
        p = subprocess.run([promtool, "check", "config", PROMETHEUS_CONFIG], capture_output=True, text=True)
        out = p.stdout + p.stderr
        if p.returncode != 0 and "field kubernetes_sd_configs not found" in out:
            # Debian builds promtool without Kubernetes discovery: check everything else (the
            # rule file, relabelling, globals) with the discovery block as a static target.
            print("promtool lacks kubernetes_sd_configs (Debian build): the discovery block is "
                  "checked by test_scrape_job_discovers_the_daemon_pods only")
            for job in config["scrape_configs"]:
                job["static_configs"] = [{"targets": ["10.0.0.1:9464"]}] if job.pop(
                    "kubernetes_sd_configs", None) is not None else job.get("static_configs")
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy(ALERTS, tmp)
                path = os.path.join(tmp, "prometheus.yml")
                with open(path, "w") as f:
                    yaml.safe_dump(config, f)
                p = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True)
                out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("SUCCESS: 1 rule files found", out)
        with open(ALERTS) as f:
            rules = sum(1 for line in f if line.strip().startswith("- alert:"))
        self.assertIn(f"SUCCESS: {rules} rules found", out)

    def test_scrape_job_discovers_the_daemon_pods(self):
        sys.path.insert(0, os.path.join(ROOT, "deploy", "validate"))
        import rendered_policy
        with open(PROMETHEUS_CONFIG) as f:
            config = yaml.safe_load(f)
        (job,) = config["scrape_configs"]
        self.assertEqual(job["kubernetes_sd_configs"], [{"role": "pod"}])
        # The job label (= job_name) is the one the alerts select.
        selected = set(re.findall(r'job="([^"]+)"', "\n".join(alert_exprs())))
        self.assertEqual(selected, {job["job_name"]})
        objs = rendered_policy.render(os.path.join(ROOT, "deploy", "kubernetes", "overlays", "sharded"))
        (sts,) = [o for o in objs if o["kind"] == "StatefulSet"]
        targets = []
        for i in range(sts["spec"]["replicas"]):
            for t in discovered_pod_targets(sts["spec"]["template"], "prod", f"cmestreamd-{i}", f"10.0.0.{i + 1}"):
                kept = relabel(t, job["relabel_configs"])
                if kept is not None:
                    targets.append(kept)
        self.assertEqual([t["__address__"] for t in targets], ["10.0.0.1:9464", "10.0.0.2:9464", "10.0.0.3:9464"])
        self.assertEqual([t["instance"] for t in targets], ["prod/cmestreamd-0", "prod/cmestreamd-1", "prod/cmestreamd-2"])
        self.assertEqual({(t["namespace"], t["pod"]) for t in targets},
                         {("prod", f"cmestreamd-{i}") for i in range(3)})
        # Another pod of the namespace (no daemon label) is not scraped.
        other = {"metadata": {"labels": {"app": "web"}, "annotations": {"prometheus.io/scrape": "true"}},
                 "spec": {"containers": [{"name": "web", "ports": [{"name": "metrics", "containerPort": 9464}]}]}}
        self.assertEqual([relabel(t, job["relabel_configs"]) for t in
                          discovered_pod_targets(other, "prod", "web-0", "10.0.0.9")], [None])

    def test_dashboard_queries_parse(self):
        # Every panel query as a recording rule, Grafana's variables substituted: promtool
        # parses each one as PromQL.
        exprs = [e for e in dashboard_exprs() if not e.startswith("label_values(")]
        subst = {"$__rate_interval": "5m", "$model": ".*", "$instance": ".*"}
        rules = []
        for i, e in enumerate(exprs):
            for var, value in subst.items():
                e = e.replace(var, value)
            self.assertNotIn("$", e)
            rules.append({"record": f"dashboard:query_{i}", "expr": e})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "dashboard_rules.yaml")
            with open(path, "w") as f:
                yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            p = subprocess.run([self.promtool(), "check", "rules", path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"SUCCESS: {len(rules)} rules found", p.stdout)

    def test_relabel_emulation(self):
        cfg = [{"source_labels": ["a", "b"], "separator": "/", "target_label": "c"},
               {"source_labels": ["a"], "regex": "x.", "action": "keep"}]
        self.assertEqual(relabel({"a": "xy", "b": "z"}, cfg), {"a": "xy", "b": "z", "c": "xy/z"})
        self.assertIsNone(relabel({"a": "xyz"}, cfg))   # anchored: "x." does not match "xyz"

    def test_dashboard_shows_the_learned_dynamics(self):
        with open(DASHBOARD) as f:
            d = json.load(f)
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        names = set().union(*(metric_names(e) for e in dashboard_exprs()))
        self.assertLessEqual(DYNAMICS_METRICS, names)
        for p in d["panels"]:
            if p["type"] in ("timeseries", "table", "stat"):
                self.assertTrue(p.get("targets"), p["title"])
        # Panels do not overlap on the 24-column grid.
        cells = set()
        for p in d["panels"]:
            g = p["gridPos"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            self.assertFalse(cells & mine, p["title"])
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            cells |= mine


if __name__ == "__main__":
    unittest.main(verbosity=2)
