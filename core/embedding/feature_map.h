// Finite feature maps for the state embedding (docs/algorithms.md §3.1).
//
// WHAT THIS OBJECT REPRESENTS
//   An immutable map h: input -> R^N, one of
//   - random Fourier features of the Gaussian kernel exp(-||a-b||^2 / (2 sigma^2)):
//       h(x) = sqrt(2/N) cos(Omega^T x + beta),  Omega ~ N(0, sigma^-2 I) (d x N),
//       beta ~ U[0, 2 pi)  (Rahimi & Recht 2008), so E[h(a)^T h(b)] = k(a, b);
//   - one-hot features of a discrete state id in [0, P): h(i) = e_i (the delta kernel), for
//     which the section-3 pipeline reduces to the normalized count matrix of paper 000.
//   Input points are rows: n x d for RFF, n x 1 (integral ids stored as doubles) for one-hot.
//
// DETERMINISM
//   Omega and beta are drawn from std::mt19937_64(seed) (its output sequence is fixed by the
//   C++ standard) through our own uniform conversion (top 53 bits) and Box–Muller, not
//   std::normal_distribution / std::uniform_real_distribution, whose algorithms differ
//   between standard libraries. So the same seed gives the same features on every build.
//   RffFrom builds the map from given Omega and beta instead (a stored map, or features drawn
//   by an older algorithm that a stored object was accumulated with).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"

namespace cmestream {

class FeatureMap {
 public:
  enum class Kind { kRff, kOneHot };

  // requires: dim >= 1, num_features >= 1, sigma > 0 and finite. Else InvalidArgument.
  static absl::StatusOr<FeatureMap> Rff(int dim, int num_features, double sigma, uint64_t seed);
  // The RFF map with the given frequencies omega (d x N) and phases beta (N). sigma and seed
  // are recorded as given: they describe the draw, omega is not checked against them.
  // requires: d >= 1, N >= 1, beta.size() == N, every entry finite, sigma > 0 and finite.
  // Else InvalidArgument. O(dN); takes the matrices without copying them.
  static absl::StatusOr<FeatureMap> RffFrom(MatrixXd omega, VectorXd beta, double sigma, uint64_t seed);
  // requires: num_states >= 1. Else InvalidArgument.
  static absl::StatusOr<FeatureMap> OneHot(int num_states);

  Kind kind() const { return kind_; }
  int input_dim() const { return kind_ == Kind::kRff ? dim_ : 1; }
  int num_features() const { return n_; }
  double sigma() const { return sigma_; }
  uint64_t seed() const { return seed_; }
  const MatrixXd& omega() const { return omega_; }  // d x N (RFF only)
  const VectorXd& beta() const { return beta_; }    // N (RFF only)

  // OK iff points has input_dim() columns and finite entries (one-hot: integral ids in
  // [0, P)). The error names the first offending row.
  absl::Status ValidatePoints(const Eigen::Ref<const RowMatrixXd>& points) const;

  // requires: ValidatePoints(points).ok(); h has points.rows() rows and num_features()
  // columns. ensures: h.row(t) = h(points.row(t)). RFF: one GEMM (n x d times d x N) plus
  // an elementwise cosine; no allocation beyond Eigen's GEMM blocking workspace.
  void Map(const Eigen::Ref<const RowMatrixXd>& points, Eigen::Ref<RowMatrixXd> h) const;
  // Convenience: allocates and returns the n x N feature matrix.
  RowMatrixXd Map(const Eigen::Ref<const RowMatrixXd>& points) const;

  // The two steps of Map for RFF, exposed for callers that reuse the features of a repeated
  // point (EmbeddingMoments on trajectories). Map(points, h) is exactly Project(points, h)
  // followed by Activate on every row of h, so a row activated from the same projection has
  // the same bits. requires: kind() == kRff, shapes as in Map; `row` has num_features() entries.
  void Project(const Eigen::Ref<const RowMatrixXd>& points, Eigen::Ref<RowMatrixXd> a) const;  // a = points Omega
  void Activate(double* row) const;  // row[k] <- sqrt(2/N) cos(row[k] + beta_k)

 private:
  FeatureMap() = default;
  Kind kind_ = Kind::kRff;
  int dim_ = 0;
  int n_ = 0;
  double sigma_ = 1;
  uint64_t seed_ = 0;
  MatrixXd omega_;
  VectorXd beta_;
};

}  // namespace cmestream
