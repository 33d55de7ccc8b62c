// Koopman eigenpairs of a compressed CME (docs/algorithms.md §1.9).
#include "core/koopman/koopman.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/kernels/gaussian.h"

namespace cmestream {

absl::Status KoopmanOptions::Validate() const {
  if (top < 1) return absl::InvalidArgumentError(absl::StrCat("Koopman option top is ", top, ", expected >= 1"));
  if (!std::isfinite(dt) || dt <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Koopman option dt is ", dt, ", expected a finite number > 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KoopmanDecomposition> KoopmanDecomposition::Fit(const CmeSnapshot& snapshot,
                                                               const KoopmanOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  KoopmanDecomposition out;
  out.x_atoms = snapshot.x_atoms;
  out.sigma = snapshot.sigma;
  out.dt = options.dt;
  const Eigen::Index mx = snapshot.x_atoms.rows();
  const Eigen::Index k = std::min<Eigen::Index>(std::max(1, options.top), mx);
  if (mx == 0 || snapshot.y_atoms.rows() == 0) {
    out.eigenvalues.resize(0);
    out.rates.resize(0);
    out.timescales.resize(0);
    out.eigenvectors.resize(0, 0);
    return out;
  }
  // M = W^T K_YX (m_x x m_x): C* Phi v = Phi M v.
  const MatrixXd kyx = GaussianGram(snapshot.y_atoms, snapshot.x_atoms, snapshot.sigma);
  const MatrixXd m = snapshot.W.transpose() * kyx;
  // Dense QR-based eigensolver: O(m^3), about a second at m = 1000; fine for a background refresh.
  Eigen::EigenSolver<MatrixXd> es(m, /*computeEigenvectors=*/true);
  if (es.info() != Eigen::Success) {
    // Eigen's QR iteration gives up after its iteration cap (non-finite entries or a pathological
    // matrix): report it rather than read eigenvalues that were never computed.
    return absl::FailedPreconditionError("the eigensolver of W^T K_YX did not converge");
  }
  const VectorXcd& mu = es.eigenvalues();
  const MatrixXcd vec = es.eigenvectors();

  // Order: |mu| descending; ties (conjugate pairs, equal moduli) by larger real part, then
  // positive imaginary part first, so the order is deterministic across refreshes.
  std::vector<Eigen::Index> order(mu.size());
  std::iota(order.begin(), order.end(), 0);
  const double tie = 1e-12;
  std::sort(order.begin(), order.end(), [&](Eigen::Index i, Eigen::Index j) {
    const double ai = std::abs(mu[i]), aj = std::abs(mu[j]);
    if (std::abs(ai - aj) > tie * std::max(1.0, ai)) return ai > aj;
    if (std::abs(mu[i].real() - mu[j].real()) > tie) return mu[i].real() > mu[j].real();
    return mu[i].imag() > mu[j].imag();
  });

  out.eigenvalues.resize(k);
  out.rates.resize(k);
  out.timescales.resize(k);
  out.eigenvectors.resize(mx, k);
  for (Eigen::Index l = 0; l < k; ++l) {
    const std::complex<double> z = mu[order[l]];
    out.eigenvalues[l] = z;
    out.rates[l] = std::log(z) / options.dt;
    const double r = std::abs(z);
    out.timescales[l] =
        r >= 1.0 || r == 0.0 ? (r == 0.0 ? 0.0 : std::numeric_limits<double>::infinity()) : -options.dt / std::log(r);
    // Normalization: unit Euclidean norm over the dictionary coefficients, then rotate so that
    // the first entry with |v_j| > 1e-8 max|v| is real positive. A conjugate pair picks the same
    // index j, so the normalized pair stays conjugate.
    VectorXcd v = vec.col(order[l]);
    v /= v.norm();
    const double vmax = v.cwiseAbs().maxCoeff();
    for (Eigen::Index j = 0; j < mx; ++j) {
      if (std::abs(v[j]) > 1e-8 * vmax) {
        v *= std::conj(v[j]) / std::abs(v[j]);
        v[j] = std::complex<double>(v[j].real(), 0.0);
        break;
      }
    }
    out.eigenvectors.col(l) = v;
  }
  return out;
}

MatrixXcd KoopmanDecomposition::Evaluate(const Eigen::Ref<const RowMatrixXd>& points) const {
  const Eigen::Index cols = std::max(eigenvectors.cols(), constants.size());
  MatrixXcd out = MatrixXcd::Zero(points.rows(), cols);
  if (points.rows() > 0 && x_atoms.rows() > 0 && eigenvectors.cols() > 0) {
    const MatrixXd k = GaussianGram(points, x_atoms, sigma);                            // n x m_x
    out.leftCols(eigenvectors.cols()) = k.cast<std::complex<double>>() * eigenvectors;  // sum_j v_l[j] k(x_j, x)
  }
  if (constants.size() > 0) out.rowwise() += constants.transpose();
  return out;
}

}  // namespace cmestream
