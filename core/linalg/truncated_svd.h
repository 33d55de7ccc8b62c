// Truncated SVD: the top-k right singular vectors of a (sparse or dense) matrix by block
// subspace iteration on A^T A with Rayleigh-Ritz and a residual stopping rule.
//
// WHAT THIS REPRESENTS
//   For an m x n matrix A, estimates of the k largest singular values sigma_1 >= ... >= sigma_k
//   and orthonormal right singular vectors v_1..v_k (A^T A v_i = sigma_i^2 v_i). It is the
//   refresh-time replacement for a full SVD when only a few singular triplets are wanted and n
//   is in the thousands (docs/algorithms.md §4.1; soft aggregation needs r of them).
//
// METHOD (why this and not Lanczos)
//   Block subspace ("orthogonal") iteration with oversampling: Q_0 = orth(Gaussian n x b),
//   b = k + oversampling; each iteration forms Y = A^T (A Q) (two sparse/dense GEMMs, O(nnz b)),
//   does Rayleigh-Ritz on span(Q) (T = Q^T Y, eigen-decomposition of the b x b matrix), checks
//   the residual ||A^T A x_i - theta_i x_i|| <= tolerance * theta_1 for the top k Ritz pairs,
//   and re-orthonormalizes Q = orth(Y S) by Householder QR (the re-orthogonalization that keeps
//   the block from collapsing onto v_1). Convergence of the i-th vector is geometric with ratio
//   (sigma_{b+1}/sigma_i)^2, so oversampling buys speed when the spectral gap after k is small.
//   The block version is preferred to Lanczos for robustness with clustered singular values
//   and because every step is a GEMM; it needs no restarts or selective reorthogonalization.
//
// DETERMINISM
//   Deterministic given options.seed (own RNG, no std distributions).
#pragma once

#include <cstdint>

#include <Eigen/SparseCore>

#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream {

struct TruncatedSvdOptions {
  int oversampling = 10;     // extra block columns b - k, >= 0
  int max_iterations = 500;  // >= 1
  double tolerance = 1e-10;  // residual bound relative to sigma_1^2, in (0, 1)
  uint64_t seed = 0x5eed;    // starting block

  // OK or InvalidArgument("Violated constraint: ...").
  absl::Status Validate() const;
};

struct TruncatedSvdResult {
  VectorXd singular_values;  // k (descending, >= 0); more if the block had spare Ritz values
  MatrixXd right_vectors;    // n x k, orthonormal columns
  int iterations = -1;       // iterations performed
  double max_residual = -1;  // max_i ||A^T A x_i - theta_i x_i|| / theta_1 at exit (i < k)
  bool converged = false;    // max_residual <= tolerance
};

// requires: 1 <= k <= min(m, n); options.Validate().ok(). Errors: InvalidArgument otherwise.
// ensures: singular_values has min(n, k + oversampling) entries (the Ritz values, the first k
//   converged to tolerance when converged == true); right_vectors has the first k Ritz vectors.
//   Non-convergence after max_iterations is reported (converged == false), not an error.
absl::StatusOr<TruncatedSvdResult> TruncatedRightSvd(const Eigen::SparseMatrix<double>& a, int k,
                                                     const TruncatedSvdOptions& options = {});
absl::StatusOr<TruncatedSvdResult> TruncatedRightSvd(const Eigen::Ref<const MatrixXd>& a, int k,
                                                     const TruncatedSvdOptions& options = {});

}  // namespace cmestream
