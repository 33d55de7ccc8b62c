// InputReduction (core/stream/input_reduction.h, docs/algorithms.md §1.15) against data whose
// principal directions are known, and the learner with options.reduce against the same stream
// reduced by hand.
#include "core/stream/input_reduction.h"

#include <cmath>
#include <random>
#include <string>

#include "core/io/binary_io.h"
#include "core/stream/input_stage.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

// n rows in R^d: mu + sum_k sqrt(var_k) g_k u_k + noise, with orthonormal u_k (returned in `u`).
RowMatrixXd LowRank(int64_t n, int d, const std::vector<double>& var, double noise, uint64_t seed, MatrixXd* u) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  MatrixXd a(d, static_cast<int>(var.size()));
  for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = g(rng);
  *u = Eigen::HouseholderQR<MatrixXd>(a).householderQ() * MatrixXd::Identity(d, a.cols());
  VectorXd mu(d);
  for (int i = 0; i < d; ++i) mu(i) = 3.0 + i;
  RowMatrixXd x(n, d);
  for (int64_t t = 0; t < n; ++t) {
    VectorXd row = mu;
    for (size_t k = 0; k < var.size(); ++k) row += std::sqrt(var[k]) * g(rng) * u->col(static_cast<int>(k));
    for (int i = 0; i < d; ++i) row(i) += noise * g(rng);
    x.row(t) = row.transpose();
  }
  return x;
}

// Largest principal angle's sine between the column spans of orthonormal a and b.
double SubspaceDistance(const MatrixXd& a, const MatrixXd& b) {
  return (a * a.transpose() - b * b.transpose()).norm() / std::sqrt(2.0);
}

TEST(InputReduction, FindsTheLeadingDirectionsOfKnownData) {
  MatrixXd u;
  const RowMatrixXd x = LowRank(4000, 20, {9.0, 4.0, 1.0}, 0.01, 3, &u);
  // Fitted on two halves, as the learner does (x and y rows): the covariance path (N > d).
  const InputReduction r = InputReduction::Fit(x.topRows(2000), x.bottomRows(2000), 3);
  ASSERT_EQ(r.in_dim(), 20);
  ASSERT_EQ(r.out_dim(), 3);
  EXPECT_NEAR((r.basis().transpose() * r.basis() - MatrixXd::Identity(3, 3)).norm(), 0.0, 1e-12);
  EXPECT_LT(SubspaceDistance(r.basis(), u), 0.01);
  EXPECT_NEAR(r.variances()(0), 9.0, 0.6);  // 4000 samples: s.e. of a variance ~ 2.2 %
  EXPECT_NEAR(r.variances()(1), 4.0, 0.3);
  EXPECT_NEAR(r.variances()(2), 1.0, 0.08);
  // 17 noise directions of variance 1e-4 are left out of ~14.
  EXPECT_NEAR(r.explained(), 1.0 - 17e-4 / 14.0, 2e-5);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(r.mean()(i), 3.0 + i, 0.15);
  // Deterministic signs: each column's largest entry is positive.
  for (int k = 0; k < 3; ++k) {
    Eigen::Index at = 0;
    r.basis().col(k).cwiseAbs().maxCoeff(&at);
    EXPECT_GT(r.basis()(at, k), 0.0);
  }
  // A point of the kept (affine) subspace round-trips; another is projected onto it.
  VectorXd p = r.mean() + 1.5 * r.basis().col(0) - 0.5 * r.basis().col(2);
  VectorXd z(3), back(20);
  r.Apply(p.data(), z.data());
  EXPECT_NEAR(z(0), 1.5, 1e-12);
  EXPECT_NEAR(z(1), 0.0, 1e-12);
  EXPECT_NEAR(z(2), -0.5, 1e-12);
  r.Invert(z.data(), back.data());
  EXPECT_NEAR((back - p).norm(), 0.0, 1e-12);
  RowMatrixXd rows = x.topRows(5);
  const RowMatrixXd projected = r.InvertRows(r.ApplyRows(rows));
  for (int64_t t = 0; t < 5; ++t) {
    const VectorXd d = rows.row(t).transpose() - r.mean();
    const VectorXd want = r.mean() + r.basis() * (r.basis().transpose() * d);
    EXPECT_NEAR((projected.row(t).transpose() - want).norm(), 0.0, 1e-10);
  }
}

TEST(InputReduction, FewerRowsThanDimensionsUseTheGramMatrix) {
  MatrixXd u;
  const RowMatrixXd x = LowRank(60, 200, {16.0, 4.0}, 0.0, 5, &u);
  const InputReduction r = InputReduction::Fit(x.topRows(30), x.bottomRows(30), 2);
  EXPECT_NEAR((r.basis().transpose() * r.basis() - MatrixXd::Identity(2, 2)).norm(), 0.0, 1e-10);
  EXPECT_LT(SubspaceDistance(r.basis(), u), 1e-8);  // noise-free: the span exactly
  EXPECT_NEAR(r.explained(), 1.0, 1e-12);
  // The variances are the sample covariance's: the same as the covariance path's on the data.
  RowMatrixXd c = x.rowwise() - x.colwise().mean();
  const VectorXd z = (c * r.basis()).colwise().squaredNorm().transpose() / 60.0;
  EXPECT_NEAR(z(0), r.variances()(0), 1e-9 * z(0));
  EXPECT_NEAR(z(1), r.variances()(1), 1e-9 * z(0));
}

TEST(InputReduction, ADegenerateWarmupStillGivesAnOrthonormalBasis) {
  RowMatrixXd x = RowMatrixXd::Constant(40, 6, 2.5);
  for (int64_t t = 0; t < 40; ++t) x(t, 4) = static_cast<double>(t % 3);  // one varying channel
  const InputReduction r = InputReduction::Fit(x, x.topRows(0), 3);
  EXPECT_NEAR((r.basis().transpose() * r.basis() - MatrixXd::Identity(3, 3)).norm(), 0.0, 1e-12);
  EXPECT_NEAR(std::abs(r.basis()(4, 0)), 1.0, 1e-12);
  EXPECT_GT(r.variances()(0), 0.0);
  EXPECT_EQ(r.variances()(1), 0.0);
  EXPECT_EQ(r.variances()(2), 0.0);
  EXPECT_NEAR(r.explained(), 1.0, 1e-12);
  const InputReduction flat = InputReduction::Fit(RowMatrixXd::Constant(30, 4, 1.0), RowMatrixXd(0, 4), 2);
  EXPECT_NEAR((flat.basis().transpose() * flat.basis() - MatrixXd::Identity(2, 2)).norm(), 0.0, 1e-12);
  EXPECT_EQ(flat.explained(), 1.0);
}

TEST(InputReduction, SerializationRoundTripAndCorruptionIsRefused) {
  MatrixXd u;
  const RowMatrixXd x = LowRank(300, 8, {4.0, 1.0}, 0.1, 7, &u);
  const InputReduction r = InputReduction::Fit(x, x.topRows(0), 2);
  io::Writer w;
  r.Serialize(w);
  const std::string bytes = w.Release();
  io::Reader in(bytes, "test");
  absl::StatusOr<InputReduction> back = InputReduction::Deserialize(in, 8, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(in.remaining(), 0u);
  io::Reader wrong_k(bytes, "test");
  EXPECT_EQ(InputReduction::Deserialize(wrong_k, 8, 3).status().code(), absl::StatusCode::kDataLoss);
  io::Reader wrong_d(bytes, "test");
  EXPECT_EQ(InputReduction::Deserialize(wrong_d, 9, 2).status().code(), absl::StatusCode::kDataLoss);
  std::string corrupt = bytes;
  const double nan = std::nan("");
  std::memcpy(corrupt.data() + 8 + 8 + 8, &nan, 8);  // d, k, the mean's count, then mean[0]
  io::Reader bad(corrupt, "test");
  const absl::Status refused = InputReduction::Deserialize(bad, 8, 2).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.message().find("not finite"), std::string::npos) << refused;
}

// --- the learner with reduce -------------------------------------------------------------------

constexpr int kDim = 12, kReduce = 3, kWarmup = 200;

// A slow 2-D rotation and a fast 1-D chain seen through 12 channels of different scales.
RowMatrixXd WideChain(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  MatrixXd mix(kDim, 3);
  for (Eigen::Index i = 0; i < mix.size(); ++i) mix.data()[i] = g(rng);
  RowMatrixXd s(n + 1, kDim);
  Eigen::Vector3d v(0, 0, 0);
  for (int64_t t = 0; t <= n; ++t) {
    for (int i = 0; i < kDim; ++i) s(t, i) = (1.0 + 10.0 * i) * (mix.row(i).dot(v) + 0.05 * g(rng)) + i;
    v = Eigen::Vector3d(0.9 * v(0) - 0.3 * v(1), 0.3 * v(0) + 0.9 * v(1), 0.5 * v(2)) +
        0.4 * Eigen::Vector3d(g(rng), g(rng), g(rng));
  }
  return s;
}

StreamingLearner::Options Options(int dim, int reduce, bool scale) {
  StreamingLearner::Options o;
  o.dim = dim;
  o.cme.dim = dim;
  o.cme.sigma = 0;
  o.cme.max_dict = 60;
  o.auto_sigma_warmup = kWarmup;
  o.scale_inputs = scale;
  o.reduce = reduce;
  o.seed = 6;
  o.rff_features = 16;
  o.latent = true;
  o.reservoir = 100;
  o.lags = {1, 3};
  o.micro_batch = 16;
  return o;
}

using test_support::Bytes;

template <class T>
std::string BytesOf(const T& part) {
  io::Writer w;
  part.Serialize(w);
  return w.Release();
}

void FeedTrajectory(StreamingLearner& l, const RowMatrixXd& s, int64_t first, int64_t last, int64_t size) {
  for (int64_t f = first; f < last; f += size) {
    StreamBatch b;
    b.n = std::min(size, last - f);
    b.dim = static_cast<int>(s.cols());
    b.x = s.row(f).data();
    b.y = s.row(f + 1).data();
    b.trajectory = true;
    b.producer = "p";
    ASSERT_TRUE(l.Observe(b).ok());
  }
}

TEST(StreamingLearnerReduction, EstimatorsHoldTheStateOfTheReducedStreamFedByHand) {
  const RowMatrixXd raw = WideChain(900, 12);
  StreamingLearner reduced(Options(kDim, kReduce, true));
  FeedTrajectory(reduced, raw, 0, 900, 41);
  ASSERT_TRUE(reduced.ready());
  ASSERT_NE(reduced.scaler(), nullptr);
  ASSERT_NE(reduced.reduction(), nullptr);
  // Scaler, then the reduction fitted on the scaled warm-up (x rows 0..W-1, y rows 1..W).
  const InputScaler scaler = InputScaler::Estimate(raw.topRows(kWarmup), raw.middleRows(1, kWarmup));
  EXPECT_EQ(*reduced.scaler(), scaler);
  RowMatrixXd z = raw;
  scaler.ApplyRows(z);
  const InputReduction want = InputReduction::Fit(z.topRows(kWarmup), z.middleRows(1, kWarmup), kReduce);
  EXPECT_EQ(*reduced.reduction(), want);
  // Three latent directions carry nearly all of the scaled variance (noise is 5 % per channel).
  EXPECT_GT(want.explained(), 0.95);

  // A plain learner of dim 3 fed the stream scaled and reduced by hand: the same estimators, bit
  // for bit (the CME, the forecast regression, the sigma choice).
  StreamingLearner by_hand(Options(kReduce, 0, false));
  FeedTrajectory(by_hand, want.ApplyRows(z), 0, 900, 41);
  ASSERT_TRUE(by_hand.ready());
  EXPECT_EQ(reduced.sigma_selection().chosen, by_hand.sigma_selection().chosen);
  EXPECT_EQ(reduced.sigma_selection().scores, by_hand.sigma_selection().scores);
  EXPECT_EQ(reduced.samples(), by_hand.samples());
  EXPECT_TRUE(BytesOf(*reduced.cme()) == BytesOf(*by_hand.cme()));
  ASSERT_NE(reduced.forecast(), nullptr);
  EXPECT_TRUE(BytesOf(*reduced.forecast()) == BytesOf(*by_hand.forecast()));
  const std::optional<StreamingLearnerSnapshot> a = reduced.Snapshot(), b = by_hand.Snapshot();
  ASSERT_TRUE(a && b && a->cme && b->cme && a->lags && b->lags && a->spectral && b->spectral);
  EXPECT_EQ(a->cme->x_atoms, b->cme->x_atoms);
  EXPECT_EQ(a->cme->x_atoms.cols(), kReduce);
  ASSERT_TRUE(a->reduction.has_value());
  EXPECT_EQ(*a->reduction, want);
  // The views' input stage maps the user's rows in and the atoms back out.
  const InputStage stage(a->scaler, a->reduction);
  const RowMatrixXd in = stage.Apply(raw.topRows(4));
  EXPECT_EQ(in.cols(), kReduce);
  EXPECT_EQ(stage.Invert(a->cme->x_atoms).cols(), kDim);
}

TEST(StreamingLearnerReduction, SerializationContinuesBitForBitAndOldVersionsRefuseAReduction) {
  const RowMatrixXd raw = WideChain(600, 13);
  StreamingLearner uninterrupted(Options(kDim, kReduce, true));
  FeedTrajectory(uninterrupted, raw, 0, 600, 23);
  const std::string want = Bytes(uninterrupted);
  for (int64_t stop : {60, 200, 400}) {
    StreamingLearner a(Options(kDim, kReduce, true));
    FeedTrajectory(a, raw, 0, stop, 23);
    const std::string bytes = Bytes(a);
    io::Reader r(bytes, "test");
    absl::StatusOr<StreamingLearner> b = StreamingLearner::Deserialize(
        r, Options(kDim, kReduce, true), StreamingLearner::kStateVersion, a.sigma_selection());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(r.remaining(), 0u);
    EXPECT_TRUE(Bytes(*b) == bytes) << stop;
    EXPECT_EQ(b->reduction() != nullptr, stop >= kWarmup);
    FeedTrajectory(*b, raw, stop, 600, 23);
    EXPECT_TRUE(Bytes(*b) == want) << stop;
  }
  io::Reader r(want, "test");
  absl::StatusOr<StreamingLearner> old = StreamingLearner::Deserialize(r, Options(kDim, kReduce, true), 8, {});
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(old.status().message().find("cannot hold an input reduction"), std::string::npos) << old.status();
}

TEST(StreamingLearnerReduction, EndWarmupNeedsTenPairsPerDirection) {
  const RowMatrixXd raw = WideChain(300, 14);
  StreamingLearner::Options o = Options(kDim, 8, true);
  o.auto_sigma_warmup = 1000;
  StreamingLearner l(o);
  FeedTrajectory(l, raw, 0, 79, 79);
  const absl::Status too_few = l.EndWarmup();
  EXPECT_EQ(too_few.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(too_few.message().find("expected at least 80"), std::string::npos) << too_few;
  FeedTrajectory(l, raw, 79, 80, 1);
  ASSERT_TRUE(l.EndWarmup().ok());
  EXPECT_EQ(l.reduction()->out_dim(), 8);
}

TEST(StreamingLearnerReduction, OptionsRefuseWhatCannotBeReduced) {
  auto refused = [](StreamingLearner::Options o, const std::string& says) {
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(says), std::string::npos) << s;
  };
  refused(Options(kDim, kDim, true), "reduce is 12, expected 0 (off) or 1..11");
  StreamingLearner::Options fixed = Options(kDim, kReduce, false);
  fixed.cme.sigma = 0.5;
  refused(fixed, "reduce needs sigma auto");
  StreamingLearner::Options delays = Options(kDim, kReduce, true);
  delays.delays = 2;
  refused(delays, "reduce needs delays 1");
  StreamingLearner::Options short_warmup = Options(kDim, 5, true);
  short_warmup.auto_sigma_warmup = 40;
  refused(short_warmup, "auto_sigma_warmup is 40, expected >= 50 to fit reduce 5");
  EXPECT_TRUE(Options(kDim, kReduce, false).Validate().ok());  // unscaled reduction: allowed
}

}  // namespace
}  // namespace cmestream
