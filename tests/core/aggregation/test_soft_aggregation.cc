// Soft state aggregation (paper 003, Algorithm 1; docs/algorithms.md §4) against chains
// P = U V^T with known anchors (core/systems/soft_aggregation_chain.h).
#include "core/aggregation/soft_aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <Eigen/SVD>

#include "core/linalg/truncated_svd.h"
#include "core/systems/soft_aggregation_chain.h"

namespace cmestream {
namespace {

using systems::SoftAggregationChain;
using systems::SoftAggregationChainOptions;

SoftAggregationChain Chain(uint64_t seed, int p = 200, int r = 4, bool hard = false, double alpha = 1.0) {
  SoftAggregationChainOptions o;
  o.states = p;
  o.meta_states = r;
  o.anchors_per_meta = 3;
  o.hard = hard;
  o.u_concentration = alpha;
  o.seed = seed;
  absl::StatusOr<SoftAggregationChain> c = systems::MakeSoftAggregationChain(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

SoftAggregation::Options Opt(int r) {
  SoftAggregation::Options o;
  o.meta_states = r;
  return o;
}

// Ground-truth rows restricted to the kept states, in row order.
MatrixXd Rows(const MatrixXd& m, const std::vector<int>& states) {
  MatrixXd out(states.size(), m.cols());
  for (size_t i = 0; i < states.size(); ++i) out.row(i) = m.row(states[i]);
  return out;
}

std::vector<int> AnchorStates(const AggregationResult& res) {
  std::vector<int> a;
  for (const auto& list : res.anchors)
    for (int row : list) a.push_back(res.states[row]);
  std::sort(a.begin(), a.end());
  return a;
}
std::vector<int> AnchorStates(const SoftAggregationChain& c) {
  std::vector<int> a;
  for (const auto& list : c.anchors) a.insert(a.end(), list.begin(), list.end());
  std::sort(a.begin(), a.end());
  return a;
}

void ExpectWellFormed(const AggregationResult& res, int r) {
  const int k = static_cast<int>(res.states.size());
  ASSERT_EQ(res.V.rows(), k);
  ASSERT_EQ(res.V.cols(), r);
  EXPECT_TRUE(res.V.allFinite() && res.U.allFinite() && res.U_raw.allFinite() && res.W.allFinite());
  EXPECT_GE(res.V.minCoeff(), 0.0);
  EXPECT_GE(res.U.minCoeff(), 0.0);
  EXPECT_GE(res.W.minCoeff(), 0.0);
  for (int q = 0; q < r; ++q) EXPECT_NEAR(res.V.col(q).sum(), 1.0, 1e-12);
  for (int i = 0; i < k; ++i) {
    EXPECT_NEAR(res.U.row(i).sum(), 1.0, 1e-12);
    EXPECT_NEAR(res.W.row(i).sum(), 1.0, 1e-12);
    EXPECT_NEAR(res.W_raw.row(i).sum(), 1.0, 1e-8);  // barycentric: first equation is 1^T q = 1
  }
  ASSERT_EQ(res.partition.size(), static_cast<size_t>(k));
  EXPECT_TRUE(std::isfinite(res.frobenius_to_empirical));
  EXPECT_TRUE(std::isfinite(res.mean_row_tv_to_empirical));
}

// Noise-free input n diag(pi) P: Algorithm 1 is exact (paper 003, section 3 "Insight"),
// so U, V, the anchors and P itself come back to rounding error.
TEST(SoftAggregation, ExpectedCountsRecoverModelExactly) {
  const SoftAggregationChain c = Chain(7);
  absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(systems::ExpectedCounts(c, 1e6), Opt(4));
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectWellFormed(*res, 4);
  EXPECT_EQ(res->summary.termination, SoftAggregation::Termination::kSuccess) << res->summary.BriefReport();
  EXPECT_EQ(res->states.size(), 200u);
  const std::vector<int> perm = MatchMetaStates(c.V, res->V);
  EXPECT_LT(MeanColumnTv(c.V, res->V, perm), 1e-9);
  EXPECT_LT(MeanRowTv(c.U, res->U_raw, perm), 1e-9);
  EXPECT_EQ(AnchorStates(*res), AnchorStates(c));
  for (int k = 0; k < 4; ++k) {
    std::vector<int> got;
    for (int row : res->anchors[perm[k]]) got.push_back(res->states[row]);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, c.anchors[k]) << "meta-state " << k;
  }
  EXPECT_LT((res->EstimatedTransitionMatrix() - c.P).cwiseAbs().maxCoeff(), 1e-10);
  EXPECT_LT(res->frobenius_to_empirical, 1e-7);
  // sigma_{r+1} of the noise-free N~ is zero: the rank-r structure is visible in the summary.
  ASSERT_EQ(res->summary.singular_values.size(), 5);
  EXPECT_LT(res->summary.singular_values(4), 1e-9 * res->summary.singular_values(0));
  EXPECT_GT(res->summary.singular_values(3), 1e-3 * res->summary.singular_values(0));
}

// Paper 003, Theorem 3/4 and Figure 3: mean TV error of V^ columns and U^ rows ~ sqrt(p/n).
// Measured (3 seeds, p = 200, r = 4, 3 anchors each, floor 0.2, Dirichlet(1) U):
// TV(V) 0.33 / 0.080 / 0.024 and TV(U) 0.45 / 0.13 / 0.042 at n = 1e4 / 1e5 / 1e6;
// sqrt(10) = 3.16 per decade. (The design prototype's chain, docs/algorithms.md §4.8, gave 0.146 / 0.046 / 0.015 for
// V.)
TEST(SoftAggregation, ErrorFallsLikeSqrtPOverNAndAnchorsExactAtLargeN) {
  const std::vector<double> ns = {1e4, 1e5, 1e6};
  std::vector<double> tv_v(3, 0), tv_u(3, 0), fit_tv(3, 0);
  constexpr int kSeeds = 3;
  for (int s = 1; s <= kSeeds; ++s) {
    const SoftAggregationChain c = Chain(s);
    for (int t = 0; t < 3; ++t) {
      const MatrixXd counts = systems::CountTransitions(
          systems::SimulateSoftAggregationChain(c, static_cast<int64_t>(ns[t]), 100 + s), 200);
      absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(counts, Opt(4));
      ASSERT_TRUE(res.ok()) << res.status();
      ExpectWellFormed(*res, 4);
      const MatrixXd v = Rows(c.V, res->states), u = Rows(c.U, res->states);
      const std::vector<int> perm = MatchMetaStates(v, res->V);
      tv_v[t] += MeanColumnTv(v, res->V, perm) / kSeeds;
      tv_u[t] += MeanRowTv(u, res->U, perm) / kSeeds;
      fit_tv[t] += res->mean_row_tv_to_empirical / kSeeds;
      if (t == 2) {
        EXPECT_EQ(AnchorStates(*res), AnchorStates(c)) << "seed " << s << " n = 1e6";
      }
    }
  }
  for (int t = 0; t < 2; ++t) {
    const double rv = tv_v[t] / tv_v[t + 1], ru = tv_u[t] / tv_u[t + 1];
    EXPECT_GE(rv, 2.0) << "V decade " << t;
    EXPECT_LE(rv, 5.0) << "V decade " << t;
    EXPECT_GE(ru, 2.0) << "U decade " << t;
    EXPECT_LE(ru, 5.0) << "U decade " << t;
  }
  // Absolute level: within a factor ~2 of sqrt(p/n) = 0.141 / 0.045 / 0.014.
  EXPECT_LT(tv_v[0], 0.45);
  EXPECT_GT(tv_v[2], 0.007);
  EXPECT_LT(tv_v[2], 0.035);
  EXPECT_LT(tv_u[2], 0.06);
  // The distance of U V^T to P^ is dominated by the sampling noise of P^ itself and falls too.
  EXPECT_GT(fit_tv[0], fit_tv[1]);
  EXPECT_GT(fit_tv[1], fit_tv[2]);
}

// Paper 003, Figure 3 right: at small n the rank-r estimate U^ V^^T is much closer to P than the
// empirical P^ = diag(N 1)^{-1} N (measured 5-6x in Frobenius norm at n = 1e4).
TEST(SoftAggregation, LowRankEstimateBeatsEmpiricalAtSmallN) {
  const SoftAggregationChain c = Chain(11);
  const MatrixXd counts = systems::CountTransitions(systems::SimulateSoftAggregationChain(c, 10000, 5), 200);
  absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(counts, Opt(4));
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_EQ(res->states.size(), 200u);  // every state entered at n = 1e4
  ASSERT_TRUE(res->rows_without_outgoing.empty());
  const MatrixXd est = res->EstimatedTransitionMatrix();  // rows/cols = states 0..199 in order
  const MatrixXd emp = counts.array().colwise() / counts.rowwise().sum().array();
  const double d_est = (est - c.P).norm(), d_emp = (emp - c.P).norm();
  EXPECT_LT(3.0 * d_est, d_emp) << "estimate " << d_est << " empirical " << d_emp;
  // Row TV too: the empirical rows have ~50 samples over 200 states.
  auto row_tv = [&](const MatrixXd& m) { return 0.5 * (m - c.P).cwiseAbs().rowwise().sum().mean(); };
  EXPECT_LT(2.0 * row_tv(est), row_tv(emp));
  // Reported distance to P^ matches a direct computation.
  EXPECT_NEAR(res->frobenius_to_empirical, (est - emp).norm(), 1e-9);
  EXPECT_NEAR(res->mean_row_tv_to_empirical, 0.5 * (est - emp).cwiseAbs().rowwise().sum().mean(), 1e-12);
}

// Hard (lumpable) aggregation: every state is an anchor of its block. The partition and the
// anchor set (all states) come back exactly from data, and V exactly from expected counts.
TEST(SoftAggregation, HardLumpableAggregationRecoveredExactly) {
  const SoftAggregationChain c = Chain(3, 200, 4, /*hard=*/true, 0.3);
  {
    absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(systems::ExpectedCounts(c, 1e5), Opt(4));
    ASSERT_TRUE(res.ok()) << res.status();
    const std::vector<int> perm = MatchMetaStates(c.V, res->V);
    EXPECT_LT(MeanColumnTv(c.V, res->V, perm), 1e-9);
    EXPECT_LT(MeanRowTv(c.U, res->U, perm), 1e-9);
  }
  const MatrixXd counts = systems::CountTransitions(systems::SimulateSoftAggregationChain(c, 1000000, 9), 200);
  absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(counts, Opt(4));
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectWellFormed(*res, 4);
  ASSERT_EQ(res->states.size(), 200u);
  const std::vector<int> perm = MatchMetaStates(c.V, res->V);
  std::vector<int> inverse(4);
  for (int k = 0; k < 4; ++k) inverse[perm[k]] = k;
  int wrong = 0;
  for (int j = 0; j < 200; ++j) wrong += inverse[res->partition[j]] != c.block[j];
  EXPECT_EQ(wrong, 0);
  // With SPA the vertices are the most extreme noisy points of each block's cloud, so only
  // part of each block clears 1 - delta_0. k-means with r centers puts the vertices at the
  // cloud centers (the denoising option of docs/algorithms.md §4.2): every state is then an
  // anchor and V^'s columns have disjoint supports, as in the model.
  SoftAggregation::Options km = Opt(4);
  km.vertex_hunting = SoftAggregation::VertexHunting::kKMeansThenSpa;
  km.kmeans_centers = 4;
  absl::StatusOr<AggregationResult> kmr = SoftAggregation::Fit(counts, km);
  ASSERT_TRUE(kmr.ok()) << kmr.status();
  const std::vector<int> kperm = MatchMetaStates(c.V, kmr->V);
  EXPECT_EQ(AnchorStates(*kmr), AnchorStates(c));  // all 200 states
  double off = 0;
  for (int j = 0; j < 200; ++j)
    for (int k = 0; k < 4; ++k)
      if (k != c.block[j]) off += kmr->V(j, kperm[k]);
  EXPECT_LT(off, 0.1);  // summed over 4 columns; measured 0.056
  std::vector<int> kinverse(4);
  for (int k = 0; k < 4; ++k) kinverse[kperm[k]] = k;
  for (int j = 0; j < 200; ++j) EXPECT_EQ(kinverse[kmr->partition[j]], c.block[j]);
  // Measured TV(V): SPA 0.040, k-means(4) 0.017 at n = 1e6.
  EXPECT_LT(MeanColumnTv(c.V, kmr->V, kperm), 0.03);
  EXPECT_LT(MeanColumnTv(c.V, kmr->V, kperm), MeanColumnTv(c.V, res->V, perm));
}

// States with no incoming transitions (e.g. where the trajectory started, or sources) are
// excluded and reported; a state with no outgoing transitions keeps its V row and gets a
// flagged, uniform U row. Nothing is NaN.
TEST(SoftAggregation, ExcludedStatesAreReportedNotDividedByZero) {
  const SoftAggregationChain c = Chain(5, 60, 3);
  MatrixXd base = systems::ExpectedCounts(c, 1e5);
  // 63 x 63, consistent with the model: states 60 and 62 only emit (like states 0 and 3, at
  // 1% of their rate), state 61 only receives (exactly what state 5 receives).
  MatrixXd counts = MatrixXd::Zero(63, 63);
  counts.topLeftCorner(60, 60) = base;
  counts.block(60, 0, 1, 60) = 0.01 * base.row(0);
  counts.block(62, 0, 1, 60) = 0.01 * base.row(3);
  counts.block(0, 61, 60, 1) = base.col(5);
  counts(60, 61) = counts(60, 5);
  counts(62, 61) = counts(62, 5);
  absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(counts, Opt(3));
  ASSERT_TRUE(res.ok()) << res.status();
  ExpectWellFormed(*res, 3);
  EXPECT_THAT(res->excluded_states, ::testing::ElementsAre(60, 62));
  EXPECT_EQ(res->summary.excluded_states, 2);
  ASSERT_EQ(res->states.size(), 61u);
  EXPECT_EQ(res->states[60], 61);
  EXPECT_THAT(res->rows_without_outgoing, ::testing::ElementsAre(60));
  EXPECT_TRUE((res->U.row(60).array() == 1.0 / 3).all());
  EXPECT_TRUE((res->U_raw.row(60).array() == 0.0).all());
  // Ground truth of the extended chain: V with state 5's row duplicated as row 60 (state 61),
  // columns renormalized. The excluded states' outgoing rows are consistent data, so exact.
  MatrixXd v_ext(61, 3);
  v_ext.topRows(60) = c.V;
  v_ext.row(60) = c.V.row(5);
  for (int k = 0; k < 3; ++k) v_ext.col(k) /= v_ext.col(k).sum();
  const std::vector<int> perm = MatchMetaStates(v_ext, res->V);
  EXPECT_LT(MeanColumnTv(v_ext, res->V, perm), 1e-9);
}

// k-means pre-clustering (docs/algorithms.md §4.2): with 30 centers it matches SPA; with
// noise-free input it is exact (anchors collapse onto the vertices, which k-means centers hit).
TEST(SoftAggregation, KMeansPreclusteringOption) {
  const SoftAggregationChain c = Chain(2);
  SoftAggregation::Options km = Opt(4);
  km.vertex_hunting = SoftAggregation::VertexHunting::kKMeansThenSpa;
  km.kmeans_centers = 30;
  {
    absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(systems::ExpectedCounts(c, 1e6), km);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_TRUE(res->summary.vertex_rows.empty());
    const std::vector<int> perm = MatchMetaStates(c.V, res->V);
    EXPECT_LT(MeanColumnTv(c.V, res->V, perm), 1e-9);
  }
  const MatrixXd counts = systems::CountTransitions(systems::SimulateSoftAggregationChain(c, 1000000, 4), 200);
  absl::StatusOr<AggregationResult> spa = SoftAggregation::Fit(counts, Opt(4));
  absl::StatusOr<AggregationResult> kmr = SoftAggregation::Fit(counts, km);
  ASSERT_TRUE(spa.ok() && kmr.ok());
  ExpectWellFormed(*kmr, 4);
  const double tv_spa = MeanColumnTv(c.V, spa->V, MatchMetaStates(c.V, spa->V));
  const double tv_km = MeanColumnTv(c.V, kmr->V, MatchMetaStates(c.V, kmr->V));
  EXPECT_LT(tv_km, 0.05);
  EXPECT_LT(tv_km, 2.0 * tv_spa) << "spa " << tv_spa << " kmeans " << tv_km;
  // Deterministic given the seed.
  absl::StatusOr<AggregationResult> again = SoftAggregation::Fit(counts, km);
  EXPECT_EQ(again->V, kmr->V);
}

// Dense BDCSVD and the truncated subspace iteration give the same aggregation.
TEST(SoftAggregation, TruncatedSvdMatchesDense) {
  const SoftAggregationChain c = Chain(4);
  const MatrixXd counts = systems::CountTransitions(systems::SimulateSoftAggregationChain(c, 100000, 8), 200);
  SoftAggregation::Options dense = Opt(4), trunc = Opt(4);
  dense.truncated_svd_min_states = 1000;
  trunc.truncated_svd_min_states = 1;
  absl::StatusOr<AggregationResult> a = SoftAggregation::Fit(counts, dense);
  absl::StatusOr<AggregationResult> b = SoftAggregation::Fit(counts, trunc);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->summary.svd_kind, SoftAggregation::SvdKind::kDense);
  EXPECT_EQ(b->summary.svd_kind, SoftAggregation::SvdKind::kTruncated);
  EXPECT_EQ(b->summary.termination, SoftAggregation::Termination::kSuccess) << b->summary.BriefReport();
  EXPECT_GT(b->summary.svd_iterations, 0);
  ASSERT_EQ(b->summary.singular_values.size(), 5);
  EXPECT_LT((a->summary.singular_values.head(4) - b->summary.singular_values.head(4)).norm(),
            1e-8 * a->summary.singular_values(0));
  // sigma_5 from the truncated SVD is an unconverged Ritz value: a lower bound, a few digits.
  EXPECT_LE(b->summary.singular_values(4), a->summary.singular_values(4) * (1 + 1e-12));
  EXPECT_GT(b->summary.singular_values(4), 0.9 * a->summary.singular_values(4));
  const std::vector<int> perm = MatchMetaStates(a->V, b->V);
  EXPECT_LT(MeanColumnTv(a->V, b->V, perm), 1e-6);
  EXPECT_EQ(a->summary.vertex_rows, b->summary.vertex_rows);
}

TEST(SoftAggregation, TripletAndSparseInputsMatchDense) {
  const SoftAggregationChain c = Chain(6, 80, 3);
  const systems::DiscreteTransitions t = systems::SimulateSoftAggregationChain(c, 20000, 1);
  std::vector<TransitionCount> triplets;
  for (size_t s = 0; s < t.from.size(); ++s) triplets.push_back({t.from[s], t.to[s], 1.0});  // duplicates summed
  const MatrixXd dense = systems::CountTransitions(t, 80);
  absl::StatusOr<AggregationResult> a = SoftAggregation::Fit(dense, Opt(3));
  absl::StatusOr<AggregationResult> b = SoftAggregation::Fit(80, triplets, Opt(3));
  absl::StatusOr<AggregationResult> s = SoftAggregation::Fit(Eigen::SparseMatrix<double>(dense.sparseView()), Opt(3));
  ASSERT_TRUE(a.ok() && b.ok() && s.ok());
  EXPECT_LT((a->V - b->V).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_LT((a->U - s->U).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(SoftAggregation, BadInputIsRejectedWithAClearError) {
  SoftAggregation::Options o = Opt(0);
  EXPECT_THAT(o.Validate().message(), ::testing::HasSubstr("meta_states >= 1"));
  o = Opt(2);
  o.anchor_threshold = 1.0;
  EXPECT_THAT(o.Validate().message(), ::testing::HasSubstr("anchor_threshold"));
  o = Opt(4);
  o.vertex_hunting = SoftAggregation::VertexHunting::kKMeansThenSpa;
  o.kmeans_centers = 3;
  EXPECT_THAT(o.Validate().message(), ::testing::HasSubstr("kmeans_centers >= meta_states"));
  o = Opt(2);
  o.svd_tolerance = 0;
  EXPECT_THAT(o.Validate().message(), ::testing::HasSubstr("svd_tolerance"));

  MatrixXd n = MatrixXd::Ones(4, 4);
  EXPECT_EQ(SoftAggregation::Fit(MatrixXd::Ones(3, 4), Opt(2)).status().code(), absl::StatusCode::kInvalidArgument);
  n(1, 2) = -1;
  EXPECT_THAT(SoftAggregation::Fit(n, Opt(2)).status().message(), ::testing::HasSubstr("N[1,2]"));
  n(1, 2) = std::nan("");
  EXPECT_EQ(SoftAggregation::Fit(n, Opt(2)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftAggregation::Fit(4, {{0, 4, 1.0}}, Opt(2)).status().code(), absl::StatusCode::kInvalidArgument);
  // Only one state has been entered: not enough data for r = 2 yet.
  MatrixXd one = MatrixXd::Zero(4, 4);
  one(0, 1) = one(2, 1) = 3;
  EXPECT_EQ(SoftAggregation::Fit(one, Opt(2)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TruncatedSvd, MatchesBdcsvdOnALowRankPlusNoiseMatrix) {
  // A = G1 diag(10, 8, 6, 4, ...) G2 + 0.01 noise: top 4 well separated.
  const SoftAggregationChain c = Chain(9, 150, 4);
  const MatrixXd a = systems::ExpectedCounts(c, 1.0) + 1e-4 * MatrixXd::Random(150, 150).cwiseAbs();
  Eigen::BDCSVD<MatrixXd> full(a, Eigen::ComputeThinV);
  absl::StatusOr<TruncatedSvdResult> t = TruncatedRightSvd(Eigen::SparseMatrix<double>(a.sparseView()), 4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->converged);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(t->singular_values(i), full.singularValues()(i), 1e-9 * full.singularValues()(0));
    EXPECT_NEAR(std::abs(t->right_vectors.col(i).dot(full.matrixV().col(i))), 1.0, 1e-6);
  }
  EXPECT_EQ(TruncatedRightSvd(a, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SoftAggregationChain, GroundTruthIsAValidModel) {
  const SoftAggregationChain c = Chain(12, 100, 5);
  EXPECT_LT((c.P.rowwise().sum().array() - 1).abs().maxCoeff(), 1e-12);
  EXPECT_LT((c.V.colwise().sum().array() - 1).abs().maxCoeff(), 1e-12);
  EXPECT_LT((c.U.rowwise().sum().array() - 1).abs().maxCoeff(), 1e-12);
  EXPECT_LT((c.stationary.transpose() * c.P - c.stationary.transpose()).cwiseAbs().maxCoeff(), 1e-14);
  std::set<int> all;
  for (int k = 0; k < 5; ++k) {
    ASSERT_EQ(c.anchors[k].size(), 3u);
    for (int j : c.anchors[k]) {
      all.insert(j);
      for (int q = 0; q < 5; ++q) {
        if (q == k) EXPECT_GT(c.V(j, q), 0);
        else EXPECT_EQ(c.V(j, q), 0);
      }
    }
  }
  EXPECT_EQ(all.size(), 15u);
  // Visit frequencies of a long run match pi (TV ~ sqrt(p / n) / 2).
  const systems::DiscreteTransitions t = systems::SimulateSoftAggregationChain(c, 400000, 3);
  VectorXd freq = VectorXd::Zero(100);
  for (int x : t.from) freq(x) += 1.0 / t.from.size();
  EXPECT_LT(0.5 * (freq - c.stationary).cwiseAbs().sum(), 0.02);
  for (size_t s = 0; s + 1 < t.from.size(); ++s) ASSERT_EQ(t.to[s], t.from[s + 1]);
  // Deterministic given the seed; different seeds differ.
  EXPECT_EQ(systems::SimulateSoftAggregationChain(c, 1000, 3).to, systems::SimulateSoftAggregationChain(c, 1000, 3).to);
  EXPECT_NE(systems::SimulateSoftAggregationChain(c, 1000, 3).to, systems::SimulateSoftAggregationChain(c, 1000, 4).to);
  const std::string json = c.GroundTruthJson();
  EXPECT_THAT(json, ::testing::StartsWith("{\"states\":100,\"meta_states\":5,\"U\":[["));
  EXPECT_THAT(json, ::testing::HasSubstr("\"anchors\":[["));
  SoftAggregationChainOptions bad;
  bad.states = 10;
  bad.meta_states = 4;
  bad.anchors_per_meta = 3;
  EXPECT_THAT(systems::MakeSoftAggregationChain(bad).status().message(), ::testing::HasSubstr("anchors_per_meta"));
}

}  // namespace
}  // namespace cmestream
