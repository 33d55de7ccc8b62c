// Limits and backpressure of cmestreamd: --max-batch-pairs, --max-models,
// --max-dim, --max-queued-batches, each with its status code and a message naming the limit
// and its flag, and nothing applied on refusal. The daemon runs in-process on loopback port 0.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "service/engine/limits.h"
#include "service/engine/memory_budget.h"
#include "service/engine/model_config.h"
#include "service/flags.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;
using ::testing::HasSubstr;

class LimitsTest : public ::testing::Test {
 protected:
  void Start(const service::LimitOptions& limits) {
    // One flat directory per test: a parameterized test's name ("Name/0") has a '/', which made
    // a nested directory whose parent TearDown left behind.
    std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test_name.begin(), test_name.end(), '/', '_');
    data_dir_ =
        std::filesystem::temp_directory_path() / ("cmestreamd-limits-" + std::to_string(::getpid()) + "-" + test_name);
    service::DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = data_dir_.string();
    options.refresh_interval_seconds = 3600;
    options.shutdown_grace_seconds = 1;
    options.limits = limits;
    absl::StatusOr<std::unique_ptr<service::Daemon>> daemon = service::Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->grpc_address(), grpc::InsecureChannelCredentials());
    models_ = v1::ModelService::NewStub(channel_);
    ingest_ = v1::IngestService::NewStub(channel_);
  }
  void TearDown() override {
    // Stop the daemon (its shutdown snapshot is the last write to the data dir), then remove it.
    if (daemon_) daemon_->Shutdown();
    daemon_.reset();
    if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_);
  }
  grpc::Status Create(const std::string& name, uint32_t dim, uint32_t max_dict = 1000) {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    req.mutable_config()->set_name(name);
    req.mutable_config()->set_dim(dim);
    req.mutable_config()->set_sigma(0.3);
    req.mutable_config()->set_max_dict(max_dict);
    v1::ModelInfo info;
    return models_->CreateModel(&ctx, req, &info);
  }
  uint64_t Samples(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    v1::ModelInfo info;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &info).ok());
    return info.samples();
  }
  // n pairs of a 1-D rotation-like map on [0, 1): x_i = frac(i * golden), y = frac(x + 0.1).
  static v1::IngestBatch Pairs(const std::string& model, int n, int64_t seed = 0) {
    v1::IngestBatch b;
    b.set_model(model);
    for (int i = 0; i < n; ++i) {
      const double x = std::fmod((i + seed) * 0.6180339887, 1.0);
      b.add_x(x);
      b.add_y(std::fmod(x + 0.1, 1.0));
    }
    return b;
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<service::Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
};

// --max-memory above what the host (or its cgroup) has could never refuse a model the machine
// cannot hold: the flag is refused, naming both sizes.
TEST(MemoryBudgetFlag, ABudgetAboveTheHostsMemoryIsRefused) {
  const double host = service::HostMemoryLimit();
  ASSERT_GT(host, 0) << "neither a cgroup limit nor physical memory could be read";
  const absl::Status over = service::CheckMemoryBudgetFitsHost(2 * host, host);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.message()),
              ::testing::HasSubstr("but this host (or its cgroup memory limit) has " + service::FormatBytes(host)));
  EXPECT_TRUE(service::CheckMemoryBudgetFitsHost(host, host).ok());
  EXPECT_TRUE(service::CheckMemoryBudgetFitsHost(1e18, 0).ok());  // host unknown: nothing to compare with
  auto flags = service::ParseFlags({"--max-memory", "100T"});     // no test machine has 100 TiB
  ASSERT_FALSE(flags.ok());
  EXPECT_THAT(std::string(flags.status().message()), ::testing::HasSubstr("flag --max-memory is 100"));
  auto fine = service::ParseFlags({"--max-memory", "64M"});
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->options.limits.max_memory_bytes, 64.0 * (1 << 20));
}

TEST_F(LimitsTest, OversizedBatchIsRefusedAndNothingApplied) {
  service::LimitOptions limits;
  limits.max_batch_pairs = 10;
  Start(limits);
  ASSERT_TRUE(Create("m", 1).ok());
  v1::IngestAck ack;
  {
    grpc::ClientContext ctx;
    grpc::Status s = ingest_->IngestOne(&ctx, Pairs("m", 11), &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("11 pairs"));
    EXPECT_THAT(s.error_message(), HasSubstr("--max-batch-pairs 10"));
  }
  EXPECT_EQ(Samples("m"), 0u);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(ingest_->IngestOne(&ctx, Pairs("m", 10), &ack).ok());
  }
  EXPECT_EQ(Samples("m"), 10u);
  // The stream: the first batch is applied, the oversized second ends the stream.
  grpc::ClientContext ctx;
  auto stream = ingest_->Ingest(&ctx);
  ASSERT_TRUE(stream->Write(Pairs("m", 4)));
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.pairs_applied(), 4u);
  stream->Write(Pairs("m", 12));
  stream->WritesDone();
  while (stream->Read(&ack)) {
  }
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("batch 1: 12 pairs"));
  EXPECT_EQ(Samples("m"), 14u);
}

TEST_F(LimitsTest, TooManyModelsIsResourceExhaustedUntilOneIsDeleted) {
  service::LimitOptions limits;
  limits.max_models = 2;
  Start(limits);
  ASSERT_TRUE(Create("a", 1).ok());
  ASSERT_TRUE(Create("b", 1).ok());
  grpc::Status s = Create("c", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("holds 2 models"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max-models 2"));
  grpc::ClientContext ctx;
  v1::DeleteModelRequest del;
  del.set_name("a");
  v1::DeleteModelResponse resp;
  ASSERT_TRUE(models_->DeleteModel(&ctx, del, &resp).ok());
  EXPECT_TRUE(Create("c", 1).ok());
}

TEST_F(LimitsTest, DimAboveTheFlagIsInvalidArgument) {
  service::LimitOptions limits;
  limits.max_dim = 8;
  Start(limits);
  grpc::Status s = Create("wide", 9);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("field dim is 9"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max-dim 8"));
  EXPECT_TRUE(Create("ok", 8).ok());
}

// A 512-dimensional model with every default creates: the latent model is off, so the
// reservoir's memory bound (3 * reservoir * dim <= 3e7 doubles) does not apply, and the
// reservoir costs nothing. With the latent model on, the bound refuses a reservoir too large
// for the dimension (naming the field and why) and accepts one that fits.
TEST_F(LimitsTest, DisabledEstimatorsNeverRefuseAModel) {
  Start(service::LimitOptions{});
  auto create = [&](const std::string& name, uint32_t latent, std::optional<uint32_t> reservoir, v1::ModelInfo* info) {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    req.mutable_config()->set_name(name);
    req.mutable_config()->set_dim(512);
    if (latent > 0) req.mutable_config()->set_latent_states(latent);
    if (reservoir) req.mutable_config()->set_reservoir(*reservoir);
    return models_->CreateModel(&ctx, req, info);
  };
  v1::ModelInfo info;
  grpc::Status s = create("g", 0, std::nullopt, &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.config().latent_states(), 0u);
  EXPECT_EQ(info.config().reservoir(), 1953u);  // the default, min(100000, 1e6 / dim): unused
  // The reservoir of a model without the latent model costs no memory.
  v1::ModelConfig small = info.config();
  small.set_reservoir(1);
  EXPECT_EQ(service::EstimateModelBytes(small), service::EstimateModelBytes(info.config()));
  // 1,500 pairs in 512 dimensions are learned (sigma auto chosen after 1,000), in batches of
  // 250 (2 MB each).
  for (int first = 0; first < 1500; first += 250) {
    v1::IngestBatch b;
    b.set_model("g");
    for (int i = first; i < first + 250; ++i) {
      for (int j = 0; j < 512; ++j) b.add_x(std::sin(0.01 * i + j));
      for (int j = 0; j < 512; ++j) b.add_y(std::sin(0.01 * (i + 1) + j));
    }
    grpc::ClientContext ctx;
    v1::IngestAck ack;
    const grpc::Status st = ingest_->IngestOne(&ctx, b, &ack);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(Samples("g"), 1500u);

  s = create("big", 3, 20000, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("field reservoir is 20000, expected 1..19531"));
  EXPECT_THAT(s.error_message(), HasSubstr("for a latent model"));
  s = create("fits", 3, 1000, &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // The default reservoir fits every dimension: min(100000, 1e6 / dim) triples.
  s = create("default", 3, std::nullopt, &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.config().reservoir(), 1953u);
  // A reservoir below 1 is refused whether or not the latent model runs.
  s = create("zero", 0, 0, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("field reservoir is 0, expected >= 1"));
}

// Deterministic queue accounting: Q waiting + 1 applying are admitted, the next is refused
// with the hint; releasing a place admits again.
TEST(IngestQueueTest, AdmitsOneApplyingPlusQWaiting) {
  service::LimitOptions limits;
  limits.max_queued_batches = 2;
  limits.retry_after_ms = 250;
  service::IngestQueue queue(limits);
  std::vector<service::IngestQueue::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    auto t = queue.Admit("m");
    ASSERT_TRUE(t.ok()) << i;
    held.push_back(*std::move(t));
  }
  EXPECT_EQ(queue.InFlight("m"), 3);
  auto refused = queue.Admit("m");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("2 batches already wait"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max-queued-batches 2"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("retry after 250 ms"));
  EXPECT_TRUE(queue.Admit("other").ok());  // other models are not affected
  held.pop_back();
  EXPECT_EQ(queue.InFlight("m"), 2);
  EXPECT_TRUE(queue.Admit("m").ok());
  held.clear();
  EXPECT_EQ(queue.InFlight("m"), 0);
}

// A flood of concurrent batches into one model with no waiting allowed: some are refused with
// RESOURCE_EXHAUSTED and the retry-after-ms trailer; every accepted batch is applied whole,
// every refused one not at all (sample count = accepted pairs exactly).
TEST_F(LimitsTest, FullQueueIsResourceExhaustedWithRetryHint) {
  service::LimitOptions limits;
  limits.max_queued_batches = 0;
  limits.retry_after_ms = 40;
  Start(limits);
  ASSERT_TRUE(Create("busy", 1, /*max_dict=*/200).ok());
  constexpr int kThreads = 6, kBatchesPerThread = 3, kPairs = 20000;
  std::atomic<int> accepted{0}, refused{0}, other{0}, hinted{0}, named{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatchesPerThread; ++b) {
        grpc::ClientContext ctx;
        v1::IngestAck ack;
        grpc::Status s = ingest_->IngestOne(&ctx, Pairs("busy", kPairs, t * 100 + b), &ack);
        if (s.ok()) {
          ++accepted;
        } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++refused;
          const auto& trailers = ctx.GetServerTrailingMetadata();
          auto it = trailers.find(service::kRetryAfterMetadataKey);
          if (it != trailers.end() && std::string(it->second.data(), it->second.size()) == "40") ++hinted;
          if (s.error_message().find("--max-queued-batches 0") != std::string::npos) ++named;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0) << "6 threads x 3 batches of 20000 pairs never overlapped";
  EXPECT_GT(accepted.load(), 0);
  EXPECT_EQ(hinted.load(), refused.load());
  EXPECT_EQ(named.load(), refused.load());
  EXPECT_EQ(Samples("busy"), static_cast<uint64_t>(accepted.load()) * kPairs);
}

// Learning runs on the ingest pool, so the gRPC threads only validate and queue: with many
// concurrent clients a model's queue fills at ANY --max-queued-batches, and the refusal carries
// the retry hint (before the ingest pool the handlers blocked on the learner lock, the callback
// threads ran out, and the hint never fired at 1..4). Every accepted batch is applied whole,
// every refused one not at all, and a GetModel issued while the flood runs answers before the
// flood ends.
class QueueDepthTest : public LimitsTest, public ::testing::WithParamInterface<int> {};

TEST_P(QueueDepthTest, ManyClientsFillTheQueueAndGetTheRetryHint) {
  service::LimitOptions limits;
  limits.max_queued_batches = GetParam();
  limits.retry_after_ms = 25;
  Start(limits);
  ASSERT_TRUE(Create("busy", 1, /*max_dict=*/200).ok());
  constexpr int kClients = 48, kPairs = 20000;
  std::atomic<int> accepted{0}, refused{0}, other{0}, hinted{0}, named{0}, finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      grpc::ClientContext ctx;
      v1::IngestAck ack;
      grpc::Status s = ingest_->IngestOne(&ctx, Pairs("busy", kPairs, t * 7), &ack);
      if (s.ok()) {
        ++accepted;
        EXPECT_EQ(ack.pairs_applied(), static_cast<uint64_t>(kPairs));
      } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++refused;
        const auto& trailers = ctx.GetServerTrailingMetadata();
        auto it = trailers.find(service::kRetryAfterMetadataKey);
        if (it != trailers.end() && std::string(it->second.data(), it->second.size()) == "25") ++hinted;
        if (s.error_message().find("--max-queued-batches " + std::to_string(GetParam())) != std::string::npos) ++named;
      } else {
        ++other;
      }
      ++finished;
    });
  }
  // Admin reads are answered while the clients' batches are still being learned.
  bool answered_during = false;
  for (int i = 0; i < 2000 && finished.load() < kClients; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetModelRequest req;
    req.set_name("busy");
    v1::ModelInfo info;
    ASSERT_TRUE(models_->GetModel(&ctx, req, &info).ok());
    if (finished.load() < kClients) answered_during = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0) << kClients << " concurrent clients never filled a queue of " << GetParam();
  EXPECT_GE(accepted.load(), GetParam() + 1);  // one applying + Q waiting were admitted at least once
  EXPECT_EQ(hinted.load(), refused.load());
  EXPECT_EQ(named.load(), refused.load());
  EXPECT_EQ(accepted.load() + refused.load(), kClients);
  EXPECT_EQ(Samples("busy"), static_cast<uint64_t>(accepted.load()) * kPairs);
  EXPECT_TRUE(answered_during);
}

INSTANTIATE_TEST_SUITE_P(Depths, QueueDepthTest, ::testing::Values(1, 4));

TEST(LimitFlagsTest, ParsedValidatedAndNamed) {
  auto f =
      service::ParseFlags({"--max-batch-pairs", "5", "--max-models=3", "--max-dim", "16", "--max-queued-batches=0"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->options.limits.max_batch_pairs, 5);
  EXPECT_EQ(f->options.limits.max_models, 3);
  EXPECT_EQ(f->options.limits.max_dim, 16);
  EXPECT_EQ(f->options.limits.max_queued_batches, 0);
  auto bad = service::ParseFlags({"--max-dim", "5000"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--max-dim is 5000, expected 1..4096"));
  bad = service::ParseFlags({"--max-models", "2.5"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--max-models is 2.5, expected an integer"));
  bad = service::ParseFlags({"--max-batch-pairs", "0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--max-batch-pairs is 0, expected >= 1"));
}

// The memory budget counts every matrix a continuous model grows to at max_dict M: at least the
// CME's five M x M matrices and the spectral moments' 12 (M+1)^2 (C00, C01, C11 per fold, for
// the live and the serving epoch; core/spectral/spectral_moments.h), each of doubles.
// A config stored before `reduce` existed (dim > 64, sigma auto, a short warm-up) loads unreduced:
// the new model's default (reduce 32, warm-up >= 320) does not apply to it.
TEST(StoredConfigTest, AWideModelStoredBeforeReductionLoadsUnreduced) {
  v1::ModelConfig c;
  c.set_name("old");
  c.set_dim(100);
  c.set_sigma(0);
  c.set_auto_sigma_warmup(100);
  absl::StatusOr<v1::ModelConfig> stored = service::NormalizeStoredModelConfig(c, service::ConfigDefaults{});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_FALSE(stored->has_reduce());
  EXPECT_EQ(stored->auto_sigma_warmup(), 100u);
  EXPECT_EQ(service::LearnerOptionsFor(*stored).reduce, 0);
  // The same config created now reduces, and its warm-up must hold 10 pairs per direction.
  const absl::StatusOr<v1::ModelConfig> created = service::NormalizeModelConfig(c, service::ConfigDefaults{});
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find(">= 320 with reduce 32"), std::string::npos) << created.status();
  c.clear_auto_sigma_warmup();
  const absl::StatusOr<v1::ModelConfig> fresh = service::NormalizeModelConfig(c, service::ConfigDefaults{});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->reduce(), 32u);
  EXPECT_EQ(fresh->auto_sigma_warmup(), 1000u);
  EXPECT_FALSE(fresh->has_scale());  // a reduced model is unscaled unless asked
}

// Random features sized to the estimator's input (learner_options::DefaultRffFeatures and
// DefaultForecastFeatures): 64 embedding and 32 forecast features for one value, 256 and 128
// otherwise (delays and a second channel count); min(N, 128) forecast features when N is given; a
// config stored before forecast_features existed loads with min(N, 128), what it ran with; a
// discrete model refuses the field.
TEST(StoredConfigTest, RandomFeaturesAreSizedToTheInputAndOldConfigsLoadAsTheyRan) {
  auto normalized = [](uint32_t dim, uint32_t delays, int rff) {
    v1::ModelConfig c;
    c.set_name("m");
    c.set_dim(dim);
    if (delays > 1) c.set_delays(delays);
    if (rff > 0) c.set_rff_features(static_cast<uint32_t>(rff));
    absl::StatusOr<v1::ModelConfig> n = service::NormalizeModelConfig(c, service::ConfigDefaults{});
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : v1::ModelConfig{};
  };
  const v1::ModelConfig scalar = normalized(1, 1, 0);
  EXPECT_EQ(scalar.rff_features(), 64u);
  EXPECT_EQ(scalar.forecast_features(), 32u);
  EXPECT_EQ(service::LearnerOptionsFor(scalar).rff_features, 64);
  EXPECT_EQ(service::LearnerOptionsFor(scalar).forecast_features, 32);
  EXPECT_EQ(normalized(2, 1, 0).rff_features(), 256u);
  EXPECT_EQ(normalized(2, 1, 0).forecast_features(), 128u);
  EXPECT_EQ(normalized(1, 12, 0).rff_features(), 256u);  // a delay window of 12 values
  EXPECT_EQ(normalized(1, 12, 0).forecast_features(), 128u);
  EXPECT_EQ(normalized(1, 1, 256).forecast_features(), 128u);  // N given: min(N, 128)
  const v1::ModelConfig given = normalized(1, 1, 16);
  EXPECT_EQ(given.rff_features(), 16u);
  EXPECT_EQ(given.forecast_features(), 16u);

  v1::ModelConfig old;  // as stored before the field: N given (normalized then), no F
  old.set_name("old");
  old.set_dim(1);
  old.set_rff_features(256);
  absl::StatusOr<v1::ModelConfig> stored = service::NormalizeStoredModelConfig(old, service::ConfigDefaults{});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->rff_features(), 256u);
  EXPECT_EQ(stored->forecast_features(), 128u);

  v1::ModelConfig discrete;
  discrete.set_name("d");
  discrete.set_num_states(4);
  discrete.set_forecast_features(8);
  EXPECT_FALSE(service::NormalizeModelConfig(discrete, service::ConfigDefaults{}).ok());
}

TEST(MemoryBudgetTest, EstimateIncludesTheSpectralMoments) {
  for (int m : {100, 1000, 2000}) {
    v1::ModelConfig c;
    c.set_name("m");
    c.set_dim(2);
    c.set_sigma(0.5);
    c.set_max_dict(m);
    absl::StatusOr<v1::ModelConfig> n = service::NormalizeModelConfig(c, service::ConfigDefaults{});
    ASSERT_TRUE(n.ok()) << n.status();
    const double mm = m, spectral = 12 * (mm + 1) * (mm + 1) * 8, cme = 5 * mm * mm * 8;
    // The view: the CME snapshot and Koopman decomposition over the atoms (measured up to 1.3
    // atoms^2 doubles: tests/service/engine/test_memory_budget.cc), counted as 1.5.
    const double koopman_view = 1.5 * mm * mm * 8;
    const double estimate = service::EstimateModelBytes(*n);
    EXPECT_GE(estimate, spectral + cme + koopman_view) << "max_dict " << m;
    // and not wildly above it (RFF moments, counts, buffers: < 40 MB at the defaults).
    EXPECT_LT(estimate, spectral + cme + koopman_view + 40e6) << "max_dict " << m;
  }
}

// ... and the lag statistics: per lag, 17 blocks (16 + the open one) of two D x D sums, D = P
// one-hot ids for a discrete model (core/validation/lag_statistics.h). Four lags of a 128-state
// model add 17 x 4 x 2 x 128^2 doubles = 17.8 MB over the same model with one lag.
TEST(MemoryBudgetTest, EstimateGrowsWithTheNumberOfLags) {
  auto estimate = [](std::vector<int> lags) {
    v1::ModelConfig c;
    c.set_name("d");
    c.set_num_states(128);
    for (int l : lags) c.add_lags(l);
    absl::StatusOr<v1::ModelConfig> n = service::NormalizeModelConfig(c, service::ConfigDefaults{});
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? service::EstimateModelBytes(*n) : 0.0;
  };
  const double one = estimate({1}), four = estimate({1, 2, 5, 10});
  EXPECT_NEAR(four - one, 17.0 * 3 * 2 * 128 * 128 * 8, 1.0);
}

}  // namespace
}  // namespace cmestream
