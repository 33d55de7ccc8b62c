// Leading eigenpairs without the dense O(n^3) eigensolvers: of a Gram matrix w^T w, and of a
// general square matrix.
//
// WHAT THIS COMPUTES
//   The k eigenvectors of the symmetric positive semi-definite n x n matrix w^T w with the
//   largest eigenvalues (the squared singular values of w), as orthonormal columns in descending
//   order. The VAMP fit (core/spectral/spectral_estimate.cc) needs the k leading right singular
//   vectors of the whitened cross-covariance, k = 6 of n = m + 1 up to 1001, and calls this ~20
//   times per refresh (ridge grid x folds x basis candidates).
//
// METHOD
//   n <= kDenseMaxSize, or a heavy spectrum (||w||_F^2 > 4k: many singular values near the top,
//   as on deterministic maps): form w^T w and use Eigen's SelfAdjointEigenSolver (what the fit
//   always did: bit-identical results). Otherwise: implicitly restarted Lanczos
//   (Spectra's SymEigsSolver) on the operator x -> w^T (w x), 2 n^2 multiply-adds per product,
//   to relative tolerance 1e-10; the dense solver costs about 9 n^3 with eigenvectors.
//   Deterministic (Spectra starts from a fixed-seed vector). If Lanczos does not converge the
//   dense solver is used.
#pragma once

#include "core/common/types.h"

namespace cmestream {

// Sizes up to this use the dense solver. Not a measured crossover (Lanczos already won at
// n = 161, docs/benchmarks.md "Truncated eigensolvers in the Koopman fit"): small bases keep the
// dense solvers' results bit for bit, where they cost little (the four-well's 30-46 atoms).
inline constexpr int kDenseMaxSize = 64;

// requires: 1 <= k <= w.cols(). Returns n x k.
MatrixXd LeadingGramEigenvectors(const MatrixXd& w, int k);

// Eigenpairs of the n x n matrix a, at least the k of largest modulus (k < n): all n from
// Eigen's EigenSolver when n <= kDenseMaxSize (unsorted, as EigenSolver returns them), else
// the k leading from Spectra's GenEigsSolver (implicitly restarted Arnoldi on x -> a x, 2 n^2
// flops per product instead of about 25 n^3 for the dense Schur form with eigenvectors), falling
// back to the dense solver if Arnoldi does not converge. False if neither converged.
bool LeadingEigenpairs(const MatrixXd& a, int k, VectorXcd* values, MatrixXcd* vectors);

// The same without eigenvectors: at least the k eigenvalues of largest modulus (all n, unsorted,
// from the dense solver when n <= kDenseMaxSize or Arnoldi does not converge). The count chain's
// implied timescales need a few of a chain of up to a dictionary's 1,000 states, where the dense
// eigenvalues took ~2 s of each refresh (docs/benchmarks.md "Refresh at the dictionary cap").
bool LeadingEigenvalues(const MatrixXd& a, int k, VectorXcd* values);

}  // namespace cmestream
