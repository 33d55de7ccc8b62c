"""Client(target): models, ingestion and queries of one cmestreamd, results as numpy arrays.

Every error the daemon returns is raised as CmestreamError carrying the gRPC status code
(`code`, a grpc.StatusCode) and the server's message (`message`), e.g.
    CmestreamError: NOT_FOUND: model 'x' not found
Point sets are (n, d) arrays; a 1-D array of length d is one point. Discrete models
(created with num_states=P) take integer state ids instead: ingest_ids / ingest_state_ids, and
the `state_ids=` argument of the view queries.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

import grpc
import numpy as np
import numpy.typing as npt

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from .model import Model

_MAX_MESSAGE = 256 << 20  # Koopman replies grow with the number of query points


class CmestreamError(Exception):
    """A failed request: `code` is the grpc.StatusCode, `message` the server's explanation.
    `owner`: when a sharded daemon (--shard-peers) refused a call for a model another pod owns
    (FAILED_PRECONDITION), that pod as (id, target) from the `cmestream-owner` trailer; else
    None. ShardedClient follows it once."""

    def __init__(self, code: grpc.StatusCode, message: str,
                 owner: Optional[Tuple[str, str]] = None):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.owner = owner


def _error(e) -> CmestreamError:
    """CmestreamError of a grpc.RpcError (also a grpc.Call), with the owner trailer if any."""
    owner = None
    if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
        for key, value in (e.trailing_metadata() or ()):
            if key == "cmestream-owner" and "=" in value:
                pod, target = value.split("=", 1)
                owner = (pod, target)
    return CmestreamError(e.code(), e.details(), owner)


@dataclasses.dataclass
class IngestResult:
    batches: int
    pairs_sent: int
    pairs_applied: int
    producer_offset: int
    model_samples: int


@dataclasses.dataclass
class KoopmanResult:
    eigenvalues: np.ndarray      # (k,) complex: the stationary mode first, then |mu| descending
    rates: np.ndarray            # (k,) complex, log(mu)/dt
    timescales: np.ndarray       # (k,) float, -dt/log|mu| (inf for |mu| >= 1)
    eigenfunctions: np.ndarray   # (k, n) complex: eigenfunction l at point i
    dt: float
    view_version: int
    samples: int
    # Per eigenpair: the stationary mode (eigenvalue exactly 1) and max(0, |mu| - 1); `spectrum`
    # is the SpectrumInfo message (estimator, epoch, held-out score, cross-view timescales,
    # warnings).
    stationary: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=bool))
    excess: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    spectrum: object = None


@dataclasses.dataclass
class CountsResult:
    entries: np.ndarray      # (nnz, 3): from, to, count (float: counts decay with forgetting)
    visits: np.ndarray       # (num_states,)
    stationary: np.ndarray   # (num_states,)
    num_states: int
    states: np.ndarray       # (num_states, d) atom coordinates; (num_states, 0) when discrete
    view_version: int
    samples: int

    def dense(self) -> np.ndarray:
        """The count matrix N as a (num_states, num_states) array."""
        n = np.zeros((self.num_states, self.num_states))
        for i, j, c in self.entries:
            n[int(i), int(j)] += c
        return n


@dataclasses.dataclass
class FitSummary:
    """How a sub-view's fit ended (docs/user-guide.md, "Reading a fit summary")."""
    termination: str        # "success", or what went wrong ("rank_clipped", "numerical_trouble")
    message: str            # why, when termination is not "success"
    brief_report: str       # one line for people
    figures: dict           # named numbers, e.g. "kept_x", "svd_iterations", "inertia"

    @staticmethod
    def from_proto(s) -> "FitSummary":
        return FitSummary(termination=s.termination, message=s.message,
                          brief_report=s.brief_report, figures=dict(s.figures))


@dataclasses.dataclass
class EmbeddingResult:
    embedding: np.ndarray            # (n, r): Psi(x) per query point
    singular_values: np.ndarray      # descending
    singular_value_gaps: np.ndarray  # sigma_i - sigma_{i+1}
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None  # the estimator's fit summary


@dataclasses.dataclass
class ClustersResult:
    ids: np.ndarray                # (m,) representative atom index or state id
    coordinates: np.ndarray        # (m, d) representative atoms (continuous), (m, 0) discrete
    weights: np.ndarray            # (m,) stationary weight of each representative
    labels: np.ndarray             # (m,) cluster of each representative
    point_labels: np.ndarray       # (n,) cluster of each query point
    transition_matrix: np.ndarray  # (K, K) coarse-grained
    masses: np.ndarray             # (K,)
    timescales: np.ndarray         # implied timescales of the count-based chain
    inertia: float
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None  # the estimator's fit summary


@dataclasses.dataclass
class AggregationResult:
    state_ids: np.ndarray     # (p,) row order
    coordinates: np.ndarray   # (p, d) continuous models; (p, 0) discrete
    V: np.ndarray             # (p, r), columns sum to 1
    U: np.ndarray             # (p, r)
    anchors: list             # r arrays of row indices
    partition: np.ndarray     # (p,)
    excluded: np.ndarray      # state ids with no incoming transitions
    distance_to_empirical: float
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None  # the estimator's fit summary


@dataclasses.dataclass
class LatentResult:
    weights: np.ndarray     # (k,)
    densities: np.ndarray   # (k, n): component h at point i
    posteriors: np.ndarray  # (n, k)
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None  # the estimator's fit summary


@dataclasses.dataclass
class ForecastSkill:
    """The model's live one-step skill: each pair scored before it was learned (NaN before the
    first scored pair; docs/algorithms.md section 11)."""
    rmse: float
    rmse_persistence: float   # the same pairs forecast by "next = last"
    ratio: float              # rmse / rmse_persistence
    pairs: int


@dataclasses.dataclass
class ForecastResult:
    forecast: np.ndarray      # (H, d) expected observations
    distribution: np.ndarray  # (H, P) discrete models; (H, 0) continuous
    state: np.ndarray         # filtered predictive state
    view_version: int
    samples: int
    horizon: int = 1
    dim: int = 0
    method: str = ""          # "regression" or "predictive_state"
    skill: Optional[ForecastSkill] = None  # continuous models


@dataclasses.dataclass
class SeriesForecast:
    """Rolling forecasts over a series (not learned): forecasts[i, h] forecasts row
    start + i + h + 1 from row start + i."""
    start: int
    forecasts: np.ndarray     # (n - start, H, d)
    horizon: int
    dim: int
    skill: ForecastSkill
    view_version: int
    samples: int


@dataclasses.dataclass
class LagScan:
    """Implied timescales against lag (units of dt, slowest first, stationary mode left out)."""
    lags: np.ndarray          # (L,)
    timescales: np.ndarray    # (L, n) NaN: undefined, inf: |mu| >= 1
    stderr: np.ndarray        # (L, n) jackknife standard errors
    samples: np.ndarray       # (L,) pairs per lag
    blocks: int


@dataclasses.dataclass
class TimescalesResult:
    estimator: str            # the primary scan: "koopman" (continuous) or "counts"
    koopman: Optional[LagScan]
    counts: LagScan
    dt: float
    view_version: int
    samples: int

    @property
    def primary(self) -> LagScan:
        return self.koopman if self.estimator == "koopman" and self.koopman else self.counts


@dataclasses.dataclass
class CkResult:
    """Chapman-Kolmogorov test: predicted T(lag)^k vs estimated T(k lag), per step k."""
    lag: int
    clusters: int
    steps: np.ndarray             # (S,) k
    predicted: np.ndarray         # (S, K, K)
    estimated: np.ndarray         # (S, K, K)
    stderr: np.ndarray            # (S, K, K) of estimated
    predicted_stderr: np.ndarray  # (S, K, K)
    max_deviation: float
    max_deviation_stderr: float
    blocks: int


@dataclasses.dataclass
class CkTestResult:
    estimator: str
    koopman: Optional[CkResult]
    counts: CkResult
    view_version: int
    samples: int

    @property
    def primary(self) -> CkResult:
        return self.koopman if self.estimator == "koopman" and self.koopman else self.counts


def _skill(s) -> ForecastSkill:
    return ForecastSkill(rmse=s.rmse, rmse_persistence=s.rmse_persistence, ratio=s.ratio,
                         pairs=int(s.pairs))


def _lag_scan(s) -> LagScan:
    n = max((len(r.timescales) for r in s.per_lag), default=0)
    return LagScan(lags=np.array(s.lags, dtype=np.int64),
                   timescales=np.array([list(r.timescales) for r in s.per_lag],
                                       dtype=np.float64).reshape(len(s.per_lag), n),
                   stderr=np.array([list(r.stderr) for r in s.per_lag],
                                   dtype=np.float64).reshape(len(s.per_lag), n),
                   samples=np.array([r.samples for r in s.per_lag], dtype=np.float64),
                   blocks=s.blocks)


def _ck_result(c) -> CkResult:
    k = c.clusters
    s = len(c.steps)

    def cube(field):
        return np.array([list(getattr(st, field)) for st in c.steps],
                        dtype=np.float64).reshape(s, k, k)
    return CkResult(lag=c.lag, clusters=k, steps=np.array([st.steps for st in c.steps], dtype=np.int64),
                    predicted=cube("predicted"), estimated=cube("estimated"), stderr=cube("stderr"),
                    predicted_stderr=cube("predicted_stderr"), max_deviation=c.max_deviation,
                    max_deviation_stderr=c.max_deviation_stderr, blocks=c.blocks)


def _real_array(values, what: str) -> np.ndarray:
    """values as a float64 array; ValueError unless they are real numbers (ints, floats)."""
    a = np.asarray(values)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer)
                                   or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{what}: expected real numbers, got an array of dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def _as_points(values, dim: int, what: str = "points", model: str = "") -> np.ndarray:
    """values as a C-contiguous (n, dim) float64 array. Accepted: an (n, dim) array, one point
    as a (dim,) vector, and for dim 1 also a flat (n,) vector. Anything else is a ValueError
    naming the expected shape: nothing is reshaped behind the caller's back (a (2, 3) array is
    not three 2-d points)."""
    a = _real_array(values, what)
    of = f" for model '{model}' (dim {dim})" if model else f" (dim {dim})"
    if dim < 1:
        raise ValueError(f"{what}: model '{model}' is discrete (states, not points): pass state ids")
    if a.ndim == 0 and dim == 1:
        a = a.reshape(1, 1)
    elif a.ndim == 1 and dim == 1:
        a = a.reshape(-1, 1)
    elif a.ndim == 1 and a.shape[0] == dim:
        a = a.reshape(1, dim)
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{what}: expected shape (n, {dim}) or ({dim},){of}, got {a.shape}")
    return np.ascontiguousarray(a)


def _as_ids(ids, what: str = "state ids") -> np.ndarray:
    """ids as a 1-D int64 array; ValueError for other shapes, non-integers and negative ids."""
    a = np.asarray(ids)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of state ids, got shape {a.shape}")
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer)
                                   or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{what}: expected integer state ids, got dtype {a.dtype}")
    if a.size and np.issubdtype(a.dtype, np.floating) and not np.all(np.mod(a, 1) == 0):
        raise ValueError(f"{what}: expected integer state ids, got non-integral values")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError(f"{what}: expected ids >= 0, got {int(a.min())}")
    return a


def _complex(values) -> np.ndarray:
    return np.array([complex(c.re, c.im) for c in values], dtype=np.complex128)


def _retry_after(error, attempt: int) -> Optional[float]:
    """Seconds to wait before retrying `error`, or None if it is not retryable: only
    RESOURCE_EXHAUSTED with the daemon's `retry-after-ms` trailer (a full ingest queue; other
    RESOURCE_EXHAUSTED answers such as --max-models are not transient). Exponential backoff from
    the hint, capped at 5 s."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    hint = None
    for key, value in (error.trailing_metadata() or ()):
        if key == "retry-after-ms":
            try:
                hint = int(value)
            except ValueError:
                return None
    if hint is None:
        return None
    return min(5.0, hint / 1000.0 * (2 ** attempt))


class Client:
    """One channel to one cmestreamd. `timeout` is the deadline of each unary call in seconds."""

    def __init__(self, target: str = "127.0.0.1:50051", timeout: float = 30.0,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, token: Optional[str] = None,
                 max_retries: int = 5, resume_timeout: float = 60.0,
                 ignore_placement: bool = False):
        """`tls_ca` (PEM file) turns TLS on; `tls_cert`/`tls_key` add a client certificate.
        `token` is sent as `authorization: Bearer TOKEN` on every call (default: the
        environment variable CMESTREAM_TOKEN). Unary calls refused with RESOURCE_EXHAUSTED and
        a `retry-after-ms` hint (a model's ingest queue is full) are retried up to
        `max_retries` times, waiting at least the hint, doubling from attempt to attempt.
        Ingestion with a producer id survives a daemon restart: after a transport failure
        (UNAVAILABLE) the client keeps trying for up to `resume_timeout` seconds, asks the daemon
        for the producer's applied offset and resumes from there (exactly once).
        `ignore_placement` sends `cmestream-placement: ignore`: sharded daemons then serve
        describe, export_model, import_model and delete_model for models they do not own (for
        moving models between pods, cmestream.rebalance; ingestion and queries stay checked)."""
        self.target = target
        self.timeout = timeout
        self.max_retries = max_retries
        self.resume_timeout = resume_timeout
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            # Reconnect quickly after a daemon restart (gRPC's default backoff grows to 120 s).
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if tls_cert is not None and tls_ca is None:
            raise ValueError("a client certificate needs TLS: pass tls_ca too")
        if tls_ca is not None:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca),
                private_key=read(tls_key) if tls_key else None,
                certificate_chain=read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        if token is None:
            token = os.environ.get("CMESTREAM_TOKEN") or None
        metadata = [("authorization", f"Bearer {token}")] if token else []
        if ignore_placement:
            metadata.append(("cmestream-placement", "ignore"))
        self._metadata = tuple(metadata) or None
        self._dims: Dict[str, int] = {}  # model name -> dim (0: discrete), for input checks
        self._models = pb_grpc.ModelServiceStub(self._channel)
        self._ingest = pb_grpc.IngestServiceStub(self._channel)
        self._queries = pb_grpc.QueryServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel; calls after this fail."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- input checks against the model's dimension -------------------------------------------

    def _dim(self, model: str, refresh: bool = False) -> int:
        """The model's dim (0 for a discrete model), cached per client (one GetModel call the
        first time a model's data is sent or queried)."""
        if refresh or model not in self._dims:
            self._dims[model] = self.describe(model).config.dim
        return self._dims[model]

    def _points_for(self, model: str, values, what: str = "points") -> np.ndarray:
        """values as (n, dim) for `model`; a mismatch is re-checked against a fresh describe
        (the model may have been deleted and re-created with another dim) before it raises."""
        try:
            return _as_points(values, self._dim(model), what, model)
        except ValueError:
            return _as_points(values, self._dim(model, refresh=True), what, model)

    def _call(self, method, request, timeout=None):
        attempt = 0
        while True:
            try:
                return method(request, timeout=self.timeout if timeout is None else timeout,
                              metadata=self._metadata)
            except grpc.RpcError as e:  # every RpcError raised by a call is also a grpc.Call
                wait = _retry_after(e, attempt)
                if wait is None or attempt >= self.max_retries:
                    raise _error(e) from None
                time.sleep(wait)
                attempt += 1

    # -- models ------------------------------------------------------------------------------

    def create_model(self, name: str, dim: int = 0, sigma: Optional[float | str] = None,
                     **config) -> pb.ModelInfo:
        """Creates a model. sigma: a bandwidth > 0, or None / "auto" for the automatic choice.
        Other keyword arguments are ModelConfig fields (eta, lambda_ or **{"lambda": ...},
        epsilon, max_dict, dt, seed, auto_sigma_warmup, refresh_interval_seconds, num_states
        (discrete model, dim 0), forgetting, rff_features, rank, clusters, meta_states,
        anchor_threshold, vertex_hunting, latent_states, tensor_restarts, tensor_iterations,
        reservoir, window, ridge_stage1, ridge_stage2)."""
        if "lambda_" in config:
            config["lambda"] = config.pop("lambda_")
        cfg = pb.ModelConfig(name=name, dim=dim, **config)
        if sigma is not None and sigma != "auto":
            cfg.sigma = float(sigma)
        info = self._call(self._models.CreateModel, pb.CreateModelRequest(config=cfg))
        self._dims[name] = info.config.dim
        return info

    def create(self, name: str, dim: int = 0, sigma: Optional[float | str] = None,
               **config) -> "Model":
        """Creates a model (arguments as create_model) and returns its Model handle."""
        from .model import Model
        return Model(self, name, self.create_model(name, dim=dim, sigma=sigma, **config))

    def model(self, name: str) -> "Model":
        """The Model handle of an existing model (CmestreamError NOT_FOUND if there is none)."""
        from .model import Model
        return Model(self, name, self.describe(name))

    def describe(self, name: str, state_digest: bool = False) -> pb.ModelInfo:
        """The model's ModelInfo: config, samples, dictionary size, view, sigma choice; with
        `state_digest`, also ModelInfo.state_digest (a digest of the full learned state, equal
        for equal states: e.g. before an export and after its import)."""
        info = self._call(self._models.GetModel,
                          pb.GetModelRequest(name=name, with_state_digest=state_digest))
        self._dims[name] = info.config.dim
        return info

    def list_models(self) -> List[pb.ModelInfo]:
        """ModelInfo of every model of the daemon."""
        return list(self._call(self._models.ListModels, pb.ListModelsRequest()).models)

    def delete_model(self, name: str) -> None:
        """Deletes the model and its durable state."""
        self._dims.pop(name, None)
        self._call(self._models.DeleteModel, pb.DeleteModelRequest(name=name))

    def export_model(self, name: str) -> bytes:
        """The model's full state as a portable file (admin scope); see import_model."""
        return self._call(self._models.ExportModel, pb.ExportModelRequest(name=name)).data

    def import_model(self, data: bytes, name: str = "") -> pb.ModelInfo:
        """Registers exported bytes as model `name` (empty: the exported name; a sharded daemon
        needs the name). ALREADY_EXISTS for a taken name."""
        info = self._call(self._models.ImportModel, pb.ImportModelRequest(data=data, name=name))
        self._dims[info.config.name] = info.config.dim
        return info

    def producer_offset(self, model: str, producer: str) -> int:
        """Pairs of `producer` the daemon has applied to `model` (where a resumed stream starts)."""
        r = self._call(self._ingest.GetProducer,
                       pb.GetProducerRequest(model=model, producer_id=producer))
        return r.applied_offset

    # -- ingestion ---------------------------------------------------------------------------

    def _stream(self, batches: Iterator[pb.IngestBatch]) -> IngestResult:
        result = IngestResult(0, 0, 0, 0, 0)
        sent = {"batches": 0, "pairs": 0}

        def counted():
            for b, pairs in batches:
                sent["batches"] += 1
                sent["pairs"] += pairs
                yield b

        try:
            for ack in self._ingest.Ingest(counted(), metadata=self._metadata):
                result.batches += 1
                result.pairs_applied += ack.pairs_applied
                result.producer_offset = ack.producer_offset
                result.model_samples = ack.model_samples
        except grpc.RpcError as e:
            raise _error(e) from None
        result.pairs_sent = sent["pairs"]
        if result.batches != sent["batches"]:
            raise CmestreamError(grpc.StatusCode.DATA_LOSS,
                                 f"sent {sent['batches']} batches, got {result.batches} acks")
        return result

    def _resumable(self, model: str, producer: Optional[str], offset: int, n_pairs: int,
                   batches_from) -> IngestResult:
        """Streams `batches_from(k)` (the batches from pair k of this call on). With a producer
        id, a transport failure (UNAVAILABLE: the daemon died or restarted) is not final: the
        client waits for the daemon (up to resume_timeout), asks it for the producer's applied
        offset, and streams the rest from there; the daemon's offsets make this exactly once."""
        total = IngestResult(0, 0, 0, 0, 0)
        start = 0
        deadline = None
        while True:
            try:
                r = self._stream(batches_from(start))
                total.batches += r.batches
                total.pairs_sent += r.pairs_sent
                total.pairs_applied += r.pairs_applied
                total.producer_offset = r.producer_offset
                total.model_samples = r.model_samples
                return total
            except CmestreamError as e:
                if not producer or e.code != grpc.StatusCode.UNAVAILABLE:
                    raise
                deadline = deadline or time.monotonic() + self.resume_timeout
            # Reconnect and ask where to resume; the daemon may still be starting.
            while True:
                if time.monotonic() > deadline:
                    raise CmestreamError(grpc.StatusCode.UNAVAILABLE,
                                         f"daemon at {self.target} unreachable for {self.resume_timeout} s "
                                         f"while streaming producer '{producer}'")
                time.sleep(0.2)
                try:
                    applied = self.producer_offset(model, producer)
                    break
                except CmestreamError as e:
                    if e.code != grpc.StatusCode.UNAVAILABLE:
                        raise
            start = min(max(applied - offset, start), n_pairs)
            deadline = None

    def ingest_pairs(self, model: str, x: npt.ArrayLike, y: npt.ArrayLike,
                     producer: Optional[str] = None, offset: int = 0,
                     batch: int = 1000) -> IngestResult:
        """Streams pairs (x[i], y[i]) in messages of `batch` pairs; x and y are (n, dim) arrays
        (ValueError naming the expected shape otherwise). With a producer id the daemon applies
        each pair at most once: offsets count pairs from `offset`, and the stream resumes by
        itself after a daemon restart (see Client)."""
        x = self._points_for(model, x, "x")
        y = self._points_for(model, y, "y")
        if x.shape != y.shape:
            raise ValueError(f"x and y: expected equal shapes, got {x.shape} and {y.shape}")
        if batch < 1:
            raise ValueError("batch: expected >= 1")

        def batches_from(first):
            for start in range(first, x.shape[0], batch):
                xs, ys = x[start:start + batch], y[start:start + batch]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     x=xs.ravel(), y=ys.ravel()), xs.shape[0]

        return self._resumable(model, producer, offset, x.shape[0], batches_from)

    def ingest_trajectory(self, model: str, states: npt.ArrayLike,
                          producer: Optional[str] = None, offset: int = 0, episode: str = "",
                          batch: int = 1000) -> IngestResult:
        """Streams one trajectory (rows of the (n, dim) array `states`; consecutive rows are
        pairs). Consecutive messages overlap by one state so no pair is lost at a message
        boundary."""
        s = self._points_for(model, states, "states")
        n_pairs = max(s.shape[0] - 1, 0)

        def batches():
            for start in range(0, n_pairs, batch):
                seg = s[start:min(start + batch, n_pairs) + 1]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     states=seg.ravel(), episode_id=episode), seg.shape[0] - 1

        return self._stream(batches())

    def ingest_ids(self, model: str, x_ids, y_ids, producer: Optional[str] = None,
                   offset: int = 0, batch: int = 1000) -> IngestResult:
        """Discrete models: streams pairs of state ids (x_ids[i] -> y_ids[i]). The daemon
        refuses a batch holding an id outside [0, P) (INVALID_ARGUMENT naming the id)."""
        x, y = _as_ids(x_ids, "x_ids"), _as_ids(y_ids, "y_ids")
        if x.shape != y.shape:
            raise ValueError(f"x_ids and y_ids: expected equal lengths, got {x.size} and {y.size}")
        if batch < 1:
            raise ValueError("batch: expected >= 1")

        def batches():
            for start in range(0, x.size, batch):
                xs, ys = x[start:start + batch], y[start:start + batch]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     x_ids=xs.tolist(), y_ids=ys.tolist()), xs.size

        return self._stream(batches())

    def ingest_state_ids(self, model: str, ids, producer: Optional[str] = None, offset: int = 0,
                         episode: str = "", batch: int = 1000) -> IngestResult:
        """Discrete models: streams one trajectory of state ids (consecutive ids are pairs)."""
        s = _as_ids(ids)
        n_pairs = max(s.size - 1, 0)

        def batches():
            for start in range(0, n_pairs, batch):
                seg = s[start:min(start + batch, n_pairs) + 1]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     state_ids=seg.tolist(), episode_id=episode), seg.size - 1

        return self._stream(batches())

    # -- queries -----------------------------------------------------------------------------

    def refresh(self, model: str, wait: bool = True, timeout: float = 60.0) -> pb.ViewInfo:
        """Requests a new view; with wait, returns once a view covering every sample applied so
        far exists (the daemon gives up after `timeout` seconds)."""
        r = self._call(self._queries.Refresh,
                       pb.RefreshRequest(model=model, wait=wait, timeout_seconds=timeout),
                       timeout=self.timeout + (timeout if wait else 0))
        return r.view

    def koopman(self, model: str, points: Optional[npt.ArrayLike] = None,
                top: int = 6) -> KoopmanResult:
        """Leading `top` Koopman eigenpairs of the current view, and the eigenfunctions at
        `points` ((n, dim) array; ValueError naming the expected shape otherwise)."""
        req = pb.KoopmanRequest(model=model, top=top)
        n = 0
        if points is not None:
            p = self._points_for(model, points)
            n = p.shape[0]
            req.points.extend(p.ravel())
        r = self._call(self._queries.GetKoopman, req)
        k = len(r.eigenvalues)
        ef = np.zeros((k, n), dtype=np.complex128)
        for l, f in enumerate(r.eigenfunctions[:k]):
            vals = np.array([(c.re, c.im) for c in f.values], dtype=np.float64).reshape(-1, 2)
            ef[l, :vals.shape[0]] = vals[:, 0] + 1j * vals[:, 1]
        return KoopmanResult(eigenvalues=_complex(r.eigenvalues), rates=_complex(r.rates),
                             timescales=np.array(r.timescales, dtype=np.float64),
                             eigenfunctions=ef, dt=r.dt, view_version=r.view.version,
                             samples=r.view.samples, stationary=np.array(r.stationary, dtype=bool),
                             excess=np.array(r.excess, dtype=np.float64), spectrum=r.spectrum)

    def predict(self, model: str, points: npt.ArrayLike) -> np.ndarray:
        """E[Y | X = point] per point of the (n, dim) array `points`: an (n, dim) array."""
        p = self._points_for(model, points)
        r = self._call(self._queries.Predict, pb.PredictRequest(model=model, points=p.ravel()))
        return np.array(r.predictions, dtype=np.float64).reshape(-1, max(r.dim, 1))

    def dictionary(self, model: str) -> Tuple[np.ndarray, np.ndarray, float]:
        """(x_atoms (m_x, d), y_atoms (m_y, d), sigma)."""
        r = self._call(self._queries.GetDictionary, pb.DictionaryRequest(model=model))
        d = max(r.dim, 1)
        return (np.array(r.x_atoms, dtype=np.float64).reshape(-1, d),
                np.array(r.y_atoms, dtype=np.float64).reshape(-1, d), r.sigma)

    # -- views of docs/algorithms.md §2-6 ----------------------------------------------------

    def _query_points(self, req, points, state_ids) -> int:
        """Fills points or state_ids of a request; returns the number of query points."""
        if points is not None and state_ids is not None:
            raise ValueError("give points (continuous models) or state_ids (discrete), not both")
        if points is not None:
            p = self._points_for(req.model, points)
            req.points.extend(p.ravel())
            return p.shape[0]
        if state_ids is not None:
            ids = _as_ids(state_ids)
            req.state_ids.extend(ids.tolist())
            return ids.size
        return 0

    def counts(self, model: str) -> CountsResult:
        """Transition counts over the model's discretization, visits, stationary weights."""
        r = self._call(self._queries.GetCounts, pb.CountsRequest(model=model))
        # `from` is a Python keyword: the field is read with getattr.
        entries = np.array([(getattr(c, "from"), c.to, c.count) for c in r.counts],
                           dtype=np.float64).reshape(-1, 3)
        coords = (np.array(r.state_coordinates, dtype=np.float64).reshape(-1, r.dim) if r.dim
                  else np.zeros((r.num_states, 0)))
        return CountsResult(entries=entries, visits=np.array(r.visits, dtype=np.float64),
                            stationary=np.array(r.stationary, dtype=np.float64),
                            num_states=r.num_states, states=coords,
                            view_version=r.view.version, samples=r.view.samples)

    def embedding(self, model: str, points: Optional[npt.ArrayLike] = None,
                  state_ids: Optional[npt.ArrayLike] = None) -> EmbeddingResult:
        """Rank-r embedding Psi(x) of the query points (or state ids) and singular values."""
        req = pb.EmbeddingRequest(model=model)
        self._query_points(req, points, state_ids)
        r = self._call(self._queries.GetEmbedding, req)
        return EmbeddingResult(
            embedding=np.array(r.embedding, dtype=np.float64).reshape(-1, max(r.rank, 1)),
            singular_values=np.array(r.singular_values, dtype=np.float64),
            singular_value_gaps=np.array(r.singular_value_gaps, dtype=np.float64),
            view_version=r.view.version, samples=r.view.samples,
            summary=FitSummary.from_proto(r.summary))

    def clusters(self, model: str, points: Optional[npt.ArrayLike] = None,
                 state_ids: Optional[npt.ArrayLike] = None) -> ClustersResult:
        """Metastable clusters, the label of each query point, the coarse-grained chain."""
        req = pb.ClustersRequest(model=model)
        self._query_points(req, points, state_ids)
        r = self._call(self._queries.GetClusters, req)
        reps = list(r.representatives)
        d = len(reps[0].coordinates) if reps else 0
        k = r.clusters
        return ClustersResult(
            ids=np.array([x.id for x in reps], dtype=np.int64),
            coordinates=np.array([list(x.coordinates) for x in reps],
                                 dtype=np.float64).reshape(len(reps), d),
            weights=np.array([x.weight for x in reps], dtype=np.float64),
            labels=np.array([x.label for x in reps], dtype=np.int64),
            point_labels=np.array(r.point_labels, dtype=np.int64),
            transition_matrix=np.array(r.transition_matrix, dtype=np.float64).reshape(k, k),
            masses=np.array(r.masses, dtype=np.float64),
            timescales=np.array(r.timescales, dtype=np.float64), inertia=r.inertia,
            view_version=r.view.version, samples=r.view.samples,
            summary=FitSummary.from_proto(r.summary))

    def aggregation(self, model: str) -> AggregationResult:
        """Soft state aggregation (model created with meta_states=R)."""
        r = self._call(self._queries.GetAggregation, pb.AggregationRequest(model=model))
        p, m = len(r.state_ids), max(r.meta_states, 1)
        return AggregationResult(
            state_ids=np.array(r.state_ids, dtype=np.int64),
            coordinates=(np.array(r.state_coordinates, dtype=np.float64).reshape(p, r.dim)
                         if r.dim and len(r.state_coordinates) == p * r.dim
                         else np.zeros((p, 0))),
            V=np.array(r.v, dtype=np.float64).reshape(-1, m),
            U=np.array(r.u, dtype=np.float64).reshape(-1, m),
            anchors=[np.array(a.indices, dtype=np.int64) for a in r.anchors],
            partition=np.array(r.partition, dtype=np.int64),
            excluded=np.array(r.excluded, dtype=np.int64),
            distance_to_empirical=r.distance_to_empirical,
            view_version=r.view.version, samples=r.view.samples,
            summary=FitSummary.from_proto(r.summary))

    def latent(self, model: str, points: Optional[npt.ArrayLike] = None,
               state_ids: Optional[npt.ArrayLike] = None) -> LatentResult:
        """Latent-state weights, densities at the query points, posteriors (latent_states=K)."""
        req = pb.LatentRequest(model=model)
        n = self._query_points(req, points, state_ids)
        r = self._call(self._queries.GetLatent, req)
        k = r.latent_states
        return LatentResult(
            weights=np.array(r.weights, dtype=np.float64),
            densities=np.array(r.densities, dtype=np.float64).reshape(k, n),
            posteriors=np.array(r.posteriors, dtype=np.float64).reshape(n, k),
            view_version=r.view.version, samples=r.view.samples,
            summary=FitSummary.from_proto(r.summary))

    def forecast(self, model: str, window: Optional[npt.ArrayLike] = None,
                 window_ids: Optional[npt.ArrayLike] = None,
                 horizon: int = 1) -> ForecastResult:
        """Forecast of the next `horizon` observations after `window` (rows, oldest first) or,
        for discrete models, `window_ids`. Continuous models answer with the forecast regression
        from the last row (predictive-state models, created with window=L: with their filter)."""
        if horizon < 1:
            raise ValueError("horizon: expected >= 1")
        req = pb.ForecastRequest(model=model, horizon=horizon)
        if window is not None:
            req.window.extend(self._points_for(model, window, "window").ravel())
        if window_ids is not None:
            req.window_ids.extend(_as_ids(window_ids, "window_ids").tolist())
        r = self._call(self._queries.Forecast, req)
        dist = np.array(r.distribution, dtype=np.float64)
        return ForecastResult(
            forecast=np.array(r.forecast, dtype=np.float64).reshape(horizon, -1),
            distribution=dist.reshape(horizon, -1) if dist.size else np.zeros((horizon, 0)),
            state=np.array(r.state, dtype=np.float64),
            view_version=r.view.version, samples=r.view.samples,
            horizon=horizon, dim=r.dim, method=r.method,
            skill=_skill(r.skill) if r.HasField("skill") else None)

    def forecast_series(self, model: str, series: npt.ArrayLike, horizon: int = 1) -> SeriesForecast:
        """Rolling forecasts (continuous models) over `series` (rows, oldest first; not learned):
        for each row r = start..n-1 the forecasts of rows r+1..r+horizon."""
        if horizon < 1:
            raise ValueError("horizon: expected >= 1")
        rows = self._points_for(model, series, "series")
        req = pb.ForecastRequest(model=model, horizon=horizon)
        req.series.extend(rows.ravel())
        r = self._call(self._queries.Forecast, req)
        d = r.dim or rows.shape[1]
        return SeriesForecast(
            start=r.start,
            forecasts=np.array(r.series_forecast, dtype=np.float64).reshape(-1, horizon, d),
            horizon=horizon, dim=d, skill=_skill(r.skill),
            view_version=r.view.version, samples=r.view.samples)

    def timescales(self, model: str) -> TimescalesResult:
        """Implied timescales at every lag of the model (create with lags=[1, 2, 5, 10]) with
        jackknife standard errors over contiguous time blocks (docs/algorithms.md section 8)."""
        r = self._call(self._queries.GetTimescales, pb.TimescalesRequest(model=model))
        return TimescalesResult(estimator=r.estimator,
                                koopman=_lag_scan(r.koopman) if r.HasField("koopman") else None,
                                counts=_lag_scan(r.counts), dt=r.dt,
                                view_version=r.view.version, samples=r.view.samples)

    def cktest(self, model: str, clusters: int = 0, steps: int = 0, lag: int = 0) -> CkTestResult:
        """Chapman-Kolmogorov test on the metastable sets (0 = the model's clusters, every
        step, its first lag) for the Koopman model and the count chain."""
        r = self._call(self._queries.CkTest,
                       pb.CkTestRequest(model=model, clusters=clusters, steps=steps, lag=lag))
        return CkTestResult(estimator=r.estimator,
                            koopman=_ck_result(r.koopman) if r.HasField("koopman") else None,
                            counts=_ck_result(r.counts),
                            view_version=r.view.version, samples=r.view.samples)
