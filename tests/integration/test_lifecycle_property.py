"""Property test of durability: a seeded random sequence of create / ingest / delete / import /
refresh / snapshot / clean restart / kill -9 (between calls and in the middle of a batch) against
a daemon under test, while a reference daemon that never restarts receives exactly what the
daemon under test acknowledged. After every restart, and at the end, both must hold the same
models with the same full state digests (every byte a snapshot keeps).

    CMESTREAM_LIFECYCLE_STEPS   steps (default 150 in CI; the `lifecycle_property_long` ctest
                                target runs 1500)
    CMESTREAM_LIFECYCLE_SEED    seed (default 7); a failure prints the seed and the step

Environment (ctest): CMESTREAMD, PYTHONPATH=<build>/python:client/python.
"""
import os
import random
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
STEPS = int(os.environ.get("CMESTREAM_LIFECYCLE_STEPS", "150"))
SEED = int(os.environ.get("CMESTREAM_LIFECYCLE_SEED", "7"))

CONFIGS = [
    dict(dim=2, sigma=0.6, max_dict=40),
    dict(dim=2, auto_sigma_warmup=150, max_dict=40, rff_features=32),       # sigma auto
    dict(dim=1, sigma=0.4, max_dict=30, latent_states=2, rff_features=16, window=2, reservoir=500),
    dict(num_states=6, meta_states=2, window=2),                               # discrete
    dict(dim=2, sigma=0.5, max_dict=30, forgetting=0.999, averaging=True, rff_features=16),
    # Delay embedding (trajectories of raw rows only; some batches after a gap) and input
    # scaling (sigma auto), with the change alarms every model has by default.
    dict(dim=2, delays=3, delay_stride=2, auto_sigma_warmup=120, max_dict=30, rff_features=16),
    dict(dim=3, alarms="off", auto_sigma_warmup=100, max_dict=30, rff_features=16),
    dict(dim=6, reduce=3, auto_sigma_warmup=60, max_dict=30, rff_features=16),  # input reduction
]


class Node:
    def __init__(self, data, log_dir, extra):
        self.data, self.log_dir, self.extra = data, log_dir, extra
        self.daemon = None
        self.channel = None

    def start(self):
        self.daemon = Daemon(DAEMON, self.data, refresh_interval=0.3,
                             log_path=os.path.join(self.log_dir, f"{os.path.basename(self.data)}-{time.monotonic_ns()}.log"),
                             extra_args=self.extra).start()
        self.channel = grpc.insecure_channel(self.daemon.grpc_target)
        self.models = pb_grpc.ModelServiceStub(self.channel)
        self.ingest = pb_grpc.IngestServiceStub(self.channel)
        self.queries = pb_grpc.QueryServiceStub(self.channel)

    def stop(self, kill=False):
        self.channel.close()
        if kill:
            self.daemon.process.kill()
            self.daemon.process.wait()
        code = self.daemon.stop()
        self.daemon = None
        return code

    def digests(self):
        out = {}
        for m in self.models.ListModels(pb.ListModelsRequest(), timeout=30).models:
            info = self.models.GetModel(pb.GetModelRequest(name=m.config.name, with_state_digest=True), timeout=30)
            out[m.config.name] = (info.state_digest, info.samples + info.pending_warmup)
        return out


class LifecyclePropertyTest(unittest.TestCase):
    def test_random_lifecycle_against_an_oracle(self):
        rng = random.Random(SEED)
        nrng = np.random.default_rng(SEED)
        with tempfile.TemporaryDirectory(prefix="cmestream-prop-") as tmp:
            sut = Node(os.path.join(tmp, "sut"), tmp, ["--snapshot-interval", "0.7"])
            ref = Node(os.path.join(tmp, "ref"), tmp, ["--snapshot-interval", "0"])
            sut.start()
            ref.start()

            def kill_left_over():  # a failed assertion must not leave the daemons running
                for node in (sut, ref):
                    if node.daemon is not None:
                        node.daemon.process.kill()
                        node.daemon.process.wait()
            self.addCleanup(kill_left_over)
            models = {}     # name -> config index
            offsets = {}    # (name, producer) -> applied offset
            counter = [0]
            tally = {}

            def check(step, why):
                got, want = sut.digests(), ref.digests()
                self.assertEqual(got, want, f"seed {SEED} step {step} after {why}")

            def batch(name, producer):
                cfg = CONFIGS[models[name]]
                n = rng.randint(5, 120)
                if "num_states" in cfg:
                    ids = nrng.integers(0, cfg["num_states"], size=n + 1).tolist()
                    kw = dict(state_ids=ids) if rng.random() < 0.5 else dict(x_ids=ids[:-1], y_ids=ids[1:])
                else:
                    d = cfg["dim"]
                    s = np.cumsum(nrng.normal(0, 0.3, size=(n + 1, d)), axis=0) % 4 - 2
                    if "delays" in cfg:  # raw rows, a gap now and then (a new episode)
                        kw = dict(states=s.ravel().tolist(), episode_id=f"e{producer}", gap=rng.random() < 0.2)
                    else:
                        kw = (dict(states=s.ravel().tolist(), episode_id=f"e{producer}") if rng.random() < 0.5
                              else dict(x=s[:-1].ravel().tolist(), y=s[1:].ravel().tolist()))
                off = offsets.get((name, producer), 0)
                return pb.IngestBatch(model=name, producer_id=producer, offset=off, **kw), n

            def restart(kill):
                code = sut.stop(kill=kill)
                if not kill:
                    self.assertEqual(code, 0)
                sut.start()

            for step in range(STEPS):
                r = rng.random()
                if not models or (r < 0.08 and len(models) < 5):
                    op = "create"
                    counter[0] += 1
                    # Round robin from a seeded start: every config appears within len(CONFIGS) creations.
                    name, idx = f"m{counter[0]}", (counter[0] - 1 + SEED) % len(CONFIGS)
                    req = pb.CreateModelRequest(config=pb.ModelConfig(name=name, seed=counter[0], **CONFIGS[idx]))
                    sut.models.CreateModel(req, timeout=30)
                    ref.models.CreateModel(req, timeout=30)
                    models[name] = idx
                    tally[f"config {idx}"] = tally.get(f"config {idx}", 0) + 1
                elif r < 0.60:
                    op = "ingest"
                    name, producer = rng.choice(sorted(models)), rng.choice(["a", "b"])
                    b, n = batch(name, producer)
                    ack = sut.ingest.IngestOne(b, timeout=60)
                    ref.ingest.IngestOne(b, timeout=60)
                    offsets[(name, producer)] = ack.producer_offset
                elif r < 0.66:
                    op = "kill-mid-batch"
                    name, producer = rng.choice(sorted(models)), rng.choice(["a", "b"])
                    b, n = batch(name, producer)
                    before = offsets.get((name, producer), 0)
                    t = threading.Thread(target=lambda: self._try(sut.ingest.IngestOne, b))
                    t.start()
                    time.sleep(rng.uniform(0, 0.004))
                    sut.stop(kill=True)
                    t.join()
                    sut.start()
                    applied = sut.ingest.GetProducer(pb.GetProducerRequest(model=name, producer_id=producer),
                                                     timeout=30).applied_offset
                    self.assertIn(applied, (before, before + n), f"seed {SEED} step {step}")
                    if applied == before + n:  # durable, so possibly acknowledged: the oracle has it too
                        ref.ingest.IngestOne(b, timeout=60)
                        offsets[(name, producer)] = applied
                    check(step, op)
                elif r < 0.69 and len(models) > 1:
                    op = "delete"
                    name = rng.choice(sorted(models))
                    sut.models.DeleteModel(pb.DeleteModelRequest(name=name), timeout=30)
                    ref.models.DeleteModel(pb.DeleteModelRequest(name=name), timeout=30)
                    del models[name]
                    for key in [k for k in offsets if k[0] == name]:
                        del offsets[key]
                elif r < 0.74 and len(models) < 6:
                    op = "import"
                    src = rng.choice(sorted(models))
                    image = ref.models.ExportModel(pb.ExportModelRequest(name=src), timeout=30).data
                    counter[0] += 1
                    name = f"m{counter[0]}"
                    sut.models.ImportModel(pb.ImportModelRequest(data=image, name=name), timeout=30)
                    ref.models.ImportModel(pb.ImportModelRequest(data=image, name=name), timeout=30)
                    models[name] = models[src]
                    for (m, p), o in list(offsets.items()):
                        if m == src:
                            offsets[(name, p)] = o
                elif r < 0.80:
                    op = "refresh"
                    name = rng.choice(sorted(models))
                    # Both nodes: an explicit refresh of a model in its sigma warm-up (>= 50
                    # pairs) ends the warm-up, a logged state change (docs/algorithms.md §1.13).
                    for node in (sut, ref):
                        try:
                            node.queries.Refresh(pb.RefreshRequest(model=name, wait=True, timeout_seconds=30),
                                                 timeout=60)
                        except grpc.RpcError as e:  # a model without data has nothing to refresh
                            self.assertIn(e.code(), (grpc.StatusCode.FAILED_PRECONDITION,))
                elif r < 0.85:
                    op = "snapshot"
                    sut.models.Snapshot(pb.SnapshotRequest(), timeout=60)
                elif r < 0.93:
                    op = "restart"
                    restart(kill=False)
                    check(step, op)
                else:
                    op = "kill9"
                    restart(kill=True)
                    check(step, op)
                tally[op] = tally.get(op, 0) + 1
            check(STEPS, "the end")
            print(f"\nlifecycle property: seed {SEED}, {STEPS} steps: {sorted(tally.items())}", flush=True)
            self.assertEqual(sut.stop(), 0)
            ref.stop()

    @staticmethod
    def _try(call, batch):
        try:
            call(batch, timeout=30)
        except grpc.RpcError:
            pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
