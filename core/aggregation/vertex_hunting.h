// Vertex hunting for simplex-shaped point clouds (docs/algorithms.md §4.2; paper 003,
// Algorithm 1 step 1(ii)): given points d_1..d_p in R^{r-1} that are noisy convex combinations of
// r unknown vertices b_1..b_r, estimate the vertices. (The k-means pre-clustering option uses
// the library's k-means, WeightedKMeans in core/cluster/kmeans.h, with equal weights.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/types.h"

namespace cmestream::internal {

// Successive projection algorithm (Araujo et al. 2001; Gillis & Vavasis) on the rows of
// Y = [1, D] (p x r): repeatedly pick the row of largest residual norm and project every row
// onto the orthogonal complement of that residual. Because (1, d_j) = sum_k w_jk (1, b_k) with w_j
// on the simplex, the largest-norm row of a projected convex hull is a projected vertex.
//   requires: d is p x (r-1) with p >= r >= 1, finite.
//   ensures: returns r distinct row indices of d (in selection order). O(p r^2).
std::vector<int> SuccessiveProjection(const Eigen::Ref<const MatrixXd>& d, int r);

}  // namespace cmestream::internal
