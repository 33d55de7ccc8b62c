"""Client(target): models, ingestion and queries of one cmestreamd, results as numpy arrays.

Every error the daemon returns is raised as CmestreamError carrying the gRPC status code
(`code`, a grpc.StatusCode) and the server's message (`message`), e.g.
    CmestreamError: NOT_FOUND: model 'x' not found
INVALID_ARGUMENT answers (an argument the daemon refuses, named in the message) are
InvalidArgumentError, which is both a CmestreamError and a ValueError.

Inputs are checked before anything is sent (cmestream.inputs): a wrong shape, dtype, a NaN or
infinity (named by row and column), a state id outside [0, num_states), an argument out of
range is a ValueError; a wrong type or an unknown keyword argument a TypeError. So a call that
raises one of them has applied nothing.

Point sets are (n, d) arrays; a 1-D array of length d is one point. Discrete models
(created with num_states=P) take integer state ids instead: ingest_ids / ingest_state_ids, and
the `state_ids=` argument of the view queries. Results are dataclasses (cmestream.results,
cmestream.info) with samples first: one row per query point.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Iterator, List, Optional, Tuple

import grpc
import numpy as np
import numpy.typing as npt

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc

from . import inputs
from .info import (FitSummary, ModelConfig, ModelInfo, SigmaSelection, SpectrumInfo,
                   SubViewStatus, TimescaleComparison, ViewInfo, from_proto, headline_from_proto, model_info_from_proto,
                   spectrum_from_proto, view_from_proto)
from .model import Model
from .results import (Alarm, AlarmList, AggregationResult, CkResult, CkTestResult, ClustersResult, CountsResult,
                      EmbeddingResult, ForecastHorizonSkill, ForecastResult, ForecastSkill, IngestResult,
                      KoopmanResult, LagScan, LatentResult, SeriesForecast, TimescalesResult,
                      ck_from_proto, complex_array, eigenfunctions_from_proto,
                      lag_scan_from_proto, samples_first, alarm_from_proto)

# Re-exported: these lived in this module before cmestream.results and cmestream.info.
__all__ = ["Alarm", "AlarmList", "AggregationResult", "CkResult", "CkTestResult", "Client", "ClustersResult",
           "CmestreamError", "CountsResult", "EmbeddingResult", "FitSummary", "ForecastResult",
           "IngestResult", "InvalidArgumentError", "KoopmanResult", "LagScan", "LatentResult",
           "ModelConfig", "ModelInfo", "SigmaSelection", "SpectrumInfo", "SubViewStatus",
           "TimescaleComparison", "TimescalesResult", "ViewInfo"]

_MAX_MESSAGE = 256 << 20  # Koopman replies grow with the number of query points


class CmestreamError(Exception):
    """A failed request: `code` is the grpc.StatusCode, `message` the server's explanation.
    `owner`: when a sharded daemon (--shard-peers) refused a call for a model another pod owns
    (FAILED_PRECONDITION), that pod as (id, target) from the `cmestream-owner` trailer; else
    None. ShardedClient follows it once. `pairs_applied`: for a failed ingest call, the pairs
    of that call applied before the failure."""

    def __init__(self, code: grpc.StatusCode, message: str,
                 owner: Optional[Tuple[str, str]] = None):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.owner = owner
        # Ingestion only: pairs of the failed call the daemon applied before it (None: no
        # ingest call, or nothing is known).
        self.pairs_applied: Optional[int] = None


class InvalidArgumentError(CmestreamError, ValueError):
    """The daemon refused an argument (INVALID_ARGUMENT, the message names it): also a
    ValueError, like the client's own checks, so `except ValueError` catches every bad
    argument wherever it was found. Nothing was applied by the refused call (for ingestion:
    by the refused message; the client checks whole arrays first, so the daemon's per-message
    checks only refuse what it alone knows, e.g. |value| above its --max-abs-value)."""


def _error(e) -> CmestreamError:
    """CmestreamError of a grpc.RpcError (also a grpc.Call), with the owner trailer if any."""
    owner = None
    if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
        for key, value in (e.trailing_metadata() or ()):
            if key == "cmestream-owner" and "=" in value:
                pod, target = value.split("=", 1)
                owner = (pod, target)
    if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgumentError(e.code(), e.details())
    return CmestreamError(e.code(), e.details(), owner)


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


def check_tls_key_pair(cert: str, key: str) -> None:
    """Raises ValueError naming both files if the private key in `key` is not the key of the
    certificate in `cert` (or either does not load). gRPC would only fail the connection, as
    "empty address list" or a failed handshake, without saying which file is wrong."""
    import ssl
    for name, path in (("tls_cert", cert), ("tls_key", key)):
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ValueError(f"{name}: cannot read '{path}' ({e.strerror})") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
            raise ValueError(f"tls_cert and tls_key do not match: the private key in '{key}' is not the key of "
                             f"the certificate in '{cert}'") from None
        raise ValueError(f"tls_cert '{cert}' and tls_key '{key}': expected a PEM certificate and its "
                         f"unencrypted PEM private key ({e.reason or e})") from None


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
        self.target = inputs.text("target", target)
        self.timeout = inputs.real("timeout", timeout, positive=True)
        self.max_retries = inputs.integer("max_retries", max_retries, 0, 1000)
        self.resume_timeout = inputs.real("resume_timeout", resume_timeout, minimum=0)
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
        if tls_cert is not None:
            check_tls_key_pair(tls_cert, tls_key)
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
        # model name -> (dim, num_states) (dim 0: discrete), for the input checks
        self._shapes: Dict[str, Tuple[int, int]] = {}
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

    # -- input checks against the model's shape -----------------------------------------------

    def _shape(self, model: str, refresh: bool = False) -> Tuple[int, int]:
        """The model's (dim, num_states) (dim 0 for a discrete model), cached per client (one
        GetModel call the first time a model's data is sent or queried)."""
        if refresh or model not in self._shapes:
            self.describe(model)  # fills the cache
        return self._shapes[model]

    def _remember(self, info: ModelInfo) -> ModelInfo:
        self._shapes[info.config.name] = (info.config.dim, info.config.num_states)
        return info

    def _checked(self, model: str, check):
        """check(dim, num_states); a refusal is re-checked against a fresh describe (the model
        may have been deleted and re-created with another shape) before it is raised."""
        cached = self._shape(model)
        try:
            return check(*cached)
        except ValueError:
            fresh = self._shape(model, refresh=True)
            if fresh == cached:
                raise
            return check(*fresh)

    def _points_for(self, model: str, values, what: str = "points") -> np.ndarray:
        """values as a finite (n, dim) array for the continuous `model` (inputs.as_points)."""
        return self._checked(model, lambda dim, _: inputs.as_points(values, dim, what, model))

    def _ids_for(self, model: str, ids, what: str = "state ids") -> np.ndarray:
        """ids as a 1-D int64 array of states of the discrete `model`, each in [0, num_states)."""
        def check(dim, num_states):
            if num_states == 0:
                raise ValueError(f"{what}: model '{model}' is continuous (dim {dim}): pass "
                                 "points, not state ids")
            return inputs.as_ids(ids, what, num_states, model)
        return self._checked(model, check)

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
                     **config) -> ModelInfo:
        """Creates a model. sigma: a bandwidth > 0, or None / "auto" / 0 for the automatic choice.
        Other keyword arguments are ModelConfig fields (eta, lambda_ or **{"lambda": ...},
        epsilon, max_dict, dt, seed, auto_sigma_warmup, scale ("auto": per-channel input scaling,
        the default with sigma auto; "none"), refresh_interval_seconds, refresh_every_samples,
        step_decay_samples, step_decay_power, averaging, num_states
        (discrete model, dim 0), forgetting, rff_features (default 64 for one input value, else
        256), forecast_features (default min(rff_features, 128) if that is given, else 32 for one
        input value and 128 otherwise), rank, clusters, meta_states,
        anchor_threshold, vertex_hunting, latent_states, tensor_restarts, tensor_iterations,
        reservoir, window, ridge_stage1, ridge_stage2, lags, delays and delay_stride (learn on
        windows of the last `delays` raw rows; ingest raw rows with ingest_trajectory), alarms,
        alarm_rate, on_change, reduce (learn on the leading `reduce` principal directions of the
        input, fitted on the warm-up; 0: off; default 32 above 64 dimensions, with scale
        "none" unless given)). Any
        other keyword is a
        TypeError; a value of the wrong type a TypeError, one the field cannot hold a ValueError
        naming it (before anything is sent); ranges that depend on the model (rank 1..64, eta
        > 0, ...) are the daemon's: InvalidArgumentError (a ValueError) naming the field."""
        fields = inputs.config_fields("create_model", config)
        cfg = pb.ModelConfig(name=inputs.text("name", name), dim=inputs.integer("dim", dim),
                             **fields)
        if sigma is not None and not (isinstance(sigma, str) and sigma == "auto"):
            # 0 is "auto" on the wire (ModelConfig.sigma of an automatic model reads 0).
            bandwidth = None if isinstance(sigma, str) else inputs.real("sigma", sigma)
            if bandwidth is None or bandwidth < 0:
                raise ValueError(f'sigma: expected a bandwidth > 0, or "auto" / None / 0 for the '
                                 f'automatic choice, got {sigma!r}')
            cfg.sigma = bandwidth
        info = self._call(self._models.CreateModel, pb.CreateModelRequest(config=cfg))
        return self._remember(model_info_from_proto(info))

    def create(self, name: str, dim: int = 0, sigma: Optional[float | str] = None,
               **config) -> Model:
        """Creates a model (arguments as create_model) and returns its Model handle."""
        return Model(self, name, self.create_model(name, dim=dim, sigma=sigma, **config))

    def model(self, name: str) -> Model:
        """The Model handle of an existing model (CmestreamError NOT_FOUND if there is none)."""
        return Model(self, name, self.describe(name))

    def describe(self, name: str, state_digest: bool = False, memory: bool = False) -> ModelInfo:
        """The model's ModelInfo (cmestream.info): config, samples, dictionary sizes, view,
        sigma choice, spectrum, sub-views; with `state_digest`, also ModelInfo.state_digest (a
        digest of the full learned state, equal for equal states: e.g. before an export and
        after its import; None otherwise); with `memory`, also ModelInfo.memory (ModelMemory:
        its share of the daemon's memory budget; None otherwise)."""
        info = self._call(self._models.GetModel,
                          pb.GetModelRequest(name=name, with_state_digest=bool(state_digest),
                                             with_memory=bool(memory)))
        return self._remember(model_info_from_proto(info, with_state_digest=bool(state_digest)))

    def list_models(self, page_size: int = 1000) -> List[ModelInfo]:
        """ModelInfo of every model of the daemon, sorted by name, fetched `page_size` models a
        call (ListModelsRequest.page_size; 0: all in one reply)."""
        page_size = inputs.integer("page_size", page_size)
        out, token = [], ""
        while True:
            reply = self._call(self._models.ListModels, pb.ListModelsRequest(page_size=page_size, page_token=token))
            out += [self._remember(model_info_from_proto(m)) for m in reply.models]
            token = reply.next_page_token
            if not token:
                return out

    def delete_model(self, name: str) -> None:
        """Deletes the model and its durable state."""
        self._shapes.pop(name, None)
        self._call(self._models.DeleteModel, pb.DeleteModelRequest(name=name))

    def export_model(self, name: str) -> bytes:
        """The model's full state as a portable file (admin scope); see import_model."""
        return self._call(self._models.ExportModel, pb.ExportModelRequest(name=name)).data

    def import_model(self, data: bytes, name: str = "") -> ModelInfo:
        """Registers exported bytes as model `name` (empty: the exported name; a sharded daemon
        needs the name). ALREADY_EXISTS for a taken name."""
        info = self._call(self._models.ImportModel, pb.ImportModelRequest(data=data, name=name))
        return self._remember(model_info_from_proto(info))

    def producer_offset(self, model: str, producer: str) -> int:
        """Pairs of `producer` the daemon has applied to `model` (where a resumed stream starts)."""
        r = self._call(self._ingest.GetProducer,
                       pb.GetProducerRequest(model=model, producer_id=producer))
        return r.applied_offset

    # -- ingestion ---------------------------------------------------------------------------

    def _stream(self, batches: Iterator[Tuple[pb.IngestBatch, int]],
                first_pair: int = 0, scores: bool = False) -> IngestResult:
        """Streams (batch, pairs) messages, one acknowledged before the next is read by the
        daemon. A refusal names the refused message's pairs (counted from the start of the
        call) and what was applied before it: CmestreamError.pairs_applied. scores: the
        batches ask for anomaly scores (IngestResult.anomaly_index / anomaly_scores)."""
        result = IngestResult(0, 0, 0, 0, 0)
        sent = []  # pairs per message, in order
        index_parts, score_parts = [], []

        def counted():
            for b, pairs in batches:
                sent.append(pairs)
                yield b

        try:
            for ack in self._ingest.Ingest(counted(), metadata=self._metadata):
                result.batches += 1
                result.pairs_applied += ack.pairs_applied
                result.producer_offset = ack.producer_offset
                result.model_samples = ack.model_samples
                result.alarms_raised += ack.effects.alarms_raised
                result.admitted_atoms += ack.effects.admitted_x
                result.spectral_epochs += ack.effects.spectral_epochs
                if scores and len(ack.anomaly_scores):
                    score_parts.append(np.asarray(ack.anomaly_scores, dtype=np.float64))
                    index_parts.append(np.arange(ack.anomaly_scores_index,
                                                 ack.anomaly_scores_index + len(ack.anomaly_scores), dtype=np.int64))
        except grpc.RpcError as e:
            err = _error(e)
            if result.batches < len(sent):  # acks are in order: message `batches` was refused
                first = first_pair + sum(sent[:result.batches])
                err.message += (f" [message {result.batches} of this call held pairs {first}.."
                                f"{first + sent[result.batches] - 1}; the {result.pairs_applied} "
                                f"pairs before it were applied, none after]")
                err.args = (f"{err.code.name}: {err.message}",)
            err.pairs_applied = result.pairs_applied
            raise err from None
        result.pairs_sent = sum(sent)
        if scores:
            result.anomaly_index = np.concatenate(index_parts) if index_parts else np.zeros(0, np.int64)
            result.anomaly_scores = np.concatenate(score_parts) if score_parts else np.zeros(0)
        if result.batches != len(sent):
            raise CmestreamError(grpc.StatusCode.DATA_LOSS,
                                 f"sent {len(sent)} batches, got {result.batches} acks")
        return result

    def _resumable(self, model: str, producer: Optional[str], offset: int, n_pairs: int,
                   batches_from, scores: bool = False) -> IngestResult:
        """Streams `batches_from(k)` (the batches from pair k of this call on). With a producer
        id, a transport failure (UNAVAILABLE: the daemon died or restarted) is not final: the
        client waits for the daemon (up to resume_timeout), asks it for the producer's applied
        offset, and streams the rest from there; the daemon's offsets make this exactly once."""
        total = IngestResult(0, 0, 0, 0, 0)
        if scores:
            total.anomaly_index, total.anomaly_scores = np.zeros(0, np.int64), np.zeros(0)
        start = 0
        deadline = None
        while True:
            try:
                r = self._stream(batches_from(start), start, scores)
                total.batches += r.batches
                total.pairs_sent += r.pairs_sent
                total.pairs_applied += r.pairs_applied
                total.producer_offset = r.producer_offset
                total.model_samples = r.model_samples
                total.alarms_raised += r.alarms_raised
                total.admitted_atoms += r.admitted_atoms
                total.spectral_epochs += r.spectral_epochs
                if scores:
                    total.anomaly_index = np.concatenate([total.anomaly_index, r.anomaly_index])
                    total.anomaly_scores = np.concatenate([total.anomaly_scores, r.anomaly_scores])
                return total
            except CmestreamError as e:
                if not producer or e.code != grpc.StatusCode.UNAVAILABLE:
                    if e.pairs_applied is not None:
                        e.pairs_applied += total.pairs_applied
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

    @staticmethod
    def _stream_args(producer, offset, episode, batch) -> Tuple[str, int, str, int]:
        """The common ingest arguments, checked (TypeError / ValueError naming them)."""
        producer = "" if producer is None else inputs.text("producer", producer)
        return (producer, inputs.integer("offset", offset, 0, inputs.UINT64_MAX),
                inputs.text("episode", episode), inputs.integer("batch", batch, 1))

    def ingest_pairs(self, model: str, x: npt.ArrayLike, y: npt.ArrayLike,
                     producer: Optional[str] = None, offset: int = 0,
                     batch: int = 1000, anomaly_scores: bool = False) -> IngestResult:
        """Streams pairs (x[i], y[i]) in messages of `batch` pairs; x and y are (n, dim) arrays
        of finite real numbers, checked whole before anything is sent (ValueError naming the
        expected shape, or the row and column of a NaN / infinity). With a producer id the
        daemon applies each pair at most once: offsets count pairs from `offset`, and the
        stream resumes by itself after a daemon restart (see Client). anomaly_scores: return
        each scored pair's anomaly score (IngestResult.anomaly_index / anomaly_scores)."""
        producer, offset, _, batch = self._stream_args(producer, offset, "", batch)
        x = self._points_for(model, x, "x")
        y = self._points_for(model, y, "y")
        if x.shape != y.shape:
            raise ValueError(f"x and y: expected equal shapes, got {x.shape} and {y.shape}")

        def batches_from(first):
            for start in range(first, x.shape[0], batch):
                xs, ys = x[start:start + batch], y[start:start + batch]
                yield pb.IngestBatch(model=model, producer_id=producer,
                                     offset=offset + start if producer else 0,
                                     x=xs.ravel(), y=ys.ravel(), anomaly_scores=bool(anomaly_scores)), xs.shape[0]

        return self._resumable(model, producer, offset, x.shape[0], batches_from, bool(anomaly_scores))

    def ingest_trajectory(self, model: str, states: npt.ArrayLike,
                          producer: Optional[str] = None, offset: int = 0, episode: str = "",
                          batch: int = 1000, gap: bool = False, anomaly_scores: bool = False) -> IngestResult:
        """Streams one trajectory (rows of the (n, dim) array `states`, checked whole first;
        consecutive rows are pairs). Consecutive messages overlap by one state so no pair is
        lost at a message boundary. gap: the trajectory follows a gap in the data (a dropped
        sample): it starts a new episode, so no pair or delay window joins it to what was sent
        before (IngestBatch.gap). anomaly_scores: return each scored pair's anomaly score
        (IngestResult.anomaly_index / anomaly_scores; docs/algorithms.md §12.15)."""
        producer, offset, episode, batch = self._stream_args(producer, offset, episode, batch)
        s = self._points_for(model, states, "states")
        n_pairs = max(s.shape[0] - 1, 0)

        def batches():
            for start in range(0, n_pairs, batch):
                seg = s[start:min(start + batch, n_pairs) + 1]
                yield pb.IngestBatch(model=model, producer_id=producer,
                                     offset=offset + start if producer else 0,
                                     states=seg.ravel(), episode_id=episode,
                                     gap=bool(gap) and start == 0,
                                     anomaly_scores=bool(anomaly_scores)), seg.shape[0] - 1

        return self._stream(batches(), scores=bool(anomaly_scores))

    def ingest_ids(self, model: str, x_ids, y_ids, producer: Optional[str] = None,
                   offset: int = 0, batch: int = 1000) -> IngestResult:
        """Discrete models: streams pairs of state ids (x_ids[i] -> y_ids[i]). Every id is
        checked to lie in [0, num_states) before anything is sent (ValueError naming the row)."""
        producer, offset, _, batch = self._stream_args(producer, offset, "", batch)
        x, y = self._ids_for(model, x_ids, "x_ids"), self._ids_for(model, y_ids, "y_ids")
        if x.shape != y.shape:
            raise ValueError(f"x_ids and y_ids: expected equal lengths, got {x.size} and {y.size}")

        def batches():
            for start in range(0, x.size, batch):
                xs, ys = x[start:start + batch], y[start:start + batch]
                yield pb.IngestBatch(model=model, producer_id=producer,
                                     offset=offset + start if producer else 0,
                                     x_ids=xs.tolist(), y_ids=ys.tolist()), xs.size

        return self._stream(batches())

    def ingest_state_ids(self, model: str, ids, producer: Optional[str] = None, offset: int = 0,
                         episode: str = "", batch: int = 1000) -> IngestResult:
        """Discrete models: streams one trajectory of state ids (consecutive ids are pairs),
        checked whole first as in ingest_ids."""
        producer, offset, episode, batch = self._stream_args(producer, offset, episode, batch)
        s = self._ids_for(model, ids, "state ids")
        n_pairs = max(s.size - 1, 0)

        def batches():
            for start in range(0, n_pairs, batch):
                seg = s[start:min(start + batch, n_pairs) + 1]
                yield pb.IngestBatch(model=model, producer_id=producer,
                                     offset=offset + start if producer else 0,
                                     state_ids=seg.tolist(), episode_id=episode), seg.size - 1

        return self._stream(batches())

    # -- queries -----------------------------------------------------------------------------

    def refresh(self, model: str, wait: bool = True, timeout: float = 60.0) -> ViewInfo:
        """Requests a new view; with wait, returns once a view covering every sample applied so
        far exists (the daemon gives up after `timeout` seconds, > 0). Returns the ViewInfo
        (cmestream.info: version, samples, build times) of the view then published."""
        timeout = inputs.real("timeout", timeout, positive=True)
        r = self._call(self._queries.Refresh,
                       pb.RefreshRequest(model=model, wait=bool(wait), timeout_seconds=timeout),
                       timeout=self.timeout + (timeout if wait else 0))
        return view_from_proto(r.view)

    def koopman(self, model: str, points: Optional[npt.ArrayLike] = None,
                top: int = 6) -> KoopmanResult:
        """Leading `top` Koopman eigenpairs of the current view (top 0: the daemon's default,
        6), and the eigenfunctions at `points` ((n, dim) array; ValueError naming the expected
        shape otherwise): KoopmanResult.eigenfunctions is (n, k), one row per point."""
        req = pb.KoopmanRequest(model=model, top=inputs.integer("top", top))
        n = 0
        if points is not None:
            p = self._points_for(model, points)
            n = p.shape[0]
            req.points.extend(p.ravel())
        r = self._call(self._queries.GetKoopman, req)
        k = len(r.eigenvalues)
        return KoopmanResult(eigenvalues=complex_array(r.eigenvalues),
                             rates=complex_array(r.rates),
                             timescales=np.array(r.timescales, dtype=np.float64),
                             eigenfunctions=eigenfunctions_from_proto(r.eigenfunctions, k, n),
                             dt=r.dt, view_version=r.view.version, samples=r.view.samples,
                             stationary=np.array(r.stationary, dtype=bool),
                             excess=np.array(r.excess, dtype=np.float64),
                             spectrum=(spectrum_from_proto(r.spectrum)
                                       if r.HasField("spectrum") else None),
                             periods=np.array(r.periods, dtype=np.float64),
                             headline=(headline_from_proto(r.headline)
                                       if r.HasField("headline") else None),
                             amplitudes=np.array(r.amplitudes, dtype=np.float64),
                             shares=np.array(r.shares, dtype=np.float64))

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
            ids = self._ids_for(req.model, state_ids)
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
        """Latent-state weights, densities and posteriors at the query points, each (n, k)
        (model created with latent_states=k)."""
        req = pb.LatentRequest(model=model)
        n = self._query_points(req, points, state_ids)
        r = self._call(self._queries.GetLatent, req)
        k = r.latent_states
        return LatentResult(
            weights=np.array(r.weights, dtype=np.float64),
            densities=samples_first(r.densities, k, n),  # the wire holds k x n
            posteriors=np.array(r.posteriors, dtype=np.float64).reshape(n, k),
            view_version=r.view.version, samples=r.view.samples,
            summary=FitSummary.from_proto(r.summary))

    def forecast(self, model: str, window: Optional[npt.ArrayLike] = None,
                 window_ids: Optional[npt.ArrayLike] = None,
                 horizon: int = 1) -> ForecastResult:
        """Forecast of the next `horizon` observations after `window` (rows, oldest first) or,
        for discrete models, `window_ids`. Continuous models answer with the forecast regression
        from the last row (predictive-state models, created with window=L: with their filter)."""
        horizon = inputs.integer("horizon", horizon, 1)
        req = pb.ForecastRequest(model=model, horizon=horizon)
        if window is not None:
            req.window.extend(self._points_for(model, window, "window").ravel())
        if window_ids is not None:
            req.window_ids.extend(self._ids_for(model, window_ids, "window_ids").tolist())
        r = self._call(self._queries.Forecast, req)
        dist = np.array(r.distribution, dtype=np.float64)
        return ForecastResult(
            forecast=np.array(r.forecast, dtype=np.float64).reshape(horizon, -1),
            distribution=dist.reshape(horizon, -1) if dist.size else np.zeros((horizon, 0)),
            state=np.array(r.state, dtype=np.float64),
            view_version=r.view.version, samples=r.view.samples,
            horizon=horizon, dim=r.dim, method=r.method,
            skill=from_proto(ForecastSkill, r.skill) if r.HasField("skill") else None,
            step_methods=list(r.step_methods),
            horizon_skill=[from_proto(ForecastHorizonSkill, h) for h in r.horizon_skill])

    def forecast_series(self, model: str, series: npt.ArrayLike, horizon: int = 1) -> SeriesForecast:
        """Rolling forecasts (continuous models) over `series` (rows, oldest first; not learned):
        for each row r = start..n-1 the forecasts of rows r+1..r+horizon."""
        horizon = inputs.integer("horizon", horizon, 1)
        rows = self._points_for(model, series, "series")
        req = pb.ForecastRequest(model=model, horizon=horizon)
        req.series.extend(rows.ravel())
        r = self._call(self._queries.Forecast, req)
        d = r.dim or rows.shape[1]
        return SeriesForecast(
            start=r.start,
            forecasts=np.array(r.series_forecast, dtype=np.float64).reshape(-1, horizon, d),
            horizon=horizon, dim=d, skill=from_proto(ForecastSkill, r.skill),
            view_version=r.view.version, samples=r.view.samples, method=r.method,
            step_methods=list(r.step_methods),
            horizon_skill=[from_proto(ForecastHorizonSkill, h) for h in r.horizon_skill])

    def timescales(self, model: str) -> TimescalesResult:
        """Implied timescales at every lag of the model (create with lags=[1, 2, 5, 10]) with
        jackknife standard errors over contiguous time blocks (docs/algorithms.md section 8)."""
        r = self._call(self._queries.GetTimescales, pb.TimescalesRequest(model=model))
        return TimescalesResult(estimator=r.estimator,
                                koopman=(lag_scan_from_proto(r.koopman)
                                         if r.HasField("koopman") else None),
                                counts=lag_scan_from_proto(r.counts), dt=r.dt,
                                view_version=r.view.version, samples=r.view.samples)

    def list_alarms(self, model: str, since: int = 0) -> AlarmList:
        """The change alarms the model raised with index >= since, oldest first (a model created
        with alarms "on", the default; docs/user-guide.md "Change alarms")."""
        r = self._call(self._queries.ListAlarms,
                       pb.ListAlarmsRequest(model=model, since=inputs.integer("since", since)))
        return AlarmList(model=r.model, armed_at=r.armed_at,
                         alarms=[alarm_from_proto(a) for a in r.alarms], dropped=r.dropped)

    def watch_alarms(self, model: str, since: int = 0,
                     timeout: Optional[float] = None) -> Iterator[Alarm]:
        """Yields the alarms with index >= since, then each new one as the model raises it, until
        the caller stops iterating or `timeout` seconds pass (None: no limit; the stream then ends
        without an error). To resume after a disconnect or a restart, pass the last index
        received + 1: nothing is missed, nothing repeated."""
        req = pb.WatchAlarmsRequest(model=model, since=inputs.integer("since", since))
        call = self._queries.WatchAlarms(req, timeout=timeout, metadata=self._metadata)
        try:
            for a in call:
                yield alarm_from_proto(a)
        except grpc.RpcError as e:
            if timeout is not None and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return
            raise _error(e) from None
        finally:
            call.cancel()

    def cktest(self, model: str, clusters: int = 0, steps: int = 0, lag: int = 0) -> CkTestResult:
        """Chapman-Kolmogorov test on the metastable sets (0 = the model's clusters, every
        step, its first lag) for the Koopman model and the count chain."""
        req = pb.CkTestRequest(model=model, clusters=inputs.integer("clusters", clusters),
                               steps=inputs.integer("steps", steps),
                               lag=inputs.integer("lag", lag))
        r = self._call(self._queries.CkTest, req)
        return CkTestResult(estimator=r.estimator,
                            koopman=ck_from_proto(r.koopman) if r.HasField("koopman") else None,
                            counts=ck_from_proto(r.counts),
                            view_version=r.view.version, samples=r.view.samples)
