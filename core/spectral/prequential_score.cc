// Prequential VAMP-E score (see prequential_score.h).
#include "core/spectral/prequential_score.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <utility>

namespace cmestream {

PrequentialVampE::PrequentialVampE(std::shared_ptr<const PrequentialModel> model) : model_(std::move(model)) {
  const Eigen::Index m = model_->basis.rows(), k = model_->vamp.su.cols();
  if (k < 1 || model_->vamp.su.rows() != m + 1 || model_->vamp.v.rows() != m + 1 || model_->vamp.v.cols() != k ||
      !(model_->sigma > 0)) {
    std::cerr << "PrequentialVampE: inconsistent model shapes\n";
    std::abort();
  }
  psi_x_.resize(m + 1);
  psi_y_.resize(m + 1);
  last_y_.resize(model_->basis.cols());
  f_.resize(k);
  g_.resize(k);
  a_ = MatrixXd::Zero(k, k);
  ff_ = MatrixXd::Zero(k, k);
  gg_ = MatrixXd::Zero(k, k);
}

void PrequentialVampE::Features(const double* z, VectorXd& psi) const {
  const RowMatrixXd& b = model_->basis;
  const Eigen::Index m = b.rows(), d = b.cols();
  const double scale = -1.0 / (2 * model_->sigma * model_->sigma);
  psi[0] = 1.0;
  for (Eigen::Index j = 0; j < m; ++j) {
    double dist = 0;
    for (Eigen::Index a = 0; a < d; ++a) {
      const double diff = z[a] - b(j, a);
      dist += diff * diff;
    }
    psi[j + 1] = dist * scale;
  }
  psi.segment(1, m) = psi.segment(1, m).array().exp().matrix();  // one vectorized exp
}

void PrequentialVampE::Observe(const double* x, const double* y) {
  // psi(x) of a point that was the previous y is psi_y_ already: swap the buffers (same size and
  // alignment, so Features computes the same bits in either; no allocation).
  const size_t bytes = sizeof(double) * static_cast<size_t>(last_y_.size());
  if (has_last_y_ && std::memcmp(x, last_y_.data(), bytes) == 0) {
    psi_x_.swap(psi_y_);
  } else {
    Features(x, psi_x_);
  }
  Features(y, psi_y_);
  std::memcpy(last_y_.data(), y, bytes);
  has_last_y_ = true;
  f_.noalias() = model_->vamp.su.transpose() * psi_x_;
  g_.noalias() = model_->vamp.v.transpose() * psi_y_;
  a_.noalias() += f_ * g_.transpose();
  ff_.noalias() += f_ * f_.transpose();
  gg_.noalias() += g_ * g_.transpose();
  ++n_;
}

double PrequentialVampE::Score() const {
  if (n_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const double inv = 1.0 / static_cast<double>(n_);
  // tr(F G) = sum_ij F_ij G_ji = sum of the elementwise product (G symmetric): no temporary.
  return 2 * a_.trace() * inv - ff_.cwiseProduct(gg_).sum() * inv * inv;
}

}  // namespace cmestream
