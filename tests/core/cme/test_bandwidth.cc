// Bandwidth selection by held-out VAMP-2 (bandwidth.h) against known answers.
#include <random>

#include <gtest/gtest.h>

#include "core/cme/bandwidth.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

RowMatrixXd Gaussian(int n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  RowMatrixXd m(n, d);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) m(i, j) = g(rng);
  return m;
}

TEST(Bandwidth, MedianPairwiseDistanceClosedForm) {
  RowMatrixXd p(4, 1);
  p << 0, 1, 3, 7;  // distances 1,3,7,2,6,4 -> sorted 1,2,3,4,6,7, upper median 4
  EXPECT_DOUBLE_EQ(MedianPairwiseDistance(p, 100), 4.0);
}

TEST(Bandwidth, Vamp2IsOneForIndependentPairsAndOnePlusRankForTheIdentity) {
  const RowMatrixXd x = Gaussian(1200, 2, 1), y = Gaussian(1200, 2, 2);
  const RowMatrixXd lm = x.topRows(100);
  // Independent: only the constant function is predictable (true VAMP-2 = 1).
  const double indep =
      HeldOutVamp2(x.topRows(600), y.topRows(600), x.bottomRows(600), y.bottomRows(600), lm, 1.0, 4, 1e-3);
  EXPECT_NEAR(indep, 1.0, 0.1);
  // Identity map: every singular value is 1 (true VAMP-2 = 1 + rank).
  const double ident =
      HeldOutVamp2(x.topRows(600), x.topRows(600), x.bottomRows(600), x.bottomRows(600), lm, 1.0, 4, 1e-3);
  EXPECT_NEAR(ident, 5.0, 0.01);
}

TEST(Bandwidth, DuffingPicksAQuarterOfTheMedian) {
  // The choice that gives ~0.98 basin accuracy (test_koopman checks the accuracy itself).
  for (uint64_t seed : {1, 2, 3}) {
    const auto warm = systems::SimulateDuffing(2000, seed);
    const BandwidthSelection sel = SelectBandwidth(warm.x, warm.y, BandwidthSelectionOptions{});
    EXPECT_NEAR(sel.median_distance, 2.04, 0.05);
    EXPECT_NEAR(sel.chosen, 0.25 * sel.median_distance, 1e-12) << "seed " << seed;
    ASSERT_EQ(sel.scores.size(), sel.candidates.size());
    EXPECT_LE(sel.scores.back(), sel.scores[2]);  // the median itself scores lower
  }
}

TEST(Bandwidth, DoubleWellPicksAtMostHalfTheMedianAndIsDeterministic) {
  const auto warm = systems::SimulateDoubleWell(2000, 1);
  const BandwidthSelection a = SelectBandwidth(warm.x, warm.y, BandwidthSelectionOptions{});
  const BandwidthSelection b = SelectBandwidth(warm.x, warm.y, BandwidthSelectionOptions{});
  EXPECT_EQ(a.chosen, b.chosen);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_LE(a.chosen, 0.5 * a.median_distance + 1e-12);
  EXPECT_GE(a.chosen, 0.25 * a.median_distance - 1e-12);
}

}  // namespace
}  // namespace cmestream
