// The truncated eigensolvers (core/linalg/leading_eigen.h) against planted spectra and Eigen's
// dense solvers, above the size where they switch to Lanczos / Arnoldi.
#include <algorithm>
#include <complex>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <Eigen/Eigenvalues>
#include <Eigen/QR>

#include "core/linalg/leading_eigen.h"

namespace cmestream {
namespace {

MatrixXd Gaussian(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  MatrixXd a(rows, cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) a(i, j) = g(rng);
  return a;
}

MatrixXd Orthonormal(int n, uint64_t seed) {
  Eigen::HouseholderQR<MatrixXd> qr(Gaussian(n, n, seed));
  return qr.householderQ() * MatrixXd::Identity(n, n);
}

// w = U diag(s) V^T with planted singular values: six leading ones close together near 1 (as
// the VAMP singular values of a slow process), then a gap, then a decaying tail.
TEST(LeadingGramEigenvectors, LanczosFindsThePlantedLeadingSubspace) {
  const int n = 200, k = 6;
  ASSERT_GT(n, kDenseMaxSize);
  VectorXd s(n);
  for (int i = 0; i < n; ++i) s[i] = i < k ? 1.0 - 0.002 * i : 0.8 * std::pow(0.97, i - k);
  const MatrixXd u = Orthonormal(n, 1), v = Orthonormal(n, 2);
  const MatrixXd w = u * s.asDiagonal() * v.transpose();
  const MatrixXd got = LeadingGramEigenvectors(w, k);
  ASSERT_EQ(got.rows(), n);
  ASSERT_EQ(got.cols(), k);
  EXPECT_LT((got.transpose() * got - MatrixXd::Identity(k, k)).norm(), 1e-10);
  for (int j = 0; j < k; ++j) {
    // Each vector is the planted one (distinct values 0.002 apart: determined up to sign).
    EXPECT_NEAR(std::abs(got.col(j).dot(v.col(j))), 1.0, 1e-8) << "vector " << j;
  }
}

// A heavy spectrum (many singular values near the top, ||w||_F^2 > 4k) goes to the dense
// solver, whose result it then is exactly.
TEST(LeadingGramEigenvectors, HeavySpectraUseTheDenseSolver) {
  const int n = 200, k = 6;
  VectorXd s(n);
  for (int i = 0; i < n; ++i) s[i] = 1.0 - 0.001 * i;  // ||w||_F^2 = 161 > 24
  const MatrixXd w = Orthonormal(n, 6) * s.asDiagonal() * Orthonormal(n, 7).transpose();
  MatrixXd gram = w.transpose() * w;
  const Eigen::SelfAdjointEigenSolver<MatrixXd> es(gram);
  EXPECT_EQ(LeadingGramEigenvectors(w, k), MatrixXd(es.eigenvectors().rightCols(k).rowwise().reverse()));
}

// A = S D S^-1 with D = [0.99, 0.95 +- 0.2i, 0.9, -0.85, 0.7 +- 0.5i, small random tail].
TEST(LeadingEigenpairs, ArnoldiFindsThePlantedLeadingEigenvaluesOfANonSymmetricMatrix) {
  const int n = 180, k = 9;
  ASSERT_GT(n, kDenseMaxSize);
  MatrixXd d = MatrixXd::Zero(n, n);
  d(0, 0) = 0.99;
  d.block<2, 2>(1, 1) << 0.95, 0.2, -0.2, 0.95;  // 0.95 +- 0.2i
  d(3, 3) = 0.9;
  d(4, 4) = -0.85;
  d.block<2, 2>(5, 5) << 0.7, 0.5, -0.5, 0.7;  // 0.7 +- 0.5i, |mu| = 0.860
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> small(-0.3, 0.3);
  for (int i = 7; i < n; ++i) d(i, i) = small(rng);
  const MatrixXd sm = MatrixXd::Identity(n, n) + 0.1 * Gaussian(n, n, 4) / std::sqrt(double{n});
  const MatrixXd a = sm * d * sm.inverse();
  VectorXcd values;
  MatrixXcd vectors;
  ASSERT_TRUE(LeadingEigenpairs(a, k, &values, &vectors));
  ASSERT_EQ(values.size(), k);
  const std::vector<std::complex<double>> planted = {{0.99, 0},  {0.95, 0.2}, {0.95, -0.2}, {0.9, 0},
                                                     {0.7, 0.5}, {0.7, -0.5}, {-0.85, 0}};
  for (const std::complex<double>& mu : planted) {
    double best = 1e300;
    for (int i = 0; i < k; ++i) best = std::min(best, std::abs(values[i] - mu));
    EXPECT_LT(best, 1e-9) << "planted " << mu;
  }
  const MatrixXcd ac = a.cast<std::complex<double>>();
  for (int i = 0; i < k; ++i) {
    const VectorXcd x = vectors.col(i);
    EXPECT_LT((ac * x - values[i] * x).norm(), 1e-8 * x.norm()) << "pair " << i;
  }
}

// At or below kDenseMaxSize the dense solvers run: exactly Eigen's results.
TEST(LeadingEigenpairs, SmallMatricesUseTheDenseSolvers) {
  const int n = 40;
  const MatrixXd a = Gaussian(n, n, 5);
  VectorXcd values;
  MatrixXcd vectors;
  ASSERT_TRUE(LeadingEigenpairs(a, 4, &values, &vectors));
  const Eigen::EigenSolver<MatrixXd> es(a);
  EXPECT_EQ(values, es.eigenvalues());
  MatrixXd gram = a.transpose() * a;
  const Eigen::SelfAdjointEigenSolver<MatrixXd> ss(gram);
  EXPECT_EQ(LeadingGramEigenvectors(a, 3), MatrixXd(ss.eigenvectors().rightCols(3).rowwise().reverse()));
}

}  // namespace
}  // namespace cmestream
