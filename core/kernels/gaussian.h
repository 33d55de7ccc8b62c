// Gaussian kernel k(a,b) = exp(-||a-b||^2 / (2 sigma^2)).
#pragma once

#include "core/common/types.h"

namespace cmestream {

inline double GaussianKernel(const double* a, const double* b, int d, double sigma) {
  double s = 0;
  for (int i = 0; i < d; ++i) {
    const double t = a[i] - b[i];
    s += t * t;
  }
  return std::exp(-s / (2 * sigma * sigma));
}

// K[i,j] = k(a_i, b_j) for row sets a (n x d) and b (m x d), via ||a||^2 + ||b||^2 - 2 a b^T.
MatrixXd GaussianGram(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b, double sigma);

}  // namespace cmestream
