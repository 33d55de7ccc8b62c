// Tests of the predictive-state model (docs/algorithms.md §6) against the optimal filters of
// the true systems (forward algorithm, Kalman filter) and against batch closed forms.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "core/predictive/predictive_state.h"
#include "core/systems/hmm.h"

namespace cmestream {
namespace {

using Acc = PredictiveStateAccumulator;
using Model = PredictiveStateModel;

Acc::Options DiscreteOptions(int history) {
  Acc::Options o;
  o.kind = Acc::Kind::kDiscrete;
  o.num_symbols = 2;
  o.history_length = history;
  return o;
}

Acc::Options GaussianOptions() {
  Acc::Options o;
  o.kind = Acc::Kind::kLinearGaussian;
  o.dim = 1;
  o.history_length = 6;
  o.future_length = 2;
  return o;
}

RowMatrixXd AsRows(const VectorXd& v) { return Eigen::Map<const RowMatrixXd>(v.data(), v.size(), 1); }

// RMSE of the learned filter's one-step forecasts of P(o_t = 1) (the expected value).
double LearnedRmse(const Model& m, const RowMatrixXd& obs) {
  VectorXd q = m.InitialState();
  double se = 0;
  for (Eigen::Index t = 0; t < obs.rows(); ++t) {
    const VectorXd pred = m.PredictMean(q);
    se += (obs.row(t).transpose() - pred).squaredNorm();
    m.Update(q, obs.row(t).data());
  }
  return std::sqrt(se / obs.rows());
}

double OptimalRmseBinary(const systems::DiscreteHmm& hmm, const VectorXd& obs) {
  const RowMatrixXd pred = hmm.OneStepPredictions(obs);
  return std::sqrt((obs - pred.col(1)).squaredNorm() / obs.size());
}

Model FitDiscrete(const VectorXd& train, int history, Model::Stage stage) {
  Acc acc(DiscreteOptions(history));
  EXPECT_TRUE(acc.ObserveBatch(AsRows(train)).ok());
  Model::FitOptions fo;
  fo.stage = stage;
  auto m = Model::Fit(acc.Snapshot(), fo);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

TEST(PredictiveState, DiscreteStatisticsMatchBruteForceCounts) {
  const VectorXd obs = (VectorXd(9) << 0, 1, 1, 0, 1, 0, 0, 1, 1).finished();
  Acc acc(DiscreteOptions(2));
  ASSERT_TRUE(acc.ObserveBatch(AsRows(obs.head(5))).ok());
  acc.StartEpisode();
  ASSERT_TRUE(acc.ObserveBatch(AsRows(obs.tail(4))).ok());
  // Windows of length H + 2 = 4 never cross the episode boundary: 5-3 + 4-3 = 3 windows.
  EXPECT_EQ(acc.windows(), 3);
  const auto s = acc.Snapshot();
  // Episode 1 (0 1 1 0 1): (0,1 | 1,0), (1,1 | 0,1); episode 2 (0 0 1 1): (0,0 | 1,1).
  // History index = 2 o_{t-2} + o_{t-1}; xi column = 2 o_t + o_{t+1}.
  EXPECT_EQ(s.a_diag, (VectorXd(4) << 1, 1, 0, 1).finished());
  EXPECT_EQ(s.B_xi(1, 1 * 2 + 0), 1);
  EXPECT_EQ(s.B_xi(3, 0 * 2 + 1), 1);
  EXPECT_EQ(s.B_xi(0, 1 * 2 + 1), 1);
  EXPECT_EQ(s.B_xi.sum(), 3);
  EXPECT_EQ(s.B_psi(1, 1) + s.B_psi(3, 0) + s.B_psi(0, 1), 3);
  EXPECT_EQ(s.pair_counts, (MatrixXd(2, 2) << 0, 1, 1, 1).finished());
  EXPECT_EQ(s.sum_e, (VectorXd(2) << 1, 2).finished());
}

TEST(PredictiveState, BadInputIsRejectedAndChangesNothing) {
  Acc acc(DiscreteOptions(2));
  const double good[] = {0, 1, 1, 0};
  for (double v : good) ASSERT_TRUE(acc.Observe(&v).ok());
  const auto before = acc.Snapshot();
  for (double v : {2.0, -1.0, 0.5, std::nan("")}) {
    EXPECT_EQ(acc.Observe(&v).code(), absl::StatusCode::kInvalidArgument);
  }
  const auto after = acc.Snapshot();
  EXPECT_EQ(acc.observations(), 4);
  EXPECT_EQ(before.B_xi, after.B_xi);
  EXPECT_EQ(acc.windows(), 1);

  Acc::Options bad = DiscreteOptions(20);
  bad.num_symbols = 4;
  EXPECT_FALSE(bad.Validate().ok());
  Model::FitOptions fo;
  EXPECT_EQ(Model::Fit(acc.Snapshot(), fo).status().code(), absl::StatusCode::kFailedPrecondition);
  fo.lambda1 = -1;
  EXPECT_EQ(Model::Fit(acc.Snapshot(), fo).status().code(), absl::StatusCode::kInvalidArgument);
}

// The streamed two-stage solution equals the batch closed form on explicit data matrices.
TEST(PredictiveState, LinearGaussianMatchesBatchTwoStage) {
  const auto ssm = systems::LinearGaussianSsm::Default();
  const RowMatrixXd obs = ssm.Simulate(500, 7);
  Acc acc(GaussianOptions());
  ASSERT_TRUE(acc.ObserveBatch(obs).ok());
  Model::FitOptions fo;
  fo.lambda1 = 1e-2;
  fo.lambda2 = 1e-3;
  auto m = Model::Fit(acc.Snapshot(), fo);
  ASSERT_TRUE(m.ok()) << m.status();

  const int H = 6, F = 2, n = static_cast<int>(obs.rows()) - H - F;
  MatrixXd Hm(n, H), Psi(n, F), Ext(n, F);  // rows: h_t, psi_t, o_{t+1..t+F}
  VectorXd O(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < H; ++j) Hm(i, j) = obs(i + j, 0);
    for (int j = 0; j < F; ++j) Psi(i, j) = obs(i + H + j, 0);
    for (int j = 0; j < F; ++j) Ext(i, j) = obs(i + H + 1 + j, 0);
    O[i] = obs(i + H, 0);
  }
  const MatrixXd A = Hm.transpose() * Hm;
  const MatrixXd Areg = A + fo.lambda1 * A.trace() / H * MatrixXd::Identity(H, H);
  const MatrixXd psibar = Hm * Areg.ldlt().solve(Hm.transpose() * Psi);
  Eigen::SelfAdjointEigenSolver<MatrixXd> eig(psibar.transpose() * psibar);
  MatrixXd U(F, 2);
  U.col(0) = eig.eigenvectors().col(F - 1);
  U.col(1) = eig.eigenvectors().col(F - 2);
  MatrixXd Xi(n, 3);
  Xi.col(0) = O;
  Xi.rightCols(2) = Ext * U;
  const MatrixXd xibar = Hm * Areg.ldlt().solve(Hm.transpose() * Xi);
  const MatrixXd qbar = psibar * U;
  const MatrixXd qq = qbar.transpose() * qbar;
  const MatrixXd W =
      (xibar.transpose() * qbar) * (qq + fo.lambda2 * qq.trace() / 2 * MatrixXd::Identity(2, 2)).inverse();
  // Eigenvector signs are arbitrary: compare W up to the sign flips of U's columns.
  MatrixXd D = MatrixXd::Identity(3, 3);
  for (int j = 0; j < 2; ++j) D(j + 1, j + 1) = m->basis().col(j).dot(U.col(j)) > 0 ? 1 : -1;
  const MatrixXd W_streamed = D * m->W() * D.bottomRightCorner(2, 2);
  EXPECT_LT((W_streamed - W).norm(), 1e-8 * W.norm()) << W_streamed << "\n---\n" << W;
}

// Forward-algorithm ground truth: the learned filter approaches the optimal one-step RMSE as n
// grows, and the instrumented estimate beats the naive one-stage regression.
TEST(PredictiveState, BinaryHmmApproachesForwardAlgorithm) {
  const auto hmm = systems::DiscreteHmm::BinaryLearningChain();
  const VectorXd test = hmm.Simulate(50000, 99);
  const double optimal = OptimalRmseBinary(hmm, test);
  const VectorXd train = hmm.Simulate(200000, 1);
  const double small = LearnedRmse(FitDiscrete(train.head(2000), 3, Model::Stage::kTwoStage), AsRows(test));
  const double large = LearnedRmse(FitDiscrete(train, 3, Model::Stage::kTwoStage), AsRows(test));
  const double naive = LearnedRmse(FitDiscrete(train, 3, Model::Stage::kNaiveOneStage), AsRows(test));
  std::printf("binary HMM one-step RMSE: optimal %.5f, learned n=2e3 %.5f, n=2e5 %.5f, naive %.5f\n", optimal, small,
              large, naive);
  EXPECT_LT(large, 1.01 * optimal);
  EXPECT_LE(large, small);
  EXPECT_GT(naive - optimal, 5 * (large - optimal));
}

TEST(PredictiveState, BinaryHmmForecastDistributions) {
  const auto hmm = systems::DiscreteHmm::BinaryLearningChain();
  const Model m = FitDiscrete(hmm.Simulate(200000, 3), 3, Model::Stage::kTwoStage);
  const VectorXd window = (VectorXd(6) << 1, 1, 1, 1, 1, 1).finished();
  auto f = m.ForecastFrom(AsRows(window), 50);
  ASSERT_TRUE(f.ok()) << f.status();
  // Exact h-step predictive distributions from the forward algorithm.
  VectorXd prior = hmm.StationaryWeights();
  for (int t = 0; t < window.size(); ++t) {
    VectorXd post = prior.cwiseProduct(hmm.emission.col(1));
    prior = hmm.transition.transpose() * (post / post.sum());
  }
  for (int h = 0; h < 50; ++h) {
    const VectorXd exact = hmm.emission.transpose() * prior;
    EXPECT_NEAR(f->distribution(h, 1), exact[1], 0.02) << "h = " << h;
    EXPECT_NEAR(f->distribution.row(h).sum(), 1.0, 1e-12);
    EXPECT_NEAR(f->mean(h, 0), f->distribution(h, 1), 1e-12);
    prior = hmm.transition.transpose() * prior;
  }
  const RowMatrixXd bad = (RowMatrixXd(2, 1) << 1, 3).finished();
  EXPECT_EQ(m.ForecastFrom(bad, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.ForecastFrom(AsRows(window), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PredictiveState, KalmanModelApproachesKalmanFilter) {
  const auto ssm = systems::LinearGaussianSsm::Default();
  const RowMatrixXd test = ssm.Simulate(50000, 99);
  const RowMatrixXd kf = ssm.OneStepPredictions(test);
  const double optimal = std::sqrt((test - kf).squaredNorm() / test.rows());
  const RowMatrixXd train = ssm.Simulate(100000, 5);
  auto fit = [&](int64_t n, Model::Stage stage) {
    Acc acc(GaussianOptions());
    EXPECT_TRUE(acc.ObserveBatch(train.topRows(n)).ok());
    Model::FitOptions fo;
    fo.stage = stage;
    auto m = Model::Fit(acc.Snapshot(), fo);
    EXPECT_TRUE(m.ok()) << m.status();
    return LearnedRmse(*m, test);
  };
  const double small = fit(1000, Model::Stage::kTwoStage);
  const double large = fit(100000, Model::Stage::kTwoStage);
  const double naive = fit(100000, Model::Stage::kNaiveOneStage);
  const double var = test.squaredNorm() / test.rows();
  std::printf("Kalman one-step RMSE: optimal %.5f, learned n=1e3 %.5f, n=1e5 %.5f, naive %.5f, sd %.5f\n", optimal,
              small, large, naive, std::sqrt(var));
  EXPECT_LT(large, 1.02 * optimal);
  EXPECT_LE(large, small);
  // Without instruments the overlapping-window noise biases W; here the naive filter is worse
  // (or unstable and diverges).
  EXPECT_TRUE(!std::isfinite(naive) || naive > large);
}

}  // namespace
}  // namespace cmestream
