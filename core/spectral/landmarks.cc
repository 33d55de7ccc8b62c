// Greedy pivoted-Cholesky landmarks (see landmarks.h).
#include "core/spectral/landmarks.h"

#include <algorithm>
#include <vector>

#include "core/kernels/gaussian.h"

namespace cmestream {

RowMatrixXd ChooseLandmarks(const Eigen::Ref<const RowMatrixXd>& x, double sigma, int max_count, double tolerance) {
  const int n = static_cast<int>(x.rows());
  const int d = static_cast<int>(x.cols());
  const int cap = std::min(n, std::max(0, max_count));
  // Column k of the partial Cholesky factor of the Gram, over all n rows.
  MatrixXd factor(n, cap);
  VectorXd residual = VectorXd::Ones(n);  // k(x_i, x_i) minus what the chosen rows explain
  std::vector<int> chosen;
  chosen.reserve(cap);
  for (int k = 0; k < cap; ++k) {
    int pivot = 0;
    for (int i = 1; i < n; ++i) {
      if (residual[i] > residual[pivot]) pivot = i;  // strict: the earliest row wins ties
    }
    if (!(residual[pivot] > tolerance)) break;
    const double scale = 1.0 / std::sqrt(residual[pivot]);
    for (int i = 0; i < n; ++i) {
      double v = GaussianKernel(x.row(i).data(), x.row(pivot).data(), d, sigma);
      for (int j = 0; j < k; ++j) v -= factor(i, j) * factor(pivot, j);
      factor(i, k) = v * scale;
      residual[i] = std::max(0.0, residual[i] - factor(i, k) * factor(i, k));
    }
    residual[pivot] = 0;  // exactly explained, whatever the rounding
    chosen.push_back(pivot);
  }
  RowMatrixXd out(static_cast<Eigen::Index>(chosen.size()), d);
  for (size_t k = 0; k < chosen.size(); ++k) out.row(static_cast<Eigen::Index>(k)) = x.row(chosen[k]);
  return out;
}

}  // namespace cmestream
