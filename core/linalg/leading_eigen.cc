// Leading eigenpairs without the dense eigensolvers (core/linalg/leading_eigen.h).
#include "core/linalg/leading_eigen.h"

#include <algorithm>

// GCC 12 at -O3 reports -Wuse-after-free inside Eigen's aligned_free when it inlines Spectra's
// UpperHessenbergEigen::doComputeEigenvectors (a false positive: the pointer is not used after
// the free; Release builds for x86-64-v2, e.g. the container image). Silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

#include <Spectra/GenEigsSolver.h>
#include <Spectra/MatOp/DenseGenMatProd.h>
#include <Spectra/SymEigsSolver.h>
#include <Eigen/Eigenvalues>

namespace cmestream {
namespace {

MatrixXd DenseLeading(const MatrixXd& w, int k) {
  MatrixXd gram(w.cols(), w.cols());
  gram.noalias() = w.transpose() * w;
  const Eigen::SelfAdjointEigenSolver<MatrixXd> es(gram);
  return es.eigenvectors().rightCols(k).rowwise().reverse();  // descending
}

// x -> w^T (w x) for Spectra (its operator interface).
class GramProduct {
 public:
  using Scalar = double;
  explicit GramProduct(const MatrixXd& w) : w_(w), tmp_(w.rows()) {}
  Eigen::Index rows() const { return w_.cols(); }
  Eigen::Index cols() const { return w_.cols(); }
  void perform_op(const double* x_in, double* y_out) const {
    tmp_.noalias() = w_ * Eigen::Map<const VectorXd>(x_in, w_.cols());
    Eigen::Map<VectorXd>(y_out, w_.cols()).noalias() = w_.transpose() * tmp_;
  }

 private:
  const MatrixXd& w_;
  mutable VectorXd tmp_;
};

}  // namespace

MatrixXd LeadingGramEigenvectors(const MatrixXd& w, int k) {
  const int n = static_cast<int>(w.cols());
  // Lanczos needs nev < ncv <= n; 2k + 20 Lanczos vectors keep restarts few for spectra with a gap.
  const int ncv = std::min(n, 2 * k + 20);
  // A heavy spectrum, sum sigma_i^2 = ||w||_F^2 > 4k, has many singular values near the top
  // (the whitened cross-covariance of a deterministic map: Duffing at m = 160-198 gives 28-83,
  // a noisy AR(1) chain 1.6-6.7), where single-vector Lanczos converges slowly or not at all
  // (it cannot separate (near-)multiple eigenvalues): measured, 10 of 13 such calls ran out of
  // the budget below. The dense solver takes those directly.
  if (n <= kDenseMaxSize || k >= ncv || w.squaredNorm() > 4.0 * k) return DenseLeading(w, k);
  GramProduct op(w);
  Spectra::SymEigsSolver<GramProduct> eigs(op, k, ncv);
  eigs.init();
  // Restart budget: a third of the dense solver's cost (~9 n^3, i.e. 4.5 n products of 2 n^2),
  // then the dense solver (spectra with a gap converge in 2-9 restarts).
  const int maxit = std::max(8, static_cast<int>(1.5 * n / (ncv - k)));
  eigs.compute(Spectra::SortRule::LargestAlge, maxit, /*tol=*/1e-10, Spectra::SortRule::LargestAlge);
  if (eigs.info() != Spectra::CompInfo::Successful) return DenseLeading(w, k);
  return eigs.eigenvectors();  // already in descending order of the eigenvalues
}

namespace {

// Arnoldi for the k eigenvalues of largest modulus (and their vectors when `vectors` is given);
// the dense solver for small n, too few Arnoldi vectors, or no convergence within the budget.
bool LeadingEigen(const MatrixXd& a, int k, VectorXcd* values, MatrixXcd* vectors) {
  const int n = static_cast<int>(a.rows());
  const auto dense = [&] {
    Eigen::EigenSolver<MatrixXd> es(a, /*computeEigenvectors=*/vectors != nullptr);
    if (es.info() != Eigen::Success) return false;
    *values = es.eigenvalues();
    if (vectors != nullptr) *vectors = es.eigenvectors();
    return true;
  };
  // Arnoldi needs nev < ncv - 1 <= n - 1 (Spectra's GenEigsSolver).
  const int ncv = std::min(n, 2 * k + 20);
  if (n <= kDenseMaxSize || k + 2 > ncv) return dense();
  Spectra::DenseGenMatProd<double> op(a);
  Spectra::GenEigsSolver<Spectra::DenseGenMatProd<double>> eigs(op, k, ncv);
  eigs.init();
  // Restart budget: a third of the dense Schur form's cost (~25 n^3, 12.5 n products of 2 n^2).
  const int maxit = std::max(8, static_cast<int>(4.0 * n / (ncv - k)));
  eigs.compute(Spectra::SortRule::LargestMagn, maxit, /*tol=*/1e-10, Spectra::SortRule::LargestMagn);
  if (eigs.info() != Spectra::CompInfo::Successful) return dense();
  *values = eigs.eigenvalues();
  if (vectors != nullptr) *vectors = eigs.eigenvectors();
  return true;
}

}  // namespace

bool LeadingEigenpairs(const MatrixXd& a, int k, VectorXcd* values, MatrixXcd* vectors) {
  return LeadingEigen(a, k, values, vectors);
}

bool LeadingEigenvalues(const MatrixXd& a, int k, VectorXcd* values) { return LeadingEigen(a, k, values, nullptr); }

}  // namespace cmestream
