"""Golden replies: every query of two models (continuous and discrete, every estimator on) fed a
fixed stream, compared byte for byte with the replies recorded at a reference commit, with one
ingest thread and with two.

What it guards: refactors that must not change behaviour (CONTRIBUTING.md "Adding an
estimator"): a reply that changes by one bit fails here, naming the RPC and showing its text.
Fields that measure wall time (ages, build seconds, fit-summary timings, brief reports that
quote them, creation time) are cleared before hashing; everything else counts.

When a change is meant to change replies, re-record with
    CMESTREAMD=build/service/cmestreamd PYTHONPATH=build/python /usr/bin/python3 \
        tests/integration/test_view_replies_golden.py --record
and say in the commit which replies changed and why.

Environment (ctest): CMESTREAMD, PYTHONPATH as the others.
"""
import hashlib
import json
import os
import sys
import tempfile
import unittest

import grpc
import numpy as np
from google.protobuf import text_format

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "view_replies.json")
PAIRS = 3500
FIRST_PHASE = 2000
BATCH = 250


def scrub(msg):
    """Clears the fields that measure wall time, recursively."""
    for field, value in list(msg.ListFields()):
        name = field.name
        if "seconds" in name or name in ("age_seconds", "brief_report"):
            msg.ClearField(name)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is None:
                for key in [k for k in value if "seconds" in k]:
                    del value[key]
            else:
                for v in value.values():
                    scrub(v)
        elif field.message_type is not None:
            if field.label == field.LABEL_REPEATED:
                for v in value:
                    scrub(v)
            else:
                scrub(value)
    return msg


def four_well_trajectory(n, seed):
    """A 2-d diffusion in a four-well potential (Euler-Maruyama), deterministic per seed."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 2))
    x[0] = (-1.0, -1.0)
    dt = 0.01
    for t in range(1, n):
        p = x[t - 1]
        grad = 4 * p * (p * p - 1)
        x[t] = p - grad * dt + np.sqrt(2 * 0.35 * dt) * rng.standard_normal(2) * 3
    return x


def discrete_trajectory(n, seed):
    """A 6-state chain with two metastable triples."""
    rng = np.random.default_rng(seed)
    T = np.full((6, 6), 0.02)
    for block in ((0, 1, 2), (3, 4, 5)):
        for i in block:
            for j in block:
                T[i, j] = 0.3
    T /= T.sum(axis=1, keepdims=True)
    s = [0]
    for _ in range(n - 1):
        s.append(int(rng.choice(6, p=T[s[-1]])))
    return np.array(s)


def collect(target):
    ch = grpc.insecure_channel(target)
    models = pb_grpc.ModelServiceStub(ch)
    ingest = pb_grpc.IngestServiceStub(ch)
    query = pb_grpc.QueryServiceStub(ch)
    models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
        name="c", dim=2, dt=0.01, meta_states=3, latent_states=3, window=2, rank=4, clusters=4,
        lags=[1, 2, 4], auto_sigma_warmup=500, refresh_interval_seconds=3600, reservoir=2000,
        alarms="off")), timeout=30)
    models.CreateModel(pb.CreateModelRequest(config=pb.ModelConfig(
        name="d", num_states=6, meta_states=2, window=2, clusters=2, lags=[1, 2],
        refresh_interval_seconds=3600, alarms="off")), timeout=30)
    x = four_well_trajectory(PAIRS + 1, 3)
    s = discrete_trajectory(PAIRS + 1, 4)
    # Two phases with a refresh between: the first view's scorer then scores the second phase,
    # so the replies carry a held-out score too.
    for off in range(0, PAIRS, BATCH):
        if off == FIRST_PHASE:
            for name in ("c", "d"):
                query.Refresh(pb.RefreshRequest(model=name, wait=True, timeout_seconds=120), timeout=150)
        rows = x[off:off + BATCH + 1]
        ingest.IngestOne(pb.IngestBatch(model="c", producer_id="p", offset=off,
                                        states=rows.ravel().tolist()), timeout=60)
        ingest.IngestOne(pb.IngestBatch(model="d", producer_id="p", offset=off,
                                        state_ids=s[off:off + BATCH + 1].tolist()), timeout=60)
    replies = {}
    points = [-1.0, -1.0, 1.0, 1.0, 0.5, -0.5]
    for name, calls in (
        ("c", [("GetKoopman", pb.KoopmanRequest(model="c", top=6, points=points)),
               ("Predict", pb.PredictRequest(model="c", points=points)),
               ("GetDictionary", pb.DictionaryRequest(model="c")),
               ("GetCounts", pb.CountsRequest(model="c")),
               ("GetEmbedding", pb.EmbeddingRequest(model="c", points=points)),
               ("GetClusters", pb.ClustersRequest(model="c")),
               ("GetClustersAt", pb.ClustersRequest(model="c", points=points)),
               ("GetLatentAt", pb.LatentRequest(model="c", points=points)),
               ("GetAggregation", pb.AggregationRequest(model="c")),
               ("GetLatent", pb.LatentRequest(model="c")),
               ("Forecast", pb.ForecastRequest(model="c", window=x[-3:].ravel().tolist(), horizon=3)),
               ("GetTimescales", pb.TimescalesRequest(model="c")),
               ("CkTest", pb.CkTestRequest(model="c")),
               ("CkTest3", pb.CkTestRequest(model="c", clusters=3))]),
        ("d", [("GetCounts", pb.CountsRequest(model="d")),
               ("GetEmbedding", pb.EmbeddingRequest(model="d", state_ids=[0, 3, 5])),
               ("GetClustersAt", pb.ClustersRequest(model="d", state_ids=[0, 3, 5])),
               ("GetClusters", pb.ClustersRequest(model="d")),
               ("GetAggregation", pb.AggregationRequest(model="d")),
               ("Forecast", pb.ForecastRequest(model="d", window_ids=s[-3:].tolist(), horizon=2)),
               ("GetTimescales", pb.TimescalesRequest(model="d")),
               ("CkTest", pb.CkTestRequest(model="d"))])):
        query.Refresh(pb.RefreshRequest(model=name, wait=True, timeout_seconds=120), timeout=150)
        for rpc, req in calls:
            key = f"{name}.{rpc}"
            method = getattr(query, rpc.rstrip("3").replace("At", ""))
            try:
                reply = scrub(method(req, timeout=60))
                replies[key] = text_format.MessageToString(reply, float_format=".17g")
            except grpc.RpcError as e:
                replies[key] = f"error {e.code().name}: {e.details()}"
        info = scrub(models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30))
        replies[f"{name}.GetModel"] = text_format.MessageToString(info, float_format=".17g")
    return replies


def run_daemon_and_collect(ingest_threads=1, helper_threads=None):
    args = ["--ingest-threads", str(ingest_threads)]
    if helper_threads is not None:
        args += ["--helper-threads", str(helper_threads)]
    with tempfile.TemporaryDirectory(prefix="cmestream-golden-") as tmp:
        with Daemon(DAEMON, os.path.join(tmp, "data"), extra_args=args) as d:
            return collect(d.grpc_target)


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


class GoldenRepliesTest(unittest.TestCase):
    def test_replies_equal_the_recorded_ones(self):
        with open(GOLDEN) as f:
            golden = json.load(f)
        replies = run_daemon_and_collect()
        self.assertEqual(sorted(replies), sorted(golden["digests"]), "the set of replies changed")
        changed = [k for k in sorted(replies) if digest(replies[k]) != golden["digests"][k]]
        for k in changed:
            print(f"--- {k} now:\n{replies[k][:4000]}", file=sys.stderr)
        self.assertEqual(changed, [], "replies differ from the recorded ones (text above)")

    def test_two_ingest_threads_give_the_same_replies_and_digests(self):
        # The ingest pool runs different models at once, never one model's batches out of order,
        # so every reply, the state digests included, is the one-thread reply.
        with open(GOLDEN) as f:
            golden = json.load(f)
        replies = run_daemon_and_collect(ingest_threads=2)
        changed = [k for k in sorted(replies) if digest(replies[k]) != golden["digests"][k]]
        self.assertEqual(changed, [], "replies with 2 ingest threads differ from the recorded ones")

    def test_helper_threads_change_no_reply_and_no_digest(self):
        # A model's learner splits its work with the helper threads (docs/algorithms.md §9.3);
        # the recorded replies were taken with the default (helpers on): the same without them,
        # and with two helpers.
        with open(GOLDEN) as f:
            golden = json.load(f)
        for helpers in (0, 2):
            replies = run_daemon_and_collect(helper_threads=helpers)
            changed = [k for k in sorted(replies) if digest(replies[k]) != golden["digests"][k]]
            self.assertEqual(changed, [], f"replies with --helper-threads {helpers} differ from the recorded ones")


if __name__ == "__main__":
    if "--record" in sys.argv:
        replies = run_daemon_and_collect()
        with open(GOLDEN, "w") as f:
            json.dump({"pairs": PAIRS, "digests": {k: digest(v) for k, v in sorted(replies.items())}}, f, indent=1)
            f.write("\n")
        for k, v in sorted(replies.items()):
            print(f"{k}: {len(v)} chars, {'error' if v.startswith('error') else 'ok'}: {v[:100]!r}")
        sys.exit(0)
    unittest.main(verbosity=2)
