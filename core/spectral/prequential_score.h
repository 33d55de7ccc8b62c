// Prequential (test-then-train) VAMP-E score of a fitted spectral model (docs/algorithms.md §7).
//
// WHAT THIS OBJECT REPRESENTS
//   The score of one fixed model -- the rank-k VAMP model (VampFactors) of a published Koopman
//   view, over that view's basis B and bandwidth sigma -- on the pairs that arrive after the
//   view was built, before anything learns from them. With f(x) = su^T psi(x) and
//   g(y) = v^T psi(y) (k values each, psi = [1, k_B]) it keeps the k x k sums
//       A = sum f(x) g(y)^T,  F = sum f(x) f(x)^T,  G = sum g(y) g(y)^T,   n pairs,
//   and Score() = 2 tr(A/n) - tr((F/n)(G/n)): the VAMP-E score of the model on those pairs,
//   the same quantity as the blocked cross-validation of spectral_estimate.h, but on data the
//   model has never seen (VAMP-E = 2 tr(S U^T C01 V) - tr(S U^T C00 U S V^T C11 V) with the
//   test moments C.. projected onto the model's singular functions).
//
// COST
//   Observe: 2m Gaussian kernels (O(m d); m on a trajectory, whose x is the previous y), two
//   (m+1) x k matrix-vector products (O(m k)) and three k x k rank-one updates; no heap
//   allocation (scratch sized at construction).
//   Memory: 2 (m+1) k + 3 k^2 + 2 (m+1) + d doubles beside the model.
//
// INITIAL VALUE
//   pairs() == 0, Score() NaN. Not part of the learner state (it depends on when views are
//   published, i.e. on wall-clock timing): snapshots and the state digest leave it out.
#pragma once

#include <cstdint>
#include <memory>

#include "core/common/types.h"
#include "core/spectral/spectral_estimate.h"

namespace cmestream {

struct PrequentialModel {
  RowMatrixXd basis;  // m x d
  double sigma = 1;   // > 0
  VampFactors vamp;   // su, v: (m+1) x k each
};

class PrequentialVampE {
 public:
  // requires: model.vamp.su and .v have basis.rows() + 1 rows and the same k >= 1 columns.
  explicit PrequentialVampE(std::shared_ptr<const PrequentialModel> model);

  // Scores one pair (x, y: dim finite doubles each; the caller validates). No allocation.
  void Observe(const double* x, const double* y);

  int64_t pairs() const { return n_; }
  // VAMP-E over the pairs observed so far; NaN without pairs.
  double Score() const;
  const PrequentialModel& model() const { return *model_; }

 private:
  void Features(const double* z, VectorXd& psi) const;

  std::shared_ptr<const PrequentialModel> model_;
  VectorXd psi_x_, psi_y_;  // m+1 scratch
  // The previous pair's y (d), whose features psi_y_ still holds after Observe: on a
  // trajectory the next x is that point and takes them instead of m more kernels.
  VectorXd last_y_;
  bool has_last_y_ = false;
  VectorXd f_, g_;        // k scratch
  MatrixXd a_, ff_, gg_;  // k x k sums
  int64_t n_ = 0;
};

}  // namespace cmestream
