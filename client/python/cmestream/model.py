"""Model: a handle on one model of a cmestreamd, with estimator-like methods.

    import cmestream
    with cmestream.Client("127.0.0.1:50051") as c:
        m = c.create("duffing", dim=2, sigma=0.5, dt=0.25)
        m.ingest(X, Y)                 # or m.partial_fit(X, Y); X, Y: (n, 2) arrays
        m.refresh()                    # build a view covering everything ingested
        k = m.koopman(points=grid)     # eigenvalues, timescales, eigenfunctions at grid
        Y_hat = m.predict(X_test)      # (n, 2): E[Y | X]
        labels = m.clusters(grid).point_labels

Continuous models take (n, dim) float arrays; discrete models (num_states=P) take 1-D integer
state ids wherever a continuous model takes points. A wrong shape or dtype, a NaN or an id out
of range is a ValueError naming the argument (and row), raised before anything is sent. Results
are samples first (cmestream.results). Server errors are CmestreamError.

This module imports no other module of the package but its result types: the client it is
given (Client or ShardedClient) creates it, so it must not import them back.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import numpy.typing as npt

from .info import ModelInfo, ViewInfo
from .results import (AggregationResult, CkTestResult, ClustersResult, CountsResult,
                      EmbeddingResult, ForecastResult, IngestResult, KoopmanResult, LatentResult,
                      SeriesForecast, TimescalesResult)


class Model:
    """One model of the daemon behind `client` (a cmestream.Client or ShardedClient). Cheap to
    create; holds no server state."""

    def __init__(self, client: Any, name: str, info: Optional[ModelInfo] = None):
        self.client = client
        self.name = name
        self._info: ModelInfo = info if info is not None else client.describe(name)

    def __repr__(self) -> str:
        kind = (f"num_states={self.num_states}" if self.is_discrete else f"dim={self.dim}")
        return f"Model({self.name!r}, {kind})"

    # -- description --------------------------------------------------------------------------

    def info(self) -> ModelInfo:
        """A fresh ModelInfo (cmestream.info: samples, dictionary sizes, view, sigma choice,
        config, spectrum, sub-views)."""
        self._info = self.client.describe(self.name)
        return self._info

    @property
    def dim(self) -> int:
        """State dimension (0 for a discrete model)."""
        return self._info.config.dim

    @property
    def num_states(self) -> int:
        """Number of states of a discrete model (0 for a continuous one)."""
        return self._info.config.num_states

    @property
    def is_discrete(self) -> bool:
        return self.dim == 0

    @property
    def samples(self) -> int:
        """Pairs applied so far (asks the daemon)."""
        return self.info().samples

    # -- ingestion ----------------------------------------------------------------------------

    def ingest(self, x: Optional[npt.ArrayLike] = None, y: Optional[npt.ArrayLike] = None, *,
               trajectory: Optional[npt.ArrayLike] = None, producer: Optional[str] = None,
               offset: int = 0, episode: str = "", batch: int = 1000) -> IngestResult:
        """Streams transitions: pairs (x[i] -> y[i]), or one `trajectory` whose consecutive
        rows are pairs. Continuous models: (n, dim) arrays; discrete: 1-D state ids. With a
        `producer` id each pair is applied at most once (offsets count pairs from `offset`)."""
        if (trajectory is None) == (x is None):
            raise ValueError("ingest: give x and y (pairs) or trajectory=, not both")
        if trajectory is not None:
            if self.is_discrete:
                return self.client.ingest_state_ids(self.name, trajectory, producer=producer,
                                                    offset=offset, episode=episode, batch=batch)
            return self.client.ingest_trajectory(self.name, trajectory, producer=producer,
                                                 offset=offset, episode=episode, batch=batch)
        if y is None:
            raise ValueError("ingest: x needs y (the successor of each x)")
        if self.is_discrete:
            return self.client.ingest_ids(self.name, x, y, producer=producer, offset=offset,
                                          batch=batch)
        return self.client.ingest_pairs(self.name, x, y, producer=producer, offset=offset,
                                        batch=batch)

    def partial_fit(self, x: npt.ArrayLike, y: npt.ArrayLike, *,
                    producer: Optional[str] = None, offset: int = 0,
                    batch: int = 1000) -> "Model":
        """scikit-learn's incremental-learning name for ingest(x, y); returns self."""
        self.ingest(x, y, producer=producer, offset=offset, batch=batch)
        return self

    def producer_offset(self, producer: str) -> int:
        """Pairs of `producer` applied so far (where a resumed stream starts)."""
        return self.client.producer_offset(self.name, producer)

    # -- views --------------------------------------------------------------------------------

    def refresh(self, wait: bool = True, timeout: float = 60.0) -> ViewInfo:
        """Rebuilds the view; with wait, returns once it covers every sample applied so far.
        Returns the ViewInfo (version, samples, build times) of the view then published."""
        return self.client.refresh(self.name, wait=wait, timeout=timeout)

    def koopman(self, points: Optional[npt.ArrayLike] = None, top: int = 6) -> KoopmanResult:
        """Leading `top` Koopman eigenpairs; eigenfunctions (n, k) at `points` ((n, dim))."""
        return self.client.koopman(self.name, points=points, top=top)

    def predict(self, x: npt.ArrayLike) -> np.ndarray:
        """One-step forecast E[Y | X = x] for each row of x: an (n, dim) array."""
        return self.client.predict(self.name, x)

    def _query(self, x):
        """(points, state_ids) keyword pair for a query at x."""
        if x is None:
            return {"points": None, "state_ids": None}
        return {"state_ids": x} if self.is_discrete else {"points": x}

    def embedding(self, x: Optional[npt.ArrayLike] = None) -> EmbeddingResult:
        """Rank-r embedding of the points (or state ids) x and the singular values."""
        return self.client.embedding(self.name, **self._query(x))

    def transform(self, x: npt.ArrayLike) -> np.ndarray:
        """scikit-learn's name for the embedding: an (n, r) array Psi(x)."""
        return self.embedding(x).embedding

    def clusters(self, x: Optional[npt.ArrayLike] = None) -> ClustersResult:
        """Metastable clusters; `point_labels` labels the points (or state ids) x."""
        return self.client.clusters(self.name, **self._query(x))

    def counts(self) -> CountsResult:
        """Transition counts over the model's discretization."""
        return self.client.counts(self.name)

    def aggregation(self) -> AggregationResult:
        """Soft state aggregation (created with meta_states=R)."""
        return self.client.aggregation(self.name)

    def latent(self, x: Optional[npt.ArrayLike] = None) -> LatentResult:
        """Latent-state model (created with latent_states=k): densities and posteriors (n, k)
        at the points (or state ids) x."""
        return self.client.latent(self.name, **self._query(x))

    def forecast(self, window: npt.ArrayLike, horizon: int = 1) -> ForecastResult:
        """Forecast of the next `horizon` observations after `window` (oldest first)."""
        if self.is_discrete:
            return self.client.forecast(self.name, window_ids=window, horizon=horizon)
        return self.client.forecast(self.name, window=window, horizon=horizon)

    def timescales(self) -> TimescalesResult:
        """Implied timescales at every lag of the model (created with lags=[...])."""
        return self.client.timescales(self.name)

    def cktest(self, clusters: int = 0, steps: int = 0, lag: int = 0) -> CkTestResult:
        """Chapman-Kolmogorov test on the metastable sets (0: the model's defaults)."""
        return self.client.cktest(self.name, clusters=clusters, steps=steps, lag=lag)

    def forecast_series(self, series: npt.ArrayLike, horizon: int = 1) -> SeriesForecast:
        """Rolling forecasts over `series` (continuous models; not learned)."""
        return self.client.forecast_series(self.name, series, horizon=horizon)

    def dictionary(self) -> Tuple[np.ndarray, np.ndarray, float]:
        """(x_atoms (m_x, dim), y_atoms (m_y, dim), sigma) of the current view."""
        return self.client.dictionary(self.name)

    # -- lifecycle ----------------------------------------------------------------------------

    def delete(self) -> None:
        """Deletes the model and its durable state on the daemon."""
        self.client.delete_model(self.name)
