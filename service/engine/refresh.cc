#include "service/engine/refresh.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cluster/chain_timescales.h"
#include "service/engine/fit_summary.h"
#include "service/engine/forecast_view.h"
#include "service/engine/model_config.h"

namespace cmestream::service {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool Covers(const std::shared_ptr<const ModelView>& view, uint64_t target) {
  return view != nullptr && view->samples >= target;
}

std::string StatusText(const absl::Status& s) { return std::string(s.message()); }

// Times `build`, records it in the per-view histogram and in the view (describe output).
template <class F>
void Timed(Model& model, ModelView& out, const char* view, F build) {
  const auto start = std::chrono::steady_clock::now();
  build();
  const double seconds = Seconds(std::chrono::steady_clock::now() - start);
  model.metrics().OnViewBuilt(view, seconds);
  out.view_seconds.emplace_back(view, seconds);
}

// Each sub-view's health as metrics (view_available, view_fit_warning): the same statuses and
// fit summaries `model describe` shows (ModelInfo.sub_views).
void ReportSubViews(const ModelView& view, ModelMetrics& metrics) {
  google::protobuf::RepeatedPtrField<v1::SubViewStatus> statuses;
  AddSubViewStatuses(view, &statuses);
  for (const v1::SubViewStatus& s : statuses) {
    const std::string& termination = s.summary().termination();
    metrics.OnSubView(s.name(), s.available(), !termination.empty() && termination != "success");
  }
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

void BuildCounts(const v1::ModelConfig& config, Model::LearnerSnapshot& snap, ModelView& view) {
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
  (void)config;
  view.counts.value = std::move(counts);
}

void BuildEmbedding(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, ModelView& view) {
  absl::StatusOr<EmbeddingMomentsSnapshot> moments = absl::FailedPreconditionError("no moments");
  if (config.num_states() > 0) {
    if (config.num_states() > kMaxDenseStates) {
      view.embedding.error = absl::StrCat("the embedding of a discrete model needs a dense num_states x num_states ",
                                          "eigendecomposition; num_states is ", config.num_states(),
                                          ", supported up to ", kMaxDenseStates);
      return;
    }
    moments = OneHotMoments(snap.counts, static_cast<int>(config.num_states()));
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
  StateEmbedding::Options options;
  options.rank = static_cast<int>(config.rank());
  absl::StatusOr<StateEmbedding> e = StateEmbedding::Fit(*moments, options);
  if (!e.ok()) {
    view.embedding.error = StatusText(e.status());
    return;
  }
  view.embedding.value = std::make_shared<const StateEmbedding>(*std::move(e));
}

void BuildClusters(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, ModelView& view) {
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
  const int k = static_cast<int>(config.clusters());
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
  km.seed = config.seed();
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
  // The reply's timescales are those of the K x K matrix it reports (the counts' pairs are one
  // step, dt, apart): docs/algorithms.md (3.11'), never those of another chain.
  absl::StatusOr<ImpliedTimescales> ts = TimescalesOfMatrix(out->coarse.transition, config.dt(), k);
  if (ts.ok()) out->timescales = ts->timescales;
  view.clusters.value = std::move(out);
}

void BuildAggregation(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, ModelView& view) {
  if (config.meta_states() == 0) {
    view.aggregation.error =
        "the model was created without meta-states (meta_states 0); create it with "
        "meta_states R > 0 (CLI: --meta R)";
    return;
  }
  const CountsSnapshot& counts = snap.counts;
  std::vector<TransitionCount> triplets;
  for (const CountTriplet& t : counts.Triplets()) triplets.push_back({t.i, t.j, t.value});
  SoftAggregation::Options o;
  o.meta_states = static_cast<int>(config.meta_states());
  o.anchor_threshold = config.anchor_threshold();
  o.vertex_hunting = config.vertex_hunting() == "kmeans-spa" ? SoftAggregation::VertexHunting::kKMeansThenSpa
                                                             : SoftAggregation::VertexHunting::kSpa;
  o.kmeans_centers = std::max(o.kmeans_centers, o.meta_states);
  o.seed = config.seed();
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

void BuildLatent(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, ModelView& view) {
  if (config.latent_states() == 0) {
    view.latent.error =
        "the model was created without latent states (latent_states 0); create it with "
        "latent_states K > 0 (CLI: --latent K) and ingest trajectories";
    return;
  }
  if (!snap.latent) {
    view.latent.error = "no trajectory data yet (the latent model learns from trajectory batches only)";
    return;
  }
  LatentModel::FitOptions o;
  o.k = static_cast<int>(config.latent_states());
  o.restarts = static_cast<int>(config.tensor_restarts());
  o.iterations = static_cast<int>(config.tensor_iterations());
  o.seed = config.seed();
  absl::StatusOr<LatentModel> m = LatentModel::Fit(*snap.latent, o);
  if (!m.ok()) {
    view.latent.error =
        absl::StrCat(StatusText(m.status()), " (", snap.latent->triples, " triples from trajectory batches so far)");
    return;
  }
  view.latent.value = std::make_shared<const LatentModel>(*std::move(m));
}

void BuildPredictive(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, ModelView& view) {
  if (config.window() == 0) {
    view.predictive.error =
        "the model was created without a predictive-state window (window 0); create it "
        "with window L > 0 (CLI: --window L) and ingest trajectories";
    return;
  }
  if (!snap.predictive) {
    view.predictive.error = "no trajectory data yet";
    return;
  }
  PredictiveStateModel::FitOptions o;
  o.lambda1 = config.ridge_stage1();
  o.lambda2 = config.ridge_stage2();
  if (config.num_states() == 0) {
    o.rank = std::min<int>(static_cast<int>(config.rank()), static_cast<int>(config.dim() * config.window()));
  }
  absl::StatusOr<PredictiveStateModel> m = PredictiveStateModel::Fit(*snap.predictive, o);
  if (!m.ok()) {
    view.predictive.error = absl::StrCat(StatusText(m.status()), " (", snap.predictive->windows,
                                         " windows from trajectory batches so far)");
    return;
  }
  view.predictive.value = std::make_shared<const PredictiveStateModel>(*std::move(m));
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
  cme.headline.set_nonstationary(cme.stationarity.nonstationary);
  cme.headline.set_nonstationary_reason(cme.stationarity.reason);
  if (!cme.stationarity.nonstationary) {
    for (const std::string& w : unit_circle_warnings) cme.spectrum.add_warnings(w);
  }
}

// The Koopman view: the spectral-moments fit when it has data (consistent eigenvalues, exact
// stationary mode), else the CME's W^T K_YX with a warning that says why and how it is biased.
// `scorer` receives the fit's rank-k VAMP model, which will score the pairs after this view.
void BuildKoopman(const v1::ModelConfig& config, const Model::LearnerSnapshot& snap, CmeView& cme,
                  std::shared_ptr<const PrequentialModel>& scorer) {
  const int top = std::max(1, kStoredEigenpairs);
  v1::SpectrumInfo& info = cme.spectrum;
  // Warnings of |mu| > 1 modes wait for the stationarity check: on a transient stream they are
  // named once, in the headline, instead of once per mode.
  std::vector<std::string> unit_circle_warnings;
  if (snap.spectral) {
    info.set_epochs(static_cast<uint64_t>(snap.spectral->live_epoch));
    info.set_data_share(0);
    SpectralFitOptions o;
    o.top = top;
    o.dt = config.dt();
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
      info.set_estimator("spectral-moments");
      info.set_epoch(static_cast<uint64_t>(fit->epoch));
      info.set_epoch_samples(static_cast<uint64_t>(fit->samples));
      info.set_epoch_weight(fit->weight);
      info.set_ready(fit->ready);
      info.set_epochs(static_cast<uint64_t>(fit->epochs));
      info.set_data_share(fit->share);
      info.set_basis_size(static_cast<uint32_t>(fit->koopman.x_atoms.rows()));
      info.set_selection_score(fit->score);
      info.set_score_rank(static_cast<uint32_t>(fit->score_rank));
      info.set_ridge(fit->ridge);
      for (double r : fit->ridge_grid) info.add_ridge_grid(r);
      for (double v : fit->ridge_scores) info.add_ridge_scores(v);
      for (const std::string& w : fit->warnings) {
        if (absl::StrContains(w, "|mu| = ")) {
          unit_circle_warnings.push_back(w);
        } else {
          info.add_warnings(w);
        }
      }
      CheckKoopmanStationarity(*snap.spectral, cme, unit_circle_warnings);
      auto model = std::make_shared<PrequentialModel>();
      model->basis = fit->koopman.x_atoms;
      model->sigma = fit->koopman.sigma;
      model->vamp = fit->vamp;
      scorer = std::move(model);
      return;
    }
    info.add_warnings(absl::StrCat("the spectral-moments estimate is not available (",
                                   fit.ok() ? fit->message : StatusText(fit.status()),
                                   "); showing the eigenvalues of the CME's W^T K_YX, which the ridge and the SGD "
                                   "step shrink (timescales too fast)"));
  }
  info.set_estimator("cme");
  info.set_selection_score(std::numeric_limits<double>::quiet_NaN());
  KoopmanOptions koopman;
  koopman.top = std::max(1, std::min<int>(top, static_cast<int>(cme.snapshot.x_atoms.rows())));
  koopman.dt = config.dt();
  if (cme.snapshot.x_atoms.rows() > 0) cme.koopman = KoopmanDecomposition::Fit(cme.snapshot, koopman);
  if (!cme.koopman.solver_error.empty()) info.add_warnings(cme.koopman.solver_error);
  cme.excess = VectorXd::Zero(cme.koopman.eigenvalues.size());
  if (snap.spectral) CheckKoopmanStationarity(*snap.spectral, cme, unit_circle_warnings);
}

// A view's timescale counts in the comparison only if it is resolved (the rule documented at
// kTimescaleDisagreementThreshold): finite, positive and at most `span`, the time the data
// covers (samples x dt). Longer decay times cannot be told from a constant on that data: an
// embedding singular value 1 - 1e-12 on Duffing reads as 1.7e11 time units.
bool Resolved(double t, double span) { return std::isfinite(t) && t > 0 && t <= span; }

// Slowest resolved non-stationary timescale of each view and their relative disagreement.
// Skipped: the stationary mode (the CME estimator does not identify it: its leading mode plays
// that role), modes flagged with an excess |mu| > 1, and unresolved timescales.
void CompareTimescales(const v1::ModelConfig& config, const ModelView& view, double span, CmeView& cme) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  v1::TimescaleComparison& c = *cme.spectrum.mutable_comparison();
  double koopman = nan;
  const KoopmanDecomposition& kd = cme.koopman;
  for (Eigen::Index l = 0; l < kd.timescales.size(); ++l) {
    const bool stationary = kd.stationary_index >= 0 ? l == kd.stationary_index : l == 0;
    const bool flagged = l < cme.excess.size() && cme.excess[l] > 0;
    if (!stationary && !flagged && Resolved(kd.timescales[l], span)) {
      koopman = kd.timescales[l];
      break;
    }
  }
  // The count chain: (3.11) of the fine chain over every visited state (atom or id), dense, so
  // for at most kMaxDenseStates of them; computed when the clusters view is (as it always was).
  double counts = nan;
  const CountsSnapshot* fine = view.counts.value ? &view.counts.value->counts : nullptr;
  if (view.clusters.value && fine != nullptr && fine->num_states() <= static_cast<int>(kMaxDenseStates)) {
    absl::StatusOr<ImpliedTimescales> ts =
        ImpliedTimescales::Fit(*fine, config.dt(), std::max(static_cast<int>(config.clusters()), 1));
    for (Eigen::Index l = 0; ts.ok() && l < ts->timescales.size(); ++l) {
      if (Resolved(ts->timescales[l], span)) {
        counts = ts->timescales[l];
        break;
      }
    }
  }
  double embedding = nan;
  if (view.embedding.value) {
    const VectorXd& sv = view.embedding.value->singular_values();
    for (Eigen::Index l = 1; l < sv.size(); ++l) {  // sv[0] is the constant's
      const double t =
          sv[l] >= 1 ? std::numeric_limits<double>::infinity() : (sv[l] > 0 ? -kd.dt / std::log(sv[l]) : 0.0);
      if (Resolved(t, span)) {
        embedding = t;
        break;
      }
    }
  }
  c.set_koopman(koopman);
  c.set_count_chain(counts);
  c.set_embedding(embedding);
  c.set_threshold(kTimescaleDisagreementThreshold);
  // The lag view's figure with its jackknife error bar: the scale of the data's own sampling
  // error, against which the estimates above are read (not part of the disagreement).
  c.set_lag_scan(nan);
  c.set_lag_scan_stderr(nan);
  if (view.lags.value) {
    const std::optional<LagTimescales>& scan =
        view.lags.value->koopman ? view.lags.value->koopman : view.lags.value->counts;
    if (scan && !scan->lags.empty() && !scan->timescales[0].empty() && Resolved(scan->timescales[0][0], span)) {
      c.set_lag_scan(scan->timescales[0][0]);
      c.set_lag_scan_stderr(scan->stderrs[0][0]);
      c.set_lag_scan_lag(static_cast<uint32_t>(scan->lags[0]));
      c.set_lag_scan_blocks(static_cast<uint32_t>(scan->blocks));
    }
  }
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  int available = 0;
  for (double t : {koopman, counts, embedding}) {
    if (std::isnan(t)) continue;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
    ++available;
  }
  const double disagreement = available >= 2 ? (hi - lo) / lo : nan;  // finite: every t is resolved
  c.set_relative_disagreement(disagreement);
  // Error bars: the lag scan's jackknife s.e. as a relative error of a slowest timescale on this
  // stream (the sampling error is a property of the data: docs/algorithms.md §7). Two views
  // differ beyond their error bars when max - min > 3 s.e. of the difference.
  const double rel = RelativeStderr(c.lag_scan(), c.lag_scan_stderr());
  c.set_relative_stderr(rel);
  const bool above = available >= 2 && disagreement > kTimescaleDisagreementThreshold;
  const bool beyond = above && std::isfinite(rel) && (hi - lo) > 3 * rel * std::hypot(hi, lo);
  const bool nonstationary = cme.stationarity.nonstationary;
  c.set_warning(beyond && !nonstationary);
  const std::string views =
      absl::StrFormat("koopman %.6g, count chain %.6g, embedding %.6g (units of time)", koopman, counts, embedding);
  if (available < 2) {
    c.set_diagnostic("fewer than two views have a resolved slowest timescale: nothing to compare");
  } else if (nonstationary) {
    c.set_diagnostic(absl::StrFormat(
        "the stream is not stationary (see headline.nonstationary_reason): the views' slowest timescales (%s, "
        "relative spread %.3g) describe the drift or transient, not relaxation, and are not compared",
        views, disagreement));
  } else if (!above) {
    c.set_diagnostic(absl::StrFormat("the views agree within %.2f (relative spread %.3g): %s",
                                     kTimescaleDisagreementThreshold, disagreement, views));
  } else if (!std::isfinite(rel)) {
    c.set_diagnostic(absl::StrFormat(
        "the views spread by %.3g (relative) but there is no error bar to judge it (the lag scan has no "
        "resolved timescale with a jackknife s.e.): %s",
        disagreement, views));
  } else if (!beyond) {
    c.set_diagnostic(absl::StrFormat(
        "the views spread by %.3g (relative), within 3 s.e. of their difference (relative s.e. %.3g from the "
        "lag scan's jackknife): %s",
        disagreement, rel, views));
  } else {
    c.set_diagnostic(absl::StrFormat(
        "the slowest timescales disagree by %.3g (relative), more than 3 s.e. of their difference (relative "
        "s.e. %.3g from the lag scan's jackknife): %s; see docs/user-guide.md",
        disagreement, rel, views));
    cme.spectrum.add_warnings(c.diagnostic());
  }
  // The headline: the estimate trusted most, with its error bar (spectral_summary.h).
  HeadlineInputs in;
  in.koopman = koopman;
  in.consistent = cme.spectrum.estimator() == "spectral-moments" && cme.spectrum.ready();
  in.lag_scan = c.lag_scan();
  in.lag_scan_stderr = c.lag_scan_stderr();
  const Headline h = ChooseHeadline(in);
  cme.headline.set_timescale(h.timescale);
  cme.headline.set_stderr(h.stderr_);
  cme.headline.set_view(h.view);
  cme.headline.set_note(h.note);
}

// The held-out score the view reports (prequential, test-then-train): the window of the
// scoring view once it holds kMinPrequentialPairs pairs, else the previous view's report
// (NaN before any complete window). Returns whether the new view's scorer should replace the
// current one: after a complete window, or when there is none yet.
constexpr int64_t kMinPrequentialPairs = 1000;

bool ReportPrequential(const std::optional<Model::LearnerSnapshot::Prequential>& window,
                       const std::shared_ptr<const ModelView>& previous, v1::SpectrumInfo& info) {
  if (window && window->pairs >= kMinPrequentialPairs) {
    info.set_heldout_score(window->score);
    info.set_heldout_pairs(static_cast<uint64_t>(window->pairs));
    info.set_heldout_view_version(window->view_version);
    return true;
  }
  if (previous && previous->cme) {
    info.set_heldout_score(previous->cme->spectrum.heldout_score());
    info.set_heldout_pairs(previous->cme->spectrum.heldout_pairs());
    info.set_heldout_view_version(previous->cme->spectrum.heldout_view_version());
  } else {
    info.set_heldout_score(std::numeric_limits<double>::quiet_NaN());
  }
  return !window.has_value();
}

// The coordinates the replies carry (count states', representatives', meta-states' atoms) in
// the user's units; the estimators keep the scaled ones (docs/algorithms.md §1.13).
void UnscaleCoordinates(ModelView& view) {
  if (!view.scaler) return;
  if (view.counts.value) {
    auto counts = std::make_shared<CountsView>(*view.counts.value);
    view.scaler->InvertRows(counts->coordinates);
    view.counts.value = std::move(counts);
  }
  if (view.clusters.value) {
    auto clusters = std::make_shared<ClustersView>(*view.clusters.value);
    view.scaler->InvertRows(clusters->coordinates);
    view.clusters.value = std::move(clusters);
  }
  if (view.aggregation.value) {
    auto aggregation = std::make_shared<AggregationView>(*view.aggregation.value);
    view.scaler->InvertRows(aggregation->coordinates);
    view.aggregation.value = std::move(aggregation);
  }
}

}  // namespace

std::shared_ptr<const ModelView> RefreshModel(Model& model) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<Model::LearnerSnapshot> snap = model.Snapshot();  // the only step under the lock
  if (!snap) return nullptr;

  auto view = std::make_shared<ModelView>();
  view->view_seconds.emplace_back("snapshot", Seconds(std::chrono::steady_clock::now() - start));
  if (snap->scaler) view->scaler = std::make_shared<const InputScaler>(*snap->scaler);
  std::shared_ptr<CmeView> cme;  // completed (cross-view comparison) after the other views
  std::shared_ptr<const PrequentialModel> scorer;
  if (snap->cme) {
    Timed(model, *view, "koopman", [&] {
      cme = std::make_shared<CmeView>();
      cme->snapshot = *snap->cme;
      cme->inverse_drift = snap->inverse_drift;
      BuildKoopman(model.config(), *snap, *cme, scorer);
    });
  }
  // Each sub-view succeeds or fails on its own; a failure keeps its reason for the queries.
  const v1::ModelConfig& config = model.config();
  Timed(model, *view, "counts", [&] { BuildCounts(config, *snap, *view); });
  Timed(model, *view, "embedding", [&] { BuildEmbedding(config, *snap, *view); });
  Timed(model, *view, "clusters", [&] { BuildClusters(config, *snap, *view); });
  if (config.meta_states() > 0) {
    Timed(model, *view, "aggregation", [&] { BuildAggregation(config, *snap, *view); });
  } else {
    BuildAggregation(config, *snap, *view);  // records how to enable it
  }
  if (config.latent_states() > 0) {
    Timed(model, *view, "latent", [&] { BuildLatent(config, *snap, *view); });
  } else {
    BuildLatent(config, *snap, *view);
  }
  if (config.window() > 0) {
    Timed(model, *view, "predictive", [&] { BuildPredictive(config, *snap, *view); });
  } else {
    BuildPredictive(config, *snap, *view);
  }
  if (snap->cme) {
    Timed(model, *view, "forecast", [&] { BuildForecast(*snap, *view); });
  } else {
    BuildForecast(*snap, *view);  // records why a discrete model has none
  }

  // Lag scans and the CK test (after the clusters, whose sets the CK test uses).
  if (snap->lags) {
    Timed(model, *view, "lags", [&] {
      auto lags = std::make_shared<LagsView>();
      BuildLags(config, *snap->lags, *view, *lags);
      const std::optional<LagTimescales>& primary = lags->koopman ? lags->koopman : lags->counts;
      const std::optional<CkTest>& ck = lags->ck_koopman ? lags->ck_koopman : lags->ck_counts;
      const double nan = std::numeric_limits<double>::quiet_NaN();
      if (primary) {
        model.metrics().OnLags(primary->lags, primary->timescales, primary->stderrs, ck ? ck->max_deviation : nan,
                               ck ? ck->max_deviation_stderr : nan);
      }
      if (!primary) view->lags.error = lags->error;
      view->lags.value = std::move(lags);
    });
  } else {
    view->lags.error =
        HasLagStatistics(config)
            ? "no lag statistics yet (continuous models start them once sigma is known)"
            : absl::StrCat("lag statistics are off for discrete models with num_states > ", kMaxLagStates);
  }
  const std::shared_ptr<const ModelView> previous = model.view();
  bool install_scorer = false;
  if (cme) {
    CompareTimescales(config, *view, static_cast<double>(snap->samples) * config.dt(), *cme);
    install_scorer = ReportPrequential(snap->prequential, previous, cme->spectrum) && scorer != nullptr;
    model.metrics().OnSpectrum(cme->spectrum.heldout_score(), cme->spectrum.comparison().relative_disagreement(),
                               static_cast<double>(cme->spectrum.epochs()), cme->spectrum.data_share());
    const v1::TimescaleComparison& c = cme->spectrum.comparison();
    model.metrics().OnSlowestTimescales(
        {c.koopman(), c.count_chain(), c.embedding(), cme->headline.timescale(), cme->headline.stderr()});
    view->cme = std::move(cme);
  }

  view->version = previous ? previous->version + 1 : 1;
  view->samples = snap->samples;
  view->built_at = std::chrono::steady_clock::now();
  view->build_seconds = Seconds(view->built_at - start);
  ReportSubViews(*view, model.metrics());
  UnscaleCoordinates(*view);
  model.Publish(view);
  // The new view scores the pairs from now on (allocated here, outside the learner lock).
  if (install_scorer) model.InstallPrequential(std::make_unique<PrequentialVampE>(scorer), view->version);
  model.metrics().OnRefresh(view->build_seconds, snap->inverse_drift, view->version, view->samples);
  return view;
}

RefreshScheduler::RefreshScheduler(ModelRegistry& registry, Options options)
    : registry_(registry), options_(options), thread_(absl::Seconds(options.tick_seconds), [this] {
        RefreshDueModels();
        CompleteWaiters();
      }) {}

void RefreshScheduler::Start() { thread_.Start(); }

void RefreshScheduler::Stop() {
  std::vector<Waiter> orphans;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
  }
  thread_.Stop();
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    orphans.swap(waiters_);
  }
  for (Waiter& w : orphans) w.done(absl::UnavailableError("cmestreamd is shutting down"));
}

void RefreshScheduler::Request(Model& model) {
  model.refresh_requested = true;
  thread_.Wake();
}

void RefreshScheduler::Wait(std::shared_ptr<Model> model, uint64_t target, Clock::time_point deadline, Callback done) {
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
    if (!stopping) {
      // Checked under mu_: CompleteWaiters runs after every publish, so a view published
      // between this check and the push is still seen by the next pass.
      std::shared_ptr<const ModelView> view = model->view();
      if (!Covers(view, target)) {
        model->refresh_requested = true;
        waiters_.push_back({std::move(model), target, deadline, std::move(done)});
        thread_.Wake();
        return;
      }
    }
  }
  if (stopping) {
    done(absl::UnavailableError("cmestreamd is shutting down"));
  } else {
    done(model->view());
  }
}

void RefreshScheduler::RefreshDueModels() {
  for (const std::shared_ptr<Model>& model : registry_.List()) {
    const Clock::time_point now = Clock::now();
    const Model::Stats stats = model->stats();
    std::shared_ptr<const ModelView> view = model->view();
    const uint64_t view_samples = view ? view->samples : 0;
    const bool has_new = stats.learner_ready && stats.samples > 0 && (!view || stats.samples > view_samples);
    const v1::ModelConfig& config = model->config();
    const bool interval_elapsed = Seconds(now - model->last_refresh_attempt) >= config.refresh_interval_seconds();
    const bool enough_samples =
        config.refresh_every_samples() > 0 && stats.samples - view_samples >= config.refresh_every_samples();
    const bool requested = model->refresh_requested.exchange(false);
    if (has_new && (requested || interval_elapsed || enough_samples)) {
      model->last_refresh_attempt = now;
      view = RefreshModel(*model);
    }
    if (view) {
      model->metrics().SetViewAge(Seconds(Clock::now() - view->built_at));
    } else {
      model->metrics().SetNoView();  // age since creation: a view that never comes is stale
    }
  }
}

void RefreshScheduler::CompleteWaiters() {
  std::vector<std::pair<Callback, absl::StatusOr<std::shared_ptr<const ModelView>>>> ready;
  {
    absl::MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    auto keep = waiters_.begin();
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      std::shared_ptr<const ModelView> view = it->model->view();
      absl::StatusOr<std::shared_ptr<Model>> current = registry_.Get(it->model->name());
      if (!current.ok() || *current != it->model) {
        ready.emplace_back(std::move(it->done),
                           absl::NotFoundError(absl::StrCat("model '", it->model->name(), "' was deleted")));
      } else if (Covers(view, it->target)) {
        ready.emplace_back(std::move(it->done), std::move(view));
      } else if (now >= it->deadline) {
        ready.emplace_back(std::move(it->done), absl::DeadlineExceededError(absl::StrCat(
                                                    "model '", it->model->name(), "': no view reflecting ", it->target,
                                                    " samples was built before the timeout (latest view reflects ",
                                                    view ? view->samples : 0, ")")));
      } else {
        it->model->refresh_requested = true;  // keep asking until covered
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    waiters_.erase(keep, waiters_.end());
  }
  for (auto& [done, result] : ready) done(std::move(result));
}

}  // namespace cmestream::service
