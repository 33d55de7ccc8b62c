"""Stream fuzzer at the model level: degenerate but valid series through the real daemon.

Every series a production metric can be (a flat line, a two-level or multi-level square wave,
sparse spikes on zeros, integer counts, quantized noise, a step of 10^6 x, values near the
daemon's magnitude bound, a long constant run after a normal warm-up, a channel constant while
the others move, a channel constant over the warm-up that moves later, a tiny spread on a huge
offset) goes through a model with default options and, for one channel, through one with
--delays 12: ingest, refresh, every view, alarms, forecast, export + import, kill -9 + restart,
more pairs after the restart.

Asserted (docs/algorithms.md §1.11.1 "Degenerate data", service/README.md fault table):
  - the daemon never stops, and no model fails (ModelInfo.failure unset) on finite data;
  - every reply is an answer or FAILED_PRECONDITION with a reason (a view that is absent for
    this stream); never INTERNAL or UNKNOWN;
  - every double of every reply is finite, except the fields documented to carry NaN/inf
    (NON_FINITE_ALLOWED: "none yet" markers and timescales of |mu| >= 1 modes);
  - an imported copy has the original's state digest; after kill -9 and restart every model
    has its digest of before (nothing acknowledged lost, restored bit for bit), and learns on;
  - a batch beyond the magnitude bound (|v| = 1e300) is refused naming the value, and changes
    nothing.
The seeds are fixed (the series are deterministic); a series that ever fails belongs in
SERIES as a regression case.

Environment (ctest): CMESTREAMD, PYTHONPATH (build/python and client/python).
"""
import math
import os
import shutil
import signal
import tempfile
import unittest

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
N = 2400          # rows per series: the default warm-up (1000 pairs) ends, views build
MIDDLE = 1300     # rows before the snapshot (and the views, export, import)
FIRST = 1700      # rows before the kill -9 (MIDDLE..FIRST replayed from the log); the rest after
BATCH = 400

# Reply fields (message, field) documented to be NaN or infinite when there is nothing to report:
# timescales and periods of modes with |mu| >= 1 or mu = 0 (proto comments), "none yet" error bars,
# scores and cross-view figures, and the live skill ratio of a stream persistence predicts exactly
# (0/0). Exactly the pairs the series below reach; anything else non-finite fails.
NON_FINITE_ALLOWED = {
    ("KoopmanResponse", "timescales"), ("KoopmanResponse", "periods"),
    ("KoopmanHeadline", "timescale"), ("KoopmanHeadline", "stderr"),
    ("LagTimescales", "timescales"), ("LagTimescales", "stderr"),
    ("SpectrumInfo", "heldout_score"), ("ForecastSkill", "ratio"),
    ("TimescaleComparison", "koopman"), ("TimescaleComparison", "count_chain"),
    ("TimescaleComparison", "embedding"), ("TimescaleComparison", "lag_scan"),
    ("TimescaleComparison", "lag_scan_stderr"), ("TimescaleComparison", "relative_disagreement"),
    ("TimescaleComparison", "relative_stderr"),
}


def series_bank():
    """name -> (rows x channels) float array; deterministic."""
    rng = np.random.default_rng(20261129)
    t = np.arange(N)
    ar = np.zeros(N)
    for i in range(1, N):
        ar[i] = 0.9 * ar[i - 1] + rng.standard_normal()
    out = {
        "flat": np.full(N, 5.0),
        "square_two_level": np.where((t // 50) % 2 == 1, 20.0, 80.0),
        "square_multi_level": np.repeat(rng.choice([0.0, 3.0, 7.0, 12.0], size=N // 40 + 1), 40)[:N],
        "sparse_spikes": np.where(rng.random(N) < 0.01, rng.integers(1, 100, N).astype(float), 0.0),
        "poisson_counts": rng.poisson(0.3, N).astype(float),
        "quantized_noise": np.round(rng.standard_normal(N) * 2) / 2,
        "step_1e6": np.where(t < 1500, rng.standard_normal(N), 1e6 + 1e6 * rng.standard_normal(N)),
        "near_bound": 9e11 * np.sign(rng.standard_normal(N)) + 1e9 * rng.standard_normal(N),
        "constant_after_warmup": np.where(t < 1200, ar, 0.37),
        "constant_in_warmup_then_moves": np.where(t < 1200, 0.0, 1000 * rng.standard_normal(N)),
        "tiny_spread_huge_offset": 1e9 + 1e-6 * rng.standard_normal(N),
        "binary_valve": (rng.random(N) < 0.5).astype(float),
        "counts_with_outlier": np.where(t == 1900, 1e7, rng.poisson(3, N)).astype(float),
    }
    series = {k: v.reshape(-1, 1) for k, v in out.items()}
    # Several channels: one constant while the others move; all quantized two-level.
    series["one_channel_constant"] = np.column_stack([ar, np.full(N, 2.5), rng.standard_normal(N)])
    series["two_channel_valves"] = np.column_stack([(t // 70) % 2, (rng.random(N) < 0.1)]).astype(float)
    series["channels_far_apart"] = np.column_stack([1e-9 * ar, 1e9 * np.sin(t / 20.0)])
    return series


def non_finite(msg, path=""):
    """Paths of the non-finite doubles of a reply whose field is not in NON_FINITE_ALLOWED (a
    Koopman rate's real part is -inf exactly where its eigenvalue is 0: log 0, proto comment)."""
    bad = []
    if msg.DESCRIPTOR.name == "KoopmanResponse":
        zero = [i for i, mu in enumerate(msg.eigenvalues) if mu.re == 0 and mu.im == 0]
        bad += [f"{path}.rates[{i}].re" for i, r in enumerate(msg.rates)
                if not math.isfinite(r.re) and not (i in zero and r.re == -math.inf)]
        bad += [f"{path}.rates[{i}].im" for i, r in enumerate(msg.rates) if not math.isfinite(r.im)]
    for field, value in msg.ListFields():
        name = f"{path}.{field.name}"
        if msg.DESCRIPTOR.name == "KoopmanResponse" and field.name == "rates":
            continue  # checked above
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                items = value.items()
                if field.message_type.fields_by_name["value"].message_type is None:
                    bad += [f"{name}[{k}]" for k, v in items if isinstance(v, float) and not math.isfinite(v)]
                else:
                    for k, v in items:
                        bad += non_finite(v, f"{name}[{k}]")
            elif field.label == field.LABEL_REPEATED:
                for i, v in enumerate(value):
                    bad += non_finite(v, f"{name}[{i}]")
            else:
                bad += non_finite(value, name)
        elif field.cpp_type in (field.CPPTYPE_DOUBLE, field.CPPTYPE_FLOAT):
            values = value if field.label == field.LABEL_REPEATED else [value]
            allowed = (msg.DESCRIPTOR.name, field.name) in NON_FINITE_ALLOWED
            if not allowed and any(not math.isfinite(v) for v in values):
                bad.append(name)
    return bad


class Stubs:
    def __init__(self, target):
        # Exports of models with large dictionaries are tens of MB.
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 1 << 30),
                                                              ("grpc.max_send_message_length", 1 << 30)])
        self.models = pb_grpc.ModelServiceStub(self.channel)
        self.ingest = pb_grpc.IngestServiceStub(self.channel)
        self.query = pb_grpc.QueryServiceStub(self.channel)

    def close(self):
        self.channel.close()


class StreamFuzzTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cmestream-stream-fuzz-")
        self.data = os.path.join(self.tmp, "data")
        # The magnitude bound at its largest (1e150) for "near_bound"; the refusal test uses 1e300.
        self.args = ["--max-abs-value", "1e150", "--snapshot-interval", "0"]
        self.daemon = Daemon(DAEMON, self.data, extra_args=self.args, refresh_interval=3600).start()
        self.s = Stubs(self.daemon.grpc_target)

    def tearDown(self):
        self.s.close()
        self.daemon.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ingest(self, name, rows, offset):
        for start in range(0, len(rows) - 1, BATCH):
            seg = rows[start:start + BATCH + 1]
            self.s.ingest.IngestOne(pb.IngestBatch(model=name, producer_id="p", offset=offset + start,
                                                   states=seg.ravel().tolist()), timeout=60)

    def describe(self, name):
        return self.s.models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30)

    def check_reply(self, name, rpc, call):
        """The reply of `call`, checked: an answer with finite numbers, or FAILED_PRECONDITION."""
        try:
            reply = call()
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.FAILED_PRECONDITION,
                             f"{name}.{rpc}: {e.code().name}: {e.details()}")
            self.assertTrue(e.details(), f"{name}.{rpc}: refused without a reason")
            return None
        self.assertEqual(non_finite(reply), [], f"{name}.{rpc}: non-finite numbers in the reply")
        return reply

    def query_everything(self, name, rows, dim):
        q = self.s.query
        self.s.query.Refresh(pb.RefreshRequest(model=name, wait=True, timeout_seconds=120), timeout=150)
        points = rows[-14:].ravel().tolist()  # 14 raw rows: one complete window of a delays-12 model
        calls = {
            "GetKoopman": lambda: q.GetKoopman(pb.KoopmanRequest(model=name, top=6, points=points), timeout=60),
            "Predict": lambda: q.Predict(pb.PredictRequest(model=name, points=points), timeout=60),
            "GetDictionary": lambda: q.GetDictionary(pb.DictionaryRequest(model=name), timeout=60),
            "GetCounts": lambda: q.GetCounts(pb.CountsRequest(model=name), timeout=60),
            "GetEmbedding": lambda: q.GetEmbedding(pb.EmbeddingRequest(model=name, points=points), timeout=60),
            "GetClusters": lambda: q.GetClusters(pb.ClustersRequest(model=name, points=points), timeout=60),
            "GetAggregation": lambda: q.GetAggregation(pb.AggregationRequest(model=name), timeout=60),
            "GetLatent": lambda: q.GetLatent(pb.LatentRequest(model=name), timeout=60),
            "Forecast": lambda: q.Forecast(pb.ForecastRequest(model=name, window=points, horizon=3), timeout=60),
            "ForecastSeries": lambda: q.Forecast(pb.ForecastRequest(model=name, series=rows[-200:].ravel().tolist(),
                                                                    horizon=2), timeout=60),
            "GetTimescales": lambda: q.GetTimescales(pb.TimescalesRequest(model=name), timeout=60),
            "CkTest": lambda: q.CkTest(pb.CkTestRequest(model=name), timeout=60),
            "ListAlarms": lambda: q.ListAlarms(pb.ListAlarmsRequest(model=name), timeout=60),
            "GetModel": lambda: self.describe(name),
        }
        answered = {rpc: self.check_reply(name, rpc, call) for rpc, call in calls.items()}
        # The views every continuous model has once it has a view.
        for rpc in ("GetKoopman", "Forecast", "GetModel", "ListAlarms"):
            self.assertIsNotNone(answered[rpc], f"{name}.{rpc} refused")
        info = answered["GetModel"]
        self.assertFalse(info.HasField("failure"), f"{name} failed: {info.failure.reason}")
        self.assertGreater(info.sigma_selection.chosen, 0)
        self.assertTrue(math.isfinite(info.sigma_selection.chosen))
        return info

    def test_degenerate_series_never_stop_the_daemon(self):
        bank = series_bank()
        digests = {}
        for series, rows in bank.items():
            dim = rows.shape[1]
            configs = [(f"{series}", pb.ModelConfig(name=series, dim=dim, refresh_interval_seconds=3600))]
            if dim == 1:
                configs.append((f"{series}_d12", pb.ModelConfig(name=f"{series}_d12", dim=1, delays=12,
                                                                refresh_interval_seconds=3600)))
            for name, config in configs:
                with self.subTest(model=name):
                    self.s.models.CreateModel(pb.CreateModelRequest(config=config), timeout=30)
                    self.ingest(name, rows[:MIDDLE], 0)
                    info = self.query_everything(name, rows[:MIDDLE], dim)
                    exported = self.s.models.ExportModel(pb.ExportModelRequest(name=name), timeout=60).data
                    self.s.models.ImportModel(pb.ImportModelRequest(data=exported, name=f"{name}_copy"), timeout=60)
                    copy = self.describe(f"{name}_copy")
                    self.assertEqual(copy.state_digest, info.state_digest, f"{name}: import changed the state")
                    self.s.models.DeleteModel(pb.DeleteModelRequest(name=f"{name}_copy"), timeout=30)
                    digests[name] = (rows, dim)
        # A snapshot (so that the restart does not replay the imports, tens of MB each), then
        # more pairs that only the write-ahead log holds when the daemon is killed.
        self.s.models.Snapshot(pb.SnapshotRequest(), timeout=300)
        for name, (rows, dim) in digests.items():
            self.ingest(name, rows[MIDDLE - 1:FIRST], MIDDLE - 1)
            digests[name] = (self.describe(name).state_digest, rows, dim)

        # kill -9, restart: every model is back with its state, bit for bit, and learns on.
        self.s.close()
        self.daemon.process.send_signal(signal.SIGKILL)
        self.daemon.process.wait()
        self.daemon.stop()
        self.daemon = Daemon(DAEMON, self.data, extra_args=self.args, refresh_interval=3600).start(timeout=180)
        self.s = Stubs(self.daemon.grpc_target)
        for name, (digest, rows, dim) in digests.items():
            with self.subTest(model=name, phase="restart"):
                self.assertEqual(self.describe(name).state_digest, digest, f"{name}: restart changed the state")
                self.ingest(name, rows[FIRST - 1:], FIRST - 1)
                info = self.query_everything(name, rows, dim)
                self.assertEqual(info.samples + info.pending_warmup, N - 1 - (11 if name.endswith("_d12") else 0))

    def test_values_beyond_the_bound_are_refused_and_change_nothing(self):
        self.s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(name="m", dim=1)), timeout=30)
        rows = np.linspace(0, 1, 300).reshape(-1, 1)
        self.ingest("m", rows, 0)
        before = self.describe("m").state_digest
        bad = rows.copy()
        bad[150, 0] = 1e300
        with self.assertRaises(grpc.RpcError) as e:
            self.s.ingest.IngestOne(pb.IngestBatch(model="m", producer_id="p", offset=299,
                                                   states=bad.ravel().tolist()), timeout=60)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("1e+300", e.exception.details())
        self.assertEqual(self.describe("m").state_digest, before)


if __name__ == "__main__":
    unittest.main()
