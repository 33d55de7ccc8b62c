"""Writes the files in this directory with a cmestreamd built BEFORE input scaling existed
(ModelConfig.scale, MODL version 5): the fixtures of
tests/integration/test_input_scaling_lifecycle.py test_files_written_before_input_scaling_load_unscaled.

    PYTHONPATH=<old build>/python:client/python /usr/bin/python3 \
        tests/integration/data/pre_scaling/make_fixtures.py <old build>/service/cmestreamd

Two models: "auto" (sigma auto, warm-up 100, ended) and "fixed" (sigma 0.5); 300 pairs each of a
2-channel stream with channel scales 235 and 0.03. Outputs: auto.export (ExportModel), wal_only/
(a data dir whose daemon was killed: the WAL replays), snapshot/ (a clean shutdown: a snapshot),
digests.json (the state digests the old daemon reported, and the pairs per model).
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.testing import Daemon, Stubs

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = 300


def populate(d):
    s = Stubs(d.grpc_target)
    try:
        s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
            name="auto", dim=2, auto_sigma_warmup=100, max_dict=30, rff_features=16)), timeout=30)
        s.models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
            name="fixed", dim=2, sigma=0.5, max_dict=30, rff_features=16)), timeout=30)
        rng = np.random.default_rng(1)
        v = np.zeros(2)
        states = np.empty((PAIRS + 1, 2))
        for t in range(PAIRS + 1):
            states[t] = [235.0 * v[0] + 1000.0, 0.03 * v[1] - 2.0]
            v = np.array([0.8 * v[0] - 0.4 * v[1], 0.4 * v[0] + 0.8 * v[1]]) + 0.3 * rng.standard_normal(2)
        for name in ("auto", "fixed"):
            for b in range(0, PAIRS, 100):
                s.ingest.IngestOne(pb.IngestBatch(model=name, producer_id="gen", offset=b, episode_id="e",
                                                  states=states[b:b + 101].ravel().tolist()), timeout=60)
        digests = {}
        for name in ("auto", "fixed"):
            info = s.models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30)
            digests[name] = info.state_digest
        image = s.models.ExportModel(pb.ExportModelRequest(name="auto"), timeout=30).data
        return digests, image
    finally:
        s.close()


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        outputs = {}
        for tree in ("wal_only", "snapshot"):
            data = os.path.join(tmp, tree)
            d = Daemon(binary, data, refresh_interval=3600, log_path=os.path.join(tmp, tree + ".log"),
                       extra_args=["--snapshot-interval", "0"])
            d.start()
            digests, image = populate(d)
            if tree == "wal_only":
                d.process.kill()
                d.process.wait()
                d.stop()
            else:
                assert d.stop() == 0
            outputs[tree] = digests
            shutil.rmtree(os.path.join(HERE, tree), ignore_errors=True)
            shutil.copytree(data, os.path.join(HERE, tree),
                            ignore=shutil.ignore_patterns("daemon.json", "LOCK", "*.lock"))
        assert outputs["wal_only"] == outputs["snapshot"], outputs
        with open(os.path.join(HERE, "auto.export"), "wb") as f:
            f.write(image)
        with open(os.path.join(HERE, "digests.json"), "w") as f:
            json.dump({**outputs["snapshot"], "pairs": PAIRS}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
