#include "core/stream/learner_view.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cluster/chain_timescales.h"
#include "core/spectral/spectral_estimate.h"

namespace cmestream {
namespace {

std::string StatusText(const absl::Status& s) { return std::string(s.message()); }

// Times `fit` into view.view_seconds (the service reports the same figures as metrics).
template <class F>
void Timed(LearnerView& view, const char* name, F fit) {
  const auto start = std::chrono::steady_clock::now();
  fit();
  view.view_seconds.emplace_back(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Discrete models: the one-hot moments are the counts themselves (docs/algorithms.md §3.2 with the
// delta kernel): S_x = diag(n_i), S_y = diag(column sums), P_h = N. Built at refresh instead of
// streamed, so a discrete model keeps no dense P x P accumulator.
absl::StatusOr<EmbeddingMomentsSnapshot> OneHotMoments(const CountsSnapshot& counts, int p) {
  absl::StatusOr<FeatureMap> features = FeatureMap::OneHot(p);
  if (!features.ok()) return features.status();
  EmbeddingMomentsSnapshot m;
  m.features = std::make_shared<const FeatureMap>(*std::move(features));
  m.Sx = MatrixXd::Zero(p, p);
  m.Sy = MatrixXd::Zero(p, p);
  m.Ph = MatrixXd::Zero(p, p);
  for (const CountTriplet& t : counts.Triplets()) {
    m.Ph(t.i, t.j) += t.value;
    m.Sx(t.i, t.i) += t.value;
    m.Sy(t.j, t.j) += t.value;
  }
  m.n = counts.total_weight();
  m.samples = counts.samples();
  return m;
}

void FitCounts(const StreamingLearnerSnapshot& snap, LearnerView& view) {
  auto counts = std::make_shared<CountsView>();
  counts->counts = snap.counts;
  if (snap.cme) {
    const int k = counts->counts.num_states();
    counts->coordinates = snap.cme->x_atoms.topRows(std::min<int64_t>(k, snap.cme->x_atoms.rows()));
  }
  if (counts->counts.samples() == 0) {
    view.counts.error = "no transitions counted yet";
    return;
  }
  view.counts.value = std::move(counts);
}

void FitEmbedding(const ViewOptions& options, const StreamingLearnerSnapshot& snap, LearnerView& view) {
  absl::StatusOr<EmbeddingMomentsSnapshot> moments = absl::FailedPreconditionError("no moments");
  if (options.num_states > 0) {
    if (options.num_states > kMaxDenseStates) {
      view.embedding.error =
          absl::StrCat("the embedding of a discrete model needs a dense num_states x num_states ",
                       "eigendecomposition; num_states is ", options.num_states, ", supported up to ", kMaxDenseStates);
      return;
    }
    moments = OneHotMoments(snap.counts, options.num_states);
  } else if (snap.moments) {
    moments = *snap.moments;
  }
  if (!moments.ok()) {
    view.embedding.error = StatusText(moments.status());
    return;
  }
  if (moments->n <= 0) {
    view.embedding.error = "no transitions yet";
    return;
  }
  StateEmbedding::Options o;
  o.rank = options.rank;
  absl::StatusOr<StateEmbedding> e = StateEmbedding::Fit(*moments, o);
  if (!e.ok()) {
    view.embedding.error = StatusText(e.status());
    return;
  }
  view.embedding.value = std::make_shared<const StateEmbedding>(*std::move(e));
}

void FitClusters(const ViewOptions& options, const StreamingLearnerSnapshot& snap, LearnerView& view) {
  if (!view.embedding.value) {
    view.clusters.error = absl::StrCat("the embedding is not available: ", view.embedding.error);
    return;
  }
  const CountsSnapshot& counts = snap.counts;
  const int states = counts.num_states();
  auto out = std::make_shared<ClustersView>();
  // Representatives: states (atoms or ids) with visits > 0, weighted by their visits.
  const int d = snap.cme ? snap.cme->dim : 1;
  std::vector<int> rows;
  for (int i = 0; i < states; ++i) {
    if (counts.visits()(i) > 0 && (!snap.cme || i < snap.cme->x_atoms.rows())) rows.push_back(i);
  }
  const int k = options.clusters;
  if (static_cast<int>(rows.size()) < k) {
    view.clusters.error = absl::StrCat("clusters needs at least clusters = ", k, " visited states, has ", rows.size());
    return;
  }
  RowMatrixXd reps(rows.size(), d);
  VectorXd weights(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (snap.cme) {
      reps.row(r) = snap.cme->x_atoms.row(rows[r]);
    } else {
      reps(r, 0) = rows[r];
    }
    weights(r) = counts.visits()(rows[r]);
    out->ids.push_back(rows[r]);
  }
  WeightedKMeansOptions km;
  km.k = k;
  km.seed = options.seed;
  absl::StatusOr<MetastableClusters> c = MetastableClusters::Fit(*view.embedding.value, reps, weights, km);
  if (!c.ok()) {
    view.clusters.error = StatusText(c.status());
    return;
  }
  out->clusters = *std::move(c);
  out->coordinates = snap.cme ? reps : RowMatrixXd();
  out->weights = out->clusters.weights();
  out->labels = out->clusters.labels();
  // Every state gets a label for coarse graining: unvisited ones are dropped (-1).
  Eigen::VectorXi all = Eigen::VectorXi::Constant(states, -1);
  for (size_t r = 0; r < rows.size(); ++r) all(rows[r]) = out->labels(r);
  absl::StatusOr<CoarseGrainedChain> coarse = CoarseGrain(counts, all, k);
  if (!coarse.ok()) {
    view.clusters.error = StatusText(coarse.status());
    return;
  }
  out->coarse = *std::move(coarse);
  // The timescales are those of the K x K matrix reported (the counts' pairs are one step, dt,
  // apart): docs/algorithms.md (3.11'), never those of another chain.
  absl::StatusOr<ImpliedTimescales> ts = TimescalesOfMatrix(out->coarse.transition, options.dt, k);
  if (ts.ok()) out->timescales = ts->timescales;
  view.clusters.value = std::move(out);
}

void FitAggregation(const ViewOptions& options, const StreamingLearnerSnapshot& snap, LearnerView& view) {
  if (options.meta_states == 0) {
    view.aggregation.error =
        "the model was created without meta-states (meta_states 0); create it with "
        "meta_states R > 0 (CLI: --meta R)";
    return;
  }
  const CountsSnapshot& counts = snap.counts;
  std::vector<TransitionCount> triplets;
  for (const CountTriplet& t : counts.Triplets()) triplets.push_back({t.i, t.j, t.value});
  SoftAggregation::Options o;
  o.meta_states = options.meta_states;
  o.anchor_threshold = options.anchor_threshold;
  o.vertex_hunting =
      options.kmeans_spa ? SoftAggregation::VertexHunting::kKMeansThenSpa : SoftAggregation::VertexHunting::kSpa;
  o.kmeans_centers = std::max(o.kmeans_centers, o.meta_states);
  o.seed = options.seed;
  if (counts.num_states() < o.meta_states) {
    view.aggregation.error =
        absl::StrCat("needs at least meta_states = ", o.meta_states, " states with data, has ", counts.num_states());
    return;
  }
  absl::StatusOr<AggregationResult> r = SoftAggregation::Fit(counts.num_states(), triplets, o);
  if (!r.ok()) {
    view.aggregation.error = StatusText(r.status());
    return;
  }
  auto out = std::make_shared<AggregationView>();
  out->result = *std::move(r);
  if (snap.cme) {
    const int d = snap.cme->dim;
    out->coordinates.resize(static_cast<int64_t>(out->result.states.size()), d);
    for (size_t i = 0; i < out->result.states.size(); ++i) {
      const int s = out->result.states[i];
      if (s < snap.cme->x_atoms.rows()) {
        out->coordinates.row(static_cast<int64_t>(i)) = snap.cme->x_atoms.row(s);
      } else {
        out->coordinates.row(static_cast<int64_t>(i)).setConstant(std::numeric_limits<double>::quiet_NaN());
      }
    }
  }
  view.aggregation.value = std::move(out);
}

// A view that learns from trajectory batches only (latent, predictive state): what it says when
// it has no model.
struct TrajectoryViewText {
  const char* what;     // "the model was created without <what> (<option> 0)"
  const char* option;   // the ModelConfig field that enables it ...
  const char* example;  // ... set to this (e.g. "K > 0")
  const char* flag;     // and the CLI's flag for it
  const char* no_data;  // enabled, but no trajectory batch was ingested yet
  const char* unit;     // what `count` of the statistics counts, quoted beside a failed fit
};

// The shared part of the latent and predictive-state fits: off, no data, or Model::Fit(stats,
// fit_options) into `out`, a failure quoting how much trajectory data there was.
template <class Model, class Stats>
void FitTrajectoryView(bool enabled, const std::optional<Stats>& stats, int64_t Stats::*count,
                       const TrajectoryViewText& text, const typename Model::FitOptions& fit_options,
                       SubView<Model>& out) {
  if (!enabled) {
    out.error = absl::StrCat("the model was created without ", text.what, " (", text.option, " 0); create it with ",
                             text.option, " ", text.example, " (CLI: ", text.flag, ") and ingest trajectories");
    return;
  }
  if (!stats) {
    out.error = text.no_data;
    return;
  }
  absl::StatusOr<Model> m = Model::Fit(*stats, fit_options);
  if (!m.ok()) {
    out.error =
        absl::StrCat(StatusText(m.status()), " (", (*stats).*count, " ", text.unit, " from trajectory batches so far)");
    return;
  }
  out.value = std::make_shared<const Model>(*std::move(m));
}

void FitLatent(const ViewOptions& options, const StreamingLearnerSnapshot& snap, LearnerView& view) {
  static constexpr TrajectoryViewText kText = {
      "latent states",
      "latent_states",
      "K > 0",
      "--latent K",
      "no trajectory data yet (the latent model learns from trajectory batches only)",
      "triples"};
  LatentModel::FitOptions o;
  o.k = options.latent_states;
  o.restarts = options.tensor_restarts;
  o.iterations = options.tensor_iterations;
  o.seed = options.seed;
  FitTrajectoryView<LatentModel>(options.latent_states != 0, snap.latent, &MultiViewAccumulator::Statistics::triples,
                                 kText, o, view.latent);
}

void FitPredictive(const ViewOptions& options, const StreamingLearnerSnapshot& snap, LearnerView& view) {
  static constexpr TrajectoryViewText kText = {"a predictive-state window", "window", "L > 0", "--window L",
                                               "no trajectory data yet",    "windows"};
  PredictiveStateModel::FitOptions o;
  o.lambda1 = options.ridge_stage1;
  o.lambda2 = options.ridge_stage2;
  if (options.num_states == 0) o.rank = std::min(options.rank, options.dim * options.window);
  FitTrajectoryView<PredictiveStateModel>(options.window != 0, snap.predictive,
                                          &PredictiveStateAccumulator::Statistics::windows, kText, o, view.predictive);
}

}  // namespace

ForecastMethod ForecastView::MethodAt(int h) const {
  if (!horizons.empty()) {
    const ForecastHorizonSkill& s = horizons[std::min<size_t>(std::max(h, 1), horizons.size()) - 1];
    if (s.pairs >= kSkillPairsToDecide) {
      const bool has_linear = model.linear() != nullptr;
      int best = 0;
      for (int m = 1; m < kForecastMethods; ++m) {
        if (m == static_cast<int>(ForecastMethod::kLinear) && !has_linear) continue;
        if (s.sse[m] < s.sse[best]) best = m;
      }
      // One standard error: the regression serves only if it beats the least-squares AR by more
      // than one standard error of their paired difference; otherwise the AR (if it beats
      // persistence too).
      if (best == 0 && has_linear && s.sse[1] <= s.sse[2]) {
        const double n = static_cast<double>(s.pairs);
        const double mean = (s.sse[0] - s.sse[1]) / n;
        const double se = std::sqrt(std::max(0.0, s.diff_sq / n - mean * mean) / n);
        if (-mean <= kLinearMarginStderrs * se) best = 1;
      }
      return static_cast<ForecastMethod>(best);
    }
  }
  return skill.pairs >= kSkillPairsToDecide && skill.ratio() > 1 ? ForecastMethod::kPersistence
                                                                 : ForecastMethod::kRegression;
}

RowMatrixXd ForecastView::Rollout(const double* x, int horizon) const {
  const int d = model.dim();
  RowMatrixXd out(horizon, d);
  std::optional<RowMatrixXd> paths[2];
  for (int h = 1; h <= horizon; ++h) {
    const ForecastMethod m = MethodAt(h);
    if (m == ForecastMethod::kPersistence) {
      out.row(h - 1) = Eigen::Map<const Eigen::RowVectorXd>(x, d);
      continue;
    }
    const int k = static_cast<int>(m);
    if (!paths[k]) paths[k] = (m == ForecastMethod::kLinear ? *model.linear() : model).Rollout(x, horizon);
    out.row(h - 1) = paths[k]->row(h - 1);
  }
  return out;
}

namespace {

void FitForecastView(const StreamingLearnerSnapshot& snap, LearnerView& view) {
  if (!snap.cme) {
    view.forecast.error = "the model is discrete; its forecasts come from the predictive-state filter (--window L)";
    return;
  }
  if (!snap.forecast) {
    view.forecast.error = "the model's state is too wide for the forecast regression (dim above 256)";
    return;
  }
  absl::StatusOr<ForecastModel> m = FitForecast(*snap.forecast);
  if (!m.ok()) {
    view.forecast.error = absl::StrCat(m.status().message(), " (", snap.forecast->samples, " pairs so far)");
    return;
  }
  auto v = std::make_shared<ForecastView>();
  v->model = *std::move(m);
  v->skill = snap.forecast->skill;
  v->horizons = snap.forecast->horizons;
  v->samples = snap.forecast->samples;
  view.forecast.value = std::move(v);
}

// Trend (block means of the sources) and transient (|mu| > 1) checks (spectral_summary.h). A
// transient names itself in the headline; |mu| > 1 on a stream without that diagnosis (the CME
// fallback does not identify the stationary mode) keeps its per-mode warnings.
void CheckKoopmanStationarity(const SpectralMomentsSnapshot& s, CmeView& cme,
                              const std::vector<std::string>& unit_circle_warnings) {
  const KoopmanDecomposition& kd = cme.koopman;
  // The CME fallback has no exact stationary mode: its leading mode plays that role.
  const int stationary = kd.stationary_index >= 0 ? kd.stationary_index : 0;
  cme.stationarity = CheckStationarity(s.drift_counts, s.drift_means, s.drift_square_means, kd.eigenvalues, stationary);
  cme.headline.nonstationary = cme.stationarity.nonstationary;
  cme.headline.nonstationary_reason = cme.stationarity.reason;
  if (!cme.stationarity.nonstationary) {
    for (const std::string& w : unit_circle_warnings) cme.spectrum.warnings.push_back(w);
  }
}

// Mode amplitudes of the newest observation; cycles the data can show: periods up to half the
// time the data cover (two cycles seen), decay times capped at that time.
ModeAmplitudeOptions AmplitudeOptions(const ViewOptions& options, const StreamingLearnerSnapshot& snap) {
  ModeAmplitudeOptions ao;
  ao.channels = options.observed_channels;
  ao.span = static_cast<double>(snap.samples) * options.dt;
  ao.max_period = ao.span / 2;
  return ao;
}

// The Koopman view: the spectral-moments fit when it has data (consistent eigenvalues, exact
// stationary mode), else the CME's W^T K_YX with a warning that says why and how it is biased.
// `scorer` receives the fit's rank-k VAMP model, which will score the pairs after this view.
void FitKoopman(const ViewOptions& options, const StreamingLearnerSnapshot& snap, CmeView& cme,
                std::shared_ptr<const PrequentialModel>& scorer) {
  const int top = std::max(1, kStoredEigenpairs);
  SpectrumReport& info = cme.spectrum;
  // Warnings of |mu| > 1 modes wait for the stationarity check: on a transient stream they are
  // named once, in the headline, instead of once per mode.
  std::vector<std::string> unit_circle_warnings;
  if (snap.spectral) {
    info.epochs = snap.spectral->live_epoch;
    info.data_share = 0;
    SpectralFitOptions o;
    o.top = top;
    o.dt = options.dt;
    // Three ridges instead of the core's five: the Rayleigh-Ritz step makes the eigenvalues
    // nearly insensitive to r (four-well: within 0.3 % over 1e-3..1e-7), and each ridge costs
    // two (m+1)^3 fits per basis candidate, twice that while a frozen prefix epoch exists
    // (docs/benchmarks.md "Refresh cost per view": 77.5 ms for five ridges at m = 160).
    o.ridge_grid = {1e-3, 1e-5, 1e-7};
    o.min_share = 0.8;  // >= 80 % of the stream inside the estimate (spectral_estimate.h)
    absl::StatusOr<SpectralFit> fit = FitSpectrum(*snap.spectral, o);
    if (fit.ok() && fit->termination == SpectralFit::Termination::kOk) {
      cme.koopman = fit->koopman;
      cme.excess = fit->excess;
      info.estimator = "spectral-moments";
      info.epoch = fit->epoch;
      info.epoch_samples = fit->samples;
      info.epoch_weight = fit->weight;
      info.ready = fit->ready;
      info.epochs = fit->epochs;
      info.data_share = fit->share;
      info.basis_size = static_cast<int>(fit->koopman.x_atoms.rows());
      info.selection_score = fit->score;
      info.score_rank = fit->score_rank;
      info.ridge = fit->ridge;
      info.ridge_grid = fit->ridge_grid;
      info.ridge_scores = fit->ridge_scores;
      for (const std::string& w : fit->warnings) {
        if (absl::StrContains(w, "|mu| = ")) {
          unit_circle_warnings.push_back(w);
        } else {
          info.warnings.push_back(w);
        }
      }
      CheckKoopmanStationarity(*snap.spectral, cme, unit_circle_warnings);
      cme.amplitudes = ModeAmplitudesOfFit(*fit, *snap.spectral, AmplitudeOptions(options, snap));
      auto model = std::make_shared<PrequentialModel>();
      model->basis = fit->koopman.x_atoms;
      model->sigma = fit->koopman.sigma;
      model->vamp = fit->vamp;
      scorer = std::move(model);
      return;
    }
    info.warnings.push_back(absl::StrCat("the spectral-moments estimate is not available (",
                                         fit.ok() ? fit->message : StatusText(fit.status()),
                                         "); showing the eigenvalues of the CME's W^T K_YX, which the ridge and the "
                                         "SGD step shrink (timescales too fast)"));
  }
  info.estimator = "cme";
  info.selection_score = std::numeric_limits<double>::quiet_NaN();
  KoopmanOptions koopman;
  koopman.top = std::max(1, std::min<int>(top, static_cast<int>(cme.snapshot.x_atoms.rows())));
  koopman.dt = options.dt;
  if (cme.snapshot.x_atoms.rows() > 0) {
    absl::StatusOr<KoopmanDecomposition> fit = KoopmanDecomposition::Fit(cme.snapshot, koopman);
    if (fit.ok()) {
      cme.koopman = *std::move(fit);
    } else {  // no spectrum, never a partial one; the atoms stay for the reply's coordinates
      info.warnings.push_back(std::string(fit.status().message()));
      cme.koopman.x_atoms = cme.snapshot.x_atoms;
      cme.koopman.sigma = cme.snapshot.sigma;
      cme.koopman.dt = koopman.dt;
    }
  }
  cme.excess = VectorXd::Zero(cme.koopman.eigenvalues.size());
  cme.amplitudes = ComputeModeAmplitudes(cme.koopman, cme.koopman.x_atoms, VectorXd(), AmplitudeOptions(options, snap));
  if (snap.spectral) CheckKoopmanStationarity(*snap.spectral, cme, unit_circle_warnings);
}

// A view's timescale counts in the comparison only if it is resolved (the rule documented at
// kTimescaleDisagreementThreshold): finite, positive and at most `span`, the time the data
// covers (samples x dt). Longer decay times cannot be told from a constant on that data: an
// embedding singular value 1 - 1e-12 on Duffing reads as 1.7e11 time units.
bool Resolved(double t, double span) { return std::isfinite(t) && t > 0 && t <= span; }

// The first resolved one of the timescales timescale(l), l in [begin, end) (slowest first);
// NaN when none is. A mode that does not count returns NaN.
template <class Timescale>
double SlowestResolved(Eigen::Index begin, Eigen::Index end, double span, Timescale timescale) {
  for (Eigen::Index l = begin; l < end; ++l) {
    const double t = timescale(l);
    if (Resolved(t, span)) return t;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Slowest resolved non-stationary timescale of each view and their relative disagreement.
// Skipped: the stationary mode (the CME estimator does not identify it: its leading mode plays
// that role), modes flagged with an excess |mu| > 1, and unresolved timescales.
void CompareTimescales(const ViewOptions& options, const LearnerView& view, double span, CmeView& cme) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  TimescaleComparison& c = cme.spectrum.comparison;
  const KoopmanDecomposition& kd = cme.koopman;
  c.koopman = SlowestResolved(0, kd.timescales.size(), span, [&](Eigen::Index l) {
    const bool stationary = kd.stationary_index >= 0 ? l == kd.stationary_index : l == 0;
    const bool flagged = l < cme.excess.size() && cme.excess[l] > 0;
    return stationary || flagged ? nan : kd.timescales[l];
  });
  // The count chain: (3.11) of the fine chain over every visited state (atom or id), dense, so
  // for at most kMaxDenseStates of them; computed when the clusters view is (as it always was).
  c.count_chain = nan;
  const CountsSnapshot* fine = view.counts.value ? &view.counts.value->counts : nullptr;
  if (view.clusters.value && fine != nullptr && fine->num_states() <= kMaxDenseStates) {
    absl::StatusOr<ImpliedTimescales> ts = ImpliedTimescales::Fit(*fine, options.dt, std::max(options.clusters, 1));
    if (ts.ok()) {
      c.count_chain =
          SlowestResolved(0, ts->timescales.size(), span, [&](Eigen::Index l) { return ts->timescales[l]; });
    }
  }
  c.embedding = nan;
  if (view.embedding.value) {
    const VectorXd& sv = view.embedding.value->singular_values();
    c.embedding = SlowestResolved(1, sv.size(), span, [&](Eigen::Index l) {  // sv[0] is the constant's
      return sv[l] >= 1 ? std::numeric_limits<double>::infinity() : (sv[l] > 0 ? -kd.dt / std::log(sv[l]) : 0.0);
    });
  }
  c.threshold = kTimescaleDisagreementThreshold;
  // The lag view's figure with its jackknife error bar: the scale of the data's own sampling
  // error, against which the estimates above are read (not part of the disagreement).
  c.lag_scan = nan;
  c.lag_scan_stderr = nan;
  if (view.lags.value) {
    const std::optional<LagTimescales>& scan =
        view.lags.value->koopman ? view.lags.value->koopman : view.lags.value->counts;
    if (scan && !scan->lags.empty() && !scan->timescales[0].empty() && Resolved(scan->timescales[0][0], span)) {
      c.lag_scan = scan->timescales[0][0];
      c.lag_scan_stderr = scan->stderrs[0][0];
      c.lag_scan_lag = scan->lags[0];
      c.lag_scan_blocks = scan->blocks;
    }
  }
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  int available = 0;
  for (double t : {c.koopman, c.count_chain, c.embedding}) {
    if (std::isnan(t)) continue;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
    ++available;
  }
  const double disagreement = available >= 2 ? (hi - lo) / lo : nan;  // finite: every t is resolved
  c.relative_disagreement = disagreement;
  // Error bars: the lag scan's jackknife s.e. as a relative error of a slowest timescale on this
  // stream (the sampling error is a property of the data: docs/algorithms.md §7). Two views
  // differ beyond their error bars when max - min > 3 s.e. of the difference.
  const double rel = RelativeStderr(c.lag_scan, c.lag_scan_stderr);
  c.relative_stderr = rel;
  const bool above = available >= 2 && disagreement > kTimescaleDisagreementThreshold;
  const bool beyond = above && std::isfinite(rel) && (hi - lo) > 3 * rel * std::hypot(hi, lo);
  const bool nonstationary = cme.stationarity.nonstationary;
  c.warning = beyond && !nonstationary;
  const std::string views = absl::StrFormat("koopman %.6g, count chain %.6g, embedding %.6g (units of time)", c.koopman,
                                            c.count_chain, c.embedding);
  if (available < 2) {
    c.diagnostic = "fewer than two views have a resolved slowest timescale: nothing to compare";
  } else if (nonstationary) {
    c.diagnostic = absl::StrFormat(
        "the stream is not stationary (see headline.nonstationary_reason): the views' slowest timescales (%s, "
        "relative spread %.3g) describe the drift or transient, not relaxation, and are not compared",
        views, disagreement);
  } else if (!above) {
    c.diagnostic = absl::StrFormat("the views agree within %.2f (relative spread %.3g): %s",
                                   kTimescaleDisagreementThreshold, disagreement, views);
  } else if (!std::isfinite(rel)) {
    c.diagnostic = absl::StrFormat(
        "the views spread by %.3g (relative) but there is no error bar to judge it (the lag scan has no "
        "resolved timescale with a jackknife s.e.): %s",
        disagreement, views);
  } else if (!beyond) {
    c.diagnostic = absl::StrFormat(
        "the views spread by %.3g (relative), within 3 s.e. of their difference (relative s.e. %.3g from the "
        "lag scan's jackknife): %s",
        disagreement, rel, views);
  } else {
    c.diagnostic = absl::StrFormat(
        "the slowest timescales disagree by %.3g (relative), more than 3 s.e. of their difference (relative "
        "s.e. %.3g from the lag scan's jackknife): %s; see docs/user-guide.md",
        disagreement, rel, views);
    cme.spectrum.warnings.push_back(c.diagnostic);
  }
  // The headline: the estimate trusted most, with its error bar (spectral_summary.h).
  HeadlineInputs in;
  in.koopman = c.koopman;
  in.consistent = cme.spectrum.estimator == "spectral-moments" && cme.spectrum.ready;
  in.lag_scan = c.lag_scan;
  in.lag_scan_stderr = c.lag_scan_stderr;
  const Headline h = ChooseHeadline(in);
  cme.headline.timescale = h.timescale;
  cme.headline.stderr_ = h.stderr_;
  cme.headline.view = h.view;
  cme.headline.note = h.note;
  // The cycles: oscillations ranked by the share they carry, periods the data can show.
  ModeAmplitudeOptions ao;
  ao.channels = options.observed_channels;
  ao.max_period = span / 2;
  ao.span = span;
  cme.headline.cycles = RankCycles(kd, KoopmanPeriods(kd.eigenvalues, kd.dt), cme.amplitudes, ao);
}

// The coordinates of counts, clusters and aggregation in the user's units; the estimators keep
// the scaled ones (docs/algorithms.md §1.13).
void UnscaleCoordinates(LearnerView& view) {
  if (!view.input) return;
  if (view.counts.value) {
    auto counts = std::make_shared<CountsView>(*view.counts.value);
    counts->coordinates = view.input->Invert(std::move(counts->coordinates));
    view.counts.value = std::move(counts);
  }
  if (view.clusters.value) {
    auto clusters = std::make_shared<ClustersView>(*view.clusters.value);
    clusters->coordinates = view.input->Invert(std::move(clusters->coordinates));
    view.clusters.value = std::move(clusters);
  }
  if (view.aggregation.value) {
    auto aggregation = std::make_shared<AggregationView>(*view.aggregation.value);
    aggregation->coordinates = view.input->Invert(std::move(aggregation->coordinates));
    view.aggregation.value = std::move(aggregation);
  }
}

}  // namespace

absl::Status ViewOptions::Validate() const {
  if (!std::isfinite(dt) || dt <= 0) return absl::InvalidArgumentError(absl::StrCat("dt is ", dt, ", expected > 0"));
  if (num_states < 0) return absl::InvalidArgumentError(absl::StrCat("num_states is ", num_states, ", expected >= 0"));
  if (num_states == 0 && dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat("dim is ", dim, ", expected >= 1 for a continuous model"));
  }
  if (rank < 1) return absl::InvalidArgumentError(absl::StrCat("rank is ", rank, ", expected >= 1"));
  if (clusters < 1) return absl::InvalidArgumentError(absl::StrCat("clusters is ", clusters, ", expected >= 1"));
  if (meta_states < 0 || latent_states < 0 || window < 0 || observed_channels < 0) {
    return absl::InvalidArgumentError("meta_states, latent_states, window and observed_channels must be >= 0");
  }
  return absl::OkStatus();
}

CkClusters CkSetsOf(const LearnerView& view) {
  CkClusters sets;
  sets.embedding = view.embedding.value.get();
  sets.clusters = view.clusters.value ? &view.clusters.value->clusters : nullptr;
  sets.missing = view.clusters.value ? view.embedding.error : view.clusters.error;
  return sets;
}

absl::StatusOr<LearnerView> FitViews(const StreamingLearnerSnapshot& snap, const ViewOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  LearnerView view;
  if (snap.scaler || snap.reduction) view.input = std::make_shared<const InputStage>(snap.scaler, snap.reduction);
  std::shared_ptr<CmeView> cme;  // completed (cross-view comparison) after the other views
  if (snap.cme) {
    Timed(view, "koopman", [&] {
      cme = std::make_shared<CmeView>();
      cme->snapshot = *snap.cme;
      cme->inverse_drift = snap.inverse_drift;
      FitKoopman(options, snap, *cme, view.scorer);
    });
  }
  Timed(view, "counts", [&] { FitCounts(snap, view); });
  Timed(view, "embedding", [&] { FitEmbedding(options, snap, view); });
  Timed(view, "clusters", [&] { FitClusters(options, snap, view); });
  // Views a model does not enable only record how to enable them (untimed).
  if (options.meta_states > 0) {
    Timed(view, "aggregation", [&] { FitAggregation(options, snap, view); });
  } else {
    FitAggregation(options, snap, view);
  }
  if (options.latent_states > 0) {
    Timed(view, "latent", [&] { FitLatent(options, snap, view); });
  } else {
    FitLatent(options, snap, view);
  }
  if (options.window > 0) {
    Timed(view, "predictive", [&] { FitPredictive(options, snap, view); });
  } else {
    FitPredictive(options, snap, view);
  }
  if (snap.cme) {
    Timed(view, "forecast", [&] { FitForecastView(snap, view); });
  } else {
    FitForecastView(snap, view);
  }
  // Lag scans and the CK test (after the clusters, whose sets the CK test uses).
  if (snap.lags) {
    Timed(view, "lags", [&] {
      auto lags = std::make_shared<LagsView>(
          FitLagsView(*snap.lags, options.dt, CkSetsOf(view), options.clusters, options.seed, options.label));
      if (!lags->koopman && !lags->counts) view.lags.error = lags->error;
      view.lags.value = std::move(lags);
    });
  } else {
    view.lags.error =
        options.lag_statistics
            ? "no lag statistics yet (continuous models start them once sigma is known)"
            : absl::StrCat("lag statistics are off for discrete models with num_states > ", kMaxLagStates);
  }
  if (cme) {
    CompareTimescales(options, view, static_cast<double>(snap.samples) * options.dt, *cme);
    view.cme = std::move(cme);
  }
  UnscaleCoordinates(view);
  return view;
}

}  // namespace cmestream
