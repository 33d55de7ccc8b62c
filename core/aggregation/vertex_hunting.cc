#include "core/aggregation/vertex_hunting.h"

namespace cmestream::internal {

std::vector<int> SuccessiveProjection(const Eigen::Ref<const MatrixXd>& d, int r) {
  const int64_t p = d.rows();
  MatrixXd y(p, d.cols() + 1);
  y.col(0).setOnes();
  y.rightCols(d.cols()) = d;
  std::vector<int> chosen;
  chosen.reserve(r);
  std::vector<char> used(p, 0);
  for (int k = 0; k < r; ++k) {
    VectorXd norms = y.rowwise().squaredNorm();
    int best = -1;
    double best_norm = -1;
    for (int64_t j = 0; j < p; ++j) {
      // Already chosen rows have zero residual in exact arithmetic; skipping them guarantees
      // distinct indices even when the remaining rows are (numerically) in their span.
      if (!used[j] && norms(j) > best_norm) {
        best_norm = norms(j);
        best = static_cast<int>(j);
      }
    }
    chosen.push_back(best);
    used[best] = 1;
    const VectorXd u = y.row(best).transpose();
    const double un = u.squaredNorm();
    if (un > 0) y -= (y * u / un) * u.transpose();  // project rows onto u's complement
  }
  return chosen;
}

}  // namespace cmestream::internal
