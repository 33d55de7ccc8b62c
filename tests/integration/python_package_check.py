"""Run by test_python_package.py with a venv's interpreter where `cmestream` is pip-installed:
checks that the import comes from the venv (not a source or build tree), then uses the Model
API against a real cmestreamd with assertions on numbers (a linear contraction y = 0.5 x: its
one-step forecast is known) and on the input checks (shape/dtype ValueErrors change nothing).
"""
import os
import sys
import tempfile

import numpy as np

import cmestream
import cmestream.v1.cmestream_pb2 as pb
from cmestream.testing import Daemon

assert "PYTHONPATH" not in os.environ
assert cmestream.__file__.startswith(sys.prefix), (cmestream.__file__, sys.prefix)
assert pb.__file__.startswith(sys.prefix), pb.__file__
assert cmestream.__version__ == os.environ["EXPECTED_VERSION"], cmestream.__version__
# Type information ships with the package: PEP 561 marker and the stubs' .pyi.
assert os.path.exists(os.path.join(os.path.dirname(cmestream.__file__), "py.typed"))
assert os.path.exists(os.path.join(os.path.dirname(pb.__file__), "cmestream_pb2.pyi"))
assert hasattr(pb.AggregationResponse(), "v") and hasattr(pb.AggregationResponse(), "u")
import cmestream_client  # the former name still imports  # noqa: E402
assert cmestream_client.Client is cmestream.Client


def raises(fn, *needles):
    try:
        fn()
    except ValueError as e:
        for n in needles:
            assert n in str(e), (n, str(e))
        return
    raise AssertionError(f"no ValueError (expected {needles})")


with tempfile.TemporaryDirectory() as tmp, \
        Daemon(os.environ["CMESTREAMD"], os.path.join(tmp, "data"), refresh_interval=3600) as d:
    with cmestream.Client(d.grpc_target) as c:
        m = c.create("contraction", dim=2, sigma=0.5, seed=1)
        assert isinstance(m, cmestream.Model) and m.dim == 2 and not m.is_discrete
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, size=(3000, 2))
        r = m.ingest(x, 0.5 * x, producer="p")
        assert (r.pairs_sent, r.pairs_applied, r.producer_offset) == (3000, 3000, 3000), r
        assert m.producer_offset("p") == 3000
        view = m.refresh()
        assert view.samples == 3000, view

        q = np.array([[0.3, -0.2], [-0.4, 0.1], [0.0, 0.5]])
        y = m.predict(q)
        assert y.shape == (3, 2) and y.dtype == np.float64, (y.shape, y.dtype)
        err = np.abs(y - 0.5 * q).max()
        print(f"predict max error vs 0.5 x: {err:.4f}", file=sys.stderr)
        assert err < 0.05, err
        np.testing.assert_allclose(m.predict(q[0]), y[:1])   # one point as a (dim,) vector
        view = m.info().view
        assert isinstance(view, cmestream.ViewInfo) and view.samples == 3000, view
        k = m.koopman(points=q, top=2)
        assert k.eigenvalues.shape == (2,) and k.eigenfunctions.shape == (3, 2)  # samples first
        assert k.samples == 3000
        # Leading eigenvalue of a contraction towards 0: the constant function, mu ~ 1.
        assert abs(abs(k.eigenvalues[0]) - 1) < 0.05, k.eigenvalues
        assert m.clusters(q).point_labels.shape == (3,)

        # Input checks: clear ValueErrors naming the expected shape; nothing is sent.
        raises(lambda: m.ingest(np.zeros((2, 3)), np.zeros((2, 3))),
               "x: expected shape (n, 2) or (2,) for model 'contraction' (dim 2), got (2, 3)")
        raises(lambda: m.ingest(np.zeros((3, 2)), np.zeros((4, 2))), "equal shapes")
        raises(lambda: m.ingest(np.zeros((3, 2, 1)), np.zeros((3, 2, 1))), "got (3, 2, 1)")
        raises(lambda: m.koopman(points=np.zeros((4, 3))), "expected shape (n, 2)", "got (4, 3)")
        raises(lambda: m.predict([1.0, 2.0, 3.0]), "got (3,)")
        raises(lambda: m.predict(np.array([["a", "b"]])), "expected real numbers")
        raises(lambda: m.predict(np.zeros((1, 2), complex)), "dtype complex128")
        raises(lambda: m.ingest(trajectory=np.zeros((5, 1))), "got (5, 1)")
        late_nan = np.zeros((3000, 2))
        late_nan[2500, 1] = np.nan
        raises(lambda: m.ingest(late_nan, late_nan), "x: row 2500, column 1 is nan")
        assert m.samples == 3000

        # A discrete model takes 1-D integer state ids.
        dm = c.create("chain", num_states=3)
        assert dm.is_discrete and dm.num_states == 3
        raises(lambda: dm.ingest([[0, 1]], [[1, 2]]), "1-D sequence", "(1, 2)")
        raises(lambda: dm.ingest([0.5], [1]), "integer state ids")
        raises(lambda: dm.ingest([-1], [1]), "ids >= 0")
        raises(lambda: dm.clusters(np.zeros((2, 2))), "1-D sequence")
        traj = np.array([0, 1, 2] * 200)
        assert dm.ingest(trajectory=traj).pairs_applied == 599
        dm.refresh()
        counts = dm.counts().dense()
        assert counts[0, 1] == 200 and counts[1, 2] == 200 and counts[2, 0] == 199, counts
        assert [mm.name for mm in [c.model("chain")]] == ["chain"]
        dm.delete()
print("package check: ok")
