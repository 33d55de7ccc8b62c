// The learner's input stage: InputScaler (core/stream/input_scaler.h) on data whose quantiles
// are known in closed form, its fallbacks, its serialization; and the StreamingLearner with
// scale_inputs, whose state must be bit for bit that of an unscaled learner fed the scaled
// stream by hand, and whose warm-up may end early (EndWarmup) exactly as a shorter warm-up.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/io/binary_io.h"
#include "core/stream/input_scaler.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

TEST(InputScaler, MedianAndIqrOfKnownData) {
  // Channel 0: 0, 1, ..., 100 (median 50, quartiles 25 and 75 exactly: type-7 quantiles of an
  // arithmetic sequence). Channel 1: the same times -3 plus 1e6 (a level far above the spread).
  RowMatrixXd rows(101, 2);
  for (int i = 0; i <= 100; ++i) {
    rows(i, 0) = i;
    rows(i, 1) = 1e6 - 3.0 * i;
  }
  const InputScaler s = InputScaler::Estimate(rows);
  ASSERT_EQ(s.dim(), 2);
  EXPECT_EQ(s.center()[0], 50.0);
  EXPECT_EQ(s.scale()[0], 50.0 / InputScaler::kIqrToSigma);
  EXPECT_EQ(s.center()[1], 1e6 - 150.0);
  EXPECT_DOUBLE_EQ(s.scale()[1], 150.0 / InputScaler::kIqrToSigma);
  EXPECT_EQ(s.spread()[0], InputScaler::Spread::kIqr);
  // Interpolation between order statistics: 0, 1, 2, 3 -> median 1.5, quartiles 0.75 and 2.25.
  RowMatrixXd four(4, 1);
  four << 3, 0, 2, 1;
  const InputScaler f = InputScaler::Estimate(four);
  EXPECT_EQ(f.center()[0], 1.5);
  EXPECT_EQ(f.scale()[0], 1.5 / InputScaler::kIqrToSigma);
}

TEST(InputScaler, GaussianChannelsGetTheirStandardDeviation) {
  // 8 channels with scales 0.03 .. 235 and offsets: IQR / 1.349 estimates sigma within its
  // sampling error (about 1.1 / sqrt(n) relative at n = 20000: 3 % is > 3 standard errors).
  const std::vector<double> scales = {0.03, 0.2, 1.0, 4.0, 17.0, 50.0, 120.0, 235.0};
  std::mt19937_64 rng(5);
  std::normal_distribution<double> z(0.0, 1.0);
  RowMatrixXd rows(20000, 8);
  for (int64_t i = 0; i < rows.rows(); ++i) {
    for (int j = 0; j < 8; ++j) rows(i, j) = 10.0 * j + scales[j] * z(rng);
  }
  const InputScaler s = InputScaler::Estimate(rows);
  for (int j = 0; j < 8; ++j) {
    EXPECT_NEAR(s.scale()[j] / scales[j], 1.0, 0.03) << j;
    EXPECT_NEAR(s.center()[j], 10.0 * j, 0.05 * scales[j]) << j;
  }
}

TEST(InputScaler, FallbacksNeverDivideByZero) {
  // Channel 0 constant: every estimate is 0, so the unit scale (centered, not divided).
  // Channel 1: 80 % zeros, then 2 and 3: IQR 0 (type-7 quartiles both 0), the standard deviation.
  // Channel 2: 40 % equal values then a spread: the IQR is usable and taken.
  RowMatrixXd rows(10, 3);
  rows.col(0).setConstant(7.25);
  rows.col(1) << 0, 0, 0, 0, 0, 0, 0, 0, 2, 3;
  rows.col(2) << 5, 5, 5, 5, 6, 7, 8, 9, 10, 11;
  const InputScaler s = InputScaler::Estimate(rows);
  EXPECT_EQ(s.spread()[0], InputScaler::Spread::kUnit);
  EXPECT_EQ(s.center()[0], 7.25);
  EXPECT_EQ(s.scale()[0], 1.0);
  EXPECT_EQ(s.spread()[1], InputScaler::Spread::kStd);
  EXPECT_EQ(s.center()[1], 0.0);
  EXPECT_DOUBLE_EQ(s.scale()[1], std::sqrt((4 + 9) / 10.0 - 0.25));  // population sd
  EXPECT_EQ(s.spread()[2], InputScaler::Spread::kIqr);
  EXPECT_EQ(s.center()[2], 6.5);
  EXPECT_EQ(s.scale()[2], (8.75 - 5.0) / InputScaler::kIqrToSigma);  // quartiles at 2.25, 6.75
  for (int j = 0; j < 3; ++j) EXPECT_GT(s.scale()[j], 0.0);
  // A spread lost in the rounding of a huge level is no spread either.
  RowMatrixXd level(4, 1);
  level << 1e300, 1e300, 1e300, 1e300 * (1 + 1e-15);
  EXPECT_EQ(InputScaler::Estimate(level).spread()[0], InputScaler::Spread::kUnit);
}

TEST(InputScaler, CommensurateChannelsShareOneScale) {
  // Channels 0 and 2: arithmetic sequences with spreads 50 / 1.349 and 75 / 1.349 (ratio 1.5):
  // both become the geometric mean. Channel 1 is constant (unit spread): left alone.
  RowMatrixXd rows(101, 3);
  for (int i = 0; i <= 100; ++i) rows.row(i) << i, 4.0, 1.5 * i - 7;
  InputScaler s = InputScaler::Estimate(rows);
  const InputScaler estimated = s;
  s.PoolCommensurate(InputScaler::kCommensurateRatio);
  const double common = std::sqrt(estimated.scale()[0] * estimated.scale()[2]);
  EXPECT_DOUBLE_EQ(s.scale()[0], common);
  EXPECT_DOUBLE_EQ(s.scale()[2], common);
  EXPECT_EQ(s.scale()[1], 1.0);
  EXPECT_EQ(s.center(), estimated.center());
  EXPECT_EQ(s.spread(), estimated.spread());
  // Spreads 2.5x apart keep their own; so does a single channel.
  for (int i = 0; i <= 100; ++i) rows(i, 2) = 2.5 * i;
  InputScaler apart = InputScaler::Estimate(rows);
  apart.PoolCommensurate(InputScaler::kCommensurateRatio);
  EXPECT_EQ(apart, InputScaler::Estimate(rows));
  InputScaler one = InputScaler::Estimate(rows.leftCols(1));
  one.PoolCommensurate(InputScaler::kCommensurateRatio);
  EXPECT_EQ(one, InputScaler::Estimate(rows.leftCols(1)));
}

TEST(InputScaler, ApplyInvertAndSerializationRoundTrip) {
  RowMatrixXd rows(50, 3);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < rows.rows(); ++i) rows.row(i) << 235 * u(rng), 0.03 * u(rng) + 1, u(rng);
  const InputScaler s = InputScaler::Estimate(rows.topRows(20), rows.bottomRows(30));
  EXPECT_EQ(s, InputScaler::Estimate(rows));  // two blocks estimate as their union
  RowMatrixXd z = rows;
  s.ApplyRows(z);
  for (int64_t i = 0; i < rows.rows(); ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(z(i, j), (rows(i, j) - s.center()[j]) / s.scale()[j]);
  }
  s.InvertRows(z);
  EXPECT_LT((z - rows).cwiseAbs().maxCoeff(), 1e-12 * 235);

  io::Writer w;
  s.Serialize(w);
  const std::string bytes = w.Release();
  io::Reader r(bytes, "test");
  absl::StatusOr<InputScaler> back = InputScaler::Deserialize(r, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(r.remaining(), 0u);

  io::Reader wrong_dim(bytes, "test");
  EXPECT_EQ(InputScaler::Deserialize(wrong_dim, 2).status().code(), absl::StatusCode::kDataLoss);
  // A scale of 0 (a corrupt file) is refused, naming the channel.
  std::string corrupt = bytes;
  const double nothing = 0.0;
  std::memcpy(corrupt.data() + 8 + 8 + 3 * 8 + 8 + 8, &nothing, 8);  // d, centers, count, scale 1
  io::Reader bad(corrupt, "test");
  const absl::Status refused = InputScaler::Deserialize(bad, 3).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.message().find("channel 1 has center"), std::string::npos) << refused;
}

// --- the learner with scale_inputs -----------------------------------------------------------

constexpr int kDim = 3, kWarmup = 120;

// A 3-channel linear chain with channel scales 235, 0.03, 1 and offsets: the pump's problem.
RowMatrixXd RawChain(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.3);
  RowMatrixXd s(n + 1, kDim);
  Eigen::Vector3d v(0, 0, 0);
  for (int64_t t = 0; t <= n; ++t) {
    s.row(t) << 235.0 * v(0) + 1000.0, 0.03 * v(1) - 2.0, v(2);
    const Eigen::Vector3d next(0.8 * v(0) - 0.4 * v(1), 0.4 * v(0) + 0.8 * v(1), 0.9 * v(2));
    v = next + Eigen::Vector3d(noise(rng), noise(rng), noise(rng));
  }
  return s;
}

StreamingLearner::Options Options(bool scale, int warmup = kWarmup) {
  StreamingLearner::Options o;
  o.dim = kDim;
  o.cme.dim = kDim;
  o.cme.sigma = 0;  // auto
  o.cme.max_dict = 50;
  o.auto_sigma_warmup = warmup;
  o.scale_inputs = scale;
  o.seed = 4;
  o.rff_features = 16;
  o.latent = true;
  o.reservoir = 100;
  o.lags = {1, 2};
  o.micro_batch = 16;
  return o;
}

using test_support::Bytes;

void FeedTrajectory(StreamingLearner& l, const RowMatrixXd& s, int64_t first, int64_t last, int64_t size) {
  for (int64_t f = first; f < last; f += size) {
    StreamBatch b;
    b.n = std::min(size, last - f);
    b.dim = kDim;
    b.x = s.row(f).data();
    b.y = s.row(f + 1).data();
    b.trajectory = true;
    b.producer = "p";
    ASSERT_TRUE(l.Observe(b).ok());
  }
}

TEST(StreamingLearnerScaling, CommensurateChannelsArePooledAtTheWarmupsEnd) {
  // RawChain's hidden state in its own units: three channels with spreads of about 0.7 each.
  RowMatrixXd raw = RawChain(700, 9);
  raw.col(0) = (raw.col(0).array() - 1000.0) / 235.0;
  raw.col(1) = (raw.col(1).array() + 2.0) / 0.03;
  StreamingLearner l(Options(true));
  FeedTrajectory(l, raw, 0, 700, 37);
  ASSERT_NE(l.scaler(), nullptr);
  InputScaler want = InputScaler::Estimate(raw.topRows(kWarmup), raw.middleRows(1, kWarmup));
  EXPECT_NE(want.scale()[0], want.scale()[1]);  // estimated one by one, they differ
  want.PoolCommensurate(InputScaler::kCommensurateRatio);
  EXPECT_EQ(*l.scaler(), want);
  EXPECT_EQ(l.scaler()->scale()[0], l.scaler()->scale()[2]);
}

TEST(StreamingLearnerScaling, StateIsThatOfTheScaledStreamFedByHand) {
  const RowMatrixXd raw = RawChain(700, 9);
  StreamingLearner scaled(Options(true));
  FeedTrajectory(scaled, raw, 0, 700, 37);
  ASSERT_TRUE(scaled.ready());
  ASSERT_NE(scaled.scaler(), nullptr);
  // The scaler: the warm-up's x rows (states 0..W-1) and y rows (states 1..W), frozen.
  const InputScaler want = InputScaler::Estimate(raw.topRows(kWarmup), raw.middleRows(1, kWarmup));
  EXPECT_EQ(*scaled.scaler(), want);
  EXPECT_NEAR(want.scale()[0] / want.scale()[1], 235.0 / 0.03, 0.3 * 235.0 / 0.03);

  // An unscaled learner fed the stream scaled by that scaler by hand holds the same state bit
  // for bit (the scaled learner's bytes are its bytes, then the scaler's).
  RowMatrixXd z = raw;
  want.ApplyRows(z);
  StreamingLearner by_hand(Options(false));
  FeedTrajectory(by_hand, z, 0, 700, 37);
  io::Writer w;
  want.Serialize(w);
  // The scaler sits after the open run and before the forecast regression (bool + object,
  // state version 6).
  const std::string hand = Bytes(by_hand);
  io::Writer forecast;
  ASSERT_NE(by_hand.forecast(), nullptr);
  by_hand.forecast()->Serialize(forecast);
  const size_t tail = 1 + forecast.size();
  const std::string b = hand.substr(0, hand.size() - tail) + w.Release() + hand.substr(hand.size() - tail);
  // Except the episode rule's last state, which stays in the user's units: i64 warm-up pairs
  // (0), bool, string "p", string "", then the u64 count and the 3 doubles of the last state.
  const std::string a = Bytes(scaled);
  constexpr size_t kLast = 8 + 1 + 9 + 8 + 8;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a.compare(0, kLast, b, 0, kLast) == 0);
  EXPECT_TRUE(a.compare(kLast + 24, std::string::npos, b, kLast + 24, std::string::npos) == 0);
  EXPECT_EQ(std::memcmp(a.data() + kLast, raw.row(700).data(), 24), 0);  // raw
  EXPECT_EQ(std::memcmp(b.data() + kLast, z.row(700).data(), 24), 0);    // scaled
  EXPECT_EQ(scaled.sigma_selection().chosen, by_hand.sigma_selection().chosen);
  EXPECT_EQ(scaled.sigma_selection().candidates, by_hand.sigma_selection().candidates);
  // Sigma is chosen on the scaled channels: O(1), where the raw median distance is ~ 235.
  EXPECT_GT(scaled.sigma_selection().chosen, 0.1);
  EXPECT_LT(scaled.sigma_selection().chosen, 10.0);
  StreamingLearner unscaled(Options(false));
  FeedTrajectory(unscaled, raw, 0, 700, 37);
  EXPECT_GT(unscaled.sigma_selection().median_distance, 50.0);

  std::optional<StreamingLearnerSnapshot> snap = scaled.Snapshot();
  ASSERT_TRUE(snap.has_value());
  ASSERT_TRUE(snap->scaler.has_value());
  EXPECT_EQ(*snap->scaler, want);
}

TEST(StreamingLearnerScaling, SerializationContinuesBitForBitAndOldVersionsRefuseAScaler) {
  const RowMatrixXd raw = RawChain(500, 10);
  StreamingLearner uninterrupted(Options(true));
  FeedTrajectory(uninterrupted, raw, 0, 500, 25);
  const std::string want = Bytes(uninterrupted);
  for (int64_t stop : {50, 120, 300}) {
    StreamingLearner a(Options(true));
    FeedTrajectory(a, raw, 0, stop, 25);
    const std::string bytes = Bytes(a);
    io::Reader r(bytes, "test");
    absl::StatusOr<StreamingLearner> b =
        StreamingLearner::Deserialize(r, Options(true), StreamingLearner::kStateVersion, a.sigma_selection());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(r.remaining(), 0u);
    EXPECT_TRUE(Bytes(*b) == bytes) << stop;
    EXPECT_EQ(b->scaler() != nullptr, stop >= kWarmup);
    FeedTrajectory(*b, raw, stop, 500, 25);
    EXPECT_TRUE(Bytes(*b) == want) << stop;
  }
  // A version-4 state (written before scaling existed) cannot hold a scaled model.
  io::Reader r(want, "test");
  absl::StatusOr<StreamingLearner> old = StreamingLearner::Deserialize(r, Options(true), 4, {});
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(old.status().message().find("cannot hold an input scaler"), std::string::npos) << old.status();
  // An unscaled learner writes no scaler: without the forecast regression that follows (state
  // version 6), its bytes are those of version 4 and load as version 4, unchanged.
  StreamingLearner plain(Options(false));
  FeedTrajectory(plain, raw, 0, 300, 25);
  const std::string plain_bytes = Bytes(plain);
  io::Writer plain_forecast;
  ASSERT_NE(plain.forecast(), nullptr);
  plain.forecast()->Serialize(plain_forecast);
  const std::string v4_bytes = plain_bytes.substr(0, plain_bytes.size() - 1 - plain_forecast.size());
  io::Reader r4(v4_bytes, "test");
  absl::StatusOr<StreamingLearner> v4 = StreamingLearner::Deserialize(r4, Options(false), 4, plain.sigma_selection());
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(r4.remaining(), 0u);
  const std::string restored = Bytes(*v4);
  EXPECT_TRUE(restored.compare(0, v4_bytes.size(), v4_bytes) == 0);
  EXPECT_EQ(v4->scaler(), nullptr);
}

// Without sequence estimators, a warm-up ended by EndWarmup after w pairs is a warm-up of w
// pairs, bit for bit. (With them, the lag statistics and the latent accumulator start with the
// next batch's states: a warm-up that fills mid-batch hands them the state after its last pair.)
StreamingLearner::Options PairsOnly(bool scale, int warmup) {
  StreamingLearner::Options o = Options(scale, warmup);
  o.latent = false;
  o.lags.clear();
  return o;
}

TEST(StreamingLearnerScaling, EndWarmupIsAShorterWarmup) {
  const RowMatrixXd raw = RawChain(400, 11);
  for (bool scale : {false, true}) {
    StreamingLearner early(PairsOnly(scale, 1000));
    FeedTrajectory(early, raw, 0, 49, 7);
    const std::string before = Bytes(early);
    const absl::Status too_few = early.EndWarmup();
    EXPECT_EQ(too_few.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(too_few.message().find("holds 49 pairs, expected at least 50"), std::string::npos) << too_few;
    EXPECT_TRUE(Bytes(early) == before);
    FeedTrajectory(early, raw, 49, 77, 7);
    ASSERT_TRUE(early.EndWarmup().ok());
    EXPECT_TRUE(early.ready());
    EXPECT_EQ(early.sigma_selection().warmup_pairs, 77u);
    EXPECT_EQ(early.EndWarmup().code(), absl::StatusCode::kFailedPrecondition);  // ended already
    FeedTrajectory(early, raw, 77, 400, 7);

    // The same as a model whose warm-up was 77 pairs long.
    StreamingLearner short_warmup(PairsOnly(scale, 77));
    FeedTrajectory(short_warmup, raw, 0, 400, 7);
    EXPECT_TRUE(Bytes(early) == Bytes(short_warmup)) << scale;
    EXPECT_EQ(early.sigma_selection().chosen, short_warmup.sigma_selection().chosen);
  }
  // With the sequence estimators, the end of the warm-up is a function of the pairs and of where
  // EndWarmup was called: stopped and restored around it, the learner continues bit for bit.
  StreamingLearner live(Options(true, 1000));
  FeedTrajectory(live, raw, 0, 90, 30);
  StreamingLearner stopped = *[&] {
    const std::string bytes = Bytes(live);
    io::Reader r(bytes, "test");
    return StreamingLearner::Deserialize(r, Options(true, 1000), StreamingLearner::kStateVersion, {});
  }();
  for (StreamingLearner* l : {&live, &stopped}) {
    ASSERT_TRUE(l->EndWarmup().ok());
    FeedTrajectory(*l, raw, 90, 400, 30);
  }
  EXPECT_TRUE(Bytes(live) == Bytes(stopped));
  EXPECT_EQ(*live.scaler(), InputScaler::Estimate(raw.topRows(90), raw.middleRows(1, 90)));
}

TEST(StreamingLearnerScaling, OptionsRefuseScalingWithAFixedSigma) {
  StreamingLearner::Options o = Options(true);
  o.cme.sigma = 0.5;
  const absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("scale_inputs needs sigma auto"), std::string::npos) << s;
}

}  // namespace
}  // namespace cmestream
