// Implied timescales of a transition matrix (see chain_timescales.h; docs/algorithms.md §3.4).
#include "core/cluster/chain_timescales.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include <Eigen/Eigenvalues>

#include "absl/strings/str_cat.h"

namespace cmestream {

absl::StatusOr<ImpliedTimescales> TimescalesOfMatrix(const Eigen::Ref<const MatrixXd>& transition, double lag_time,
                                                     int count) {
  if (!(lag_time > 0) || !std::isfinite(lag_time)) {
    return absl::InvalidArgumentError(absl::StrCat("lag time must be > 0 (got ", lag_time, ")"));
  }
  if (count < 0) return absl::InvalidArgumentError("count must be >= 0");
  if (transition.rows() != transition.cols() || transition.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("transition matrix is ", transition.rows(), " x ", transition.cols(), ", expected square"));
  }
  if (!transition.allFinite()) return absl::InvalidArgumentError("transition matrix has a non-finite entry");
  Eigen::EigenSolver<MatrixXd> es(transition, /*computeEigenvectors=*/false);
  VectorXd mod = es.eigenvalues().cwiseAbs();
  std::sort(mod.data(), mod.data() + mod.size(), std::greater<double>());
  ImpliedTimescales out;
  const int m = std::max(0, std::min<int>(count, static_cast<int>(mod.size()) - 1));
  out.eigenvalue_moduli = mod.segment(1, m);
  out.timescales.resize(m);
  for (int l = 0; l < m; ++l) {
    const double lam = out.eigenvalue_moduli[l];
    out.timescales[l] = lam >= 1 ? std::numeric_limits<double>::infinity() : lam <= 0 ? 0.0 : -lag_time / std::log(lam);
  }
  return out;
}

}  // namespace cmestream
