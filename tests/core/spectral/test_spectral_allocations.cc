// SpectralMoments::Observe must not touch the heap once its epoch started (house rule: no
// allocation per sample), at the basis sizes the benchmark uses. Same counting malloc as
// test_cme_allocations (a separate binary, so the interposition affects nothing else).
#include <cmath>
#include <cstddef>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "core/spectral/prequential_score.h"
#include "core/spectral/spectral_moments.h"
#include "tests/core/counting_malloc.h"

namespace cmestream {
namespace {

class SpectralAllocations : public ::testing::TestWithParam<int> {};

TEST_P(SpectralAllocations, ObserveIsAllocationFreeWithinAnEpoch) {
  const int m = GetParam(), d = 3, n = 3000;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd;
  RowMatrixXd atoms(m, d), x(n + 1, d);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < d; ++j) atoms(i, j) = nd(rng);
  for (int i = 0; i <= n; ++i)
    for (int j = 0; j < d; ++j) x(i, j) = nd(rng);
  SpectralMoments::Options o;
  o.dim = d;
  o.sigma = 1.0;
  o.forgetting = 0.9999;  // exercise the lazy scale as well
  o.block_length = 700;   // block ends inside batches
  SpectralMoments acc(o);
  acc.StartEpoch(atoms);
  const long before = testing::AllocationCount();
  for (int t = 0; t < n; ++t) acc.Observe(x.row(t).data(), x.row(t + 1).data());
  EXPECT_EQ(testing::AllocationCount() - before, 0) << "m = " << m;
  EXPECT_EQ(acc.epoch_samples(), n);
}

// The prequential score runs on every ingested pair next to the moments: no allocation either.
TEST_P(SpectralAllocations, PrequentialScoreObserveIsAllocationFree) {
  const int m = GetParam(), d = 3, k = 6, n = 2000;
  std::mt19937_64 rng(6);
  std::normal_distribution<double> nd;
  auto model = std::make_shared<PrequentialModel>();
  model->basis.resize(m, d);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < d; ++j) model->basis(i, j) = nd(rng);
  model->sigma = 0.7;
  model->vamp.su = MatrixXd::Random(m + 1, k);
  model->vamp.v = MatrixXd::Random(m + 1, k);
  RowMatrixXd x(n + 1, d);
  for (int i = 0; i <= n; ++i)
    for (int j = 0; j < d; ++j) x(i, j) = nd(rng);
  PrequentialVampE score(model);
  const long before = testing::AllocationCount();
  for (int t = 0; t < n; ++t) score.Observe(x.row(t).data(), x.row(t + 1).data());
  const double s = score.Score();
  EXPECT_EQ(testing::AllocationCount() - before, 0) << "m = " << m;
  EXPECT_EQ(score.pairs(), n);
  EXPECT_TRUE(std::isfinite(s));
}

INSTANTIATE_TEST_SUITE_P(BasisSizes, SpectralAllocations, ::testing::Values(20, 160, 500));

}  // namespace
}  // namespace cmestream
