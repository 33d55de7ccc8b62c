// Implied timescales of a given transition matrix (docs/algorithms.md (3.11) and (3.11')): the
// count chain's (ImpliedTimescales::Fit, core/cluster/metastable.h) and a coarse-grained
// chain's (the clusters view's reply: the timescales of the K x K matrix it reports).
#pragma once

#include "absl/status/statusor.h"
#include "core/cluster/metastable.h"
#include "core/common/types.h"

namespace cmestream {

// Eigenvalues of `transition` (square; row-stochastic, or with zero rows for states never
// left) sorted by |λ| descending; the first (λ = 1, the stationary one) is skipped; up to
// `count` values t_i = -lag_time / log|λ_i| (+inf if |λ_i| >= 1, 0 if λ_i == 0), with the
// moduli used. InvalidArgument for a non-square or non-finite matrix, lag_time <= 0 or not
// finite, count < 0. O(K^3) for K <= kDenseMaxSize (dense eigenvalues, no eigenvectors, bit for bit
// what this always computed); above it the count + 1 leading eigenvalues of each strongly
// connected block (Arnoldi for blocks above kDenseMaxSize states, core/linalg/leading_eigen.h,
// relative tolerance 1e-10, O(K^2) a restart; per block so that eigenvalue 1 counts once per
// closed class, as the dense solver counts it).
absl::StatusOr<ImpliedTimescales> TimescalesOfMatrix(const Eigen::Ref<const MatrixXd>& transition, double lag_time,
                                                     int count);

}  // namespace cmestream
