#include "service/engine/lags.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/engine/model_view.h"

namespace cmestream::service {
namespace {

std::vector<int> Lags(const v1::ModelConfig& c) { return std::vector<int>(c.lags().begin(), c.lags().end()); }

LagEstimateOptions KoopmanOptions(double dt) {
  LagEstimateOptions o;
  o.top = kLagTimescales;
  o.dt = dt;
  o.ridge = kLagRidge;
  o.constant_index = 0;
  return o;
}

LagEstimateOptions CountOptions(double dt) {
  LagEstimateOptions o;
  o.top = kLagTimescales;
  o.dt = dt;
  return o;
}

// Why lags other than 1 have no pairs: the stream had no trajectories.
std::string PairsOnlyReason(const std::string& model, const LaggedMomentsSnapshot& s) {
  return absl::StrCat("model '", model, "' was fed only unordered pairs (", s.unordered_pairs,
                      " pairs, no trajectory batches): pairs carry no history, so they feed lag 1 only; lags "
                      "above 1 and the CK test need trajectory batches (IngestBatch.trajectory, or "
                      "`cmestream ingest --trajectory`)");
}

// Cluster label of each count-chain state (basis atom or id) from the view's metastable
// clusters, re-clustered when another K is asked for. -1 where there is no label.
absl::StatusOr<Eigen::VectorXi> StateLabels(const v1::ModelConfig& config, const LagStatisticsSnapshot& stats,
                                            const ModelView& view, int k) {
  if (!view.clusters.value || !view.embedding.value) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CK test needs the metastable clusters, which are not available: ",
                     view.clusters.value ? view.embedding.error : view.clusters.error));
  }
  const ClustersView& cv = *view.clusters.value;
  const StateEmbedding& emb = *view.embedding.value;
  MetastableClusters clusters = cv.clusters;
  if (k != cv.clusters.num_clusters()) {
    if (k > static_cast<int>(cv.ids.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("clusters ", k, " is more than the ", cv.ids.size(), " visited representative states"));
    }
    WeightedKMeansOptions km;
    km.k = k;
    km.seed = config.seed();
    absl::StatusOr<MetastableClusters> c =
        MetastableClusters::Fit(emb, cv.clusters.representatives(), cv.clusters.weights(), km);
    if (!c.ok()) return c.status();
    clusters = *std::move(c);
  }
  if (stats.discrete) {
    const int p = stats.counts ? stats.counts->dim : 0;
    RowMatrixXd ids(p, 1);
    for (int i = 0; i < p; ++i) ids(i, 0) = i;
    return clusters.Label(emb, ids);
  }
  return clusters.Label(emb, stats.basis);
}

void Fill(const LagTimescales& t, v1::LagScan* out) {
  for (size_t k = 0; k < t.lags.size(); ++k) {
    out->add_lags(static_cast<uint32_t>(t.lags[k]));
    v1::LagTimescales* row = out->add_per_lag();
    for (double v : t.timescales[k]) row->add_timescales(v);
    for (double v : t.stderrs[k]) row->add_stderr(v);
    row->set_samples(t.pairs[k]);
  }
  out->set_blocks(static_cast<uint32_t>(t.blocks));
}

void Fill(const CkTest& ck, int k, v1::CkResult* out) {
  out->set_lag(static_cast<uint32_t>(ck.lag));
  out->set_clusters(static_cast<uint32_t>(k));
  out->set_max_deviation(ck.max_deviation);
  out->set_max_deviation_stderr(ck.max_deviation_stderr);
  out->set_blocks(static_cast<uint32_t>(ck.blocks));
  for (const CkStep& st : ck.steps) {
    v1::CkTestStep* s = out->add_steps();
    s->set_steps(static_cast<uint32_t>(st.steps));
    s->set_lag(static_cast<uint32_t>(st.lag));
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) {
        s->add_predicted(st.predicted(i, j));
        s->add_estimated(st.estimated(i, j));
        s->add_stderr(st.estimated_stderr(i, j));
        s->add_predicted_stderr(st.predicted_stderr(i, j));
      }
    }
    s->set_max_deviation(st.max_deviation);
    s->set_max_deviation_stderr(st.max_deviation_stderr);
  }
}

struct CkPair {
  std::optional<CkTest> koopman, counts;
};

absl::StatusOr<CkPair> RunCk(const std::string& model, const v1::ModelConfig& config, const LagsView& lags,
                             const ModelView& view, int k, int steps, int lag) {
  const LagStatisticsSnapshot& s = lags.stats;
  if (!s.counts) return absl::FailedPreconditionError(absl::StrCat("model '", model, "': ", lags.error));
  if (s.counts->trajectory_states == 0 && s.counts->unordered_pairs > 0) {
    return absl::FailedPreconditionError(PairsOnlyReason(model, *s.counts));
  }
  absl::StatusOr<Eigen::VectorXi> labels = StateLabels(config, s, view, k);
  if (!labels.ok()) return labels.status();
  const int p = static_cast<int>(labels->size());
  MatrixXd chi = MatrixXd::Zero(p, k);
  for (int i = 0; i < p; ++i)
    if ((*labels)[i] >= 0 && (*labels)[i] < k) chi(i, (*labels)[i]) = 1;
  CkPair out;
  absl::StatusOr<CkTest> counts = ChapmanKolmogorovTest(*s.counts, chi, lag, steps, CountOptions(lags.dt));
  if (!counts.ok()) return counts.status();
  out.counts = *std::move(counts);
  if (s.koopman) {
    // Memberships in the Koopman features: least squares on the basis atoms weighted by visits.
    const int base =
        static_cast<int>(std::find(s.counts->lags.begin(), s.counts->lags.end(), lag) - s.counts->lags.begin());
    const VectorXd visits = s.counts->total[base].s0.array() + 1e-12;
    const MatrixXd m = MembershipCoefficients(s.Features(s.basis), visits, *labels, k);
    absl::StatusOr<CkTest> koopman = ChapmanKolmogorovTest(*s.koopman, m, lag, steps, KoopmanOptions(lags.dt));
    if (!koopman.ok()) return koopman.status();
    out.koopman = *std::move(koopman);
  }
  return out;
}

}  // namespace

absl::Status NormalizeLags(v1::ModelConfig& c) {
  if (c.lags().empty()) c.add_lags(1);
  LaggedMoments::Options o;
  o.lags = Lags(c);
  if (absl::Status s = o.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", c.name(), "': field lags is [", absl::StrJoin(o.lags, ","), "]: ", s.message(),
                     " (at most ", LaggedMoments::kMaxLags, " lags, each in 1..", LaggedMoments::kMaxLag, ")"));
  }
  if (c.num_states() > static_cast<uint32_t>(kMaxLagStates) && o.lags != std::vector<int>{1}) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", c.name(), "': field lags is [", absl::StrJoin(o.lags, ","),
                     "] but lag statistics of a discrete model ", "need num_states <= ", kMaxLagStates,
                     " (dense one-hot sums per lag and block); num_states is ", c.num_states()));
  }
  return absl::OkStatus();
}

bool HasLagStatistics(const v1::ModelConfig& c) {
  return c.num_states() == 0 || c.num_states() <= static_cast<uint32_t>(kMaxLagStates);
}

void BuildLags(const v1::ModelConfig& config, const LagStatisticsSnapshot& snap, const ModelView& view, LagsView& out) {
  out.stats = snap;
  out.dt = config.dt();
  if (!snap.counts) {
    out.error = "no lag basis yet (it is taken from the dictionary with the first pairs)";
    return;
  }
  if (snap.counts->samples == 0) {
    out.error = "no samples yet";
    return;
  }
  absl::StatusOr<LagTimescales> c = EstimateImpliedTimescales(*snap.counts, CountOptions(out.dt));
  if (c.ok()) out.counts = *std::move(c);
  if (snap.koopman) {
    absl::StatusOr<LagTimescales> k = EstimateImpliedTimescales(*snap.koopman, KoopmanOptions(out.dt));
    if (k.ok()) out.koopman = *std::move(k);
  }
  // The CK test for the gauges: the first lag, the model's clusters, every step available.
  const int lag = snap.counts->lags.front();
  absl::StatusOr<CkPair> ck =
      RunCk(config.name(), config, out, view, static_cast<int>(config.clusters()), LaggedMoments::kMaxLag, lag);
  if (ck.ok()) {
    out.ck_koopman = ck->koopman;
    out.ck_counts = ck->counts;
  } else {
    out.ck_error = std::string(ck.status().message());
  }
}

absl::Status FillTimescales(const std::string& model, const LagsView& lags, v1::TimescalesResponse* resp) {
  const LaggedMomentsSnapshot* s = lags.stats.counts ? &*lags.stats.counts : nullptr;
  if (!lags.counts) {
    return absl::FailedPreconditionError(absl::StrCat("model '", model, "': timescales not available: ", lags.error));
  }
  if (s && s->trajectory_states == 0 && s->unordered_pairs > 0 && s->lags != std::vector<int>{1}) {
    return absl::FailedPreconditionError(PairsOnlyReason(model, *s));
  }
  resp->set_dt(lags.dt);
  resp->set_estimator(lags.koopman ? "koopman" : "counts");
  Fill(*lags.counts, resp->mutable_counts());
  if (lags.koopman) Fill(*lags.koopman, resp->mutable_koopman());
  resp->set_basis_size(static_cast<uint32_t>(lags.stats.discrete ? 0 : lags.stats.basis.rows()));
  resp->set_epoch(static_cast<uint64_t>(lags.stats.epoch));
  return absl::OkStatus();
}

absl::Status FillCkTest(const std::string& model, const v1::ModelConfig& config, const LagsView& lags,
                        const ModelView& view, uint32_t clusters, uint32_t steps, uint32_t lag,
                        v1::CkTestResponse* resp) {
  const int k = clusters == 0 ? static_cast<int>(config.clusters()) : static_cast<int>(clusters);
  if (k < 1 || k > static_cast<int>(kLagBasisAtoms) * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("field clusters is ", clusters, ", expected 1..", kLagBasisAtoms * 4));
  }
  if (steps == 1) return absl::InvalidArgumentError("field steps is 1, expected >= 2 (or 0 for every multiple)");
  const int base = lag == 0 ? (lags.stats.counts ? lags.stats.counts->lags.front() : 1) : static_cast<int>(lag);
  const int max_steps = steps == 0 ? LaggedMoments::kMaxLag : static_cast<int>(std::min<uint32_t>(steps, 1u << 20));
  absl::StatusOr<CkPair> ck = RunCk(model, config, lags, view, k, max_steps, base);
  if (!ck.ok()) {
    return absl::Status(ck.status().code(), absl::StrCat("model '", model, "': CK test: ", ck.status().message()));
  }
  resp->set_estimator(ck->koopman ? "koopman" : "counts");
  Fill(*ck->counts, k, resp->mutable_counts());
  if (ck->koopman) Fill(*ck->koopman, k, resp->mutable_koopman());
  return absl::OkStatus();
}

}  // namespace cmestream::service
