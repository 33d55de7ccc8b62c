// Metastable clusters by π-weighted k-means (seed paper 000, Algorithm 3; docs/algorithms.md
// §3.4; the k-means itself in core/cluster/kmeans.h), coarse-grained transition matrices and
// implied timescales from counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cluster/kmeans.h"
#include "core/common/types.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"

namespace cmestream {

// ---------------------------------------------------------------------------------------------
// WHAT THIS OBJECT REPRESENTS
//   Metastable clusters of a state embedding: k-means in embedding space over representative
//   states (continuous: the dictionary X atoms; discrete: the state ids) weighted by their
//   stationary weights π (visit counts). Immutable; a query point gets the cluster of its
//   nearest centroid in embedding space.
class MetastableClusters {
 public:
  // Embeds the representatives and clusters them. weights: raw visit counts (normalized here).
  // Errors: InvalidArgument for bad points / weights / options (message names the problem).
  static absl::StatusOr<MetastableClusters> Fit(const StateEmbedding& embedding,
                                                const Eigen::Ref<const RowMatrixXd>& representatives,
                                                const Eigen::Ref<const VectorXd>& weights,
                                                const WeightedKMeansOptions& options);

  const WeightedKMeansResult& kmeans() const { return kmeans_; }
  int num_clusters() const { return static_cast<int>(kmeans_.centroids.rows()); }
  const RowMatrixXd& representatives() const { return representatives_; }    // m x d (or m x 1 ids)
  const RowMatrixXd& representative_embedding() const { return embedded_; }  // m x r
  const VectorXd& weights() const { return weights_; }                       // m, sums to 1
  const Eigen::VectorXi& labels() const { return kmeans_.labels; }           // m
  // Stationary mass of each cluster: sum of the normalized weights of its representatives.
  VectorXd Masses() const;
  // requires: embedding.features().ValidatePoints(points).ok(), the embedding used to build
  // this object. Labels of query points (nearest centroid of Ψ(x)).
  Eigen::VectorXi Label(const StateEmbedding& embedding, const Eigen::Ref<const RowMatrixXd>& points) const;

 private:
  RowMatrixXd representatives_;
  RowMatrixXd embedded_;
  VectorXd weights_;
  WeightedKMeansResult kmeans_;
};

// ---------------------------------------------------------------------------------------------
// Coarse-grained chain. labels[i] in [0, K) is the cluster of state i (size >= num_states;
// a negative label drops the state). C[a,b] = sum_{i in a, j in b} N[i,j]; the K x K matrix
// is C row-normalized (rows of clusters without outgoing counts are zero and flagged);
// masses[a] = sum_{i in a} π_i with π ∝ visits.
struct CoarseGrainedChain {
  MatrixXd transition;        // K x K
  VectorXd masses;            // K
  std::vector<bool> visited;  // K
};
absl::StatusOr<CoarseGrainedChain> CoarseGrain(const CountsSnapshot& counts,
                                               const Eigen::Ref<const Eigen::VectorXi>& labels, int k);

// Implied timescales of the count-based transition matrix at lag dt. The matrix is
// restricted to visited states (n_i > 0): transitions into never-left states are dropped and
// rows renormalized. Eigenvalues sorted by |λ| descending; the first (λ = 1, the stationary
// one) is skipped; returns up to `count` values t_i = -dt / log|λ_i| (+inf if |λ_i| >= 1,
// 0 if λ_i == 0). Also returns the eigenvalue moduli used.
struct ImpliedTimescales {
  VectorXd eigenvalue_moduli;  // |λ_2|, |λ_3|, ...
  VectorXd timescales;
  static absl::StatusOr<ImpliedTimescales> Fit(const CountsSnapshot& counts, double dt, int count);
};

// π-weighted misclassification rate of paper 000 section 4 with the best label permutation:
// min_σ sum_j π({x in Ω_j, label(x) != σ(j)}) / π(Ω_j), for K <= 8 (exhaustive search).
// truth, predicted: labels in [0, K); weights >= 0. Used by tests and demos.
double WeightedMisclassification(const Eigen::Ref<const Eigen::VectorXi>& truth,
                                 const Eigen::Ref<const Eigen::VectorXi>& predicted,
                                 const Eigen::Ref<const VectorXd>& weights, int k);

}  // namespace cmestream
