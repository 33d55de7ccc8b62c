// Transition counts (docs/algorithms.md §2): exact values, validation, forgetting, bounds.
#include "core/counts/transition_counts.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/systems/four_well.h"

namespace cmestream {
namespace {

TransitionCounts Make(int max_states, double forgetting = 1.0) {
  TransitionCounts::Options o;
  o.max_states = max_states;
  o.forgetting = forgetting;
  return TransitionCounts(o);
}

TEST(TransitionCounts, ExactCountsMatrixAndStationary) {
  TransitionCounts c = Make(10);
  // 0->1 x3, 0->2 x1, 1->0 x2, 2->2 x4; state 5 appears only as a target.
  for (int k = 0; k < 3; ++k) c.Add(0, 1);
  c.Add(0, 2);
  c.Add(1, 0);
  c.Add(1, 0);
  for (int k = 0; k < 4; ++k) c.Add(2, 2);
  c.Add(2, 5);
  const CountsSnapshot s = c.Snapshot();
  EXPECT_EQ(s.num_states(), 6);
  EXPECT_EQ(s.samples(), 11);
  EXPECT_DOUBLE_EQ(s.total_weight(), 11.0);
  EXPECT_EQ(s.nonzeros(), 5);
  EXPECT_DOUBLE_EQ(s.Count(0, 1), 3.0);
  EXPECT_DOUBLE_EQ(s.Count(2, 5), 1.0);
  EXPECT_DOUBLE_EQ(s.Count(5, 0), 0.0);
  EXPECT_DOUBLE_EQ(s.visits()[0], 4.0);
  EXPECT_DOUBLE_EQ(s.visits()[2], 5.0);

  const std::vector<CountTriplet> t = s.Triplets();
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0].i, 0);
  EXPECT_EQ(t[0].j, 1);
  EXPECT_EQ(t[4].i, 2);
  EXPECT_EQ(t[4].j, 5);

  const EmpiricalTransitionMatrix p = s.TransitionMatrix();
  EXPECT_DOUBLE_EQ(p.P(0, 1), 0.75);
  EXPECT_DOUBLE_EQ(p.P(0, 2), 0.25);
  EXPECT_DOUBLE_EQ(p.P(2, 2), 0.8);
  EXPECT_TRUE(p.visited[0]);
  EXPECT_FALSE(p.visited[3]);
  EXPECT_FALSE(p.visited[5]);
  EXPECT_DOUBLE_EQ(p.P.row(5).sum(), 0.0);
  for (int i : {0, 1, 2}) EXPECT_NEAR(p.P.row(i).sum(), 1.0, 1e-15);
  EXPECT_TRUE(s.TransitionRow(1).isApprox(p.P.row(1).transpose()));

  const VectorXd pi = s.Stationary();
  EXPECT_NEAR(pi.sum(), 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(pi[2], 5.0 / 11.0);
  EXPECT_DOUBLE_EQ(pi[5], 0.0);

  // Dense export over states with data: {0, 1, 2, 5}.
  const DenseCounts d = s.Dense();
  ASSERT_EQ(d.states, (std::vector<int>{0, 1, 2, 5}));
  EXPECT_DOUBLE_EQ(d.N(0, 1), 3.0);
  EXPECT_DOUBLE_EQ(d.N(2, 3), 1.0);
  EXPECT_DOUBLE_EQ(d.N.sum(), 11.0);
}

TEST(TransitionCounts, OutOfRangeIdsAreRejectedAndChangeNothing) {
  TransitionCounts c = Make(4);
  c.Add(0, 1);
  const absl::Status bad = c.ValidatePair(2, 4);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("j = 4 out of range [0, 4)"), std::string::npos) << bad.message();
  EXPECT_EQ(c.ValidatePair(-1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.ValidatePair(3, 3).ok());

  const int64_t is[] = {1, 2, 7};
  const int64_t js[] = {2, 3, 0};
  const absl::Status batch = c.AddBatch(is, js, 3);
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(batch.message().find("pair 2"), std::string::npos) << batch.message();
  // All-or-nothing: the two valid pairs before the bad one were not added.
  EXPECT_EQ(c.samples(), 1);
  EXPECT_EQ(c.num_states(), 2);
  EXPECT_DOUBLE_EQ(c.Count(1, 2), 0.0);

  TransitionCounts::Options o;
  o.forgetting = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o.forgetting = 1;
  o.max_states = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransitionCounts, ForgettingHalvesAfterTheHalfLife) {
  const int half_life = 100;
  const double gamma = std::pow(0.5, 1.0 / half_life);
  TransitionCounts c = Make(8, gamma);
  c.Add(0, 1);
  for (int k = 0; k < half_life; ++k) c.Add(2, 3);
  EXPECT_NEAR(c.Count(0, 1), 0.5, 1e-12);
  for (int k = 0; k < half_life; ++k) c.Add(2, 3);
  EXPECT_NEAR(c.Count(0, 1), 0.25, 1e-12);
  EXPECT_NEAR(c.Visits(0), 0.25, 1e-12);
  // Geometric sum: the 200 (2,3) pairs weigh sum_{s<200} gamma^s.
  const double expected = (1 - std::pow(gamma, 200)) / (1 - gamma);
  EXPECT_NEAR(c.Count(2, 3), expected, 1e-9 * expected);
  EXPECT_NEAR(c.Snapshot().Stationary()[0], 0.25 / (0.25 + expected), 1e-12);
}

TEST(TransitionCounts, ForgettingSurvivesRescalingAndStaysBounded) {
  // gamma = 0.5 forces a rescale of the lazy unit every ~330 samples.
  const double gamma = 0.5;
  TransitionCounts c = Make(10, gamma);
  std::mt19937_64 rng(7);
  int last_i = 0, last_j = 0;
  for (int t = 0; t < 100000; ++t) {
    last_i = static_cast<int>(rng() % 10);
    last_j = static_cast<int>(rng() % 10);
    c.Add(last_i, last_j);
  }
  // Total weight of an infinite stream: 1/(1 - gamma) = 2.
  EXPECT_NEAR(c.total_weight(), 2.0, 1e-9);
  EXPECT_GE(c.Count(last_i, last_j), 1.0);
  EXPECT_LE(c.nonzeros(), 100);
  EXPECT_EQ(c.num_states(), 10);
  const CountsSnapshot s = c.Snapshot();
  double sum = 0;
  for (const CountTriplet& t : s.Triplets()) sum += t.value;
  EXPECT_NEAR(sum, 2.0, 1e-9);
  EXPECT_NEAR(s.visits().sum(), 2.0, 1e-9);
}

TEST(TransitionCounts, BoundedByMaxStatesWithoutForgetting) {
  TransitionCounts c = Make(16);
  std::mt19937_64 rng(3);
  for (int t = 0; t < 200000; ++t) c.Add(static_cast<int>(rng() % 16), static_cast<int>(rng() % 16));
  EXPECT_EQ(c.num_states(), 16);
  EXPECT_EQ(c.nonzeros(), 256);
  EXPECT_DOUBLE_EQ(c.total_weight(), 200000.0);
}

TEST(TransitionCounts, EmpiricalMatrixConvergesToTheChain) {
  const systems::FiniteChain chain = systems::LowRankChain(12, 3, 11);
  const std::vector<int> path = systems::SampleChain(chain.P, 200000, 0, 5);
  TransitionCounts c = Make(12);
  for (size_t t = 0; t + 1 < path.size(); ++t) c.Add(path[t], path[t + 1]);
  const CountsSnapshot s = c.Snapshot();
  const EmpiricalTransitionMatrix p = s.TransitionMatrix();
  // Entry-wise standard error <= sqrt(0.25 / (n pi_i)) ~ 0.004 here; allow ~5 sigma.
  EXPECT_LT((p.P - chain.P).cwiseAbs().maxCoeff(), 0.02);
  EXPECT_LT((s.Stationary() - chain.pi).cwiseAbs().maxCoeff(), 0.01);
}

}  // namespace
}  // namespace cmestream
