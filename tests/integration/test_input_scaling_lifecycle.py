"""Input scaling (ModelConfig.scale, docs/algorithms.md §1.13) across the daemon's lifecycle:
a scaled model whose warm-up an explicit refresh ended keeps its scaler and its state bit for
bit through WAL replay after kill -9, a clean restart from its snapshot and export/import; files
written before input scaling existed (committed under data/pre_scaling/) load unscaled with
their state digests unchanged.

Environment (ctest): CMESTREAMD, PYTHONPATH=<build>/python:client/python.
"""
import glob
import json
import os
import shutil
import struct
import tempfile
import time
import unittest

import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.testing import Daemon, Stubs

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "pre_scaling")
WAL_BATCH = 3  # WalRecordType::kBatch (service/storage/wal.h)


def chain(n, seed=0):
    """States 0..n of a 3-channel linear chain with channel scales 235, 0.03 and 1."""
    rng = np.random.default_rng(seed)
    v = np.zeros(3)
    out = np.empty((n + 1, 3))
    for t in range(n + 1):
        out[t] = [235.0 * v[0] + 1000.0, 0.03 * v[1] - 2.0, v[2]]
        v = np.array([0.8 * v[0] - 0.4 * v[1], 0.4 * v[0] + 0.8 * v[1], 0.9 * v[2]]) + 0.3 * rng.standard_normal(3)
    return out


def wal_batches(data):
    """The IngestBatch payloads of every WAL batch record, in order."""
    out = []
    for path in sorted(glob.glob(os.path.join(data, "wal", "*.log"))):
        raw = open(path, "rb").read()
        pos = 16 if raw[:8] == b"CMEWALSG" else 0
        while pos + 17 <= len(raw):
            length, = struct.unpack_from("<I", raw, pos + 4)
            if raw[pos + 8] == WAL_BATCH:
                b = pb.IngestBatch()
                b.ParseFromString(raw[pos + 17:pos + 17 + length])
                out.append(b)
            pos += 17 + length
    return out


class InputScalingLifecycleTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cmestream-scaling-")
        self.dir = self.tmp.name
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        self.tmp.cleanup()

    def start(self, data):
        d = Daemon(DAEMON, data, refresh_interval=3600,
                   log_path=os.path.join(self.dir, f"{os.path.basename(data)}-{time.monotonic_ns()}.log"),
                   extra_args=["--snapshot-interval", "0"])
        d.start()
        self.daemons.append(d)
        return d

    def kill9(self, d):
        d.process.kill()
        d.process.wait()
        d.stop()
        self.daemons.remove(d)

    def term(self, d):
        self.assertEqual(d.stop(), 0)
        self.daemons.remove(d)

    def call(self, d, f):
        s = Stubs(d.grpc_target)
        try:
            return f(s)
        finally:
            s.close()

    def ingest(self, d, name, states, first, last, chunk=50, producer="p"):
        def go(s):
            for b in range(first, last, chunk):
                e = min(last, b + chunk)
                s.ingest.IngestOne(pb.IngestBatch(model=name, producer_id=producer, offset=b, episode_id="e",
                                                  states=states[b:e + 1].ravel().tolist()), timeout=60)
        self.call(d, go)

    def info(self, d, name):
        return self.call(d, lambda s: s.models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True),
                                                          timeout=30))

    def state(self, d, name):
        i = self.info(d, name)
        return (i.state_digest, i.samples, i.pending_warmup, i.input_scaling.SerializeToString(),
                i.sigma_selection.SerializeToString())

    def test_scaler_and_early_warmup_survive_kill9_restart_and_export_import(self):
        data = os.path.join(self.dir, "a")
        d = self.start(data)
        self.call(d, lambda s: s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
            name="s", dim=3, auto_sigma_warmup=1000, max_dict=60, rff_features=32, lags=[1, 2])), timeout=30))
        x = chain(900, seed=4)
        self.ingest(d, "s", x, 0, 150)
        self.assertEqual(self.info(d, "s").pending_warmup, 150)
        self.call(d, lambda s: s.queries.Refresh(pb.RefreshRequest(model="s", wait=True), timeout=60))
        info = self.info(d, "s")
        self.assertEqual(info.config.scale, "auto")
        self.assertEqual(info.sigma_selection.warmup_pairs, 150)
        self.assertEqual(info.samples, 150)
        sc = info.input_scaling
        self.assertEqual(sc.mode, "auto")
        self.assertTrue(sc.frozen)
        # The scaler: median and IQR / 1.349 of the warm-up's x rows (states 0..149) and y rows
        # (states 1..150), numpy's default (type-7) quantiles.
        rows = np.concatenate([x[:150], x[1:151]])
        q25, q50, q75 = np.quantile(rows, [0.25, 0.5, 0.75], axis=0)
        np.testing.assert_allclose(sc.center, q50, rtol=1e-13)
        np.testing.assert_allclose(sc.scale, (q75 - q25) / 1.3489795003921634, rtol=1e-13)
        self.assertEqual(list(sc.spread), ["iqr"] * 3)
        # The log recorded the end of the warm-up as a marker without pairs, after the 3 batches.
        marks = [b.end_warmup for b in wal_batches(data)]
        self.assertEqual(marks, [False, False, False, True])
        self.ingest(d, "s", x, 150, 600)
        before = self.state(d, "s")
        self.assertEqual(before[1], 600)

        self.kill9(d)  # no snapshot: everything replays from the WAL, the marker included
        d = self.start(data)
        self.assertEqual(self.state(d, "s"), before)
        self.term(d)   # a shutdown snapshot
        d = self.start(data)
        self.assertEqual(self.state(d, "s"), before)

        image = self.call(d, lambda s: s.models.ExportModel(pb.ExportModelRequest(name="s"), timeout=30).data)
        other = self.start(os.path.join(self.dir, "b"))
        self.call(other, lambda s: s.models.ImportModel(pb.ImportModelRequest(data=image, name="t"), timeout=30))
        self.assertEqual(self.state(other, "t"), before)
        # Both continue alike, and still do after the importer's WAL replays the import.
        self.ingest(d, "s", x, 600, 900)
        self.ingest(other, "t", x, 600, 900)
        after = self.state(d, "s")
        self.assertEqual(self.state(other, "t"), after)
        self.kill9(other)
        other = self.start(os.path.join(self.dir, "b"))
        self.assertEqual(self.state(other, "t"), after)

        # Replies in the user's units: the atoms are states that were sent.
        self.call(d, lambda s: s.queries.Refresh(pb.RefreshRequest(model="s", wait=True), timeout=60))
        dic = self.call(d, lambda s: s.queries.GetDictionary(pb.DictionaryRequest(model="s"), timeout=30))
        atoms = np.array(dic.x_atoms).reshape(-1, 3)
        for a in atoms:
            err = np.min(np.max(np.abs(x - a) / np.array([235.0, 0.03, 1.0]), axis=1))
            self.assertLess(err, 1e-9)

    def test_files_written_before_input_scaling_load_unscaled(self):
        with open(os.path.join(FIXTURES, "digests.json")) as f:
            want = json.load(f)
        # An export file: imports unscaled, its digest unchanged, and keeps learning.
        d = self.start(os.path.join(self.dir, "imp"))
        image = open(os.path.join(FIXTURES, "auto.export"), "rb").read()
        self.call(d, lambda s: s.models.ImportModel(pb.ImportModelRequest(data=image), timeout=30))
        info = self.info(d, "auto")
        # `want` holds the digests the writing build reported. This build's learner state has a
        # part those files lack (the forecast regression, state version 6, restored empty), so
        # the digest after loading is that of the old state plus an empty regression: the same
        # for the export and the snapshot of one model (a replayed WAL learns it from pair 0).
        loaded = {"auto": info.state_digest}
        self.assertEqual(info.samples + info.pending_warmup, want["pairs"])
        self.assertFalse(info.config.HasField("scale"))
        self.assertEqual(info.input_scaling.mode, "none")
        self.assertFalse(info.input_scaling.frozen)
        # Data directories: the WAL of a killed daemon (replayed) and a shutdown snapshot.
        for tree in ("wal_only", "snapshot"):
            data = os.path.join(self.dir, tree)
            shutil.copytree(os.path.join(FIXTURES, tree), data)
            d = self.start(data)
            for name in ("auto", "fixed"):
                info = self.info(d, name)
                if tree == "snapshot":  # a replayed WAL learns the regression from its first pair
                    self.assertEqual(info.state_digest, loaded.setdefault(name, info.state_digest), (tree, name))
                self.assertEqual(info.samples + info.pending_warmup, want["pairs"], (tree, name))
                self.assertEqual(info.input_scaling.mode, "none", (tree, name))
            x = chain(100, seed=9)
            self.ingest(d, "auto", x[:, :2].copy(), 0, 100, producer="later")
            self.assertEqual(self.info(d, "auto").samples + self.info(d, "auto").pending_warmup, want["pairs"] + 100)


if __name__ == "__main__":
    unittest.main()
