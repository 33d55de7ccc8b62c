// LaggedMoments / LagStatistics must not touch the heap per state once set up (house rule: no
// allocation per sample), block merges included. Counted by tests/core/counting_malloc.cc
// (a separate binary, so the interposition affects nothing else).
#include <cstddef>
#include <random>

#include <gtest/gtest.h>

#include "core/validation/lag_statistics.h"
#include "core/validation/lagged_moments.h"
#include "tests/core/counting_malloc.h"

namespace cmestream {
namespace {

class LagAllocations : public ::testing::TestWithParam<int> {};

TEST_P(LagAllocations, ObserveIsAllocationFreeAcrossBlockMerges) {
  const int lags = GetParam(), d = 2, n = 5000;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  RowMatrixXd atoms(60, d), x(n + 1, d);
  for (int i = 0; i < atoms.rows(); ++i)
    for (int j = 0; j < d; ++j) atoms(i, j) = nd(rng);
  for (int i = 0; i <= n; ++i)
    for (int j = 0; j < d; ++j) x(i, j) = nd(rng);
  LagStatistics::Options o;
  o.lags.clear();
  for (int k = 1; k <= lags; ++k) o.lags.push_back(k * k);
  o.dim = d;
  o.sigma = 0.5;
  o.initial_block_length = 16;  // several merges within n
  LagStatistics acc(o);
  acc.Rebase(atoms, 1);
  const long before = testing::AllocationCount();
  for (int t = 0; t < n; ++t) {
    if (t % 997 == 0) acc.StartEpisode();
    if (t % 5 == 0) {
      acc.ObservePair(x.row(t).data(), x.row(t + 1).data());
    } else {
      acc.ObserveState(x.row(t).data());
    }
  }
  EXPECT_EQ(testing::AllocationCount() - before, 0) << "lags = " << lags;
  EXPECT_EQ(acc.Snapshot().counts->samples, n);
}

INSTANTIATE_TEST_SUITE_P(NumberOfLags, LagAllocations, ::testing::Values(1, 4, 8));

}  // namespace
}  // namespace cmestream
