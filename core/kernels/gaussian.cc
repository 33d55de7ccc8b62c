#include "core/kernels/gaussian.h"

namespace cmestream {

MatrixXd GaussianGram(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b, double sigma) {
  MatrixXd k(a.rows(), b.rows());
  if (a.rows() == 0 || b.rows() == 0) return k;
  // ||a_i - b_j||^2 = ||a_i||^2 + ||b_j||^2 - 2 a_i.b_j; the cross term is one GEMM.
  const VectorXd na = a.rowwise().squaredNorm();
  const VectorXd nb = b.rowwise().squaredNorm();
  k.noalias() = -2.0 * a * b.transpose();
  k.colwise() += na;
  k.rowwise() += nb.transpose();
  const double scale = -1.0 / (2 * sigma * sigma);
  // Cancellation can make tiny distances slightly negative: clamp at 0 so k <= 1.
  k = (k.cwiseMax(0.0) * scale).array().exp().matrix();
  return k;
}

}  // namespace cmestream
