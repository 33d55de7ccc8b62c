// Input conditioning through the real daemon (service::Daemon in-process, generated stubs):
// ModelConfig.scale (docs/algorithms.md §1.13) on an 8-channel stream whose channel scales run
// from 0.03 to 235, the end of the warm-up by an explicit Refresh, replies in the user's units.
// Ground truth: the hidden four-well diffusion's transfer-operator eigenvalues
// (systems::FourWellEigenvalues), the rows the daemon was sent, numpy-free quantiles.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "core/stream/input_scaler.h"
#include "core/systems/four_well.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/daemon.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;

class InputScalingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ =
        std::filesystem::temp_directory_path() / ("cmestreamd-scaling-" + std::to_string(::getpid()) + "-" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    service::DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = data_dir_.string();
    options.refresh_interval_seconds = 3600;  // views only on explicit Refresh
    options.scheduler_tick_seconds = 0.01;
    options.shutdown_grace_seconds = 1;
    absl::StatusOr<std::unique_ptr<service::Daemon>> daemon = service::Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto channel = grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials());
    models_ = v1::ModelService::NewStub(channel);
    ingest_ = v1::IngestService::NewStub(channel);
    query_ = v1::QueryService::NewStub(channel);
  }
  void TearDown() override {
    if (daemon_) daemon_->Shutdown();
    std::filesystem::remove_all(data_dir_);
  }

  grpc::Status Create(const v1::ModelConfig& config) {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    *req.mutable_config() = config;
    v1::ModelInfo ignored;
    return models_->CreateModel(&ctx, req, &ignored);
  }
  v1::ModelInfo Describe(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    v1::ModelInfo info;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &info).ok());
    return info;
  }
  grpc::Status Refresh(const std::string& model) {
    grpc::ClientContext ctx;
    v1::RefreshRequest req;
    req.set_model(model);
    req.set_wait(true);
    v1::RefreshResponse resp;
    return query_->Refresh(&ctx, req, &resp);
  }
  // States first..last of `s` in trajectory batches of `chunk` pairs (each repeats the last
  // state of the previous one).
  void IngestStates(const std::string& model, const RowMatrixXd& s, int64_t first, int64_t last, int64_t chunk) {
    for (int64_t b = first; b < last; b += chunk) {
      v1::IngestBatch batch;
      batch.set_model(model);
      batch.set_producer_id("p");
      batch.set_offset(static_cast<uint64_t>(b));
      batch.set_episode_id("e");
      for (int64_t t = b; t <= std::min(last, b + chunk); ++t) {
        for (int64_t j = 0; j < s.cols(); ++j) batch.add_states(s(t, j));
      }
      grpc::ClientContext ctx;
      v1::IngestAck ack;
      grpc::Status st = ingest_->IngestOne(&ctx, batch, &ack);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<service::Daemon> daemon_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::QueryService::Stub> query_;
};

// The four-well diffusion seen through 8 sensors: channel k = s_k g_k(x) + o_k + noise, with
// monotone g_k (so every channel tells the well) and scales s_k from 0.03 to 235.
constexpr int kChannels = 8;
const double kScales[kChannels] = {0.03, 0.4, 2.0, 7.5, 18.0, 60.0, 120.0, 235.0};

RowMatrixXd EightChannels(const systems::Transitions& data, uint64_t seed) {
  const int64_t n = data.x.rows() + 1;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  RowMatrixXd s(n, kChannels);
  for (int64_t t = 0; t < n; ++t) {
    const double x = t < data.x.rows() ? data.x(t, 0) : data.y(t - 1, 0);
    const double g[kChannels] = {x, std::tanh(x), x, x * x * x / 4, std::sin(0.5 * x), x, std::tanh(2 * x), x};
    for (int k = 0; k < kChannels; ++k) s(t, k) = kScales[k] * (g[k] + 0.02 * z(rng)) + 10.0 * k;
  }
  return s;
}

TEST_F(InputScalingTest, EightChannelsFrom003To235KeepTheFourWellTimescale) {
  const systems::FourWellOptions fw;
  constexpr int64_t kPairs = 30000;
  const systems::Transitions data = systems::SimulateFourWell(kPairs, 17, fw);
  const RowMatrixXd s = EightChannels(data, 3);
  v1::ModelConfig c;
  c.set_name("pump");
  c.set_dim(kChannels);
  c.set_dt(fw.tau);
  c.set_max_dict(400);
  c.set_auto_sigma_warmup(1000);
  ASSERT_TRUE(Create(c).ok());
  IngestStates("pump", s, 0, kPairs, 5000);
  ASSERT_TRUE(Refresh("pump").ok());
  const v1::ModelInfo info = Describe("pump");
  EXPECT_EQ(info.config().scale(), "auto");  // the default for sigma auto

  // The scaler: the warm-up's rows (states 0..999 as x, 1..1000 as y), frozen.
  const InputScaler want = InputScaler::Estimate(s.topRows(1000), s.middleRows(1, 1000));
  const v1::InputScaling& in = info.input_scaling();
  EXPECT_EQ(in.mode(), "auto");
  ASSERT_TRUE(in.frozen());
  ASSERT_EQ(in.center_size(), kChannels);
  ASSERT_EQ(in.scale_size(), kChannels);
  for (int k = 0; k < kChannels; ++k) {
    EXPECT_EQ(in.center(k), want.center()[k]) << k;
    EXPECT_EQ(in.scale(k), want.scale()[k]) << k;
    EXPECT_EQ(in.spread(k), "iqr") << k;
  }
  EXPECT_GT(in.scale(7) / in.scale(0), 1000.0);  // the raw channels differ by > 3 decades

  // Sigma chosen on the scaled channels: O(1) against their unit spreads (the median pairwise
  // distance of 8 unit channels is a few units), not the raw channels' hundreds.
  const v1::SigmaSelection& sigma = info.sigma_selection();
  EXPECT_TRUE(sigma.automatic());
  EXPECT_EQ(sigma.warmup_pairs(), 1000u);
  EXPECT_GT(sigma.median_distance(), 1.0);
  EXPECT_LT(sigma.median_distance(), 10.0);
  EXPECT_GT(sigma.chosen(), 0.1);
  EXPECT_LT(sigma.chosen(), 5.0);

  // The slowest Koopman timescale: the hidden diffusion's, within the 10 % the 1-D four-well
  // test allows on unscaled data (test_daemon_views.cc ContinuousFourWellClusters).
  grpc::ClientContext kctx;
  v1::KoopmanRequest kreq;
  kreq.set_model("pump");
  kreq.set_top(4);
  v1::KoopmanResponse k;
  ASSERT_TRUE(query_->GetKoopman(&kctx, kreq, &k).ok());
  ASSERT_GE(k.timescales_size(), 2);
  EXPECT_TRUE(k.stationary(0));
  const VectorXd ev = systems::FourWellEigenvalues(4, fw);
  const double truth = -fw.tau / std::log(ev[1]);
  EXPECT_NEAR(k.timescales(1) / truth, 1.0, 0.10) << "slowest " << k.timescales(1) << " truth " << truth;
  std::printf(
      "8-channel four-well, scaled: sigma %.4f (median distance %.4f), slowest timescale %.4f, truth %.4f, "
      "estimator %s, %u atoms\n",
      sigma.chosen(), sigma.median_distance(), k.timescales(1), truth, k.spectrum().estimator().c_str(),
      info.dictionary_size());

  // Replies in the user's units: every X atom is one of the states sent (scaled, then
  // inverted: equal up to two roundings).
  grpc::ClientContext dctx;
  v1::DictionaryRequest dreq;
  dreq.set_model("pump");
  v1::DictionaryResponse dict;
  ASSERT_TRUE(query_->GetDictionary(&dctx, dreq, &dict).ok());
  const int64_t atoms = dict.x_atoms_size() / kChannels;
  ASSERT_GT(atoms, 10);
  for (int64_t a = 0; a < atoms; a += 7) {
    double best = INFINITY;
    for (int64_t t = 0; t <= kPairs && best > 0; ++t) {
      double d = 0;
      for (int k = 0; k < kChannels; ++k)
        d = std::max(d, std::abs(dict.x_atoms(a * kChannels + k) - s(t, k)) / kScales[k]);
      best = std::min(best, d);
    }
    EXPECT_LT(best, 1e-9) << "atom " << a;
  }
  // Predict: points in the user's units in, predictions in the user's units out; the
  // conditional mean from the middle of a well stays in that well's range on every channel.
  grpc::ClientContext pctx;
  v1::PredictRequest preq;
  preq.set_model("pump");
  int64_t in_well = 0;
  while (std::abs(data.x(in_well, 0) - 0.5) > 0.05) ++in_well;
  for (int k = 0; k < kChannels; ++k) preq.add_points(s(in_well, k));
  v1::PredictResponse pred;
  ASSERT_TRUE(query_->Predict(&pctx, preq, &pred).ok());
  ASSERT_EQ(pred.predictions_size(), kChannels);
  for (int k = 0; k < kChannels; ++k) {
    EXPECT_NEAR((pred.predictions(k) - 10.0 * k) / kScales[k], (s(in_well, k) - 10.0 * k) / kScales[k], 0.5) << k;
  }

  // The same stream unscaled (--scale none): sigma is chosen on the raw channels, in the
  // hundreds of the largest one.
  v1::ModelConfig raw = c;
  raw.set_name("raw");
  raw.set_scale("none");
  ASSERT_TRUE(Create(raw).ok());
  IngestStates("raw", s, 0, 1000, 500);
  const v1::ModelInfo raw_info = Describe("raw");
  EXPECT_FALSE(raw_info.config().has_scale());  // "none" is stored unset
  EXPECT_EQ(raw_info.input_scaling().mode(), "none");
  EXPECT_FALSE(raw_info.input_scaling().frozen());
  EXPECT_GT(raw_info.sigma_selection().median_distance(), 50.0);
  std::printf("8-channel four-well, unscaled: sigma %.4f (median distance %.4f)\n", raw_info.sigma_selection().chosen(),
              raw_info.sigma_selection().median_distance());
}

TEST_F(InputScalingTest, RefreshEndsAShortWarmupAndConfigsAreChecked) {
  const systems::FourWellOptions fw;
  const systems::Transitions data = systems::SimulateFourWell(400, 5, fw);
  const RowMatrixXd s = EightChannels(data, 4);
  v1::ModelConfig c;
  c.set_name("short");
  c.set_dim(kChannels);
  c.set_auto_sigma_warmup(1000);
  ASSERT_TRUE(Create(c).ok());
  IngestStates("short", s, 0, 40, 40);
  grpc::Status early = Refresh("short");  // 40 pairs: too few to end the warm-up
  EXPECT_EQ(early.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(early.error_message().find("40 of 1000 warm-up pairs buffered; a refresh ends the warm-up from 50"),
            std::string::npos)
      << early.error_message();
  IngestStates("short", s, 40, 300, 100);
  ASSERT_TRUE(Refresh("short").ok());
  const v1::ModelInfo info = Describe("short");
  EXPECT_EQ(info.sigma_selection().warmup_pairs(), 300u);
  EXPECT_EQ(info.samples(), 300u);
  EXPECT_EQ(info.pending_warmup(), 0u);
  EXPECT_TRUE(info.input_scaling().frozen());
  const InputScaler want = InputScaler::Estimate(s.topRows(300), s.middleRows(1, 300));
  for (int k = 0; k < kChannels; ++k) EXPECT_EQ(info.input_scaling().scale(k), want.scale()[k]);

  // Bad configs: clear errors, nothing created.
  v1::ModelConfig bad = c;
  bad.set_name("bad");
  bad.set_sigma(0.5);
  bad.set_scale("auto");
  grpc::Status refused = Create(bad);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("field scale is 'auto'"), std::string::npos) << refused.error_message();
  bad.clear_sigma();
  bad.set_scale("robust");
  refused = Create(bad);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("expected 'auto' or 'none'"), std::string::npos) << refused.error_message();
  // An explicit sigma implies "none".
  v1::ModelConfig fixed = c;
  fixed.set_name("fixed");
  fixed.set_sigma(0.5);
  ASSERT_TRUE(Create(fixed).ok());
  EXPECT_EQ(Describe("fixed").input_scaling().mode(), "none");
  // A client cannot write the log's end-of-warm-up marker.
  v1::IngestBatch marker;
  marker.set_model("short");
  marker.set_end_warmup(true);
  marker.add_states(0);
  grpc::ClientContext ctx;
  v1::IngestAck ack;
  grpc::Status st = ingest_->IngestOne(&ctx, marker, &ack);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("field end_warmup is set"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace cmestream
