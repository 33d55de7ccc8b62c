// Functions of symmetric positive semi-definite matrices (covariances, Gram matrices).
#pragma once

#include <Eigen/Eigenvalues>

#include "core/common/types.h"

namespace cmestream {

// C^{-1/2} of a symmetric matrix through its eigendecomposition, with the eigenvalues floored at
// `floor` > 0 first: covariance estimates are PSD only up to rounding and sampling, and the
// floor is the whitening's regularizer (the callers choose it relative to the spectrum).
inline MatrixXd InverseSqrtPsd(const MatrixXd& c, double floor) {
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(c);
  const VectorXd ev = es.eigenvalues().cwiseMax(floor).cwiseSqrt().cwiseInverse();
  return es.eigenvectors() * ev.asDiagonal() * es.eigenvectors().transpose();
}

}  // namespace cmestream
