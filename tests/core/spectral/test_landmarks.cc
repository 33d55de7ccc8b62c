// Landmarks of the spectral basis (core/spectral/landmarks.h, docs/algorithms.md §7.2).
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/kernels/gaussian.h"
#include "core/spectral/landmarks.h"
#include "core/spectral/spectral_moments.h"

namespace cmestream {
namespace {

// Smallest residual variance of each row against the span of the landmarks' kernel features:
// 1 - k_L(x)^T K_LL^{-1} k_L(x).
VectorXd Residuals(const RowMatrixXd& x, const RowMatrixXd& landmarks, double sigma) {
  const MatrixXd kll = GaussianGram(landmarks, landmarks, sigma);
  const MatrixXd kxl = GaussianGram(x, landmarks, sigma);
  const MatrixXd solved = kll.ldlt().solve(kxl.transpose());
  return (VectorXd::Ones(x.rows()) - (kxl.array() * solved.transpose().array()).rowwise().sum().matrix());
}

TEST(Landmarks, EveryRowIsRepresentedToTheToleranceWithFewerThanTheCap) {
  // 201 points on [0, 20] with sigma 1: about one landmark per sigma suffices.
  RowMatrixXd x(201, 1);
  for (int i = 0; i < 201; ++i) x(i, 0) = 0.1 * i;
  const RowMatrixXd l = ChooseLandmarks(x, 1.0, 64, 0.01);
  EXPECT_GE(l.rows(), 10);
  EXPECT_LE(l.rows(), 30);
  EXPECT_LE(Residuals(x, l, 1.0).maxCoeff(), 0.01 + 1e-9);
  // The first pivot is the first row (all residuals 1, earliest wins); rows are distinct.
  EXPECT_EQ(l(0, 0), 0.0);
  for (int i = 0; i < l.rows(); ++i)
    for (int j = 0; j < i; ++j) EXPECT_NE(l(i, 0), l(j, 0));
}

TEST(Landmarks, StopsAtTheCapAndOnRepeatedRows) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  RowMatrixXd x(300, 12);
  for (int i = 0; i < x.rows(); ++i)
    for (int j = 0; j < x.cols(); ++j) x(i, j) = nd(rng);
  EXPECT_EQ(ChooseLandmarks(x, 1.5, 32, 0.01).rows(), 32);  // 12-D: the cap binds
  EXPECT_EQ(ChooseLandmarks(x, 1.5, 0, 0.01).rows(), 0);
  // One point repeated: one landmark, whatever the cap.
  RowMatrixXd same = RowMatrixXd::Constant(50, 3, 0.7);
  EXPECT_EQ(ChooseLandmarks(same, 1.0, 32, 0.01).rows(), 1);
  // Fewer rows than the cap.
  EXPECT_EQ(ChooseLandmarks(x.topRows(4), 1.5, 32, 0.01).rows(), 4);
}

TEST(Landmarks, GreedyChoiceBeatsTheSameNumberOfEvenlySpacedRows) {
  // A cycle sampled unevenly (dense at one end): the pivots go where rows are worst explained.
  RowMatrixXd x(400, 2);
  for (int i = 0; i < 400; ++i) {
    const double t = 2 * M_PI * std::pow(i / 400.0, 3);
    x(i, 0) = 3 * std::cos(t);
    x(i, 1) = 3 * std::sin(t);
  }
  const RowMatrixXd l = ChooseLandmarks(x, 0.8, 12, 0.0);
  ASSERT_EQ(l.rows(), 12);
  RowMatrixXd even(12, 2);
  for (int k = 0; k < 12; ++k) even.row(k) = x.row(k * 400 / 12);
  // 12 landmarks 1.6 sigma apart on the circle leave about 0.5 at worst; evenly spaced rows, bunched
  // at the dense end, leave almost a whole unit.
  EXPECT_LT(Residuals(x, l, 0.8).maxCoeff(), 0.6);
  EXPECT_GT(Residuals(x, even, 0.8).maxCoeff(), 0.9);
}

// The landmarks lead the basis; a dictionary atom that copies one (the CME's first atom is the
// stream's first x, often also the first landmark) is left out, since two equal features leave
// the Gram singular; the new-atom count still sees every dictionary atom.
TEST(SpectralMomentsLandmarks, LeadTheBasisAndCopiesAreLeftOut) {
  SpectralMoments::Options o;
  o.dim = 1;
  o.sigma = 1.0;
  o.new_atom_fraction = 0.25;
  SpectralMoments acc(o);
  RowMatrixXd landmarks(2, 1);
  landmarks << 0.0, 5.0;
  acc.SetLandmarks(landmarks);
  RowMatrixXd source(6, 1);
  source << 0.0, 1.0, 5.0 + 0.01, 2.0, 3.0, 4.0;  // a copy of landmark 0, a near copy of landmark 1
  EXPECT_TRUE(acc.ShouldStartEpoch(1));
  acc.StartEpoch(source.topRows(4));
  EXPECT_EQ(acc.landmarks(), 2);
  ASSERT_EQ(acc.basis_size(), 4);  // 0, 5 | 1, 2
  const SpectralMomentsSnapshot s = acc.Snapshot();
  EXPECT_EQ(s.basis(2, 0), 1.0);
  EXPECT_EQ(s.basis(3, 0), 2.0);
  // 2 new atoms would give 6: 2 > 0.25 * 6.
  EXPECT_FALSE(acc.ShouldStartEpoch(4));
  EXPECT_TRUE(acc.ShouldStartEpoch(6));
  acc.StartEpoch(source);
  EXPECT_EQ(acc.basis_size(), 6);
  EXPECT_TRUE(acc.has_previous());  // nested: the old basis is a prefix
}

}  // namespace
}  // namespace cmestream
