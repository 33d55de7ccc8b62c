"""Results of the queries: dataclasses of numpy arrays, one orientation everywhere.

Samples first, as numpy, scikit-learn and deeptime: an array with one entry per query point has
the points along axis 0 (n rows), and per-mode or per-component values along axis 1. So
`KoopmanResult.eigenfunctions[i, l]` is eigenfunction l at point i, like
`EmbeddingResult.embedding[i, j]` and `LatentResult.posteriors[i, h]`. Every docstring below
gives the shape of every array. Letters: n query points, d the model's dim, k eigenpairs or
latent components, r the embedding rank, K clusters, P states of a discrete model.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np

from .info import FitSummary, KoopmanHeadline, SpectrumInfo, from_proto


@dataclasses.dataclass
class IngestResult:
    """What one ingest call did (all counts of pairs, no arrays).

    Attributes:
        batches: messages acknowledged.
        pairs_sent: pairs streamed by this call.
        pairs_applied: pairs the daemon applied (fewer than sent when a producer id made it
            skip pairs it had already applied).
        producer_offset: the producer's applied offset after the call (0 without a producer).
        model_samples: the model's sample count after the last batch.
        alarms_raised: change alarms the call's pairs raised (cmestream alarms lists them).
        admitted_atoms: dictionary atoms admitted (X side) by the call's pairs.
        spectral_epochs: spectral-moment epochs the call's pairs started.
        anomaly_index, anomaly_scores: with anomaly_scores=True on a model with alarms, the
            stream index (Alarm.index's numbering) and the per-pair anomaly score in [0, 1] of
            every pair the call's pairs had scored (docs/algorithms.md §12.15): 1 on a pair that
            raised an alarm, else the tests' largest statistic over its threshold; None when not
            asked. Pairs applied before a daemon restart whose ack was lost have no score here.
    """
    batches: int
    pairs_sent: int
    pairs_applied: int
    producer_offset: int
    model_samples: int
    alarms_raised: int = 0
    admitted_atoms: int = 0
    spectral_epochs: int = 0
    anomaly_index: Optional[np.ndarray] = None
    anomaly_scores: Optional[np.ndarray] = None


@dataclasses.dataclass
class KoopmanResult:
    """Leading Koopman eigenpairs of the current view.

    Attributes:
        eigenvalues: (k,) complex; the stationary mode first, then |mu| descending.
        rates: (k,) complex, log(mu) / dt.
        timescales: (k,) float, -dt / log|mu| (inf for |mu| >= 1).
        eigenfunctions: (n, k) complex; [i, l] is eigenfunction l at query point i
            ((0, k) without query points).
        dt: the model's sampling interval.
        view_version, samples: the view the reply was computed from.
        stationary: (k,) bool, the stationary mode (eigenvalue exactly 1).
        excess: (k,) float, max(0, |mu| - 1).
        spectrum: SpectrumInfo (estimator, epoch, held-out score, cross-view timescales,
            warnings); None if the daemon sent none.
        periods: (k,) float, 2 pi dt / |arg mu| (NaN where mu is real).
        headline: KoopmanHeadline, the one timescale to quote with its standard error and the
            cycles ranked by share; None if the daemon sent none.
        amplitudes: (k,) float, RMS of each mode's component of the observed channels (the
            model's scaled units; a conjugate pair is one oscillation, both entries alike).
        shares: (k,) float, the fraction of the observed channels' variance each mode explains
            alone (0 for the stationary mode); docs/algorithms.md §7.3.
    """
    eigenvalues: np.ndarray
    rates: np.ndarray
    timescales: np.ndarray
    eigenfunctions: np.ndarray
    dt: float
    view_version: int
    samples: int
    stationary: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=bool))
    excess: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    spectrum: Optional[SpectrumInfo] = None
    periods: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    headline: Optional[KoopmanHeadline] = None
    amplitudes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    shares: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


@dataclasses.dataclass
class CountsResult:
    """Transition counts over the model's discretization (P states: atoms, or state ids).

    Attributes:
        entries: (nnz, 3) float rows (from, to, count); counts are floats (forgetting decays
            them).
        visits: (P,) visits per state.
        stationary: (P,) stationary weights.
        num_states: P.
        states: (P, d) atom coordinates; (P, 0) for a discrete model.
        view_version, samples: the view the reply was computed from.
    """
    entries: np.ndarray
    visits: np.ndarray
    stationary: np.ndarray
    num_states: int
    states: np.ndarray
    view_version: int
    samples: int

    def dense(self) -> np.ndarray:
        """The count matrix N as a (P, P) array, N[i, j] = counts from i to j."""
        n = np.zeros((self.num_states, self.num_states))
        for i, j, c in self.entries:
            n[int(i), int(j)] += c
        return n


@dataclasses.dataclass
class EmbeddingResult:
    """Rank-r state embedding.

    Attributes:
        embedding: (n, r), Psi(x) per query point.
        singular_values: (s,) every kept singular value, descending (s >= r).
        singular_value_gaps: (s - 1,) sigma_i - sigma_{i+1}.
        view_version, samples: the view the reply was computed from.
        summary: the estimator's FitSummary.
    """
    embedding: np.ndarray
    singular_values: np.ndarray
    singular_value_gaps: np.ndarray
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None


@dataclasses.dataclass
class ClustersResult:
    """Metastable clusters over m representatives (atoms or states).

    Attributes:
        ids: (m,) int, representative atom index or state id.
        coordinates: (m, d) representative atoms; (m, 0) for a discrete model.
        weights: (m,) stationary weight of each representative.
        labels: (m,) int, cluster of each representative.
        point_labels: (n,) int, cluster of each query point.
        transition_matrix: (K, K) coarse-grained chain, row-stochastic.
        masses: (K,) stationary mass per cluster.
        timescales: (K-1,) implied timescales -dt/ln|lambda| of transition_matrix, slowest
            first, the stationary mode left out (lower bounds: a hard partition underestimates).
        inertia: weighted k-means inertia.
        view_version, samples: the view the reply was computed from.
        summary: the estimator's FitSummary.
    """
    ids: np.ndarray
    coordinates: np.ndarray
    weights: np.ndarray
    labels: np.ndarray
    point_labels: np.ndarray
    transition_matrix: np.ndarray
    masses: np.ndarray
    timescales: np.ndarray
    inertia: float
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None


@dataclasses.dataclass
class AggregationResult:
    """Soft state aggregation of p states into R meta-states (docs/algorithms.md §4).

    Attributes:
        state_ids: (p,) int, the state (or atom index) of each row.
        coordinates: (p, d) atoms of a continuous model; (p, 0) for a discrete one.
        V: (p, R) disaggregation matrix, columns sum to 1.
        U: (p, R) aggregation matrix.
        anchors: list of R int arrays, the anchor rows of each meta-state.
        partition: (p,) int, meta-state per row.
        excluded: (e,) int, state ids with no incoming transitions.
        distance_to_empirical: mean row total variation |U V^T - P_hat|.
        view_version, samples: the view the reply was computed from.
        summary: the estimator's FitSummary.
    """
    state_ids: np.ndarray
    coordinates: np.ndarray
    V: np.ndarray
    U: np.ndarray
    anchors: List[np.ndarray]
    partition: np.ndarray
    excluded: np.ndarray
    distance_to_empirical: float
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None


@dataclasses.dataclass
class LatentResult:
    """Latent-state (mixture) model with k components.

    Attributes:
        weights: (k,) mixing weights.
        densities: (n, k); [i, h] is the density of component h at query point i.
        posteriors: (n, k); [i, h] is P(component h | query point i).
        view_version, samples: the view the reply was computed from.
        summary: the estimator's FitSummary.
    """
    weights: np.ndarray
    densities: np.ndarray
    posteriors: np.ndarray
    view_version: int
    samples: int
    summary: Optional[FitSummary] = None


@dataclasses.dataclass
class ForecastSkill:
    """The model's live one-step skill: each pair scored before it was learned (NaN before the
    first scored pair; docs/algorithms.md section 11).

    Attributes:
        rmse: root-mean-square one-step error of the model's forecasts.
        rmse_persistence: the same pairs forecast by "next = last".
        ratio: rmse / rmse_persistence (below 1: the model beats persistence).
        pairs: pairs scored.
    """
    rmse: float
    rmse_persistence: float
    ratio: float
    pairs: int


@dataclasses.dataclass
class ForecastHorizonSkill:
    """The live skill of the candidate forecasts at one horizon (docs/algorithms.md section 11
    "Served forecast"): each candidate iterated `horizon` steps from the same origins, scored on
    rows before they were learned (NaN before the first).

    Attributes:
        horizon: h >= 1.
        pairs: h-step forecasts scored (every candidate on the same ones).
        rmse_regression: the forecast regression.
        rmse_linear: its linear part alone (an AR on the same state).
        rmse_persistence: "next = last" repeated h steps.
        method: the candidate served at this horizon ("regression", "linear", "persistence").
    """
    horizon: int
    pairs: int
    rmse_regression: float
    rmse_linear: float
    rmse_persistence: float
    method: str


@dataclasses.dataclass
class ForecastResult:
    """Forecast of the next H observations after a window.

    Attributes:
        forecast: (H, d) expected observations (H, 1 for a discrete model: the expected id).
        distribution: (H, P) probabilities of a discrete model; (H, 0) for a continuous one.
        state: (s,) the filtered predictive state (predictive-state models; (0,) otherwise).
        view_version, samples: the view the reply was computed from.
        horizon: H.
        dim: d, the observation dimension.
        method: what served the first step: "regression" (the forecast regression,
            continuous models), "linear" (its linear part), "persistence" (the newest row
            repeated) or "predictive_state" (the predictive-state filter). A continuous model
            serves at each horizon the candidate with the smallest live error over >= 8 scored
            forecasts of that horizon.
        skill: ForecastSkill of a continuous model; None otherwise.
        step_methods: the method of each step 1..H (continuous models; empty otherwise).
        horizon_skill: ForecastHorizonSkill per horizon kept (continuous models).
    """
    forecast: np.ndarray
    distribution: np.ndarray
    state: np.ndarray
    view_version: int
    samples: int
    horizon: int = 1
    dim: int = 0
    method: str = ""
    skill: Optional[ForecastSkill] = None
    step_methods: List[str] = dataclasses.field(default_factory=list)
    horizon_skill: List[ForecastHorizonSkill] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SeriesForecast:
    """Rolling forecasts over a series (not learned).

    Attributes:
        start: the 0-based row at which the first complete window ends.
        forecasts: (n - start, H, d); forecasts[i, h] forecasts row start + i + h + 1 from the
            rows up to start + i.
        horizon: H.
        dim: d.
        skill: the model's live one-step ForecastSkill.
        view_version, samples: the view the reply was computed from.
        method, step_methods, horizon_skill: as in ForecastResult.
    """
    start: int
    forecasts: np.ndarray
    horizon: int
    dim: int
    skill: ForecastSkill
    view_version: int
    samples: int
    method: str = ""
    step_methods: List[str] = dataclasses.field(default_factory=list)
    horizon_skill: List[ForecastHorizonSkill] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LagScan:
    """Implied timescales against lag (units of dt, slowest first, stationary mode left out):
    one row per lag (L lags), one column per mode (M modes).

    Attributes:
        lags: (L,) int, lags in samples.
        timescales: (L, M); NaN: undefined, inf: |mu| >= 1.
        stderr: (L, M) jackknife standard errors (NaN with fewer than 2 blocks).
        samples: (L,) pairs per lag.
        blocks: jackknife blocks.
    """
    lags: np.ndarray
    timescales: np.ndarray
    stderr: np.ndarray
    samples: np.ndarray
    blocks: int


@dataclasses.dataclass
class TimescalesResult:
    """Lag scans of the Koopman model (continuous models) and the count chain.

    Attributes:
        estimator: the primary scan, "koopman" (continuous) or "counts".
        koopman: LagScan, or None for a discrete model.
        counts: LagScan.
        dt: the model's sampling interval.
        view_version, samples: the view the reply was computed from.
    """
    estimator: str
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
    """Chapman-Kolmogorov test: predicted T(lag)^k vs estimated T(k lag), one row per step k
    (S steps) over K metastable sets; [s, i, j] is the probability from set i to set j.

    Attributes:
        lag: base lag tau in samples.
        clusters: K.
        steps: (S,) int, the k of each row.
        predicted: (S, K, K) T(lag)^k.
        estimated: (S, K, K) T(k lag).
        stderr: (S, K, K) standard errors of `estimated`.
        predicted_stderr: (S, K, K) standard errors of `predicted`.
        max_deviation, max_deviation_stderr: max |predicted - estimated| and its s.e.
        blocks: jackknife blocks.
    """
    lag: int
    clusters: int
    steps: np.ndarray
    predicted: np.ndarray
    estimated: np.ndarray
    stderr: np.ndarray
    predicted_stderr: np.ndarray
    max_deviation: float
    max_deviation_stderr: float
    blocks: int


@dataclasses.dataclass
class CkTestResult:
    """Chapman-Kolmogorov tests of the Koopman model and of the count chain.

    Attributes:
        estimator: the primary test, "koopman" (continuous) or "counts"; see `primary`.
        koopman: CkResult, or None for a discrete model.
        counts: CkResult.
        view_version, samples: the view the reply was computed from.
    """
    estimator: str
    koopman: Optional[CkResult]
    counts: CkResult
    view_version: int
    samples: int

    @property
    def primary(self) -> CkResult:
        return self.koopman if self.estimator == "koopman" and self.koopman else self.counts


# -- conversion from the wire -----------------------------------------------------------------

def complex_array(values) -> np.ndarray:
    """(k,) complex128 of repeated Complex messages."""
    return np.array([complex(c.re, c.im) for c in values], dtype=np.complex128)


def samples_first(values, per_sample: int, n: int) -> np.ndarray:
    """An (n, per_sample) C-contiguous array of a flat reply laid out per_sample-major
    ([h * n + i]: all points of component 0, then of component 1, ...)."""
    return np.ascontiguousarray(np.array(values, dtype=np.float64).reshape(per_sample, n).T)


def eigenfunctions_from_proto(eigenfunctions, k: int, n: int) -> np.ndarray:
    """(n, k) complex: column l holds eigenfunction l at the n query points."""
    ef = np.zeros((n, k), dtype=np.complex128)
    for l, f in enumerate(eigenfunctions[:k]):
        vals = np.array([(c.re, c.im) for c in f.values], dtype=np.float64).reshape(-1, 2)
        ef[:vals.shape[0], l] = vals[:, 0] + 1j * vals[:, 1]
    return ef


def lag_scan_from_proto(s) -> LagScan:
    m = max((len(r.timescales) for r in s.per_lag), default=0)
    return LagScan(lags=np.array(s.lags, dtype=np.int64),
                   timescales=np.array([list(r.timescales) for r in s.per_lag],
                                       dtype=np.float64).reshape(len(s.per_lag), m),
                   stderr=np.array([list(r.stderr) for r in s.per_lag],
                                   dtype=np.float64).reshape(len(s.per_lag), m),
                   samples=np.array([r.samples for r in s.per_lag], dtype=np.float64),
                   blocks=s.blocks)


def ck_from_proto(c) -> CkResult:
    k = c.clusters
    s = len(c.steps)

    def cube(field):
        return np.array([list(getattr(st, field)) for st in c.steps],
                        dtype=np.float64).reshape(s, k, k)
    return CkResult(lag=c.lag, clusters=k, steps=np.array([st.steps for st in c.steps],
                                                          dtype=np.int64),
                    predicted=cube("predicted"), estimated=cube("estimated"),
                    stderr=cube("stderr"), predicted_stderr=cube("predicted_stderr"),
                    max_deviation=c.max_deviation, max_deviation_stderr=c.max_deviation_stderr,
                    blocks=c.blocks)


@dataclasses.dataclass
class Alarm:
    """One change alarm (docs/user-guide.md "Change alarms").

    Attributes:
        model: the model's name.
        index: 0-based position in the model's stream of the pair whose arrival raised it.
        time: unix seconds its batch arrived (as the daemon logged it).
        score, threshold: the CUSUM statistic at the alarm and the level it crossed.
        channels: 0-based raw channels, most changed first (continuous models).
        kind: "dynamics", "noise" (only the size of the residuals changed), or "spike" (one
            step y - x beyond the tail of the steps so far; score = |step|, threshold = the
            tail's bound; docs/algorithms.md §12.14).
        onset: the estimated index at which the change began.
        direction: "up" (forecast errors grew) or "down".
    """
    model: str
    index: int
    time: float
    score: float
    threshold: float
    channels: List[int]
    kind: str
    onset: int
    direction: str

    def as_dict(self) -> dict:
        """The JSON form of `cmestream alarms --json` (one entry of "alarms")."""
        return {"index": self.index, "time": self.time, "score": self.score,
                "threshold": self.threshold, "channels": list(self.channels),
                "kind": self.kind, "onset": self.onset}


@dataclasses.dataclass
class AlarmList:
    """What list_alarms returns: the alarms kept with index >= since, oldest first.

    Attributes:
        model: the model's name.
        armed_at: stream index at which the detector armed (-1: not yet).
        alarms: list of Alarm.
        dropped: alarms older than every one kept (the model keeps its last 1,000), counted
            when `since` is at or before the first kept alarm's index.
    """
    model: str
    armed_at: int
    alarms: List[Alarm]
    dropped: int


def alarm_from_proto(a) -> Alarm:
    return from_proto(Alarm, a, channels=list(a.channels))
