#include "core/stream/input_reduction.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"

namespace cmestream {

InputReduction InputReduction::Fit(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b,
                                   int k) {
  const int64_t n = a.rows() + b.rows();
  const int64_t d = a.cols();
  RowMatrixXd z(n, d);
  z.topRows(a.rows()) = a;
  z.bottomRows(b.rows()) = b;
  InputReduction r;
  r.mean_ = z.colwise().mean().transpose();
  z.rowwise() -= r.mean_.transpose();
  r.total_variance_ = z.squaredNorm() / static_cast<double>(n);

  // Eigenpairs of the smaller of the covariance (d x d) and the Gram matrix (n x n), ascending.
  const bool gram = n < d;
  MatrixXd m = gram ? MatrixXd(z * z.transpose()) : MatrixXd(z.transpose() * z);
  m /= static_cast<double>(n);
  const Eigen::SelfAdjointEigenSolver<MatrixXd> eig(m);
  const int64_t p = m.rows();
  r.basis_.setZero(d, k);
  r.variances_.setZero(k);
  // A direction must carry variance above the rounding of the total to be one; a warm-up that
  // varies in fewer than k directions gets the rest of its basis from the coordinate axes
  // (orthogonalized): constant coordinates, which the kernel ignores.
  const double floor = 1e-12 * std::max(r.total_variance_, 1e-300);
  int64_t axis = 0;
  for (int j = 0; j < k; ++j) {
    const double lambda = j < p && eig.info() == Eigen::Success ? eig.eigenvalues()(p - 1 - j) : 0.0;
    VectorXd v;
    if (lambda > floor) {
      v = gram ? VectorXd(z.transpose() * eig.eigenvectors().col(p - 1 - j))
               : VectorXd(eig.eigenvectors().col(p - 1 - j));
      r.variances_(j) = lambda;
    } else {
      do {
        v = VectorXd::Unit(d, axis++);
        v -= r.basis_.leftCols(j) * (r.basis_.leftCols(j).transpose() * v);
      } while (v.norm() < 0.5 && axis < d);
    }
    v.normalize();
    Eigen::Index at = 0;
    v.cwiseAbs().maxCoeff(&at);
    if (v(at) < 0) v = -v;
    r.basis_.col(j) = v;
  }
  return r;
}

double InputReduction::explained() const {
  if (!(total_variance_ > 0)) return 1.0;
  return std::min(1.0, variances_.sum() / total_variance_);
}

void InputReduction::Apply(const double* in, double* out) const {
  // k dot products with the centered input, each an Eigen reduction (vectorized, where a plain
  // loop's sum may not be reordered; no temporary: a GEMV of an expression would allocate one).
  const Eigen::Map<const VectorXd> x(in, basis_.rows());
  for (Eigen::Index j = 0; j < basis_.cols(); ++j) out[j] = basis_.col(j).dot(x - mean_);
}

void InputReduction::Invert(const double* in, double* out) const {
  Eigen::Map<VectorXd> o(out, basis_.rows());
  o.noalias() = basis_ * Eigen::Map<const VectorXd>(in, basis_.cols());
  o += mean_;
}

RowMatrixXd InputReduction::ApplyRows(const Eigen::Ref<const RowMatrixXd>& rows) const {
  RowMatrixXd out(rows.rows(), out_dim());
  for (int64_t i = 0; i < rows.rows(); ++i) Apply(rows.row(i).data(), out.row(i).data());
  return out;
}

RowMatrixXd InputReduction::InvertRows(const Eigen::Ref<const RowMatrixXd>& rows) const {
  RowMatrixXd out(rows.rows(), in_dim());
  for (int64_t i = 0; i < rows.rows(); ++i) Invert(rows.row(i).data(), out.row(i).data());
  return out;
}

void InputReduction::Serialize(io::Writer& w) const {
  w.U64(static_cast<uint64_t>(basis_.rows()));
  w.U64(static_cast<uint64_t>(basis_.cols()));
  w.Doubles(mean_.data(), mean_.size());
  w.Matrix(basis_);
  w.Doubles(variances_.data(), variances_.size());
  w.F64(total_variance_);
}

absl::StatusOr<InputReduction> InputReduction::Deserialize(io::Reader& r, int in_dim, int out_dim) {
  const int64_t d = r.Count("model input reduction dim", in_dim, in_dim);
  const int64_t k = r.Count("model input reduction kept dim", out_dim, out_dim);
  if (!r.ok()) return r.status();
  InputReduction s;
  s.mean_.resize(d);
  s.basis_.resize(d, k);
  s.variances_.resize(k);
  r.Doubles("model input reduction mean", d, s.mean_.data());
  r.MatrixInto("model input reduction basis", s.basis_);
  r.Doubles("model input reduction variances", k, s.variances_.data());
  s.total_variance_ = r.F64("model input reduction total variance");
  if (!r.ok()) return r.status();
  if (!s.mean_.allFinite() || !s.basis_.allFinite() || !s.variances_.allFinite() || !std::isfinite(s.total_variance_) ||
      (s.variances_.array() < 0).any() || s.total_variance_ < 0) {
    return r.Fail("model input reduction holds a value that is not finite, or a negative variance");
  }
  return s;
}

}  // namespace cmestream
