#include "core/stream/lags_view.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cmestream {
namespace {

LagEstimateOptions KoopmanLagOptions(double dt) {
  LagEstimateOptions o;
  o.top = kLagTimescales;
  o.dt = dt;
  o.ridge = kLagRidge;
  o.constant_index = 0;
  return o;
}

LagEstimateOptions CountLagOptions(double dt) {
  LagEstimateOptions o;
  o.top = kLagTimescales;
  o.dt = dt;
  return o;
}

// Cluster label of each count-chain state (basis atom or id) from the metastable clusters,
// re-clustered when another K is asked for. -1 where there is no label.
absl::StatusOr<Eigen::VectorXi> StateLabels(const LagStatisticsSnapshot& stats, const CkClusters& sets, int k,
                                            uint64_t seed) {
  if (sets.clusters == nullptr || sets.embedding == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CK test needs the metastable clusters, which are not available: ", sets.missing));
  }
  const StateEmbedding& emb = *sets.embedding;
  MetastableClusters clusters = *sets.clusters;
  if (k != clusters.num_clusters()) {
    const int64_t representatives = clusters.representatives().rows();
    if (k > representatives) {
      return absl::InvalidArgumentError(
          absl::StrCat("clusters ", k, " is more than the ", representatives, " visited representative states"));
    }
    WeightedKMeansOptions km;
    km.k = k;
    km.seed = seed;
    absl::StatusOr<MetastableClusters> c =
        MetastableClusters::Fit(emb, sets.clusters->representatives(), sets.clusters->weights(), km);
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

}  // namespace

std::string PairsOnlyReason(const std::string& name, const LaggedMomentsSnapshot& s) {
  return absl::StrCat(name, " was fed only unordered pairs (", s.unordered_pairs,
                      " pairs, no trajectory batches): pairs carry no history, so they feed lag 1 only; lags "
                      "above 1 and the CK test need trajectory batches (IngestBatch.trajectory, or "
                      "`cmestream ingest --trajectory`)");
}

absl::StatusOr<CkPair> RunCkTests(const LagsView& lags, const CkClusters& sets, int k, int steps, int lag,
                                  uint64_t seed, const std::string& name) {
  const LagStatisticsSnapshot& s = lags.stats;
  if (!s.counts) return absl::FailedPreconditionError(absl::StrCat(name, ": ", lags.error));
  if (s.counts->trajectory_states == 0 && s.counts->unordered_pairs > 0) {
    return absl::FailedPreconditionError(PairsOnlyReason(name, *s.counts));
  }
  absl::StatusOr<Eigen::VectorXi> labels = StateLabels(s, sets, k, seed);
  if (!labels.ok()) return labels.status();
  const int p = static_cast<int>(labels->size());
  MatrixXd chi = MatrixXd::Zero(p, k);
  for (int i = 0; i < p; ++i)
    if ((*labels)[i] >= 0 && (*labels)[i] < k) chi(i, (*labels)[i]) = 1;
  CkPair out;
  absl::StatusOr<CkTest> counts = ChapmanKolmogorovTest(*s.counts, chi, lag, steps, CountLagOptions(lags.dt));
  if (!counts.ok()) return counts.status();
  out.counts = *std::move(counts);
  if (s.koopman) {
    // Memberships in the Koopman features: least squares on the basis atoms weighted by visits.
    const int base =
        static_cast<int>(std::find(s.counts->lags.begin(), s.counts->lags.end(), lag) - s.counts->lags.begin());
    const VectorXd visits = s.counts->total[base].s0.array() + 1e-12;
    const MatrixXd m = MembershipCoefficients(s.Features(s.basis), visits, *labels, k);
    absl::StatusOr<CkTest> koopman = ChapmanKolmogorovTest(*s.koopman, m, lag, steps, KoopmanLagOptions(lags.dt));
    if (!koopman.ok()) return koopman.status();
    out.koopman = *std::move(koopman);
  }
  return out;
}

LagsView FitLagsView(const LagStatisticsSnapshot& snap, double dt, const CkClusters& sets, int clusters, uint64_t seed,
                     const std::string& name) {
  LagsView out;
  out.stats = snap;
  out.dt = dt;
  if (!snap.counts) {
    out.error = "no lag basis yet (it is taken from the dictionary with the first pairs)";
    return out;
  }
  if (snap.counts->samples == 0) {
    out.error = "no samples yet";
    return out;
  }
  absl::StatusOr<LagTimescales> c = EstimateImpliedTimescales(*snap.counts, CountLagOptions(dt));
  if (c.ok()) out.counts = *std::move(c);
  if (snap.koopman) {
    absl::StatusOr<LagTimescales> k = EstimateImpliedTimescales(*snap.koopman, KoopmanLagOptions(dt));
    if (k.ok()) out.koopman = *std::move(k);
  }
  // The CK test for the gauges: the first lag, the model's clusters, every step available.
  const int lag = snap.counts->lags.front();
  absl::StatusOr<CkPair> ck = RunCkTests(out, sets, clusters, LaggedMoments::kMaxLag, lag, seed, name);
  if (ck.ok()) {
    out.ck_koopman = ck->koopman;
    out.ck_counts = ck->counts;
  } else {
    out.ck_error = std::string(ck.status().message());
  }
  return out;
}

}  // namespace cmestream
