"""What describe() and refresh() return: plain dataclasses mirroring the daemon's ModelInfo,
ModelConfig, ViewInfo, SigmaSelection, SpectrumInfo, TimescaleComparison, SubViewStatus and
FitSummary messages field for field (same names, so code written against the protobuf
messages keeps working), with repeated numbers as numpy arrays. A test compares every field
list with the proto, so a field added there cannot be forgotten here.

No protobuf object leaves the client: these are built by the `*_from_proto` functions below.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import numpy as np


@dataclasses.dataclass
class FitSummary:
    """How a sub-view's fit ended (docs/user-guide.md, "Reading a fit summary").

    Attributes:
        termination: "success", or what went wrong ("rank_clipped", "numerical_trouble").
        message: why, when termination is not "success".
        brief_report: one line for people.
        figures: named numbers of the estimator (e.g. "kept_x", "svd_iterations", "inertia");
            absent names are not applicable.
    """
    termination: str
    message: str
    brief_report: str
    figures: Dict[str, float]

    @staticmethod
    def from_proto(s) -> "FitSummary":
        return from_proto(FitSummary, s, figures=dict(s.figures))


@dataclasses.dataclass
class ViewInfo:
    """The published view a reply was computed from (what refresh() returns).

    Attributes:
        version: 0 = no view yet.
        samples: pairs the view reflects.
        age_seconds: time since the view was built.
        build_seconds: how long the refresh took.
        build_seconds_by_view: sub-view ("koopman", "embedding", ...) -> seconds.
        lag_pairs: pairs the model learned that the view does not reflect yet (describe; 0 in
            query replies): background refreshes share the daemon's --refresh-budget.
    """
    version: int
    samples: int
    age_seconds: float
    build_seconds: float
    build_seconds_by_view: Dict[str, float]
    lag_pairs: int = 0


@dataclasses.dataclass
class SigmaSelection:
    """How the kernel bandwidth was chosen.

    Attributes:
        automatic: False for a bandwidth given at creation.
        chosen: the bandwidth in use.
        median_distance: median pairwise distance of the warm-up states.
        candidates: (c,) bandwidths scored.
        scores: (c,) held-out VAMP-2 score per candidate (higher is better).
        warmup_pairs: pairs the choice rests on.
        note: what was degenerate in the warm-up and the value chosen for it ("" if nothing).
    """
    automatic: bool
    chosen: float
    median_distance: float
    candidates: np.ndarray
    scores: np.ndarray
    warmup_pairs: int
    note: str = ""


@dataclasses.dataclass
class TimescaleComparison:
    """The slowest non-stationary timescale (units of dt) by three estimators of the same model.

    Attributes:
        koopman, count_chain, embedding: the three estimates (NaN: view unavailable).
        relative_disagreement: (max - min) / min over the available ones.
        threshold: above it, `warning` is set.
        warning: bool.
        lag_scan: the lag view's figure at lag `lag_scan_lag` (samples).
        lag_scan_stderr: its delete-one-block jackknife standard error over `lag_scan_blocks`
            contiguous blocks (docs/algorithms.md §8.3).
        lag_scan_lag, lag_scan_blocks: ints.
        relative_stderr: relative s.e. of a slowest timescale on this stream (lag_scan_stderr /
            lag_scan; NaN without a lag scan).
        diagnostic: which case of the comparison holds (agreement within the error bars, a
            disagreement beyond them, or a non-stationary stream).
    """
    koopman: float
    count_chain: float
    embedding: float
    relative_disagreement: float
    threshold: float
    warning: bool
    lag_scan: float
    lag_scan_stderr: float
    lag_scan_lag: int
    lag_scan_blocks: int
    relative_stderr: float = float("nan")
    diagnostic: str = ""


@dataclasses.dataclass
class SpectrumInfo:
    """How the Koopman spectrum was estimated and how far to trust it (docs/user-guide.md).

    Attributes:
        estimator: "spectral-moments" (consistent) or "cme" (until the first epoch has data).
        epoch, epoch_samples, epoch_weight: the basis epoch the spectrum rests on, its pairs and
            their (forgotten) weight.
        ready: the epoch has enough samples to serve.
        basis_size: atoms in the epoch's basis.
        heldout_score: prequential VAMP-E of view `heldout_view_version` on the `heldout_pairs`
            pairs ingested after it (NaN until a window of >= 1000 pairs completed).
        score_rank: singular functions scored, the constant included.
        ridge: the chosen regularizer.
        ridge_grid: (g,) the regularizers scored.
        ridge_scores: (g,) their cross-validated scores.
        warnings: list of strings (|mu| > 1 modes, a not-ready epoch, view disagreement).
        comparison: TimescaleComparison.
        selection_score: cross-validated VAMP-E of `ridge`.
        heldout_pairs, heldout_view_version: what heldout_score rests on.
        epochs: basis epochs begun so far (1 + re-bases of the landmark basis).
        data_share: share of the stream's pairs inside the estimate (epoch_samples / pairs).
    """
    estimator: str
    epoch: int
    epoch_samples: int
    epoch_weight: float
    ready: bool
    basis_size: int
    heldout_score: float
    score_rank: int
    ridge: float
    ridge_grid: np.ndarray
    ridge_scores: np.ndarray
    warnings: List[str]
    comparison: TimescaleComparison
    selection_score: float
    heldout_pairs: int
    heldout_view_version: int
    epochs: int = 0
    data_share: float = float("nan")


@dataclasses.dataclass
class Cycle:
    """One oscillation of the Koopman spectrum and the share of the observed signal it carries
    (docs/algorithms.md §7.3).

    Attributes:
        period: units of time.
        timescale: decay time -dt/log|mu| (inf: undamped).
        share: fraction of the observed channels' variance it explains alone (0..1).
        amplitude: RMS of its component, in the model's scaled units (A sin: A / sqrt 2).
        harmonic: k, period ~ fundamental / k; 1 for a fundamental.
        group_share: a fundamental: its share plus its harmonics'.
        harmonics: a fundamental's harmonics (Cycle, by share); empty for a harmonic.
        mode: index of the eigenpair (Im mu > 0) among the view's stored eigenpairs.
        peak: share x min(timescale, time the data cover), the height of its spectral peak:
            what ranks the cycles; group_peak: a fundamental's plus its harmonics'.
    """
    period: float
    timescale: float
    share: float
    amplitude: float
    harmonic: int
    group_share: float
    harmonics: List["Cycle"]
    mode: int
    peak: float
    group_peak: float


def cycle_from_proto(c) -> Cycle:
    return from_proto(Cycle, c, harmonics=[cycle_from_proto(h) for h in c.harmonics])


@dataclasses.dataclass
class KoopmanHeadline:
    """The estimate the Koopman reply trusts most (docs/algorithms.md §7.1).

    Attributes:
        timescale: slowest resolved non-stationary timescale (units of time); NaN: none.
        stderr: its standard error; NaN when there is none (see note).
        view: "koopman", "lag-scan" or "koopman-fallback"; empty: none.
        nonstationary: the stream is not stationary (trend, drifting mean, transient).
        nonstationary_reason: what was seen; empty when stationary.
        note: where the error bar comes from, or why there is none.
        cycles: the oscillations ranked by the share of the observed variance they carry,
            harmonics grouped under their fundamental (Cycle); cycles[0] is the cycle to quote.
    """
    timescale: float
    stderr: float
    view: str
    nonstationary: bool
    nonstationary_reason: str
    note: str
    cycles: List[Cycle] = dataclasses.field(default_factory=list)


def headline_from_proto(h) -> KoopmanHeadline:
    return from_proto(KoopmanHeadline, h, cycles=[cycle_from_proto(c) for c in h.cycles])


@dataclasses.dataclass
class SubViewStatus:
    """One sub-view of the latest view.

    Attributes:
        name: "counts", "embedding", "clusters", "aggregation", "latent", "predictive", "lags".
        available: bool.
        error: why not available (too little data, not enabled and how to enable it, ...).
        summary: its FitSummary; None when the estimator reports none.
    """
    name: str
    available: bool
    error: str
    summary: Optional[FitSummary]


@dataclasses.dataclass
class InputScaling:
    """A continuous model's input conditioning (ModelConfig.scale): the kernel sees
    z_j = (v_j - center_j) / scale_j (docs/algorithms.md §1.13).

    Attributes:
        mode: "auto" or "none".
        frozen: the warm-up ended and the input stage is estimated (center/scale are empty
            before, and with mode "none").
        center: (dim,) per-channel center in the user's units (the warm-up median).
        scale: (dim,) per-channel scale in the user's units (> 0).
        spread: per channel, which estimate gave the scale: "iqr", "std" or "unit".
        reduce: principal directions the learner keeps after scaling (ModelConfig.reduce;
            0: no reduction; docs/algorithms.md §1.15).
        explained_variance: once frozen with reduce > 0, the share of the scaled warm-up's
            variance in the kept directions (else 0).
        reduce_variances: (reduce,) the kept directions' variances, descending (empty before).
    """
    mode: str
    frozen: bool
    center: np.ndarray
    scale: np.ndarray
    spread: List[str]
    reduce: int = 0
    explained_variance: float = 0.0
    reduce_variances: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


@dataclasses.dataclass
class ModelConfig:
    """A model's configuration as the daemon stores it, every default filled in (meanings and
    ranges: proto/cmestream/v1/cmestream.proto ModelConfig). `lambda_` is the proto's `lambda`
    (a Python keyword). `sigma` is 0 for "auto" (and for discrete models); dim is 0 for a
    discrete model (num_states > 0). Fields the daemon leaves unset are None."""
    name: str
    dim: int
    sigma: Optional[float]
    eta: Optional[float]
    lambda_: Optional[float]
    epsilon: Optional[float]
    max_dict: Optional[int]
    dt: Optional[float]
    seed: Optional[int]
    auto_sigma_warmup: Optional[int]
    refresh_interval_seconds: Optional[float]
    refresh_every_samples: Optional[int]
    step_decay_samples: Optional[float]
    step_decay_power: Optional[float]
    averaging: Optional[bool]
    num_states: int
    forgetting: Optional[float]
    rff_features: Optional[int]
    rank: Optional[int]
    clusters: Optional[int]
    meta_states: Optional[int]
    anchor_threshold: Optional[float]
    vertex_hunting: str
    latent_states: Optional[int]
    tensor_restarts: Optional[int]
    tensor_iterations: Optional[int]
    reservoir: Optional[int]
    window: Optional[int]
    ridge_stage1: Optional[float]
    ridge_stage2: Optional[float]
    lags: List[int]
    scale: Optional[str]
    delays: Optional[int] = None
    delay_stride: Optional[int] = None
    alarms: Optional[str] = None
    alarm_rate: Optional[float] = None
    on_change: Optional[str] = None
    reduce: Optional[int] = None
    fork_of: Optional[str] = None  # set on a fork (on_change "fork"): the model it forked from
    fork_index: Optional[int] = None  # ... and that model's alarm index it starts at
    forecast_features: Optional[int] = None  # random features of the forecast regression


@dataclasses.dataclass
class AlarmStatus:
    """A model's change detector (ModelConfig.alarms "on"; docs/user-guide.md "Change alarms").

    Attributes:
        scored: pairs scored so far (the first ones train the alarms' forecast).
        armed_at: stream index at which the detector armed (-1: not yet).
        alarms_total: alarms raised since the model was created.
        score: the CUSUM statistic now as a fraction of the threshold (an alarm at 1).
        threshold: the CUSUM threshold h.
        alarm_rate: target false alarms per 10,000 stationary pairs.
        rearmed: "alarm monitor from format vN re-armed at pair P" for a model restored from a
            snapshot or export whose alarm monitor had an older format (its records and alarm
            count kept, its tests rebuilt from pair P on); None otherwise.
    """
    scored: int
    armed_at: int
    alarms_total: int
    score: float
    threshold: float
    alarm_rate: float
    rearmed: Optional[str] = None


@dataclasses.dataclass
class ModelInfo:
    """What describe(), create_model(), import_model() and list_models() return.

    Attributes:
        config: ModelConfig.
        samples: pairs applied to the learner.
        pending_warmup: pairs buffered while sigma "auto" is being chosen.
        dictionary_size, dictionary_size_y: atoms on the X and Y side (m_x, m_y).
        forced_compressions, forced_error_sum: dictionary-cap compressions and their error.
        inverse_drift: max ||R (G + gamma I) R^T - I||_F at the last check (estimate).
        view: ViewInfo of the latest view (version 0: none yet).
        sigma_selection: SigmaSelection.
        batches_applied: ingest batches applied.
        created_unix_seconds: creation time.
        state_digest: 64-bit digest of the full learned state (equal for equal states), only
            when asked for (describe(..., state_digest=True)); else None.
        spectrum: SpectrumInfo of the latest view; None before the first view.
        sub_views: list of SubViewStatus of the latest view (empty before the first view).
        input_scaling: InputScaling (continuous models; None for discrete ones).
        state_dim: values per learned state: dim x delays (continuous), 1 (discrete).
        alarms: AlarmStatus of a model with change alarms; None without.
        estimators: the estimators the model runs, in the order a pair meets them, as
            EstimatorCost (name, per-pair multiply-adds at the current sizes, formula).
        failure: None, or ModelFailure once the model failed (it refuses data and queries
            until deleted; the daemon and the other models go on).
        memory: ModelMemory, the model's share of the daemon's memory budget, when asked for
            (describe(..., memory=True)); else None.
        evicted: True while the model is evicted (idle for --evict-idle-seconds: its learner is
            on disk; its view and alarms answer, its next batch loads it back).
        idle_seconds: seconds since its last batch or view query.
        last_reload_seconds: how long its last load back took (0: never evicted and reloaded).
    """
    config: ModelConfig
    samples: int
    pending_warmup: int
    dictionary_size: int
    dictionary_size_y: int
    forced_compressions: int
    forced_error_sum: float
    inverse_drift: float
    view: ViewInfo
    sigma_selection: SigmaSelection
    batches_applied: int
    created_unix_seconds: float
    state_digest: Optional[int]
    spectrum: Optional[SpectrumInfo]
    sub_views: List[SubViewStatus]
    input_scaling: Optional[InputScaling] = None
    state_dim: int = 0
    alarms: Optional[AlarmStatus] = None
    estimators: List["EstimatorCost"] = dataclasses.field(default_factory=list)
    failure: Optional["ModelFailure"] = None
    memory: Optional["ModelMemory"] = None
    evicted: bool = False
    idle_seconds: float = 0.0
    last_reload_seconds: float = 0.0


@dataclasses.dataclass
class ModelMemory:
    """A model's share of the daemon's memory budget (--max-memory; service/README.md "Memory"):
    bytes estimated from the sizes its state is allocated at (dictionary capacity and atoms,
    spectral bases), not measured.

    Attributes:
        charged_bytes: counted for this model in the budget.
        dictionary_cap: the dictionary cap of its last batch (0: none, max_dict).
        growth_denied: batches whose dictionary reached the cap the budget set (growth denied).
        budget_bytes: the daemon's budget.
        committed_bytes: what all its models are charged.
        models: models charged (the fair share is 0.9 x budget_bytes / models).
    """
    charged_bytes: float
    dictionary_cap: int
    growth_denied: int
    budget_bytes: float
    committed_bytes: float
    models: int


@dataclasses.dataclass
class ModelFailure:
    """Why a model failed: its learner could not go on with a record of its stream.

    Attributes:
        sequence: the write-ahead-log record it could not learn (0 without a log).
        reason: what failed.
    """
    sequence: int
    reason: str


@dataclasses.dataclass
class EstimatorCost:
    """One estimator of a model and its per-pair arithmetic (an operation count at the model's
    current sizes, not a measurement; docs/benchmarks.md "Per-pair arithmetic of a model").

    Attributes:
        name: "input", "alarms", "cme", "counts", "embedding", "spectral", "lags", "forecast",
            "latent" or "predictive".
        multiply_adds: per pair, at the current dictionary size (its cap during the warm-up).
        formula: the count and its sizes, e.g. "3 m^2 + 2 m d (m = 1000, d = 32)".
    """
    name: str
    multiply_adds: float
    formula: str


# -- conversion from the wire -----------------------------------------------------------------

def from_proto(cls, message, **converted):
    """The dataclass `cls` filled from the protobuf `message`, whose fields bear the same names.

    Scalar fields are copied as the message holds them; `converted` gives the fields that need
    more (repeated fields as arrays or lists, nested messages as dataclasses, absent ones as None)
    and any field the message does not have.
    """
    copied = {f.name: getattr(message, f.name) for f in dataclasses.fields(cls) if f.name not in converted}
    return cls(**copied, **converted)


def _floats(values) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def view_from_proto(v) -> ViewInfo:
    return from_proto(ViewInfo, v, build_seconds_by_view=dict(v.build_seconds_by_view))


def sigma_selection_from_proto(s) -> SigmaSelection:
    return from_proto(SigmaSelection, s, candidates=_floats(s.candidates), scores=_floats(s.scores))


def spectrum_from_proto(s) -> SpectrumInfo:
    return from_proto(SpectrumInfo, s, ridge_grid=_floats(s.ridge_grid), ridge_scores=_floats(s.ridge_scores),
                      warnings=list(s.warnings), comparison=from_proto(TimescaleComparison, s.comparison))


def sub_view_from_proto(s) -> SubViewStatus:
    return from_proto(SubViewStatus, s,
                      summary=FitSummary.from_proto(s.summary) if s.HasField("summary") else None)


def config_from_proto(c) -> ModelConfig:
    values = {}
    for field in c.DESCRIPTOR.fields:
        value = getattr(c, field.name)
        if field.label == field.LABEL_REPEATED:
            value = list(value)
        elif field.has_presence and field.message_type is None and not c.HasField(field.name):
            value = None
        values["lambda_" if field.name == "lambda" else field.name] = value
    return ModelConfig(**values)


def input_scaling_from_proto(s) -> InputScaling:
    return from_proto(InputScaling, s, center=_floats(s.center), scale=_floats(s.scale), spread=list(s.spread),
                      reduce_variances=_floats(s.reduce_variances))


def model_info_from_proto(m, with_state_digest: bool = False) -> ModelInfo:
    return ModelInfo(
        config=config_from_proto(m.config), samples=m.samples, pending_warmup=m.pending_warmup,
        dictionary_size=m.dictionary_size, dictionary_size_y=m.dictionary_size_y,
        forced_compressions=m.forced_compressions, forced_error_sum=m.forced_error_sum,
        inverse_drift=m.inverse_drift, view=view_from_proto(m.view),
        sigma_selection=sigma_selection_from_proto(m.sigma_selection),
        batches_applied=m.batches_applied, created_unix_seconds=m.created_unix_seconds,
        state_digest=m.state_digest if with_state_digest else None,
        spectrum=spectrum_from_proto(m.spectrum) if m.HasField("spectrum") else None,
        sub_views=[sub_view_from_proto(s) for s in m.sub_views],
        input_scaling=(input_scaling_from_proto(m.input_scaling)
                       if m.HasField("input_scaling") else None),
        state_dim=m.state_dim,
        alarms=(from_proto(AlarmStatus, m.alarms,
                           rearmed=m.alarms.rearmed if m.alarms.HasField("rearmed") else None)
                if m.alarms.enabled else None),
        estimators=[from_proto(EstimatorCost, e) for e in m.estimators],
        failure=from_proto(ModelFailure, m.failure) if m.HasField("failure") else None,
        memory=from_proto(ModelMemory, m.memory) if m.HasField("memory") else None,
        evicted=m.evicted, idle_seconds=m.idle_seconds, last_reload_seconds=m.last_reload_seconds)
