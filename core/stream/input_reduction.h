// InputReduction: the second step of a model's input stage (docs/algorithms.md §1.15): a linear
// projection of the (scaled) state onto its K leading principal directions, fitted once on the
// warm-up and then frozen, like the InputScaler before it.
//
// WHY. A 512-dimensional stream (a game agent's hidden layer, a wide sensor array) costs the
// kernel estimators 2 m d per kernel column and makes the Gaussian kernel's distances mostly
// noise: the slow dynamics live in a few directions of large variance. Projecting onto the K
// leading principal directions keeps the distances the kernel sees (minus the discarded
// variance, reported as 1 - explained) and makes every per-pair cost that grows with d grow with
// K instead. It is frozen for the same reason as the scaler: every estimator downstream stores
// its atoms in these coordinates.
//
// FIT. Over the warm-up's rows z_i (x and y halves together, N rows, d columns): mean mu;
// covariance C = (1/N) sum (z_i - mu)(z_i - mu)^T; basis V = the K leading eigenvectors of C
// (columns, descending eigenvalue), each signed so that its largest-magnitude entry is
// positive (a deterministic choice: replay and restart fit the same basis). When N < d the
// eigenvectors come from the N x N Gram matrix G = (1/N) Z Z^T instead (V_k = Z^T u_k /
// sqrt(N lambda_k)): the same directions at O(N^2 d + N^3) instead of O(N d^2 + d^3).
// No whitening: the projection is orthonormal, so distances in the reduced space are the
// distances within the kept subspace, and one bandwidth still means what it meant.
//
// APPLY. r = V^T (z - mu), O(d K), allocation-free. Invert gives mu + V r: the point of the
// kept subspace (exact for points in it; a projection otherwise). Replies of the daemon are
// in the user's units: atoms and predictions are mapped back through Invert, then the scaler.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class InputReduction {
 public:
  // Warm-up rows per kept direction: a covariance estimated from fewer is mostly noise.
  static constexpr int kRowsPerDirection = 10;

  InputReduction() = default;
  // requires: 1 <= k < a.cols(), a.cols() == b.cols(), a.rows() + b.rows() >= 1, values finite.
  // Never fails: a warm-up that varies in fewer than k directions completes the basis with
  // (orthogonalized) coordinate axes, along which its rows are constant.
  static InputReduction Fit(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b, int k);

  int in_dim() const { return static_cast<int>(mean_.size()); }
  int out_dim() const { return static_cast<int>(basis_.cols()); }
  const VectorXd& mean() const { return mean_; }
  const MatrixXd& basis() const { return basis_; }          // in_dim x out_dim, orthonormal columns
  const VectorXd& variances() const { return variances_; }  // kept eigenvalues, descending
  double total_variance() const { return total_variance_; }
  // Share of the warm-up's variance in the kept directions, in [0, 1].
  double explained() const;

  // in: in_dim values; out: out_dim values (no aliasing).
  void Apply(const double* in, double* out) const;
  // in: out_dim values; out: in_dim values (no aliasing).
  void Invert(const double* in, double* out) const;
  // Row-wise: n x in_dim -> n x out_dim, and back.
  RowMatrixXd ApplyRows(const Eigen::Ref<const RowMatrixXd>& rows) const;
  RowMatrixXd InvertRows(const Eigen::Ref<const RowMatrixXd>& rows) const;

  // u64 d, u64 k, d doubles mean, d x k basis (column-major), k doubles variances, f64 total.
  // Deserialize checks d and k against the model's, every value finite, variances >= 0:
  // DataLoss naming the part otherwise.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<InputReduction> Deserialize(io::Reader& r, int in_dim, int out_dim);

  bool operator==(const InputReduction& o) const {
    return mean_ == o.mean_ && basis_ == o.basis_ && variances_ == o.variances_ && total_variance_ == o.total_variance_;
  }

 private:
  VectorXd mean_;
  MatrixXd basis_;
  VectorXd variances_;
  double total_variance_ = 0;
};

}  // namespace cmestream
