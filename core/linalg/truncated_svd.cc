#include "core/linalg/truncated_svd.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Eigenvalues>
#include <Eigen/QR>

#include "absl/strings/str_cat.h"
#include "core/common/splitmix.h"

namespace cmestream {
namespace {

using internal::SplitMix;

MatrixXd ThinQ(const MatrixXd& y) {
  Eigen::HouseholderQR<MatrixXd> qr(y);
  return qr.householderQ() * MatrixXd::Identity(y.rows(), y.cols());
}

template <typename Mat>
absl::StatusOr<TruncatedSvdResult> Run(const Mat& a, int k, const TruncatedSvdOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const int64_t m = a.rows(), n = a.cols();
  if (k < 1 || k > std::min(m, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: 1 <= k <= min(rows, cols); k = ", k, ", matrix ", m, " x ", n));
  }
  const int b = static_cast<int>(std::min<int64_t>(n, int64_t{k} + options.oversampling));
  SplitMix rng(options.seed);
  MatrixXd q(n, b);
  for (int64_t j = 0; j < b; ++j)
    for (int64_t i = 0; i < n; ++i) q(i, j) = rng.Normal();
  q = ThinQ(q);

  TruncatedSvdResult out;
  MatrixXd z(m, b), y(n, b), t(b, b), s, x, r;
  VectorXd theta(b);
  for (int it = 1; it <= options.max_iterations; ++it) {
    z.noalias() = a * q;
    y.noalias() = a.transpose() * z;  // y = A^T A q
    t.noalias() = q.transpose() * y;
    t = 0.5 * (t + t.transpose()).eval();
    Eigen::SelfAdjointEigenSolver<MatrixXd> eig(t);
    // Descending order of Ritz values.
    s = eig.eigenvectors().rowwise().reverse();
    theta = eig.eigenvalues().reverse();
    x.noalias() = q * s;
    r.noalias() = y * s;
    r -= x * theta.asDiagonal();
    const double scale = std::max(theta(0), std::numeric_limits<double>::min());
    double res = 0;
    for (int i = 0; i < k; ++i) res = std::max(res, r.col(i).norm() / scale);
    out.iterations = it;
    out.max_residual = res;
    if (res <= options.tolerance || theta(0) <= 0) {
      out.converged = true;
      break;
    }
    // Next block: A^T A applied to the Ritz basis, re-orthonormalized (keeps the block from
    // collapsing onto the dominant direction in floating point).
    q = ThinQ(y * s);
  }
  out.singular_values = theta.cwiseMax(0.0).cwiseSqrt();
  out.right_vectors = x.leftCols(k);
  return out;
}

}  // namespace

absl::Status TruncatedSvdOptions::Validate() const {
  if (oversampling < 0)
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: oversampling >= 0; got ", oversampling));
  if (max_iterations < 1)
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: max_iterations >= 1; got ", max_iterations));
  if (!(tolerance > 0 && tolerance < 1))
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: 0 < tolerance < 1; got ", tolerance));
  return absl::OkStatus();
}

absl::StatusOr<TruncatedSvdResult> TruncatedRightSvd(const Eigen::SparseMatrix<double>& a, int k,
                                                     const TruncatedSvdOptions& options) {
  return Run(a, k, options);
}

absl::StatusOr<TruncatedSvdResult> TruncatedRightSvd(const Eigen::Ref<const MatrixXd>& a, int k,
                                                     const TruncatedSvdOptions& options) {
  return Run(a, k, options);
}

}  // namespace cmestream
