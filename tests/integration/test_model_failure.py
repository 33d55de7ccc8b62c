"""One model's failure stays that model's (service/README.md fault table, "a model's estimator
fails" and "a model's log records fail to replay").

No finite stream is known to fail a model (test_stream_fuzz.py), so the daemon's testing hook
--testing-fail-on-value V fails the model whose batch holds V, exactly where an estimator
failure would (Model::Ingest, and again when the record is replayed). Asserted:
  - the batch is refused with FAILED_PRECONDITION naming the record and the reason; the model
    says it failed in describe and list (ModelInfo.failure), its queries and further batches are
    refused the same way, and cmestream_model_failed{model} is 1 (0 for the others);
  - every other model keeps learning and answering, before and after;
  - restart after kill -9 (the failing record replayed from the log) and restart after a clean
    shutdown (the failure kept in the snapshot): the daemon starts, the model is still failed
    at the same record, the others have their state of before (digests) and go on;
  - deleting the model removes it, and a model of the same name can be created and fed again.
Environment (ctest): CMESTREAMD, CMESTREAM, PYTHONPATH.
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest
import urllib.request

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
CLI = os.environ.get("CMESTREAM", "cmestream")
POISON = 777.25


def trajectory(n, seed):
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for i in range(1, n):
        x[i] = 0.8 * x[i - 1] + rng.standard_normal()
    return x.reshape(-1, 1)


class ModelFailureTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cmestream-model-failure-")
        self.data = os.path.join(self.tmp, "data")
        self.args = ["--testing-fail-on-value", str(POISON), "--snapshot-interval", "0"]
        self.start()

    def tearDown(self):
        self.channel.close()
        self.daemon.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self):
        self.daemon = Daemon(DAEMON, self.data, extra_args=self.args, refresh_interval=3600).start()
        self.channel = grpc.insecure_channel(self.daemon.grpc_target)
        self.models = pb_grpc.ModelServiceStub(self.channel)
        self.ingest = pb_grpc.IngestServiceStub(self.channel)
        self.query = pb_grpc.QueryServiceStub(self.channel)

    def restart(self, kill):
        self.channel.close()
        if kill:
            self.daemon.process.send_signal(signal.SIGKILL)
            self.daemon.process.wait()
        self.daemon.stop()
        self.start()

    def send(self, name, rows, offset):
        return self.ingest.IngestOne(pb.IngestBatch(model=name, producer_id="p", offset=offset,
                                                    states=rows.ravel().tolist()), timeout=60)

    def describe(self, name):
        return self.models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30)

    def metric(self, name):
        text = urllib.request.urlopen(f"http://{self.daemon.metrics_target}/metrics", timeout=10).read().decode()
        m = re.search(r'^cmestream_model_failed\{model="%s"\} (\S+)$' % re.escape(name), text, re.M)
        return float(m.group(1)) if m else None

    def assert_failed_at(self, name, sequence):
        info = self.describe(name)
        self.assertTrue(info.HasField("failure"), f"{name} is not failed")
        self.assertEqual(info.failure.sequence, sequence)
        self.assertIn("testing-fail-on-value", info.failure.reason)
        for call in (lambda: self.query.GetKoopman(pb.KoopmanRequest(model=name), timeout=30),
                     lambda: self.query.Forecast(pb.ForecastRequest(model=name, horizon=1), timeout=30),
                     lambda: self.query.Refresh(pb.RefreshRequest(model=name, wait=True), timeout=30),
                     lambda: self.send(name, trajectory(20, 9), 10_000),
                     lambda: self.models.ExportModel(pb.ExportModelRequest(name=name), timeout=30)):
            with self.assertRaises(grpc.RpcError) as e:
                call()
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn(f"model '{name}' failed at WAL record {sequence}", e.exception.details())
        self.assertEqual(self.metric(name), 1.0)
        listed = self.models.ListModels(pb.ListModelsRequest(), timeout=30).models
        self.assertEqual([m.failure.sequence for m in listed if m.config.name == name], [sequence])

    def assert_healthy_and_learning(self, name, offset):
        before = self.describe(name)
        self.assertFalse(before.HasField("failure"))
        self.send(name, trajectory(301, offset)[:, :], offset)
        self.query.Refresh(pb.RefreshRequest(model=name, wait=True, timeout_seconds=120), timeout=150)
        after = self.describe(name)
        self.assertEqual(after.samples + after.pending_warmup, before.samples + before.pending_warmup + 300)
        self.query.GetKoopman(pb.KoopmanRequest(model=name, top=3), timeout=60)
        self.assertEqual(self.metric(name), 0.0)

    def test_a_failed_model_leaves_the_daemon_and_the_others_serving(self):
        for name in ("good", "bad", "late"):
            self.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
                name=name, dim=1, refresh_interval_seconds=3600)), timeout=30)
        x = trajectory(1500, 1)
        for name in ("good", "bad", "late"):
            self.send(name, x[:1201], 0)
        poisoned = x[1200:1401].copy()
        poisoned[57, 0] = POISON
        with self.assertRaises(grpc.RpcError) as e:
            self.send("bad", poisoned, 1200)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        failed_at = int(re.search(r"failed at WAL record (\d+)", e.exception.details()).group(1))
        self.assert_failed_at("bad", failed_at)
        listing = subprocess.run([CLI, "--server", self.daemon.grpc_target, "model", "list"],
                                 capture_output=True, text=True, timeout=30)
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertRegex(listing.stdout, r"bad .* FAILED: ")
        self.assert_healthy_and_learning("good", 1200)
        digests = {n: self.describe(n).state_digest for n in ("good", "late")}

        # kill -9: the failing record is replayed from the log and fails the model again.
        self.restart(kill=True)
        self.assert_failed_at("bad", failed_at)
        for n in ("good", "late"):
            self.assertEqual(self.describe(n).state_digest, digests[n])
        # Clean shutdown: the snapshot keeps the failure (with a fresh learner in its place).
        self.restart(kill=False)
        self.assert_failed_at("bad", failed_at)
        self.assertEqual(self.describe("late").state_digest, digests["late"])
        self.assert_healthy_and_learning("late", 1200)

        # Deletion removes it; the name can be used again.
        self.models.DeleteModel(pb.DeleteModelRequest(name="bad"), timeout=30)
        self.assertIsNone(self.metric("bad"))
        self.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
            name="bad", dim=1, refresh_interval_seconds=3600)), timeout=30)
        self.assert_healthy_and_learning("bad", 0)


if __name__ == "__main__":
    unittest.main()
