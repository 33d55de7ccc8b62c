// Integration tests of cmestreamd: the real daemon (service::Daemon) in-process on loopback
// port 0, driven through the generated gRPC stubs. Numbers are asserted against ground truth:
// exact sample counts, the Duffing flow, the Koopman spectrum's known structure.
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "core/systems/duffing.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "tests/integration/daemon_test_util.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;
using ::cmestream::testing::AppendRows;
using ::cmestream::testing::HttpGet;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ =
        std::filesystem::temp_directory_path() / ("cmestreamd-test-" + std::to_string(::getpid()) + "-" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    service::DaemonOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.data_dir = data_dir_.string();
    // Views only on explicit Refresh, so "no view yet" is deterministic.
    options.refresh_interval_seconds = 3600;
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

  grpc::Status Create(v1::ModelConfig config, v1::ModelInfo* info = nullptr) {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    *req.mutable_config() = std::move(config);
    v1::ModelInfo ignored;
    return models_->CreateModel(&ctx, req, info ? info : &ignored);
  }
  // A 2-D model with a fixed sigma (no warm-up).
  void CreateFixed(const std::string& name, double sigma = 0.4, double dt = 0.25) {
    v1::ModelConfig c;
    c.set_name(name);
    c.set_dim(2);
    c.set_sigma(sigma);
    c.set_dt(dt);
    ASSERT_TRUE(Create(c).ok());
  }
  v1::ModelInfo Describe(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    v1::ModelInfo info;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &info).ok());
    return info;
  }
  grpc::Status IngestOne(const v1::IngestBatch& batch, v1::IngestAck* ack) {
    grpc::ClientContext ctx;
    return ingest_->IngestOne(&ctx, batch, ack);
  }
  static v1::IngestBatch PairsBatch(const std::string& model, const systems::Transitions& t, int64_t begin, int64_t end,
                                    const std::string& producer = "", uint64_t offset = 0) {
    v1::IngestBatch b;
    b.set_model(model);
    b.set_producer_id(producer);
    b.set_offset(offset);
    AppendRows(t.x.middleRows(begin, end - begin), b.mutable_x());
    AppendRows(t.y.middleRows(begin, end - begin), b.mutable_y());
    return b;
  }
  grpc::Status RefreshWait(const std::string& model, v1::RefreshResponse* resp) {
    grpc::ClientContext ctx;
    v1::RefreshRequest req;
    req.set_model(model);
    req.set_wait(true);
    req.set_timeout_seconds(30);
    return query_->Refresh(&ctx, req, resp);
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<service::Daemon> daemon_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::QueryService::Stub> query_;
};

TEST_F(DaemonTest, CreateDescribeListDeleteWithDefaultsFilled) {
  v1::ModelConfig c;
  c.set_name("m1");
  c.set_dim(3);
  v1::ModelInfo info;
  ASSERT_TRUE(Create(c, &info).ok());
  EXPECT_EQ(info.config().name(), "m1");
  EXPECT_EQ(info.config().dim(), 3u);
  EXPECT_EQ(info.config().sigma(), 0.0);  // auto
  EXPECT_DOUBLE_EQ(info.config().eta(), 0.1);
  EXPECT_DOUBLE_EQ(info.config().lambda(), 1e-3);
  EXPECT_DOUBLE_EQ(info.config().epsilon(), 1e-3);
  EXPECT_EQ(info.config().max_dict(), 1000u);
  EXPECT_DOUBLE_EQ(info.config().dt(), 1.0);
  EXPECT_EQ(info.config().seed(), 1u);
  EXPECT_EQ(info.config().auto_sigma_warmup(), 1000u);
  EXPECT_EQ(info.config().scale(), "auto");                          // per-channel scaling with sigma auto
  EXPECT_DOUBLE_EQ(info.config().refresh_interval_seconds(), 3600);  // the daemon's flag
  EXPECT_TRUE(info.sigma_selection().automatic());
  EXPECT_EQ(info.samples(), 0u);
  EXPECT_EQ(info.view().version(), 0u);

  EXPECT_EQ(Create(c).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  CreateFixed("m2");
  {
    grpc::ClientContext ctx;
    v1::ListModelsResponse list;
    ASSERT_TRUE(models_->ListModels(&ctx, v1::ListModelsRequest(), &list).ok());
    ASSERT_EQ(list.models_size(), 2);
    EXPECT_EQ(list.models(0).config().name(), "m1");
    EXPECT_EQ(list.models(1).config().name(), "m2");
    EXPECT_DOUBLE_EQ(list.models(1).sigma_selection().chosen(), 0.4);
  }
  {
    grpc::ClientContext ctx;
    v1::DeleteModelRequest req;
    req.set_name("m1");
    v1::DeleteModelResponse resp;
    ASSERT_TRUE(models_->DeleteModel(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name("m1");
    v1::ModelInfo gone;
    EXPECT_EQ(models_->GetModel(&ctx, req, &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::DeleteModelRequest req;
    req.set_name("m1");
    v1::DeleteModelResponse resp;
    EXPECT_EQ(models_->DeleteModel(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(DaemonTest, BadConfigsAreRejectedNamingTheField) {
  struct Case {
    const char* what;
    std::function<void(v1::ModelConfig&)> mutate;
    const char* expect_in_message;
  };
  const Case cases[] = {
      {"bad name", [](v1::ModelConfig& c) { c.set_name("bad name!"); }, "field name"},
      {"empty name", [](v1::ModelConfig& c) { c.set_name(""); }, "field name"},
      {"dim 0", [](v1::ModelConfig& c) { c.set_dim(0); }, "field dim is 0"},
      {"sigma < 0", [](v1::ModelConfig& c) { c.set_sigma(-1); }, "field sigma is -1"},
      {"sigma NaN", [](v1::ModelConfig& c) { c.set_sigma(std::nan("")); }, "field sigma"},
      {"eta 0", [](v1::ModelConfig& c) { c.set_eta(0); }, "field eta is 0"},
      {"lambda < 0", [](v1::ModelConfig& c) { c.set_lambda(-1e-3); }, "field lambda"},
      {"epsilon < 0", [](v1::ModelConfig& c) { c.set_epsilon(-1); }, "field epsilon"},
      {"max_dict 0", [](v1::ModelConfig& c) { c.set_max_dict(0); }, "field max_dict is 0"},
      {"dt 0", [](v1::ModelConfig& c) { c.set_dt(0); }, "field dt is 0"},
      {"warm-up 5", [](v1::ModelConfig& c) { c.set_auto_sigma_warmup(5); }, "field auto_sigma_warmup is 5"},
      {"refresh < 0", [](v1::ModelConfig& c) { c.set_refresh_interval_seconds(-1); }, "refresh_interval_seconds"},
  };
  for (const Case& k : cases) {
    v1::ModelConfig c;
    c.set_name("ok");
    c.set_dim(2);
    k.mutate(c);
    const grpc::Status s = Create(c);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.what;
    EXPECT_NE(s.error_message().find(k.expect_in_message), std::string::npos) << k.what << ": " << s.error_message();
  }
  grpc::ClientContext ctx;
  v1::ListModelsResponse list;
  ASSERT_TRUE(models_->ListModels(&ctx, v1::ListModelsRequest(), &list).ok());
  EXPECT_EQ(list.models_size(), 0);
}

// Streams Duffing pairs, refreshes, and checks the learned operator against the true flow.
TEST_F(DaemonTest, LearnsDuffingAndServesKoopmanPredictionsAndDictionary) {
  CreateFixed("duffing", 0.4, 0.25);
  const int64_t n = 4000, batch = 500;
  const systems::Transitions t = systems::SimulateDuffing(n, /*seed=*/7);

  {  // Queries before the first view answer FAILED_PRECONDITION, not zeros.
    grpc::ClientContext ctx;
    v1::KoopmanRequest req;
    req.set_model("duffing");
    v1::KoopmanResponse resp;
    const grpc::Status s = query_->GetKoopman(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("has no view yet"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    auto stream = ingest_->Ingest(&ctx);
    for (int64_t b = 0; b < n / batch; ++b) {
      ASSERT_TRUE(stream->Write(PairsBatch("duffing", t, b * batch, (b + 1) * batch, "sim", b * batch)));
      v1::IngestAck ack;
      ASSERT_TRUE(stream->Read(&ack));
      EXPECT_EQ(ack.batch_index(), static_cast<uint64_t>(b));
      EXPECT_EQ(ack.pairs_received(), static_cast<uint64_t>(batch));
      EXPECT_EQ(ack.pairs_applied(), static_cast<uint64_t>(batch));
      EXPECT_EQ(ack.producer_offset(), static_cast<uint64_t>((b + 1) * batch));
      EXPECT_EQ(ack.model_samples(), static_cast<uint64_t>((b + 1) * batch));
    }
    stream->WritesDone();
    ASSERT_TRUE(stream->Finish().ok());
  }
  v1::RefreshResponse refreshed;
  ASSERT_TRUE(RefreshWait("duffing", &refreshed).ok());
  EXPECT_EQ(refreshed.view().version(), 1u);
  EXPECT_EQ(refreshed.view().samples(), static_cast<uint64_t>(n));
  {
    // The per-view build times are parts of the refresh, built one after the other: each is
    // present for the views this model has, non-negative, and they add up to at most the total.
    const auto& by_view = refreshed.view().build_seconds_by_view();
    double sum = 0;
    for (const char* name : {"snapshot", "koopman", "counts", "embedding", "clusters"}) {
      ASSERT_TRUE(by_view.contains(name)) << name;
    }
    for (const auto& [name, seconds] : by_view) {
      EXPECT_GE(seconds, 0.0) << name;
      sum += seconds;
    }
    EXPECT_GT(sum, 0.0);
    EXPECT_LE(sum, refreshed.view().build_seconds() + 1e-9);
  }

  const v1::ModelInfo info = Describe("duffing");
  EXPECT_EQ(info.samples(), static_cast<uint64_t>(n));
  EXPECT_EQ(info.batches_applied(), static_cast<uint64_t>(n / batch));
  EXPECT_GT(info.dictionary_size(), 10u);
  EXPECT_LT(info.dictionary_size(), static_cast<uint32_t>(n / 4));  // far smaller than the stream
  EXPECT_EQ(info.view().version(), 1u);

  // Koopman: the constant function gives mu = 1; a stable system has no |mu| > 1 (up to SGD
  // noise); timescales = -dt/log|mu|.
  RowMatrixXd probes(3, 2);
  probes << 1.0, 0.0, -1.0, 0.0, 0.5, 0.5;
  v1::KoopmanResponse k;
  {
    grpc::ClientContext ctx;
    v1::KoopmanRequest req;
    req.set_model("duffing");
    req.set_top(6);
    AppendRows(probes, req.mutable_points());
    ASSERT_TRUE(query_->GetKoopman(&ctx, req, &k).ok());
  }
  ASSERT_EQ(k.eigenvalues_size(), 6);
  EXPECT_EQ(k.view().version(), 1u);
  EXPECT_EQ(k.view().samples(), static_cast<uint64_t>(n));
  EXPECT_DOUBLE_EQ(k.dt(), 0.25);
  // The stationary mode first (exactly 1), then by |mu| descending; a mode beyond the
  // unit circle (Duffing's basin indicator under box sampling) carries its excess.
  const double lead = std::hypot(k.eigenvalues(0).re(), k.eigenvalues(0).im());
  ASSERT_EQ(k.stationary_size(), 6);
  EXPECT_TRUE(k.stationary(0));
  EXPECT_EQ(k.eigenvalues(0).re(), 1.0);
  EXPECT_EQ(k.eigenvalues(0).im(), 0.0);
  for (int l = 0; l < k.eigenvalues_size(); ++l) {
    const double mod = std::hypot(k.eigenvalues(l).re(), k.eigenvalues(l).im());
    EXPECT_LE(mod, 1.05) << "eigenvalue " << l;
    if (l > 0) {
      EXPECT_FALSE(k.stationary(l));
    }
    if (l > 0) {
      EXPECT_NEAR(k.excess(l), std::max(0.0, mod - 1), 1e-12);
    }
    if (l > 1) {
      EXPECT_LE(mod, std::hypot(k.eigenvalues(l - 1).re(), k.eigenvalues(l - 1).im()) + 1e-12);
    }
    if (mod < 1) {
      EXPECT_NEAR(k.timescales(l), -0.25 / std::log(mod), 1e-9 * k.timescales(l));
    }
    EXPECT_NEAR(k.rates(l).re(), std::log(mod) / 0.25, 1e-9);
  }
  ASSERT_EQ(k.eigenfunctions_size(), 6);
  for (const auto& f : k.eigenfunctions()) EXPECT_EQ(f.values_size(), 3);

  // Predict: E[Y | X = x] against the true flow over dt, on points inside the sampled box.
  RowMatrixXd points(5, 2);
  points << 0.5, 0.5, -0.5, 0.8, 1.2, -0.4, -1.0, -1.0, 0.0, 1.5;
  v1::PredictResponse p;
  {
    grpc::ClientContext ctx;
    v1::PredictRequest req;
    req.set_model("duffing");
    AppendRows(points, req.mutable_points());
    ASSERT_TRUE(query_->Predict(&ctx, req, &p).ok());
  }
  ASSERT_EQ(p.dim(), 2u);
  ASSERT_EQ(p.predictions_size(), 10);
  EXPECT_EQ(p.view().version(), 1u);
  double err2 = 0, move2 = 0;
  for (int i = 0; i < points.rows(); ++i) {
    const Eigen::Vector2d x = points.row(i).transpose();
    const Eigen::Vector2d truth = systems::DuffingFlow(x, 0.25);
    const Eigen::Vector2d pred(p.predictions(2 * i), p.predictions(2 * i + 1));
    err2 += (pred - truth).squaredNorm();
    move2 += (truth - x).squaredNorm();
  }
  const double rms_err = std::sqrt(err2 / points.rows()), rms_move = std::sqrt(move2 / points.rows());
  std::cerr << "measured: m_x=" << info.dictionary_size() << " m_y=" << info.dictionary_size_y() << " of " << n
            << " samples, leading |mu|=" << lead << ", mu_1=" << k.eigenvalues(1).re() << "+" << k.eigenvalues(1).im()
            << "i, rms forecast error " << rms_err << " vs rms motion " << rms_move << ", refresh "
            << refreshed.view().build_seconds() << " s\n";
  EXPECT_LT(rms_err, 0.08) << "rms prediction error";                               // measured 0.027
  EXPECT_LT(rms_err, 0.25 * rms_move) << "must beat the no-motion forecast by 4x";  // measured 0.11x

  // Dictionary atoms: as many as described, each a point of the stream's box.
  v1::DictionaryResponse d;
  {
    grpc::ClientContext ctx;
    v1::DictionaryRequest req;
    req.set_model("duffing");
    ASSERT_TRUE(query_->GetDictionary(&ctx, req, &d).ok());
  }
  EXPECT_EQ(d.dim(), 2u);
  EXPECT_DOUBLE_EQ(d.sigma(), 0.4);
  EXPECT_EQ(d.x_atoms_size(), static_cast<int>(2 * info.dictionary_size()));
  EXPECT_EQ(d.y_atoms_size(), static_cast<int>(2 * info.dictionary_size_y()));
  for (double v : d.x_atoms()) EXPECT_LE(std::abs(v), 2.0);

  // A refresh without new samples keeps the view; bad query points are refused.
  ASSERT_TRUE(RefreshWait("duffing", &refreshed).ok());
  EXPECT_EQ(refreshed.view().version(), 1u);
  {
    grpc::ClientContext ctx;
    v1::KoopmanRequest req;
    req.set_model("duffing");
    req.add_points(1.0);
    req.add_points(2.0);
    req.add_points(3.0);
    v1::KoopmanResponse resp;
    const grpc::Status s = query_->GetKoopman(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("field points has 3 values, expected a multiple of dim 2"), std::string::npos)
        << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::KoopmanRequest req;
    req.set_model("duffing");
    req.set_top(17);
    v1::KoopmanResponse resp;
    EXPECT_EQ(query_->GetKoopman(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(DaemonTest, BadBatchesAreRejectedAndChangeNothing) {
  CreateFixed("m");
  const systems::Transitions t = systems::SimulateDuffing(20, 3);
  v1::IngestAck ack;
  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 0, 10), &ack).ok());
  ASSERT_EQ(Describe("m").samples(), 10u);

  struct Case {
    const char* what;
    std::function<void(v1::IngestBatch&)> mutate;
    const char* expect_in_message;
  };
  const Case cases[] = {
      {"wrong dimension",
       [](v1::IngestBatch& b) {
         b.mutable_x()->RemoveLast();
         b.mutable_y()->RemoveLast();
       },
       "field x has 19 values, expected a multiple of dim 2 (model 'm')"},
      {"x/y mismatch", [](v1::IngestBatch& b) { b.mutable_y()->Resize(18, 0.0); }, "field y has 18 values"},
      {"NaN", [](v1::IngestBatch& b) { b.set_x(5, std::nan("")); }, "field x value 5 (pair 2, component 1) is nan"},
      {"Inf", [](v1::IngestBatch& b) { b.set_y(0, INFINITY); }, "field y value 0 (pair 0, component 0) is inf"},
      {"empty",
       [](v1::IngestBatch& b) {
         b.clear_x();
         b.clear_y();
       },
       "no pairs"},
      {"both forms",
       [](v1::IngestBatch& b) {
         b.add_states(0);
         b.add_states(0);
         b.add_states(1);
         b.add_states(1);
       },
       "both x/y and states"},
      {"one state",
       [](v1::IngestBatch& b) {
         b.clear_x();
         b.clear_y();
         b.add_states(0);
         b.add_states(0);
       },
       "field states has 2 values, expected at least 2 states"},
      {"ids", [](v1::IngestBatch& b) { b.add_x_ids(1); }, "state ids"},
  };
  for (const Case& k : cases) {
    v1::IngestBatch b = PairsBatch("m", t, 10, 20);
    k.mutate(b);
    const grpc::Status s = IngestOne(b, &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.what;
    EXPECT_NE(s.error_message().find(k.expect_in_message), std::string::npos) << k.what << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind("batch 0: ", 0), 0u) << s.error_message();
  }
  const v1::ModelInfo info = Describe("m");
  EXPECT_EQ(info.samples(), 10u);
  EXPECT_EQ(info.batches_applied(), 1u);

  // In a stream, a bad batch ends the stream naming its index; the batches before it stay.
  {
    grpc::ClientContext ctx;
    auto stream = ingest_->Ingest(&ctx);
    ASSERT_TRUE(stream->Write(PairsBatch("m", t, 10, 15)));
    ASSERT_TRUE(stream->Read(&ack));
    EXPECT_EQ(ack.model_samples(), 15u);
    v1::IngestBatch bad = PairsBatch("m", t, 15, 20);
    bad.set_x(0, std::nan(""));
    stream->Write(bad);
    stream->WritesDone();
    EXPECT_FALSE(stream->Read(&ack));
    const grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message().rfind("batch 1: field x value 0", 0), 0u) << s.error_message();
  }
  EXPECT_EQ(Describe("m").samples(), 15u);

  // Rejections are counted by reason.
  const std::string metrics = HttpGet(daemon_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("cmestream_ingest_batches_rejected_total{model=\"m\",reason=\"non_finite\"} 3"),
            std::string::npos)
      << metrics;
}

TEST_F(DaemonTest, ResentAndOverlappingBatchesAreAppliedOnce) {
  CreateFixed("m");
  const systems::Transitions t = systems::SimulateDuffing(40, 5);
  v1::IngestAck ack;
  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 0, 10, "p", 0), &ack).ok());
  EXPECT_EQ(ack.pairs_applied(), 10u);
  EXPECT_EQ(ack.producer_offset(), 10u);
  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 0, 10, "p", 0), &ack).ok());  // re-sent
  EXPECT_EQ(ack.pairs_received(), 10u);
  EXPECT_EQ(ack.pairs_applied(), 0u);
  EXPECT_EQ(ack.producer_offset(), 10u);
  EXPECT_EQ(ack.model_samples(), 10u);
  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 5, 15, "p", 5), &ack).ok());  // overlaps by 5
  EXPECT_EQ(ack.pairs_applied(), 5u);
  EXPECT_EQ(ack.producer_offset(), 15u);
  EXPECT_EQ(ack.model_samples(), 15u);

  const grpc::Status gap = IngestOne(PairsBatch("m", t, 20, 30, "p", 20), &ack);
  EXPECT_EQ(gap.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(gap.error_message().find("applied its pairs up to offset 15"), std::string::npos) << gap.error_message();

  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 0, 10, "q", 0), &ack).ok());  // producers are independent
  EXPECT_EQ(ack.pairs_applied(), 10u);
  ASSERT_TRUE(IngestOne(PairsBatch("m", t, 0, 10), &ack).ok());  // no producer: no de-duplication
  EXPECT_EQ(ack.pairs_applied(), 10u);
  EXPECT_EQ(ack.model_samples(), 35u);
  EXPECT_EQ(Describe("m").samples(), 35u);

  grpc::ClientContext ctx;
  v1::GetProducerRequest req;
  req.set_model("m");
  req.set_producer_id("p");
  v1::ProducerStatus status;
  ASSERT_TRUE(ingest_->GetProducer(&ctx, req, &status).ok());
  EXPECT_EQ(status.applied_offset(), 15u);
}

// A trajectory of n states is exactly the n-1 consecutive pairs: the same learner state as
// sending those pairs explicitly.
TEST_F(DaemonTest, TrajectoryBatchesYieldConsecutivePairs) {
  CreateFixed("traj");
  CreateFixed("pairs");
  RowMatrixXd states(51, 2);
  states.row(0) << 1.5, -0.5;
  for (int i = 1; i < states.rows(); ++i) {
    states.row(i).head<2>() =
        systems::DuffingFlow(states.row(i - 1).transpose(), 0.25).transpose();  // fixed size: see test_embedding
  }
  v1::IngestBatch traj;
  traj.set_model("traj");
  traj.set_episode_id("e1");
  AppendRows(states, traj.mutable_states());
  v1::IngestAck ack;
  ASSERT_TRUE(IngestOne(traj, &ack).ok());
  EXPECT_EQ(ack.pairs_received(), 50u);
  EXPECT_EQ(ack.model_samples(), 50u);

  systems::Transitions pairs{states.topRows(50), states.bottomRows(50)};
  ASSERT_TRUE(IngestOne(PairsBatch("pairs", pairs, 0, 50), &ack).ok());

  v1::RefreshResponse r;
  ASSERT_TRUE(RefreshWait("traj", &r).ok());
  ASSERT_TRUE(RefreshWait("pairs", &r).ok());
  v1::DictionaryResponse a, b;
  for (auto [name, out] : {std::pair{"traj", &a}, std::pair{"pairs", &b}}) {
    grpc::ClientContext ctx;
    v1::DictionaryRequest req;
    req.set_model(name);
    ASSERT_TRUE(query_->GetDictionary(&ctx, req, out).ok());
  }
  EXPECT_EQ(a.view().samples(), 50u);
  ASSERT_EQ(a.x_atoms_size(), b.x_atoms_size());
  ASSERT_EQ(a.y_atoms_size(), b.y_atoms_size());
  for (int i = 0; i < a.x_atoms_size(); ++i) EXPECT_EQ(a.x_atoms(i), b.x_atoms(i));
  for (int i = 0; i < a.y_atoms_size(); ++i) EXPECT_EQ(a.y_atoms(i), b.y_atoms(i));
}

TEST_F(DaemonTest, UnknownModelIsNotFoundEverywhere) {
  const systems::Transitions t = systems::SimulateDuffing(4, 1);
  v1::IngestAck ack;
  EXPECT_EQ(IngestOne(PairsBatch("nope", t, 0, 4), &ack).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::RefreshResponse r;
  EXPECT_EQ(RefreshWait("nope", &r).error_code(), grpc::StatusCode::NOT_FOUND);
  {
    grpc::ClientContext ctx;
    v1::PredictRequest req;
    req.set_model("nope");
    v1::PredictResponse resp;
    const grpc::Status s = query_->Predict(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(s.error_message(), "model 'nope' does not exist");
  }
  {
    grpc::ClientContext ctx;
    v1::KoopmanRequest req;
    req.set_model("nope");
    v1::KoopmanResponse resp;
    EXPECT_EQ(query_->GetKoopman(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

// Sigma "auto": warm-up pairs are acknowledged, buffered, then learned once sigma is chosen.
TEST_F(DaemonTest, AutoSigmaBuffersWarmupThenLearnsAllPairs) {
  v1::ModelConfig c;
  c.set_name("auto");
  c.set_dim(2);
  c.set_dt(0.25);
  c.set_auto_sigma_warmup(200);
  ASSERT_TRUE(Create(c).ok());
  const systems::Transitions t = systems::SimulateDuffing(300, 11);
  v1::IngestAck ack;
  ASSERT_TRUE(IngestOne(PairsBatch("auto", t, 0, 40), &ack).ok());
  // Fewer than 50 pairs: an explicit refresh cannot end the warm-up either (from 50 on it would,
  // docs/algorithms.md §1.13; tests/service/engine/test_input_scaling.cc).
  v1::RefreshResponse r;
  EXPECT_EQ(RefreshWait("auto", &r).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(IngestOne(PairsBatch("auto", t, 40, 150), &ack).ok());
  EXPECT_EQ(ack.model_samples(), 150u);
  v1::ModelInfo info = Describe("auto");
  EXPECT_EQ(info.samples(), 0u);
  EXPECT_EQ(info.pending_warmup(), 150u);

  ASSERT_TRUE(IngestOne(PairsBatch("auto", t, 150, 300), &ack).ok());
  info = Describe("auto");
  EXPECT_EQ(info.samples(), 300u);
  EXPECT_EQ(info.pending_warmup(), 0u);
  const v1::SigmaSelection& s = info.sigma_selection();
  EXPECT_TRUE(s.automatic());
  EXPECT_EQ(s.warmup_pairs(), 200u);
  ASSERT_GT(s.candidates_size(), 1);
  ASSERT_EQ(s.scores_size(), s.candidates_size());
  // The chosen bandwidth is the best-scoring candidate.
  int best = 0;
  for (int i = 1; i < s.scores_size(); ++i) {
    if (s.scores(i) > s.scores(best)) best = i;
  }
  EXPECT_DOUBLE_EQ(s.chosen(), s.candidates(best));
  ASSERT_TRUE(RefreshWait("auto", &r).ok());
  EXPECT_EQ(r.view().samples(), 300u);
}

TEST_F(DaemonTest, MetricsExposePerModelSeriesAndDropThemOnDelete) {
  CreateFixed("metered");
  const systems::Transitions t = systems::SimulateDuffing(30, 2);
  v1::IngestAck ack;
  ASSERT_TRUE(IngestOne(PairsBatch("metered", t, 0, 30), &ack).ok());
  v1::RefreshResponse r;
  ASSERT_TRUE(RefreshWait("metered", &r).ok());
  const v1::ModelInfo info = Describe("metered");

  const std::string text = HttpGet(daemon_->metrics_port(), "/metrics");
  EXPECT_NE(text.find("cmestream_samples_ingested_total{model=\"metered\"} 30"), std::string::npos) << text;
  EXPECT_NE(
      text.find("cmestream_dictionary_size{model=\"metered\",side=\"x\"} " + std::to_string(info.dictionary_size())),
      std::string::npos);
  EXPECT_NE(text.find("cmestream_view_version{model=\"metered\"} 1"), std::string::npos);
  EXPECT_NE(text.find("cmestream_refresh_duration_seconds_count{model=\"metered\"} 1"), std::string::npos);
  EXPECT_NE(text.find("cmestream_forced_compressions_total{model=\"metered\"} 0"), std::string::npos);
  EXPECT_NE(text.find("cmestream_rpc_duration_seconds_count{method=\"IngestOne\"} 1"), std::string::npos);
  EXPECT_NE(text.find("cmestream_rpc_completed_total{code=\"OK\",method=\"Refresh\"} 1"), std::string::npos) << text;

  grpc::ClientContext ctx;
  v1::DeleteModelRequest req;
  req.set_name("metered");
  v1::DeleteModelResponse resp;
  ASSERT_TRUE(models_->DeleteModel(&ctx, req, &resp).ok());
  const std::string after = HttpGet(daemon_->metrics_port(), "/metrics");
  EXPECT_EQ(after.find("model=\"metered\""), std::string::npos) << after;
}

TEST_F(DaemonTest, DataDirIsLockedAgainstASecondDaemon) {
  service::DaemonOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.data_dir = data_dir_.string();
  absl::StatusOr<std::unique_ptr<service::Daemon>> second = service::Daemon::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::exists(data_dir_ / "daemon.json"));
}

}  // namespace
}  // namespace cmestream
