// Metastable clusters, coarse graining, implied timescales (see metastable.h;
// docs/algorithms.md §3.4; paper 000 Algorithm 3; the k-means in kmeans.cc).
#include "core/cluster/metastable.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/cluster/chain_timescales.h"

namespace cmestream {

VectorXd MetastableClusters::Masses() const {
  VectorXd m = VectorXd::Zero(num_clusters());
  for (Eigen::Index i = 0; i < weights_.size(); ++i) m[kmeans_.labels[i]] += weights_[i];
  return m;
}

Eigen::VectorXi MetastableClusters::Label(const StateEmbedding& embedding,
                                          const Eigen::Ref<const RowMatrixXd>& points) const {
  return NearestCentroid(kmeans_.centroids, embedding.Embed(points));
}

absl::StatusOr<MetastableClusters> MetastableClusters::Fit(const StateEmbedding& embedding,
                                                           const Eigen::Ref<const RowMatrixXd>& representatives,
                                                           const Eigen::Ref<const VectorXd>& weights,
                                                           const WeightedKMeansOptions& options) {
  if (absl::Status s = embedding.features().ValidatePoints(representatives); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("representatives: ", s.message()));
  }
  MetastableClusters out;
  out.representatives_ = representatives;
  out.embedded_ = embedding.Embed(representatives);
  absl::StatusOr<WeightedKMeansResult> km = WeightedKMeans(out.embedded_, weights, options);
  if (!km.ok()) return km.status();
  out.kmeans_ = *std::move(km);
  out.weights_ = weights / weights.sum();
  return out;
}

absl::StatusOr<CoarseGrainedChain> CoarseGrain(const CountsSnapshot& counts,
                                               const Eigen::Ref<const Eigen::VectorXi>& labels, int k) {
  if (k < 1) return absl::InvalidArgumentError(absl::StrCat("k must be >= 1 (got ", k, ")"));
  if (labels.size() < counts.num_states()) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels has ", labels.size(), " entries, need ", counts.num_states()));
  }
  for (int i = 0; i < counts.num_states(); ++i) {
    if (labels[i] >= k) {
      return absl::InvalidArgumentError(absl::StrCat("label of state ", i, " is ", labels[i], " >= k = ", k));
    }
  }
  CoarseGrainedChain out;
  MatrixXd c = MatrixXd::Zero(k, k);
  for (const CountTriplet& t : counts.Triplets()) {
    if (labels[t.i] < 0 || labels[t.j] < 0) continue;
    c(labels[t.i], labels[t.j]) += t.value;
  }
  out.transition = MatrixXd::Zero(k, k);
  out.visited.assign(k, false);
  for (int a = 0; a < k; ++a) {
    const double row = c.row(a).sum();
    if (row > 0) {
      out.transition.row(a) = c.row(a) / row;
      out.visited[a] = true;
    }
  }
  const VectorXd pi = counts.Stationary();
  out.masses = VectorXd::Zero(k);
  for (int i = 0; i < counts.num_states(); ++i) {
    if (labels[i] >= 0) out.masses[labels[i]] += pi[i];
  }
  return out;
}

absl::StatusOr<ImpliedTimescales> ImpliedTimescales::Fit(const CountsSnapshot& counts, double dt, int count) {
  if (!(dt > 0) || !std::isfinite(dt)) return absl::InvalidArgumentError(absl::StrCat("dt must be > 0 (got ", dt, ")"));
  if (count < 0) return absl::InvalidArgumentError("count must be >= 0");
  std::vector<int> states;
  std::vector<int> index(counts.num_states(), -1);
  for (int i = 0; i < counts.num_states(); ++i) {
    if (counts.visits()[i] > 0) {
      index[i] = static_cast<int>(states.size());
      states.push_back(i);
    }
  }
  if (states.empty()) return absl::FailedPreconditionError("no transitions counted yet");
  const int p = static_cast<int>(states.size());
  MatrixXd t = MatrixXd::Zero(p, p);
  for (const CountTriplet& e : counts.Triplets()) {
    if (index[e.i] >= 0 && index[e.j] >= 0) t(index[e.i], index[e.j]) += e.value;
  }
  for (int a = 0; a < p; ++a) {
    const double row = t.row(a).sum();
    if (row > 0) t.row(a) /= row;  // a row can lose all mass only if it leads to unvisited states
  }
  return TimescalesOfMatrix(t, dt, count);
}

double WeightedMisclassification(const Eigen::Ref<const Eigen::VectorXi>& truth,
                                 const Eigen::Ref<const Eigen::VectorXi>& predicted,
                                 const Eigen::Ref<const VectorXd>& weights, int k) {
  // confusion[a][b] = π(truth a, predicted b); mass[a] = π(Ω_a).
  MatrixXd confusion = MatrixXd::Zero(k, k);
  VectorXd mass = VectorXd::Zero(k);
  for (Eigen::Index i = 0; i < truth.size(); ++i) {
    confusion(truth[i], predicted[i]) += weights[i];
    mass[truth[i]] += weights[i];
  }
  std::vector<int> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  do {
    double rate = 0;
    for (int a = 0; a < k; ++a) {
      if (mass[a] > 0) rate += (mass[a] - confusion(a, perm[a])) / mass[a];
    }
    best = std::min(best, rate);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

}  // namespace cmestream
