"""Golden replies: every query of two models (continuous and discrete, every estimator on) fed a
fixed stream, compared with the replies recorded at a reference commit.

What it guards: refactors that must not change behaviour (CONTRIBUTING.md "Adding an
estimator"). The golden file (golden/view_replies.json) holds the replies' numbers themselves,
and a reply is compared field by field:

  * within a stated tolerance for floating-point numbers (TOLERANCES below, with the reason for
    each): the last bits of a reply follow the processor, not only the code. Eigen sizes a
    matrix product's blocks from the cache sizes cpuid reports, and the blocks set the order of
    its sums (Eigen/src/Core/products/GeneralBlockPanelKernel.h); a machine with other caches
    gives other roundings, which the online learner carries on. A refactor that changes
    behaviour moves numbers by far more than rounding does;
  * exactly for everything discrete: counts, sizes, versions, labels and cluster assignments,
    partitions, ids, flags, strings (a number written inside a string is compared like a
    number), which fields are present and how many values each holds.

A failure names the reply, the field path, both values and by how much it moved.

What is promised bit for bit is checked bit for bit, within one run of this test on one machine:
two ingest threads and helper threads 0 and 2 give the very replies (text at 17 digits) and the
very state digests of the one-thread daemon started in the same test. (Restart and replay
continuing bit for bit are other tests: test_lifecycle.py, test_fault_kill.py, ...). The state
digest is a hash of the learner's bytes, so it is only compared within a run, never with the
golden file.

test_replies_within_tolerance_under_other_cache_sizes shows that the tolerances cover other
processors: the daemon runs with Eigen's cache sizes set to two other machines' values (the
testing knob CMESTREAM_EIGEN_CACHE_SIZES, service/README.md) and must match the golden file.

Fields that measure wall time (ages, build seconds, fit-summary timings, brief reports that
quote them, creation time) are left out; everything else counts.

When a change is meant to change replies, re-record with
    CMESTREAMD=build/service/cmestreamd PYTHONPATH=build/python:client/python /usr/bin/python3 \
        tests/integration/test_view_replies_golden.py --record
and say in the commit which replies changed and why (`git diff` of the JSON shows it).

Environment (ctest): CMESTREAMD, PYTHONPATH as the others.
"""
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import unittest

import grpc
import numpy as np
from google.protobuf import descriptor
from google.protobuf import text_format

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc
from cmestream.testing import Daemon

DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "view_replies.json")
PAIRS = 3500
FIRST_PHASE = 2000
BATCH = 250

# Two other processors' cache sizes (L1d, L2, L3 in bytes, as Eigen reads them from cpuid) for
# test_replies_within_tolerance_under_other_cache_sizes. Eigen's product blocking takes its depth
# block kc from L1 (and row blocks from L2/L3), so these split the sums of the longer products
# differently from this machine: Eigen's own defaults (32 KiB L1d: they reproduce, bit for bit,
# the replies of the machine that recorded the old digests) and a small cache that splits them
# more (kc = 56 instead of 248 or none).
OTHER_CACHE_SIZES = ("32K,256K,2M", "8K,128K,1M")

# Tolerances for floating-point fields: (pattern on the field path, rtol, atol). The first
# pattern that matches the path (reply key, then field names, list indexes left out, e.g.
# "c.GetKoopman.eigenvalues") wins. A number passes when |got - want| <= atol + rtol * scale,
# where scale is |want| for a single number and the largest |want| of the list for a repeated
# field (normwise: products and factorizations are accurate relative to the size of the whole
# vector or matrix, not of each tiny entry). A complex number is compared as one number.
# NaN must stay NaN and an infinity the same infinity. What other cache sizes moved (L1 8-64 KiB
# against this machine's 48 KiB): eigenfunctions 2e-9 (normwise), periods and rates 4e-11, all
# else at most 5e-12 relative (eigenvalues 3e-12); inverse_drift 3e-11 absolute; every discrete
# field: nothing.
TOLERANCES = [
    # The inverse drift max ||R (G + gamma I) R^T - I|| measures accumulated rounding itself
    # (~6e-8 here): processors differ by a good part of it. What the learner does with it is
    # compare it with drift_tolerance (1e-3) to refactorize: absolute 1e-6, 1000x below that.
    (r"\.inverse_drift$", 0.0, 1e-6),
    # Koopman eigenfunctions: an eigenvector moves by the eigenvalue's error over the gap to the
    # nearest other eigenvalue, and the leading ones are close (the complex pair's members
    # 0.0066 apart, the 5th and 6th 0.0077): ~150x the eigenvalues' 3e-12, 2e-9 seen.
    # Implied timescales t = -dt / ln|mu|, rates ln(mu) / dt, periods 2 pi dt / |arg mu|, their
    # jackknife errors, the cross-view comparison of timescales and the CK test's deviations: a
    # relative change e of mu moves t by e / |ln|mu|| (up to ~100x for the slow modes here), a
    # period by e / |arg mu|, and a jackknife s.e. or a deviation is a difference of nearly equal
    # estimates (cancellation). 1e-6 for all of these: still far below any change of an
    # estimator (2nd-4th digit).
    (r"(eigenfunctions\.values|timescales|timescale|rates|stderr|periods|lag_scan|comparison\.\w+|"
     r"max_deviation\w*)$", 1e-6, 1e-12),
    # Everything else (eigenvalues, eigenfunctions, embeddings and singular values, forecasts,
    # predictions, probabilities, cluster weights and transition matrices, scores, fit figures):
    # rounding of the sums carried through 3500 learning steps moved them by <= 5e-12; 1e-8
    # leaves a 1000x margin and still catches a change of behaviour (3rd-6th digit).
    (r"", 1e-8, 1e-12),
]

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)


def skipped(name):
    """Fields that measure wall time (left out of every comparison)."""
    return "seconds" in name or name in ("age_seconds", "brief_report")


def scrub(msg):
    """Clears the fields that measure wall time, recursively."""
    for field, value in list(msg.ListFields()):
        name = field.name
        if skipped(name):
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


def number(x):
    """A double for JSON: finite as is, else "nan" / "inf" / "-inf"."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def scalar(field, value):
    if field.type in (descriptor.FieldDescriptor.TYPE_DOUBLE, descriptor.FieldDescriptor.TYPE_FLOAT):
        return number(value)
    if field.type == descriptor.FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def to_tree(msg, drop=("state_digest",)):
    """A (scrubbed) message as JSON values: every field, defaults included (a number that becomes
    0 stays compared), sub-messages when set, maps by key, doubles as floats. Fields named in
    `drop` are left out (the state digest: a hash of bits, see the module doc)."""
    out = {}
    for field in msg.DESCRIPTOR.fields:
        name = field.name
        if skipped(name) or name in drop:
            continue
        value = getattr(msg, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            vfield = field.message_type.fields_by_name["value"]
            out[name] = {str(k): (to_tree(v, drop) if vfield.message_type else scalar(vfield, v))
                         for k, v in sorted(value.items()) if "seconds" not in str(k)}
        elif field.label == field.LABEL_REPEATED:
            out[name] = [to_tree(v, drop) if field.message_type else scalar(field, v) for v in value]
        elif field.message_type is not None:
            if msg.HasField(name):
                out[name] = to_tree(value, drop)
        else:
            try:
                present = msg.HasField(name)  # proto3 `optional`: unset stays absent
            except ValueError:
                present = True  # no presence: the value (default or not) counts
            if present:
                out[name] = scalar(field, value)
    return out


def tolerance(path):
    bare = re.sub(r"\[\d+\]", "", path)
    for pattern, rtol, atol in TOLERANCES:
        if re.search(pattern, bare):
            return rtol, atol
    raise AssertionError(path)


def as_float(x):
    """The float a JSON value stands for, or None when it is not a double."""
    if isinstance(x, float):
        return x
    if x in ("nan", "inf", "-inf"):
        return float(x)
    return None


def is_complex(x):
    return isinstance(x, dict) and set(x) == {"re", "im"}


def close(got, want, scale, path):
    """None when `got` is within the tolerance of `path` of `want`, else what moved."""
    rtol, atol = tolerance(path)
    if math.isnan(want) or math.isinf(want) or math.isnan(got) or math.isinf(got):
        same = (math.isnan(want) and math.isnan(got)) or got == want
        return None if same else f"{want!r} -> {got!r}"
    diff = abs(got - want)
    if diff <= atol + rtol * scale:
        return None
    rel = diff / abs(want) if want else math.inf
    return f"{want!r} -> {got!r} (moved {diff:.3g}, relative {rel:.3g}; allowed {atol:g} + {rtol:g} x {scale:.3g})"


def as_complex(x):
    return complex(as_float(x["re"]), as_float(x["im"]))


def magnitude(x):
    """|x| of a double or a complex number of the tree (None for anything else or not finite)."""
    if is_complex(x):
        z = as_complex(x)
        return abs(z) if math.isfinite(z.real) and math.isfinite(z.imag) else None
    v = as_float(x)
    return abs(v) if v is not None and math.isfinite(v) else None


def compare(got, want, path, problems, scale=None):
    """Appends to `problems` every difference between two trees beyond the tolerances; `scale`:
    the largest magnitude of the list a number belongs to (default: its own)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if is_complex(want) and is_complex(got):
            w, g = as_complex(want), as_complex(got)
            if any(math.isnan(v) or math.isinf(v) for v in (w.real, w.imag, g.real, g.imag)):
                compare(got["re"], want["re"], path + ".re", problems)
                compare(got["im"], want["im"], path + ".im", problems)
                return
            rtol, atol = tolerance(path)
            scale = abs(w) if scale is None else scale
            if abs(g - w) > atol + rtol * scale:
                problems.append(f"{path}: {w} -> {g} (moved {abs(g - w):.3g}; allowed {atol:g} + {rtol:g} x {scale:.3g})")
            return
        for key in sorted(set(want) | set(got)):
            if key not in got:
                problems.append(f"{path}.{key}: gone (was {json.dumps(want[key])[:200]})")
            elif key not in want:
                problems.append(f"{path}.{key}: new (now {json.dumps(got[key])[:200]})")
            else:
                compare(got[key], want[key], f"{path}.{key}", problems)
        return
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            problems.append(f"{path}: {len(want)} values -> {len(got)}")
            return
        scale = max((m for m in map(magnitude, want) if m is not None), default=0.0)
        for i, (g, w) in enumerate(zip(got, want)):
            gf, wf = as_float(g), as_float(w)
            if gf is not None and wf is not None:
                moved = close(gf, wf, scale, path)
                if moved:
                    problems.append(f"{path}[{i}]: {moved}")
            else:
                compare(g, w, f"{path}[{i}]", problems, scale if is_complex(w) else None)
        return
    gf, wf = as_float(got), as_float(want)
    if gf is not None and wf is not None:
        moved = close(gf, wf, abs(wf) if math.isfinite(wf) else 0.0, path)
        if moved:
            problems.append(f"{path}: {moved}")
        return
    if isinstance(want, str) and isinstance(got, str):
        # Text that quotes numbers (warnings, notes, formulas): the words exactly, the numbers
        # like numbers.
        wn, gn = _NUMBER.findall(want), _NUMBER.findall(got)
        if _NUMBER.sub("#", want) != _NUMBER.sub("#", got) or len(wn) != len(gn):
            problems.append(f"{path}: {want!r} -> {got!r}")
            return
        for w, g in zip(wn, gn):
            if w == g:
                continue
            if not (re.search(r"[.eEnN]", w) or re.search(r"[.eEnN]", g)):
                problems.append(f"{path}: {want!r} -> {got!r} (integer {w} -> {g})")
                return
            moved = close(float(g), float(w), abs(float(w)), path)
            if moved:
                problems.append(f"{path}: {want!r} -> {got!r} ({moved})")
                return
        return
    if type(got) is not type(want) or got != want:
        problems.append(f"{path}: {json.dumps(want)} -> {json.dumps(got)}")


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


class Error:
    """An RPC that failed: compared by its code and message."""

    def __init__(self, e):
        self.text = f"error {e.code().name}: {e.details()}"


def collect(target):
    """Every reply, scrubbed, by key ("c.GetKoopman", ...): messages, or Error."""
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
                replies[key] = scrub(method(req, timeout=60))
            except grpc.RpcError as e:
                replies[key] = Error(e)
        replies[f"{name}.GetModel"] = scrub(
            models.GetModel(pb.GetModelRequest(name=name, with_state_digest=True), timeout=30))
    ch.close()
    return replies


def texts(replies):
    """Each reply's full text at 17 digits, state digest included: the bits."""
    return {k: v.text if isinstance(v, Error) else text_format.MessageToString(v, float_format=".17g")
            for k, v in replies.items()}


def trees(replies):
    """Each reply as the golden file stores it."""
    return {k: {"error": v.text} if isinstance(v, Error) else to_tree(v) for k, v in replies.items()}


@contextlib.contextmanager
def environment(name, value):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_daemon_and_collect(ingest_threads=1, helper_threads=None, eigen_cache_sizes=None):
    """Replies of a fresh daemon; with `eigen_cache_sizes` the daemon's log must say it used them."""
    args = ["--ingest-threads", str(ingest_threads)]
    if helper_threads is not None:
        args += ["--helper-threads", str(helper_threads)]
    with tempfile.TemporaryDirectory(prefix="cmestream-golden-") as tmp:
        log = os.path.join(tmp, "cmestreamd.log")
        with environment("CMESTREAM_EIGEN_CACHE_SIZES", eigen_cache_sizes):
            with Daemon(DAEMON, os.path.join(tmp, "data"), log_path=log, extra_args=args) as d:
                replies = collect(d.grpc_target)
        with open(log, errors="replace") as f:
            text = f.read()
        if eigen_cache_sizes is not None and "CMESTREAM_EIGEN_CACHE_SIZES" not in text:
            raise AssertionError(f"the daemon did not report Eigen's cache sizes {eigen_cache_sizes}; log:\n{text[-2000:]}")
        return replies


def differences(got, golden):
    """Every field of every reply beyond its tolerance, as lines."""
    problems = []
    if sorted(got) != sorted(golden):
        problems.append(f"the set of replies changed: {sorted(set(golden) - set(got))} gone, "
                        f"{sorted(set(got) - set(golden))} new")
    for key in sorted(set(got) & set(golden)):
        compare(got[key], golden[key], key, problems)
    return problems


def load_golden():
    with open(GOLDEN) as f:
        return json.load(f)["replies"]


_REFERENCE = {}


def reference():
    """The one-thread daemon's replies, once per run of this file (the bitwise tests compare with it)."""
    if not _REFERENCE:
        _REFERENCE.update(run_daemon_and_collect())
    return _REFERENCE


class GoldenRepliesTest(unittest.TestCase):
    maxDiff = None

    def assertMatchesGolden(self, replies, what):
        problems = differences(trees(replies), load_golden())
        for line in problems[:200]:
            print(f"  {line}", file=sys.stderr)
        self.assertEqual(problems, [], f"{what}: {len(problems)} fields differ from the recorded replies beyond "
                                       f"their tolerance (lines above: reply.field: recorded -> now)")

    def assertSameBits(self, replies, what):
        ref, now = texts(reference()), texts(replies)
        self.assertEqual(sorted(now), sorted(ref), f"{what}: the set of replies changed")
        changed = [k for k in sorted(now) if now[k] != ref[k]]
        for k in changed:
            print(f"--- {k} one thread:\n{ref[k][:3000]}\n--- {k} {what}:\n{now[k][:3000]}", file=sys.stderr)
        self.assertEqual(changed, [], f"{what}: replies differ in their bits from the one-thread daemon's (text above)")

    def test_replies_equal_the_recorded_ones(self):
        self.assertMatchesGolden(reference(), "one ingest thread")

    def test_two_ingest_threads_give_the_same_replies_and_digests(self):
        # The ingest pool runs different models at once, never one model's batches out of order,
        # so every reply, the state digests included, is the one-thread reply, bit for bit.
        self.assertSameBits(run_daemon_and_collect(ingest_threads=2), "two ingest threads")

    def test_helper_threads_change_no_reply_and_no_digest(self):
        # A model's learner splits its work with the helper threads (docs/algorithms.md §9.3):
        # the reference runs with the default (helpers on); the same bits without them, and with
        # two helpers.
        for helpers in (0, 2):
            self.assertSameBits(run_daemon_and_collect(helper_threads=helpers), f"--helper-threads {helpers}")

    def test_replies_within_tolerance_under_other_cache_sizes(self):
        # Another processor's cache sizes change the order of Eigen's sums, so the last bits of
        # many replies (this is what made the golden test fail on a machine with other caches);
        # the tolerances must absorb that, and only that.
        for sizes in OTHER_CACHE_SIZES:
            replies = run_daemon_and_collect(eigen_cache_sizes=sizes)
            ref, now = texts(reference()), texts(replies)
            moved = [k for k in sorted(now) if now.get(k) != ref.get(k)]
            print(f"Eigen cache sizes {sizes}: {len(moved)} of {len(now)} replies differ in their bits from "
                  f"this machine's: {', '.join(moved)}", file=sys.stderr)
            self.assertMatchesGolden(replies, f"Eigen cache sizes {sizes}")


if __name__ == "__main__":
    if "--record" in sys.argv:
        replies = run_daemon_and_collect()
        with open(GOLDEN, "w") as f:
            json.dump({"pairs": PAIRS, "replies": trees(replies)}, f, indent=1, sort_keys=True)
            f.write("\n")
        for k, v in sorted(replies.items()):
            print(f"{k}: {'error: ' + v.text if isinstance(v, Error) else 'ok'}")
        sys.exit(0)
    unittest.main(verbosity=2)
