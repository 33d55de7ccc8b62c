#include "service/engine/fit_summary.h"

#include <algorithm>
#include <cmath>

#include <string>

namespace cmestream::service {
namespace {

// Figures by name: Set(out, "rank", 3, "kept_x", 120, ...).
template <class... Rest>
void Set(v1::FitSummary& out, const char* name, double value, const Rest&... rest) {
  (*out.mutable_figures())[name] = value;
  if constexpr (sizeof...(rest) > 0) Set(out, rest...);
}

// A summary with its termination, message and brief report (an empty string is proto3's
// default: as if not set).
v1::FitSummary NewSummary(const std::string& termination, const std::string& message = "",
                          const std::string& brief_report = "") {
  v1::FitSummary out;
  out.set_termination(termination);
  out.set_message(message);
  out.set_brief_report(brief_report);
  return out;
}

template <class T>
v1::SubViewStatus* AddStatus(const char* name, const SubView<T>& sub,
                             google::protobuf::RepeatedPtrField<v1::SubViewStatus>* out) {
  v1::SubViewStatus* s = out->Add();
  s->set_name(name);
  s->set_available(sub.value != nullptr);
  if (!sub.value) s->set_error(sub.error);
  return s;
}

}  // namespace

v1::FitSummary ToFitSummary(const StateEmbedding::Summary& s) {
  v1::FitSummary out = NewSummary(s.termination == StateEmbedding::Termination::kSuccess ? "success" : "rank_clipped",
                                  s.message, s.BriefReport());
  Set(out, "num_features", s.num_features, "kept_x", s.kept_x, "kept_y", s.kept_y, "rank", s.rank, "suggested_rank",
      s.suggested_rank, "samples_weight", s.samples_weight, "eigen_seconds", s.seconds_eigen, "svd_seconds",
      s.seconds_svd);
  return out;
}

v1::FitSummary ToFitSummary(const WeightedKMeansResult& kmeans) {
  // k-means always returns its best restart.
  v1::FitSummary out = NewSummary("success", "", kmeans.BriefReport());
  Set(out, "inertia", kmeans.inertia, "iterations", kmeans.iterations, "best_restart", kmeans.best_restart, "restarts",
      static_cast<double>(kmeans.restart_inertia.size()));
  return out;
}

v1::FitSummary ToFitSummary(const AggregationResult& result) {
  using T = SoftAggregation::Termination;
  const SoftAggregation::Summary& s = result.summary;
  v1::FitSummary out = NewSummary(s.termination == T::kSuccess            ? "success"
                                  : s.termination == T::kNumericalTrouble ? "numerical_trouble"
                                                                          : "not_run",
                                  s.message, s.BriefReport());
  Set(out, "kept_states", static_cast<double>(s.kept_states), "excluded_states", static_cast<double>(s.excluded_states),
      "truncated_svd", s.svd_kind == SoftAggregation::SvdKind::kTruncated ? 1 : 0, "svd_iterations", s.svd_iterations,
      "svd_residual", s.svd_residual, "vertex_rcond", s.vertex_rcond, "mean_clipped_mass", s.mean_clipped_mass,
      "zero_h1_rows", s.zero_h1_rows, "total_seconds", s.total_seconds);
  // The gap sigma_r / sigma_{r+1} is what tells a user whether r meta-states are supported.
  const Eigen::Index r = result.V.cols();
  if (r >= 1 && s.singular_values.size() > r && s.singular_values[r] > 0) {
    Set(out, "singular_value_gap", s.singular_values[r - 1] / s.singular_values[r]);
  }
  return out;
}

v1::FitSummary ToFitSummary(const LatentModel::Summary& s) {
  // A failed fit has no view (the reply is FAILED_PRECONDITION).
  v1::FitSummary out = NewSummary("success", "", s.BriefReport());
  Set(out, "triples", static_cast<double>(s.triples));
  Set(out, "reservoir", static_cast<double>(s.reservoir));
  for (Eigen::Index i = 0; i < s.tensor_eigenvalues.size(); ++i) {
    Set(out, ("tensor_eigenvalue_" + std::to_string(i)).c_str(), s.tensor_eigenvalues[i]);
  }
  return out;
}

v1::FitSummary ToFitSummary(const CountsSnapshot& c) {
  v1::FitSummary out = NewSummary("success");  // counts are exact: nothing to converge
  Set(out, "states", c.num_states(), "samples", static_cast<double>(c.samples()), "total_weight", c.total_weight(),
      "nonzeros", static_cast<double>(c.nonzeros()));
  return out;
}

v1::FitSummary ToFitSummary(const PredictiveStateModel& m) {
  v1::FitSummary out = NewSummary("success");  // a failed fit has no view
  Set(out, "state_dim", m.state_dim());
  Set(out, "obs_dim", m.obs_dim());
  if (m.kind() == PredictiveStateAccumulator::Kind::kDiscrete) Set(out, "num_symbols", m.num_symbols());
  return out;
}

v1::FitSummary ToFitSummary(const LagsView& lags) {
  v1::FitSummary out;
  // "success": timescales and the CK test; "no_ck_test": timescales only (message: why);
  // "no_timescales": neither yet (message: why).
  const std::optional<LagTimescales>& scan = lags.koopman ? lags.koopman : lags.counts;
  const std::optional<CkTest>& ck = lags.ck_koopman ? lags.ck_koopman : lags.ck_counts;
  if (!scan) {
    out.set_termination("no_timescales");
    out.set_message(lags.error);
  } else if (!ck) {
    out.set_termination("no_ck_test");
    out.set_message(lags.ck_error);
  } else {
    out.set_termination("success");
  }
  Set(out, "epoch", static_cast<double>(lags.stats.epoch));
  Set(out, "basis_size", static_cast<double>(lags.stats.discrete ? 0 : lags.stats.basis.rows()));
  if (scan) {
    Set(out, "lags", static_cast<double>(scan->lags.size()));
    Set(out, "blocks", scan->blocks);
  }
  if (ck) {
    Set(out, "ck_max_deviation", ck->max_deviation);
    Set(out, "ck_max_deviation_stderr", ck->max_deviation_stderr);
  }
  return out;
}

v1::FitSummary ToFitSummary(const ForecastView& f) {
  v1::FitSummary out = NewSummary("success");
  Set(out, "pairs", static_cast<double>(f.samples), "kernel_features", f.model.num_features(), "skill_pairs",
      static_cast<double>(f.skill.pairs));
  // Live one-step RMSE / persistence's (< 1: beats it). Absent while undefined (no pair scored,
  // or a stream persistence predicts exactly, e.g. a flat line): figures absent = not applicable.
  if (std::isfinite(f.skill.ratio())) Set(out, "skill_ratio", f.skill.ratio());
  int increments = 0;
  for (const ForecastChoice& c : f.model.choices()) increments += c.increment ? 1 : 0;
  Set(out, "increment_components", increments);
  // The candidates per horizon (docs/algorithms.md §11 "Served forecast"): the linear part's
  // live one-step ratio to persistence, and how many of the horizons kept each candidate serves.
  if (!f.horizons.empty()) {
    const ForecastHorizonSkill& h1 = f.horizons[0];
    const int sd = f.skill.scored_dims;
    Set(out, "skill_horizons", static_cast<double>(f.horizons.size()), "candidate_pairs",
        static_cast<double>(h1.pairs));
    const double lin = h1.rmse(ForecastMethod::kLinear, sd) / h1.rmse(ForecastMethod::kPersistence, sd);
    if (std::isfinite(lin)) Set(out, "linear_skill_ratio", lin);
    int served[kForecastMethods] = {0, 0, 0};
    for (size_t h = 1; h <= f.horizons.size(); ++h) ++served[static_cast<int>(f.MethodAt(static_cast<int>(h)))];
    Set(out, "regression_horizons", served[0], "linear_horizons", served[1], "persistence_horizons", served[2]);
  }
  // When the first step is not the regression's: what serves it, and which candidate serves
  // which horizons, in runs ("linear at 1-3, regression at 4-12"). A model served by the
  // regression at step 1 says nothing here (the figures above count the horizons).
  const ForecastMethod first = f.MethodAt(1);
  if (first == ForecastMethod::kPersistence) {
    out.set_message(absl::StrCat("forecasts are persistence (next = last): the regression's live skill ratio ",
                                 f.skill.ratio(), " over ", f.skill.pairs, " pairs is above 1"));
  } else if (first == ForecastMethod::kLinear) {
    out.set_message(
        "one-step forecasts are the least-squares AR on the same state: the regression does not beat it "
        "by one standard error of their live errors");
  }
  if (first != ForecastMethod::kRegression && f.horizons.size() > 1) {
    const int kept = static_cast<int>(f.horizons.size());
    std::string runs;
    for (int h = 1; h <= kept;) {
      const ForecastMethod m = f.MethodAt(h);
      int end = h;
      while (end < kept && f.MethodAt(end + 1) == m) ++end;
      absl::StrAppend(&runs, runs.empty() ? "" : ", ", ForecastMethodName(m), " at ",
                      end > h ? absl::StrCat(h, "-", end) : absl::StrCat(h));
      h = end + 1;
    }
    out.set_message(absl::StrCat(out.message(), "; by horizon (steps): ", runs));
  }
  return out;
}

v1::SpectrumInfo ToSpectrumInfo(const SpectrumReport& r, const HeldoutScore& heldout) {
  v1::SpectrumInfo out;
  out.set_estimator(r.estimator);
  out.set_epoch(static_cast<uint64_t>(r.epoch));
  out.set_epoch_samples(static_cast<uint64_t>(r.epoch_samples));
  out.set_epoch_weight(r.epoch_weight);
  out.set_ready(r.ready);
  out.set_basis_size(static_cast<uint32_t>(r.basis_size));
  out.set_heldout_score(heldout.score);
  out.set_score_rank(static_cast<uint32_t>(r.score_rank));
  out.set_ridge(r.ridge);
  for (double v : r.ridge_grid) out.add_ridge_grid(v);
  for (double v : r.ridge_scores) out.add_ridge_scores(v);
  for (const std::string& w : r.warnings) out.add_warnings(w);
  v1::TimescaleComparison& c = *out.mutable_comparison();
  c.set_koopman(r.comparison.koopman);
  c.set_count_chain(r.comparison.count_chain);
  c.set_embedding(r.comparison.embedding);
  c.set_relative_disagreement(r.comparison.relative_disagreement);
  c.set_threshold(r.comparison.threshold);
  c.set_warning(r.comparison.warning);
  c.set_lag_scan(r.comparison.lag_scan);
  c.set_lag_scan_stderr(r.comparison.lag_scan_stderr);
  c.set_lag_scan_lag(static_cast<uint32_t>(r.comparison.lag_scan_lag));
  c.set_lag_scan_blocks(static_cast<uint32_t>(r.comparison.lag_scan_blocks));
  c.set_relative_stderr(r.comparison.relative_stderr);
  c.set_diagnostic(r.comparison.diagnostic);
  out.set_selection_score(r.selection_score);
  out.set_heldout_pairs(heldout.pairs);
  out.set_heldout_view_version(heldout.view_version);
  out.set_epochs(static_cast<uint64_t>(r.epochs));
  out.set_data_share(r.data_share);
  return out;
}

namespace {
void ToCycle(const Cycle& c, v1::Cycle* out) {
  out->set_period(c.period);
  out->set_timescale(c.timescale);
  out->set_share(c.share);
  out->set_amplitude(c.amplitude);
  out->set_harmonic(static_cast<uint32_t>(c.harmonic));
  out->set_group_share(c.group_share);
  out->set_mode(static_cast<uint32_t>(std::max(c.mode, 0)));
  out->set_peak(c.peak);
  out->set_group_peak(c.group_peak);
  for (const Cycle& h : c.harmonics) ToCycle(h, out->add_harmonics());
}
}  // namespace

v1::KoopmanHeadline ToHeadline(const KoopmanHeadline& h) {
  v1::KoopmanHeadline out;
  out.set_timescale(h.timescale);
  out.set_stderr(h.stderr_);
  out.set_view(h.view);
  out.set_nonstationary(h.nonstationary);
  out.set_nonstationary_reason(h.nonstationary_reason);
  out.set_note(h.note);
  for (const Cycle& c : h.cycles) ToCycle(c, out.add_cycles());
  return out;
}

void AddSubViewStatuses(const ModelView& view, google::protobuf::RepeatedPtrField<v1::SubViewStatus>* out) {
  if (auto* s = AddStatus("counts", view.counts, out); view.counts.value) {
    *s->mutable_summary() = ToFitSummary(view.counts.value->counts);
  }
  if (auto* s = AddStatus("embedding", view.embedding, out); view.embedding.value) {
    *s->mutable_summary() = ToFitSummary(view.embedding.value->summary());
  }
  if (auto* s = AddStatus("clusters", view.clusters, out); view.clusters.value) {
    *s->mutable_summary() = ToFitSummary(view.clusters.value->clusters.kmeans());
  }
  if (auto* s = AddStatus("aggregation", view.aggregation, out); view.aggregation.value) {
    *s->mutable_summary() = ToFitSummary(view.aggregation.value->result);
  }
  if (auto* s = AddStatus("latent", view.latent, out); view.latent.value) {
    *s->mutable_summary() = ToFitSummary(view.latent.value->summary());
  }
  if (auto* s = AddStatus("predictive", view.predictive, out); view.predictive.value) {
    *s->mutable_summary() = ToFitSummary(*view.predictive.value);
  }
  if (auto* s = AddStatus("lags", view.lags, out); view.lags.value) {
    *s->mutable_summary() = ToFitSummary(*view.lags.value);
  }
  if (auto* s = AddStatus("forecast", view.forecast, out); view.forecast.value) {
    *s->mutable_summary() = ToFitSummary(*view.forecast.value);
  }
}

}  // namespace cmestream::service
