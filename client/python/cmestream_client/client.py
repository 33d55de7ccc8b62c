"""Client(target): models, ingestion and queries of one cmestreamd, results as numpy arrays.

Every error the daemon returns is raised as CmestreamError carrying the gRPC status code
(`code`, a grpc.StatusCode) and the server's message (`message`), e.g.
    CmestreamError: NOT_FOUND: model 'x' not found
Point sets are (n, d) arrays; a 1-D array of length d is one point.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Optional, Sequence

import grpc
import numpy as np

from cmestream.v1 import cmestream_pb2 as pb
from cmestream.v1 import cmestream_pb2_grpc as pb_grpc

_MAX_MESSAGE = 256 << 20  # Koopman replies grow with the number of query points


class CmestreamError(Exception):
    """A failed request: `code` is the grpc.StatusCode, `message` the server's explanation."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclasses.dataclass
class IngestResult:
    batches: int
    pairs_sent: int
    pairs_applied: int
    producer_offset: int
    model_samples: int


@dataclasses.dataclass
class KoopmanResult:
    eigenvalues: np.ndarray      # (k,) complex, |mu| descending
    rates: np.ndarray            # (k,) complex, log(mu)/dt
    timescales: np.ndarray       # (k,) float, -dt/log|mu| (inf for |mu| >= 1)
    eigenfunctions: np.ndarray   # (k, n) complex: eigenfunction l at point i
    dt: float
    view_version: int
    samples: int


def _points(points, dim: Optional[int] = None) -> np.ndarray:
    a = np.asarray(points, dtype=np.float64)
    if a.ndim == 1:
        a = a.reshape(1, -1) if dim is None or a.size == dim else a.reshape(-1, dim)
    if a.ndim != 2:
        raise ValueError(f"points: expected an (n, d) array, got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise ValueError(f"points: expected {dim} columns, got {a.shape[1]}")
    return np.ascontiguousarray(a)


def _complex(values) -> np.ndarray:
    return np.array([complex(c.re, c.im) for c in values], dtype=np.complex128)


class Client:
    """One channel to one cmestreamd. `timeout` is the deadline of each unary call in seconds."""

    def __init__(self, target: str = "127.0.0.1:50051", timeout: float = 30.0):
        self.target = target
        self.timeout = timeout
        self._channel = grpc.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
        ])
        self._models = pb_grpc.ModelServiceStub(self._channel)
        self._ingest = pb_grpc.IngestServiceStub(self._channel)
        self._queries = pb_grpc.QueryServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as e:  # every RpcError raised by a call is also a grpc.Call
            raise CmestreamError(e.code(), e.details()) from None

    # -- models ------------------------------------------------------------------------------

    def create_model(self, name: str, dim: int, sigma=None, **config) -> pb.ModelInfo:
        """Creates a model. sigma: a bandwidth > 0, or None / "auto" for the automatic choice.
        Other keyword arguments are ModelConfig fields (eta, lambda_ or **{"lambda": ...},
        epsilon, max_dict, dt, seed, auto_sigma_warmup, refresh_interval_seconds, ...)."""
        if "lambda_" in config:
            config["lambda"] = config.pop("lambda_")
        cfg = pb.ModelConfig(name=name, dim=dim, **config)
        if sigma is not None and sigma != "auto":
            cfg.sigma = float(sigma)
        return self._call(self._models.CreateModel, pb.CreateModelRequest(config=cfg))

    def describe(self, name: str) -> pb.ModelInfo:
        return self._call(self._models.GetModel, pb.GetModelRequest(name=name))

    def list_models(self) -> list:
        return list(self._call(self._models.ListModels, pb.ListModelsRequest()).models)

    def delete_model(self, name: str) -> None:
        self._call(self._models.DeleteModel, pb.DeleteModelRequest(name=name))

    def producer_offset(self, model: str, producer: str) -> int:
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
            for ack in self._ingest.Ingest(counted()):
                result.batches += 1
                result.pairs_applied += ack.pairs_applied
                result.producer_offset = ack.producer_offset
                result.model_samples = ack.model_samples
        except grpc.RpcError as e:
            raise CmestreamError(e.code(), e.details()) from None
        result.pairs_sent = sent["pairs"]
        if result.batches != sent["batches"]:
            raise CmestreamError(grpc.StatusCode.DATA_LOSS,
                                 f"sent {sent['batches']} batches, got {result.batches} acks")
        return result

    def ingest_pairs(self, model: str, x, y, producer: Optional[str] = None, offset: int = 0,
                     batch: int = 1000) -> IngestResult:
        """Streams pairs (x[i], y[i]) in messages of `batch` pairs. With a producer id the
        daemon applies each pair at most once: offsets count pairs from `offset`."""
        x = _points(x)
        y = _points(y, x.shape[1])
        if x.shape != y.shape:
            raise ValueError(f"x and y: expected equal shapes, got {x.shape} and {y.shape}")
        if batch < 1:
            raise ValueError("batch: expected >= 1")

        def batches():
            for start in range(0, x.shape[0], batch):
                xs, ys = x[start:start + batch], y[start:start + batch]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     x=xs.ravel(), y=ys.ravel()), xs.shape[0]

        return self._stream(batches())

    def ingest_trajectory(self, model: str, states, producer: Optional[str] = None,
                          offset: int = 0, episode: str = "", batch: int = 1000) -> IngestResult:
        """Streams one trajectory (rows of `states`; consecutive rows are pairs). Consecutive
        messages overlap by one state so no pair is lost at a message boundary."""
        s = _points(states)
        n_pairs = max(s.shape[0] - 1, 0)

        def batches():
            for start in range(0, n_pairs, batch):
                seg = s[start:min(start + batch, n_pairs) + 1]
                yield pb.IngestBatch(model=model, producer_id=producer or "",
                                     offset=offset + start if producer else 0,
                                     states=seg.ravel(), episode_id=episode), seg.shape[0] - 1

        return self._stream(batches())

    # -- queries -----------------------------------------------------------------------------

    def refresh(self, model: str, wait: bool = True, timeout: float = 60.0) -> pb.ViewInfo:
        r = self._call(self._queries.Refresh,
                       pb.RefreshRequest(model=model, wait=wait, timeout_seconds=timeout),
                       timeout=self.timeout + (timeout if wait else 0))
        return r.view

    def koopman(self, model: str, points=None, top: int = 6) -> KoopmanResult:
        req = pb.KoopmanRequest(model=model, top=top)
        n = 0
        if points is not None:
            p = _points(points)
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
                             samples=r.view.samples)

    def predict(self, model: str, points) -> np.ndarray:
        """E[Y | X = point] per point, an (n, d) array."""
        p = _points(points)
        r = self._call(self._queries.Predict, pb.PredictRequest(model=model, points=p.ravel()))
        return np.array(r.predictions, dtype=np.float64).reshape(-1, max(r.dim, 1))

    def dictionary(self, model: str):
        """(x_atoms (m_x, d), y_atoms (m_y, d), sigma)."""
        r = self._call(self._queries.GetDictionary, pb.DictionaryRequest(model=model))
        d = max(r.dim, 1)
        return (np.array(r.x_atoms, dtype=np.float64).reshape(-1, d),
                np.array(r.y_atoms, dtype=np.float64).reshape(-1, d), r.sigma)
