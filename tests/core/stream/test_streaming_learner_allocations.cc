// StreamingLearner::Observe must not touch the heap once sigma is known and the model has
// settled (house rule: no allocation per sample): every estimator it routes to, the prequential
// scorer, the episode rule and the summary included. What may allocate is listed in the header
// (a count entry seen for the first time, dictionary capacity growth, a new spectral epoch or
// lag basis); with max_dict = 16 the warm run below fills the dictionary, and the measured
// window replays pairs the warm run saw with that dictionary, so it exercises only the steady
// path. Counted by tests/core/counting_malloc.cc (a separate
// binary, so the interposition affects nothing else).
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/stream/streaming_learner.h"
#include "tests/core/counting_malloc.h"

namespace cmestream {
namespace {

// States 0..n of a 2-D random walk folded into [-1, 1]^2, so a small dictionary covers it.
RowMatrixXd FoldedWalk(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> step(0.0, 0.2);
  RowMatrixXd s(n + 1, 2);
  s.row(0).setZero();
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < 2; ++j) s(t + 1, j) = std::sin(std::asin(s(t, j)) + step(rng));
  }
  return s;
}

StreamBatch Batch(const RowMatrixXd& s, int64_t first, int64_t n, bool trajectory) {
  StreamBatch b;
  b.n = n;
  b.dim = 2;
  b.x = s.row(first).data();
  b.y = s.row(first + 1).data();
  b.trajectory = trajectory;
  b.producer = "producer";
  b.episode = "episode";
  return b;
}

void ExpectSteadyPathAllocationFree(const StreamingLearner::Options& o);

// Every estimator on, sigma auto (the warm-up ends inside the warm run), a 16-atom cap.
StreamingLearner::Options EveryEstimator() {
  StreamingLearner::Options o;
  o.dim = 2;
  o.cme.dim = 2;
  o.cme.sigma = 0;
  o.cme.max_dict = 16;
  o.auto_sigma_warmup = 100;
  o.rff_features = 32;
  o.latent = true;
  o.reservoir = 50;
  o.window = 2;
  o.lags = {1, 4};
  // CME runs of 250 pairs (docs/algorithms.md §9.2): the warm run's 6000 pairs end on a run
  // boundary, so the measured window does not count pairs of the warm run, whose first-time
  // count entries would allocate. Batches of 100 and 99 pairs cross run boundaries in it.
  o.micro_batch = 250;
  return o;
}

TEST(StreamingLearnerAllocations, ObserveIsAllocationFreeAfterTheWarmup) {
  ExpectSteadyPathAllocationFree(EveryEstimator());
}

// The input stage on the hot path: the frozen scaler and the reduction (docs/algorithms.md
// §1.13, §1.15) map every pair and state into scratch buffers the learner owns.
TEST(StreamingLearnerAllocations, ScaledAndReducedInputsAreAllocationFreeToo) {
  StreamingLearner::Options o = EveryEstimator();
  o.scale_inputs = true;
  o.reduce = 1;
  ExpectSteadyPathAllocationFree(o);
}

void ExpectSteadyPathAllocationFree(const StreamingLearner::Options& o) {
  StreamingLearner l(o);
  const RowMatrixXd s = FoldedWalk(6000, 1);
  const long at_start = testing::AllocationCount();
  for (int64_t f = 0; f < 6000; f += 100) ASSERT_TRUE(l.Observe(Batch(s, f, 100, true)).ok());
  ASSERT_TRUE(l.ready());
  ASSERT_GT(testing::AllocationCount(), at_start) << "the counting malloc is not in effect";
  // A prequential scorer as the refresh installs it (a view's VAMP model over 16 atoms).
  auto model = std::make_shared<PrequentialModel>();
  model->basis = l.Snapshot()->cme->x_atoms.topRows(16);  // the estimators' coordinates
  model->sigma = l.sigma_selection().chosen;
  model->vamp.su = MatrixXd::Random(17, 3);
  model->vamp.v = MatrixXd::Random(17, 3);
  (void)l.InstallPrequential(std::make_unique<PrequentialVampE>(model), 1);

  // The measured window replays states 3000..6000: the dictionary is full (its atoms no longer
  // change), so every pair lands on count entries the warm run created. New states would be a
  // documented exception (a count entry seen for the first time), not the steady path.
  // The forecast regression refits at pair 8192 (a documented allocation, like an epoch): the
  // batch that holds it is left out of the count.
  const int64_t samples = l.samples();
  long allocations = 0;
  int64_t episodes = 0, admitted = 0, epochs = 0, rebases = 0, refits = 0;
  for (int64_t f = 3000; f < 6000; f += 100) {
    // Trajectory batches (continuing, and a new episode every tenth batch: the repeated state is
    // skipped) and unordered pairs (lag 1).
    const bool trajectory = (f / 100) % 3 != 0;
    const int64_t first = (f / 100) % 10 == 0 ? f + 1 : f;
    const long before = testing::AllocationCount();
    absl::StatusOr<ObserveSummary> r = l.Observe(Batch(s, first, f + 100 - first, trajectory));
    ASSERT_TRUE(r.ok());
    if (r->forecast_refits == 0) allocations += testing::AllocationCount() - before;
    refits += r->forecast_refits;
    episodes += r->episode_started ? 1 : 0;
    admitted += r->admitted_x + r->admitted_y;
    epochs += r->spectral_epochs;
    rebases += r->lag_rebases;
  }
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(refits, 1);
  EXPECT_EQ(admitted + epochs + rebases, 0);  // the steady path only
  EXPECT_EQ(l.samples(), samples + 3000 - 3);
  EXPECT_GT(episodes, 0);
  EXPECT_EQ(l.Snapshot()->prequential->pairs, 3000 - 3);
}

}  // namespace
}  // namespace cmestream
