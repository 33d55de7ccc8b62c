#include "service/engine/fit_summary.h"

#include <string>

namespace cmestream::service {
namespace {

void Set(v1::FitSummary& out, const char* name, double value) { (*out.mutable_figures())[name] = value; }

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
  v1::FitSummary out;
  out.set_termination(s.termination == StateEmbedding::Termination::kSuccess ? "success" : "rank_clipped");
  out.set_message(s.message);
  out.set_brief_report(s.BriefReport());
  Set(out, "num_features", s.num_features);
  Set(out, "kept_x", s.kept_x);
  Set(out, "kept_y", s.kept_y);
  Set(out, "rank", s.rank);
  Set(out, "suggested_rank", s.suggested_rank);
  Set(out, "samples_weight", s.samples_weight);
  Set(out, "eigen_seconds", s.seconds_eigen);
  Set(out, "svd_seconds", s.seconds_svd);
  return out;
}

v1::FitSummary ToFitSummary(const WeightedKMeansResult& kmeans) {
  v1::FitSummary out;
  out.set_termination("success");  // k-means always returns its best restart
  out.set_brief_report(kmeans.BriefReport());
  Set(out, "inertia", kmeans.inertia);
  Set(out, "iterations", kmeans.iterations);
  Set(out, "best_restart", kmeans.best_restart);
  Set(out, "restarts", static_cast<double>(kmeans.restart_inertia.size()));
  return out;
}

v1::FitSummary ToFitSummary(const AggregationResult& result) {
  using T = SoftAggregation::Termination;
  const SoftAggregation::Summary& s = result.summary;
  v1::FitSummary out;
  out.set_termination(s.termination == T::kSuccess            ? "success"
                      : s.termination == T::kNumericalTrouble ? "numerical_trouble"
                                                              : "not_run");
  out.set_message(s.message);
  out.set_brief_report(s.BriefReport());
  Set(out, "kept_states", static_cast<double>(s.kept_states));
  Set(out, "excluded_states", static_cast<double>(s.excluded_states));
  Set(out, "truncated_svd", s.svd_kind == SoftAggregation::SvdKind::kTruncated ? 1 : 0);
  Set(out, "svd_iterations", s.svd_iterations);
  Set(out, "svd_residual", s.svd_residual);
  Set(out, "vertex_rcond", s.vertex_rcond);
  Set(out, "mean_clipped_mass", s.mean_clipped_mass);
  Set(out, "zero_h1_rows", s.zero_h1_rows);
  Set(out, "total_seconds", s.total_seconds);
  // The gap sigma_r / sigma_{r+1} is what tells a user whether r meta-states are supported.
  const Eigen::Index r = result.V.cols();
  if (r >= 1 && s.singular_values.size() > r && s.singular_values[r] > 0) {
    Set(out, "singular_value_gap", s.singular_values[r - 1] / s.singular_values[r]);
  }
  return out;
}

v1::FitSummary ToFitSummary(const LatentModel::Summary& s) {
  v1::FitSummary out;
  out.set_termination("success");  // a failed fit has no view (the reply is FAILED_PRECONDITION)
  out.set_brief_report(s.BriefReport());
  Set(out, "triples", static_cast<double>(s.triples));
  Set(out, "reservoir", static_cast<double>(s.reservoir));
  for (Eigen::Index i = 0; i < s.tensor_eigenvalues.size(); ++i) {
    Set(out, ("tensor_eigenvalue_" + std::to_string(i)).c_str(), s.tensor_eigenvalues[i]);
  }
  return out;
}

void AddSubViewStatuses(const ModelView& view, google::protobuf::RepeatedPtrField<v1::SubViewStatus>* out) {
  AddStatus("counts", view.counts, out);
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
  AddStatus("predictive", view.predictive, out);
  AddStatus("lags", view.lags, out);
}

}  // namespace cmestream::service
