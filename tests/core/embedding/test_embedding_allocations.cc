// EmbeddingMoments::Observe must not touch the heap (house rule: no allocation per sample):
// the block flushes (feature GEMMs, cosines, trajectory reuse, rank-B updates) included, on
// a trajectory and on independent pairs, at the daemon's N = 256, B = 64. Counted by
// tests/core/counting_malloc.cc (a separate binary, so the interposition affects nothing else).
#include <random>

#include <gtest/gtest.h>

#include "core/embedding/state_embedding.h"
#include "tests/core/counting_malloc.h"

namespace cmestream {
namespace {

TEST(EmbeddingAllocations, ObserveIsAllocationFreeOnTrajectoriesAndPairs) {
  const int d = 2, n = 2000;
  auto f = std::make_shared<const FeatureMap>(*FeatureMap::Rff(d, 256, 0.5, 1));
  EmbeddingMoments m(f, {});
  std::mt19937_64 rng(4);
  std::normal_distribution<double> nd;
  RowMatrixXd s(n + 1, d), y(n, d);
  for (int i = 0; i <= n; ++i)
    for (int j = 0; j < d; ++j) s(i, j) = nd(rng);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) y(i, j) = nd(rng);
  const long before = testing::AllocationCount();
  for (int t = 0; t < n; ++t) m.Observe(s.row(t).data(), s.row(t + 1).data());  // trajectory
  for (int t = 0; t < n; ++t) m.Observe(s.row(t).data(), y.row(t).data());      // pairs
  EXPECT_EQ(testing::AllocationCount() - before, 0);
  EXPECT_GT(m.reused_features(), n - n / 64 - 2);  // the trajectory half reused its features
  EXPECT_EQ(m.samples(), 2 * n);
}

}  // namespace
}  // namespace cmestream
