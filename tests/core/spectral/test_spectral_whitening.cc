// FitVampFactors whitens with Cholesky factors; the VAMP model must be the one of the
// symmetric inverse square roots R^{-1/2} (the definition in docs/algorithms.md §7), which this
// test computes independently: same singular values, same singular functions up to a common
// sign per pair, same held-out VAMP-E scores (so the same ridge is chosen).
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "core/kernels/gaussian.h"
#include "core/spectral/spectral_estimate.h"

namespace cmestream {
namespace {

struct Moments {
  MatrixXd c00, c01, c11;
};

// Features [1, k(x, atom_1..m)] of a 2-D AR(1) chain, moments normalized by n.
Moments ChainMoments(int n, int m, uint64_t seed, const RowMatrixXd& atoms) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  RowMatrixXd s(n + 1, 2);
  s.row(0) << 0, 0;
  // head<2>(): a fixed-size destination (GCC 12 -Warray-bounds false positive with AVX).
  for (int t = 0; t < n; ++t) s.row(t + 1).head<2>() = 0.9 * s.row(t) + 0.4 * Eigen::RowVector2d(g(rng), g(rng));
  MatrixXd px(n, m + 1), py(n, m + 1);
  px.col(0).setOnes();
  py.col(0).setOnes();
  px.rightCols(m) = GaussianGram(s.topRows(n), atoms, 0.5);
  py.rightCols(m) = GaussianGram(s.bottomRows(n), atoms, 0.5);
  return {px.transpose() * px / n, px.transpose() * py / n, py.transpose() * py / n};
}

MatrixXd InvSqrt(MatrixXd c, double ridge) {
  c.diagonal().tail(c.rows() - 1).array() += ridge;
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(c);
  return es.eigenvectors() * es.eigenvalues().cwiseSqrt().cwiseInverse().asDiagonal() * es.eigenvectors().transpose();
}

// m = 60 takes the dense eigensolver, m = 150 the truncated Lanczos one
// (core/linalg/leading_eigen.h, kDenseMaxSize = 64).
class FitVampFactorsAtSize : public ::testing::TestWithParam<int> {};

TEST_P(FitVampFactorsAtSize, CholeskyWhiteningGivesTheSymmetricWhiteningModel) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  const int m = GetParam(), k = 6;
  RowMatrixXd atoms(m, 2);
  for (int i = 0; i < m; ++i) atoms.row(i) << u(rng), u(rng);
  const Moments a = ChainMoments(4000, m, 1, atoms), b = ChainMoments(4000, m, 2, atoms);
  for (double ridge : {1e-3, 1e-5, 1e-7}) {
    const MatrixXd l0 = InvSqrt(a.c00, ridge), l1 = InvSqrt(a.c11, ridge);
    Eigen::BDCSVD<MatrixXd> svd(l0 * a.c01 * l1, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const VampFactors got = FitVampFactors(a.c00, a.c01, a.c11, ridge, k);
    ASSERT_EQ(got.su.rows(), m + 1);
    ASSERT_EQ(got.su.cols(), k);
    const VectorXd sv = svd.singularValues().head(k);
    ASSERT_GT(sv[k - 1] - svd.singularValues()[k], 1e-4) << "the rank-k subspace must be well defined";
    MatrixXd r00 = a.c00, r11 = a.c11;
    r00.diagonal().tail(m).array() += ridge;
    r11.diagonal().tail(m).array() += ridge;
    // Differences as functions: the norm in the ridged metric (|f|^2 = f^T R f), in which both
    // singular functions have norm 1 (times sigma for su). Coefficient vectors themselves may
    // differ more along directions of tiny R eigenvalues (R has condition ~1/ridge).
    const auto metric = [](const MatrixXd& r, const VectorXd& f) { return std::sqrt(std::max(0.0, f.dot(r * f))); };
    for (int j = 0; j < k; ++j) {
      const VectorXd su = l0 * svd.matrixU().col(j) * sv[j], v = l1 * svd.matrixV().col(j);
      const double sign = su.dot(r00 * got.su.col(j)) < 0 ? -1.0 : 1.0;  // free per pair, shared by u and v
      EXPECT_LT(metric(r00, sign * got.su.col(j) - su), 1e-8 * sv[j]) << "ridge " << ridge << " pair " << j;
      EXPECT_LT(metric(r11, sign * got.v.col(j) - v), 1e-8) << "ridge " << ridge << " pair " << j;
      EXPECT_NEAR(metric(r11, got.v.col(j)), 1.0, 1e-9);
      EXPECT_NEAR(metric(r00, got.su.col(j)), sv[j], 1e-9);
    }
    VampFactors want;
    want.su = l0 * svd.matrixU().leftCols(k) * sv.asDiagonal();
    want.v = l1 * svd.matrixV().leftCols(k);
    const double s_want = VampEScore(want, b.c00, b.c01, b.c11);
    const double s_got = HeldOutVampE(a.c00, a.c01, a.c11, b.c00, b.c01, b.c11, ridge, k);
    EXPECT_NEAR(s_got, s_want, 1e-10 * std::abs(s_want)) << "ridge " << ridge;
  }
}

INSTANTIATE_TEST_SUITE_P(DenseAndLanczos, FitVampFactorsAtSize, ::testing::Values(60, 150));

}  // namespace
}  // namespace cmestream
