// Weighted k-means (docs/algorithms.md §3.4): the one k-means of the library, used by the
// metastable clusters (π-weighted, core/cluster/metastable.h) and by the k-means pre-clustering
// of vertex hunting (equal weights, core/aggregation/soft_aggregation.cc, §4.2).
//
// WHAT IT COMPUTES
//   Centroids c_1..c_k and labels minimizing the inertia sum_i w_i ||x_i - c_{label(i)}||^2 (the
//   weights normalized to sum 1, so the inertia does not depend on their scale), by Lloyd
//   iterations from k-means++ seedings, `restarts` times; the restart with the lowest inertia is
//   kept. Deterministic given the seed: the draws come from std::mt19937_64(seed) through
//   internal::Uniform01 (core/common/random.h), whose values the C++ standard fixes.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream {

// Weighted k-means: minimize sum_i w_i ||x_i - c_{label(i)}||^2.
struct WeightedKMeansOptions {
  int k = 4;                 // clusters, >= 1 and <= number of points with positive weight
  int restarts = 10;         // independent k-means++ seedings, >= 1; the lowest inertia wins
  int max_iterations = 100;  // Lloyd iterations per restart, >= 1
  double tolerance = 1e-10;  // stop when the relative inertia decrease is below this, >= 0
  uint64_t seed = 0;         // everything is deterministic given the seed
  absl::Status Validate() const;
};

struct WeightedKMeansResult {
  RowMatrixXd centroids;   // k x r
  Eigen::VectorXi labels;  // n, in [0, k); zero-weight points get their nearest centroid
  double inertia = -1;     // sum_i w_i ||x_i - c_label||^2 of the kept restart
  int iterations = -1;     // Lloyd iterations of the kept restart
  int best_restart = -1;
  VectorXd restart_inertia;  // per restart
  std::string BriefReport() const;
};

// requires: points n x r finite, weights n, finite, >= 0, at least k positive (else
// InvalidArgument naming the problem).
// ensures: k-means++ seeding with probabilities ∝ w_i D(x_i)^2 (the first center ∝ w_i); Lloyd
// iterations with weighted means; an emptied cluster is re-seeded at the point with the largest
// weighted distance. O(restarts * max_iterations * n k r); allocates its result and O(n k)
// scratch.
absl::StatusOr<WeightedKMeansResult> WeightedKMeans(const Eigen::Ref<const RowMatrixXd>& points,
                                                    const Eigen::Ref<const VectorXd>& weights,
                                                    const WeightedKMeansOptions& options);

// Index of the nearest centroid (Euclidean) of each row of points. requires same columns.
// O(n k r); allocates the n x k distances.
Eigen::VectorXi NearestCentroid(const Eigen::Ref<const RowMatrixXd>& centroids,
                                const Eigen::Ref<const RowMatrixXd>& points);

}  // namespace cmestream
