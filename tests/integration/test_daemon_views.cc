// Integration tests of the views of docs/algorithms.md §2-6 through the real daemon (service::Daemon
// in-process on loopback port 0, generated gRPC stubs): transition counts, embedding,
// metastable clusters, soft aggregation, latent model and predictive-state forecasts, for
// discrete and continuous models. Numbers are asserted against ground truth: exact counts,
// known blocks and anchors, the four wells, the forward filter, the mixture weights.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <Eigen/Eigenvalues>

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "core/cluster/metastable.h"
#include "core/systems/duffing.h"
#include "core/systems/four_well.h"
#include "core/systems/hmm.h"
#include "core/systems/soft_aggregation_chain.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/daemon.h"
#include "service/engine/batch.h"
#include "service/engine/batch_log.h"
#include "service/engine/model.h"
#include "service/engine/model_config.h"
#include "service/observability/metrics.h"
#include "tests/integration/daemon_test_util.h"

namespace cmestream {
namespace {

namespace v1 = ::cmestream::v1;
using ::cmestream::testing::HttpGet;

// The implied timescales of a clusters reply's own K x K matrix, recomputed here from its
// doubles: -dt / ln|lambda| by modulus descending, the stationary (first) one left out.
std::vector<double> TimescalesOfReplyMatrix(const v1::ClustersResponse& r, double dt) {
  const int k = static_cast<int>(r.clusters());
  EXPECT_EQ(r.transition_matrix_size(), k * k);
  MatrixXd t(k, k);
  for (int a = 0; a < k; ++a)
    for (int b = 0; b < k; ++b) t(a, b) = r.transition_matrix(a * k + b);
  const Eigen::VectorXcd ev = Eigen::EigenSolver<MatrixXd>(t, false).eigenvalues();
  std::vector<double> mod(ev.size());
  for (int i = 0; i < ev.size(); ++i) mod[i] = std::abs(ev[i]);
  std::sort(mod.rbegin(), mod.rend());
  std::vector<double> out;
  for (size_t i = 1; i < mod.size(); ++i) {
    out.push_back(mod[i] >= 1 ? std::numeric_limits<double>::infinity() : -dt / std::log(mod[i]));
  }
  return out;
}

// The reply's timescales equal those of its matrix (to 1e-9 relative).
void ExpectTimescalesOfReplyMatrix(const v1::ClustersResponse& r, double dt) {
  const std::vector<double> want = TimescalesOfReplyMatrix(r, dt);
  ASSERT_EQ(r.timescales_size(), static_cast<int>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = r.timescales(static_cast<int>(i));
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got)) << "timescale " << i;
    } else {
      EXPECT_NEAR(got, want[i], 1e-9 * want[i]) << "timescale " << i;
    }
  }
}

class DaemonViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_dir_ =
        std::filesystem::temp_directory_path() / ("cmestreamd-views-" + std::to_string(::getpid()) + "-" +
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

  grpc::Status Create(const v1::ModelConfig& config, v1::ModelInfo* info = nullptr) {
    grpc::ClientContext ctx;
    v1::CreateModelRequest req;
    *req.mutable_config() = config;
    v1::ModelInfo ignored;
    return models_->CreateModel(&ctx, req, info ? info : &ignored);
  }
  v1::ModelInfo Describe(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_name(name);
    v1::ModelInfo info;
    EXPECT_TRUE(models_->GetModel(&ctx, req, &info).ok());
    return info;
  }
  grpc::Status IngestOne(const v1::IngestBatch& batch) {
    grpc::ClientContext ctx;
    v1::IngestAck ack;
    return ingest_->IngestOne(&ctx, batch, &ack);
  }
  grpc::Status RefreshWait(const std::string& model) {
    grpc::ClientContext ctx;
    v1::RefreshRequest req;
    req.set_model(model);
    req.set_wait(true);
    v1::RefreshResponse resp;
    return query_->Refresh(&ctx, req, &resp);
  }
  // Sends id pairs from[t] -> to[t] in batches of `chunk`.
  void IngestIdPairs(const std::string& model, const std::vector<int>& from, const std::vector<int>& to,
                     size_t chunk = 20000) {
    for (size_t b = 0; b < from.size(); b += chunk) {
      v1::IngestBatch batch;
      batch.set_model(model);
      for (size_t t = b; t < std::min(from.size(), b + chunk); ++t) {
        batch.add_x_ids(from[t]);
        batch.add_y_ids(to[t]);
      }
      ASSERT_TRUE(IngestOne(batch).ok());
    }
  }
  // Sends a trajectory in segments of `chunk` states; each segment after the first repeats
  // the previous segment's last state (the episode rule).
  template <class Add>
  void IngestTrajectory(const std::string& model, int64_t n, int64_t chunk, Add add_state) {
    for (int64_t b = 0; b + 1 < n; b += chunk) {
      v1::IngestBatch batch;
      batch.set_model(model);
      batch.set_producer_id("p");
      batch.set_offset(static_cast<uint64_t>(b));
      batch.set_episode_id("e");
      for (int64_t t = b; t <= std::min(n - 1, b + chunk); ++t) add_state(batch, t);
      grpc::Status s = IngestOne(batch);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<service::Daemon> daemon_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::QueryService::Stub> query_;
};

v1::ModelConfig Discrete(const std::string& name, uint32_t p) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_num_states(p);
  return c;
}

// Labels a[i] and b[i] define the same partition.
bool SamePartition(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return false;
  std::map<int, int> ab, ba;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ab.emplace(a[i], b[i]).first->second != b[i]) return false;
    if (ba.emplace(b[i], a[i]).first->second != a[i]) return false;
  }
  return true;
}

TEST_F(DaemonViewsTest, ConfigValidationNamesTheField) {
  struct Case {
    std::function<void(v1::ModelConfig&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::ModelConfig& c) { c.set_forgetting(1.5); }, "field forgetting is 1.5, expected in [1e-06, 1]"},
      {[](v1::ModelConfig& c) { c.set_vertex_hunting("magic"); }, "field vertex_hunting is 'magic'"},
      {[](v1::ModelConfig& c) { c.set_dim(2); }, "field dim is 2, expected 0 for a discrete model"},
      {[](v1::ModelConfig& c) { c.set_window(17); }, "field window is 17, expected 0 (off) .. 16"},
      {[](v1::ModelConfig& c) { c.set_meta_states(9); }, "field meta_states is 9, expected <= num_states 5"},
      {[](v1::ModelConfig& c) { c.set_latent_states(6); }, "field latent_states is 6"},
      {[](v1::ModelConfig& c) { c.set_num_states(200000); }, "field num_states is 200000, expected 1..100000"},
  };
  for (const Case& k : cases) {
    v1::ModelConfig c = Discrete("bad", 5);
    k.edit(c);
    grpc::Status s = Create(c);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << k.field;
    EXPECT_NE(s.error_message().find(k.field), std::string::npos) << s.error_message();
  }
  // Discrete PSR statistics bound: 100^3 histories * (100^2 + ...) doubles.
  v1::ModelConfig big = Discrete("big", 100);
  big.set_window(3);
  grpc::Status s = Create(big);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("num_states^window"), std::string::npos) << s.error_message();
  v1::ModelConfig cont;
  cont.set_name("c");
  cont.set_dim(1);
  cont.set_rff_features(5000);
  s = Create(cont);
  EXPECT_NE(s.error_message().find("field rff_features is 5000, expected 1..4096"), std::string::npos)
      << s.error_message();

  // Defaults are filled in and reported.
  v1::ModelInfo info;
  ASSERT_TRUE(Create(Discrete("ok", 5), &info).ok());
  EXPECT_EQ(info.config().dim(), 0u);
  EXPECT_EQ(info.config().forgetting(), 1.0);
  EXPECT_EQ(info.config().rank(), 4u);
  EXPECT_EQ(info.config().clusters(), 2u);
  EXPECT_EQ(info.config().meta_states(), 0u);
  EXPECT_EQ(info.config().vertex_hunting(), "spa");
  EXPECT_EQ(info.config().tensor_restarts(), 20u);
  EXPECT_EQ(info.config().reservoir(), 100000u);  // min(100000, 1e6 / dim), dim 1 for ids
  EXPECT_EQ(info.config().ridge_stage1(), 1e-3);
  EXPECT_EQ(info.dictionary_size(), 0u);
}

// Lumpable chain with 3 blocks: exact counts, clusters = blocks, aggregation partition =
// blocks, bad ids refused with the model unchanged, queries before the view and of disabled
// features refused with the reason.
TEST_F(DaemonViewsTest, DiscreteLumpableChain) {
  const systems::FiniteChain chain = systems::LumpableBlockChain({4, 5, 3}, 0.9, 7);
  const int p = 12;
  const std::vector<int> states = systems::SampleChain(chain.P, 40000, 0, 3);
  const std::vector<int> from(states.begin(), states.end() - 1), to(states.begin() + 1, states.end());
  v1::ModelConfig c = Discrete("lump", p);
  c.set_rank(3);
  c.set_clusters(3);
  c.set_meta_states(3);
  c.set_dt(0.5);
  ASSERT_TRUE(Create(c).ok());

  {  // Before any view.
    grpc::ClientContext ctx;
    v1::CountsRequest req;
    req.set_model("lump");
    v1::CountsResponse resp;
    grpc::Status s = query_->GetCounts(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("has no view yet"), std::string::npos) << s.error_message();
  }
  IngestIdPairs("lump", from, to);
  {  // Out-of-range id: INVALID_ARGUMENT naming batch, field, index, value, range; nothing applied.
    v1::IngestBatch bad;
    bad.set_model("lump");
    for (int i = 0; i < 5; ++i) {
      bad.add_x_ids(i);
      bad.add_y_ids(i == 3 ? p : i);
    }
    grpc::Status s = IngestOne(bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("batch 0: field y_ids value 3 is 12, expected a state id in [0, 12)"),
              std::string::npos)
        << s.error_message();
    v1::IngestBatch mixed;
    mixed.set_model("lump");
    mixed.add_x_ids(0);
    mixed.add_y_ids(1);
    mixed.add_x(0.5);
    s = IngestOne(mixed);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  EXPECT_EQ(Describe("lump").samples(), from.size());
  ASSERT_TRUE(RefreshWait("lump").ok());

  {  // Counts equal what was sent, exactly.
    MatrixXd truth = MatrixXd::Zero(p, p);
    for (size_t t = 0; t < from.size(); ++t) truth(from[t], to[t]) += 1;
    grpc::ClientContext ctx;
    v1::CountsRequest req;
    req.set_model("lump");
    v1::CountsResponse resp;
    ASSERT_TRUE(query_->GetCounts(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.view().samples(), from.size());
    EXPECT_EQ(resp.num_states(), static_cast<uint32_t>(p));
    MatrixXd got = MatrixXd::Zero(p, p);
    for (const v1::CountEntry& e : resp.counts()) got(e.from(), e.to()) = e.count();
    EXPECT_EQ(got, truth);
    ASSERT_EQ(resp.visits_size(), p);
    for (int i = 0; i < p; ++i) EXPECT_EQ(resp.visits(i), truth.row(i).sum());
    EXPECT_NEAR(std::accumulate(resp.stationary().begin(), resp.stationary().end(), 0.0), 1.0, 1e-12);
    EXPECT_EQ(resp.state_coordinates_size(), 0);
  }
  std::vector<int> blocks(chain.blocks.data(), chain.blocks.data() + p);
  {  // Clusters equal the blocks; coarse-grained chain is the block chain (stay 0.9).
    grpc::ClientContext ctx;
    v1::ClustersRequest req;
    req.set_model("lump");
    for (int i = 0; i < p; ++i) req.add_state_ids(i);
    v1::ClustersResponse resp;
    grpc::Status s = query_->GetClusters(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.clusters(), 3u);
    ASSERT_EQ(resp.representatives_size(), p);
    std::vector<int> labels, point_labels(resp.point_labels().begin(), resp.point_labels().end());
    for (const v1::Representative& r : resp.representatives()) {
      EXPECT_EQ(r.id(), static_cast<int64_t>(labels.size()));
      EXPECT_EQ(r.coordinates_size(), 0);
      labels.push_back(static_cast<int>(r.label()));
    }
    EXPECT_TRUE(SamePartition(labels, blocks));
    EXPECT_EQ(point_labels, labels);
    ASSERT_EQ(resp.transition_matrix_size(), 9);
    for (int a = 0; a < 3; ++a) EXPECT_NEAR(resp.transition_matrix(a * 3 + a), 0.9, 0.02);
    EXPECT_NEAR(resp.masses(0) + resp.masses(1) + resp.masses(2), 1.0, 1e-12);
    // Implied timescales at lag dt = 0.5 of the coarse (block) chain, K - 1 = 2 of them: its
    // eigenvalue 0.9 - 0.05 = 0.85 (twice) -> -0.5 / log 0.85 = 3.08.
    ASSERT_EQ(resp.timescales_size(), 2);
    EXPECT_NEAR(resp.timescales(0), -0.5 / std::log(0.85), 0.4);
    EXPECT_NEAR(resp.timescales(1), -0.5 / std::log(0.85), 0.4);
    ExpectTimescalesOfReplyMatrix(resp, 0.5);
  }
  {  // Aggregation: V columns sum to 1, partition = blocks, every state an anchor of its block.
    grpc::ClientContext ctx;
    v1::AggregationRequest req;
    req.set_model("lump");
    v1::AggregationResponse resp;
    grpc::Status s = query_->GetAggregation(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.meta_states(), 3u);
    ASSERT_EQ(resp.state_ids_size(), p);
    ASSERT_EQ(resp.v_size(), p * 3);
    for (int k = 0; k < 3; ++k) {
      double sum = 0;
      for (int i = 0; i < p; ++i) sum += resp.v(i * 3 + k);
      EXPECT_NEAR(sum, 1.0, 1e-9);
    }
    std::vector<int> partition(resp.partition().begin(), resp.partition().end());
    EXPECT_TRUE(SamePartition(partition, blocks));
    size_t anchors = 0;
    for (const v1::IndexList& l : resp.anchors()) anchors += l.indices_size();
    EXPECT_EQ(anchors, static_cast<size_t>(p));
    EXPECT_EQ(resp.excluded_size(), 0);
  }
  {  // Embedding: one r-vector per state id; bad ids refused.
    grpc::ClientContext ctx;
    v1::EmbeddingRequest req;
    req.set_model("lump");
    req.add_state_ids(0);
    req.add_state_ids(11);
    v1::EmbeddingResponse resp;
    ASSERT_TRUE(query_->GetEmbedding(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.rank(), 3u);
    EXPECT_EQ(resp.embedding_size(), 2 * 3);
    EXPECT_NEAR(resp.singular_values(0), 1.0, 1e-6);
    EXPECT_EQ(resp.singular_value_gaps_size(), resp.singular_values_size() - 1);
    grpc::ClientContext ctx2;
    req.add_state_ids(-1);
    grpc::Status s = query_->GetEmbedding(&ctx2, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("field state_ids value 2 is -1, expected a state id in [0, 12)"),
              std::string::npos)
        << s.error_message();
  }
  {  // Features not enabled, and CME queries on a discrete model.
    grpc::ClientContext ctx;
    v1::LatentRequest req;
    req.set_model("lump");
    v1::LatentResponse resp;
    grpc::Status s = query_->GetLatent(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(
        s.error_message().find("model 'lump': latent model not available: the model was created without "
                               "latent states (latent_states 0); create it with latent_states K > 0 (CLI: --latent K)"),
        std::string::npos)
        << s.error_message();
    grpc::ClientContext ctx2;
    v1::ForecastRequest f;
    f.set_model("lump");
    v1::ForecastResponse fr;
    s = query_->Forecast(&ctx2, f, &fr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("--window L"), std::string::npos) << s.error_message();
    grpc::ClientContext ctx3;
    v1::KoopmanRequest k;
    k.set_model("lump");
    v1::KoopmanResponse kr;
    s = query_->GetKoopman(&ctx3, k, &kr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("is discrete"), std::string::npos) << s.error_message();
  }
  // Per-view build times are exported.
  const std::string metrics = HttpGet(daemon_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("cmestream_view_build_seconds_count{model=\"lump\",view=\"aggregation\"}"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_build_seconds_count{model=\"lump\",view=\"clusters\"}"), std::string::npos);
  // Sub-view health: the same statuses describe shows (ModelInfo.sub_views).
  EXPECT_NE(metrics.find("cmestream_view_available{model=\"lump\",view=\"aggregation\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_available{model=\"lump\",view=\"embedding\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_available{model=\"lump\",view=\"latent\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_fit_warning{model=\"lump\",view=\"embedding\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_fit_warning{model=\"lump\",view=\"latent\"} 0"), std::string::npos);
}

// A fit that terminates with a warning is a metric, not only a line in describe: rank 8 asked
// of a 3-state chain is clipped to the 3 singular values there are (termination rank_clipped).
TEST_F(DaemonViewsTest, FitWarningsAreMetrics) {
  const systems::FiniteChain chain = systems::LumpableBlockChain({1, 1, 1}, 0.8, 3);
  const std::vector<int> states = systems::SampleChain(chain.P, 5000, 0, 4);
  const std::vector<int> from(states.begin(), states.end() - 1), to(states.begin() + 1, states.end());
  v1::ModelConfig c = Discrete("clipped", 3);
  c.set_rank(8);
  c.set_clusters(2);
  ASSERT_TRUE(Create(c).ok());
  IngestIdPairs("clipped", from, to);
  ASSERT_TRUE(RefreshWait("clipped").ok());
  grpc::ClientContext ctx;
  v1::GetModelRequest req;
  req.set_name("clipped");
  v1::ModelInfo info;
  ASSERT_TRUE(models_->GetModel(&ctx, req, &info).ok());
  std::string termination;
  for (const v1::SubViewStatus& s : info.sub_views()) {
    if (s.name() == "embedding") termination = s.summary().termination();
  }
  EXPECT_EQ(termination, "rank_clipped");
  const std::string metrics = HttpGet(daemon_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("cmestream_view_available{model=\"clipped\",view=\"embedding\"} 1"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("cmestream_view_fit_warning{model=\"clipped\",view=\"embedding\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("cmestream_view_fit_warning{model=\"clipped\",view=\"counts\"} 0"), std::string::npos);
}

// Soft aggregation chain P = U V^T with 3 anchors per meta-state: the anchors are recovered.
TEST_F(DaemonViewsTest, DiscreteSoftAggregationAnchors) {
  systems::SoftAggregationChainOptions o;
  o.states = 30;
  o.meta_states = 3;
  o.anchors_per_meta = 3;
  o.seed = 5;
  const systems::SoftAggregationChain chain = *systems::MakeSoftAggregationChain(o);
  const systems::DiscreteTransitions t = systems::SimulateSoftAggregationChain(chain, 300000, 9);
  v1::ModelConfig c = Discrete("soft", 30);
  c.set_meta_states(3);
  c.set_clusters(3);
  ASSERT_TRUE(Create(c).ok());
  IngestIdPairs("soft", t.from, t.to, 50000);
  ASSERT_TRUE(RefreshWait("soft").ok());
  grpc::ClientContext ctx;
  v1::AggregationRequest req;
  req.set_model("soft");
  v1::AggregationResponse resp;
  grpc::Status s = query_->GetAggregation(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::set<std::set<int>> got, truth;
  for (const v1::IndexList& l : resp.anchors()) {
    std::set<int> ids;
    for (uint32_t row : l.indices()) ids.insert(static_cast<int>(resp.state_ids(static_cast<int>(row))));
    got.insert(ids);
  }
  for (const std::vector<int>& a : chain.anchors) truth.insert(std::set<int>(a.begin(), a.end()));
  EXPECT_EQ(got, truth);
  for (int k = 0; k < 3; ++k) {
    double sum = 0;
    for (int i = 0; i < resp.state_ids_size(); ++i) sum += resp.v(i * 3 + k);
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  std::printf("soft aggregation: distance to empirical %.4f\n", resp.distance_to_empirical());
}

// Duffing (the default model: sigma auto, 20k pairs from a box): its basin indicator comes out
// with |mu| > 1 and its embedding singular value is 1 - 1e-12 (1.7e11 time units). The
// cross-view comparison must skip both (service/engine/model_view.h, kTimescaleDisagreementThreshold):
// a finite disagreement, every compared timescale finite and within the data's time span.
TEST_F(DaemonViewsTest, DuffingComparisonSkipsFlaggedAndUnresolvedTimescales) {
  const systems::DuffingOptions dopt;
  const systems::Transitions data = systems::SimulateDuffing(20000, 7, dopt);
  v1::ModelConfig c;
  c.set_name("duffing");
  c.set_dim(2);
  c.set_dt(dopt.dt);
  ASSERT_TRUE(Create(c).ok());
  for (int64_t b = 0; b < data.x.rows(); b += 5000) {
    v1::IngestBatch batch;
    batch.set_model("duffing");
    for (int64_t t = b; t < b + 5000; ++t) {
      batch.add_x(data.x(t, 0));
      batch.add_x(data.x(t, 1));
      batch.add_y(data.y(t, 0));
      batch.add_y(data.y(t, 1));
    }
    ASSERT_TRUE(IngestOne(batch).ok());
  }
  ASSERT_TRUE(RefreshWait("duffing").ok());
  grpc::ClientContext ctx;
  v1::KoopmanRequest req;
  req.set_model("duffing");
  req.set_top(6);
  v1::KoopmanResponse k;
  ASSERT_TRUE(query_->GetKoopman(&ctx, req, &k).ok());
  ASSERT_EQ(k.spectrum().estimator(), "spectral-moments");
  const double span = 20000 * dopt.dt;
  // The Koopman entry is the first mode that is not stationary, not flagged and finite.
  int first = -1;
  for (int l = 0; l < k.timescales_size(); ++l) {
    if (!k.stationary(l) && k.excess(l) == 0 && std::isfinite(k.timescales(l)) && k.timescales(l) <= span) {
      first = l;
      break;
    }
  }
  ASSERT_GE(first, 2) << "the basin indicator (|mu| > 1) comes before it";
  EXPECT_GT(k.excess(1), 0.0);
  const v1::TimescaleComparison& cmp = k.spectrum().comparison();
  EXPECT_EQ(cmp.koopman(), k.timescales(first));
  int available = 0;
  for (double t : {cmp.koopman(), cmp.count_chain(), cmp.embedding()}) {
    if (std::isnan(t)) continue;
    ++available;
    EXPECT_TRUE(std::isfinite(t));
    EXPECT_GT(t, 0.0);
    EXPECT_LE(t, span);
  }
  std::printf("duffing comparison: koopman %.4g, count chain %.4g, embedding %.4g, disagreement %.4g\n", cmp.koopman(),
              cmp.count_chain(), cmp.embedding(), cmp.relative_disagreement());
  ASSERT_GE(available, 2);
  EXPECT_TRUE(std::isfinite(cmp.relative_disagreement()));
  // Box sampling is a transient (|mu| > 1): the headline names it, the views are not compared
  // (no "disagree by" warning) and the |mu| > 1 modes are not repeated as warnings.
  const v1::KoopmanHeadline& h = k.headline();
  std::printf("duffing headline: %.4g +/- %.4g [%s], nonstationary: %s\n", h.timescale(), h.stderr(), h.view().c_str(),
              h.nonstationary_reason().c_str());
  EXPECT_TRUE(h.nonstationary());
  EXPECT_NE(h.nonstationary_reason().find("transient"), std::string::npos);
  EXPECT_FALSE(cmp.warning());
  EXPECT_NE(cmp.diagnostic().find("not stationary"), std::string::npos);
  for (const std::string& w : k.spectrum().warnings()) {
    EXPECT_EQ(w.find("disagree"), std::string::npos) << w;
    EXPECT_EQ(w.find("|mu| ="), std::string::npos) << w;
  }
}

// The prequential window (service/engine/refresh.cc ReportPrequential): a view scores the pairs after
// it; a refresh reports the window once it holds >= 1000 pairs and then installs the new view's
// model; a shorter window keeps the scoring view and the previous report.
TEST_F(DaemonViewsTest, PrequentialWindowsNeedAThousandPairs) {
  const systems::FourWellOptions fw;
  const systems::Transitions data = systems::SimulateFourWell(23100, 21, fw);
  v1::ModelConfig c;
  c.set_name("preq");
  c.set_dim(1);
  c.set_sigma(0.27);
  c.set_dt(fw.tau);
  ASSERT_TRUE(Create(c).ok());
  int64_t sent = 0;
  const auto ingest_to = [&](int64_t end) {
    v1::IngestBatch batch;
    batch.set_model("preq");
    for (; sent < end; ++sent) {
      batch.add_x(data.x(sent, 0));
      batch.add_y(data.y(sent, 0));
    }
    ASSERT_TRUE(IngestOne(batch).ok());
    ASSERT_TRUE(RefreshWait("preq").ok());
  };
  const auto spectrum = [&]() { return Describe("preq").spectrum(); };
  ingest_to(20000);  // view 1: nothing scored yet
  EXPECT_TRUE(std::isnan(spectrum().heldout_score()));
  EXPECT_EQ(spectrum().heldout_pairs(), 0u);
  ingest_to(20500);  // view 2: view 1 has scored 500 pairs, too few: no report, view 1 keeps scoring
  EXPECT_TRUE(std::isnan(spectrum().heldout_score()));
  EXPECT_EQ(spectrum().heldout_pairs(), 0u);
  ingest_to(21100);  // view 3: view 1's window now holds 1100 pairs: reported
  v1::SpectrumInfo s3 = spectrum();
  EXPECT_EQ(s3.heldout_view_version(), 1u);
  EXPECT_EQ(s3.heldout_pairs(), 1100u);
  EXPECT_GT(s3.heldout_score(), 2.0);
  EXPECT_LT(s3.heldout_score(), 3.8);
  ingest_to(21600);  // view 4: view 3 has 500 pairs: view 3's report is carried over
  v1::SpectrumInfo s4 = spectrum();
  EXPECT_EQ(s4.heldout_view_version(), 1u);
  EXPECT_EQ(s4.heldout_pairs(), 1100u);
  EXPECT_EQ(s4.heldout_score(), s3.heldout_score());
  ingest_to(23100);  // view 5: view 3 scored 2000 pairs
  v1::SpectrumInfo s5 = spectrum();
  EXPECT_EQ(s5.heldout_view_version(), 3u);
  EXPECT_EQ(s5.heldout_pairs(), 2000u);
  EXPECT_GT(s5.heldout_score(), 2.0);
  EXPECT_NE(s5.heldout_score(), s3.heldout_score());
}

// Continuous four-well diffusion: clusters of the dictionary atoms match the wells.
TEST_F(DaemonViewsTest, ContinuousFourWellClusters) {
  const systems::FourWellOptions fw;
  const systems::Transitions data = systems::SimulateFourWell(30000, 17, fw);
  v1::ModelConfig c;
  c.set_name("wells");
  c.set_dim(1);
  c.set_sigma(0.4);
  c.set_rank(4);
  c.set_clusters(4);
  c.set_meta_states(4);
  c.set_dt(fw.tau);
  ASSERT_TRUE(Create(c).ok());
  {  // Embedding before any view: FAILED_PRECONDITION.
    grpc::ClientContext ctx;
    v1::EmbeddingRequest req;
    req.set_model("wells");
    v1::EmbeddingResponse resp;
    EXPECT_EQ(query_->GetEmbedding(&ctx, req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  for (int64_t b = 0; b < data.x.rows(); b += 5000) {
    v1::IngestBatch batch;
    batch.set_model("wells");
    for (int64_t t = b; t < std::min<int64_t>(data.x.rows(), b + 5000); ++t) {
      batch.add_x(data.x(t, 0));
      batch.add_y(data.y(t, 0));
    }
    ASSERT_TRUE(IngestOne(batch).ok());
    // A view after 20k pairs, so that the last 10k are scored by it before being learned.
    if (b + 5000 == 20000) {
      ASSERT_TRUE(RefreshWait("wells").ok());
    }
  }
  ASSERT_TRUE(RefreshWait("wells").ok());
  const v1::ModelInfo info = Describe("wells");

  double koopman_slowest = 0;
  {  // Koopman: the stationary mode named, consistent timescales, one truth across views.
    grpc::ClientContext kctx;
    v1::KoopmanRequest kreq;
    kreq.set_model("wells");
    kreq.set_top(4);
    kreq.add_points(-1.5);
    kreq.add_points(0.5);
    v1::KoopmanResponse k;
    ASSERT_TRUE(query_->GetKoopman(&kctx, kreq, &k).ok());
    ASSERT_EQ(k.eigenvalues_size(), 4);
    ASSERT_EQ(k.stationary_size(), 4);
    ASSERT_EQ(k.excess_size(), 4);
    EXPECT_TRUE(k.stationary(0));
    EXPECT_EQ(k.eigenvalues(0).re(), 1.0);
    EXPECT_EQ(k.eigenvalues(0).im(), 0.0);
    EXPECT_TRUE(std::isinf(k.timescales(0)));
    for (const auto& v : k.eigenfunctions(0).values()) EXPECT_NEAR(v.re(), 1.0, 1e-12);  // g = 1
    const VectorXd ev = systems::FourWellEigenvalues(4, fw);
    for (int l = 1; l < 4; ++l) {
      EXPECT_FALSE(k.stationary(l));
      EXPECT_EQ(k.excess(l), 0.0);
      const double truth = -fw.tau / std::log(ev[l]);
      EXPECT_NEAR(k.timescales(l) / truth, 1.0, 0.10) << "timescale " << l << " truth " << truth;
    }
    const v1::SpectrumInfo& sp = k.spectrum();
    EXPECT_EQ(sp.estimator(), "spectral-moments");
    EXPECT_TRUE(sp.ready());
    EXPECT_GE(sp.epoch(), 1u);
    EXPECT_GE(sp.epoch_samples(), 2000u);
    EXPECT_LE(sp.epoch_samples(), 30000u);
    EXPECT_GT(sp.basis_size(), 10u);
    // Prequential: the view after 20k pairs, scored on the 10k after it.
    EXPECT_EQ(sp.heldout_pairs(), 10000u);
    EXPECT_EQ(sp.heldout_view_version(), k.view().version() - 1);
    EXPECT_GT(sp.heldout_score(), 2.5);
    EXPECT_LT(sp.heldout_score(), 3.8);
    EXPECT_TRUE(std::isfinite(sp.selection_score()));
    EXPECT_EQ(sp.ridge_grid_size(), sp.ridge_scores_size());
    const v1::TimescaleComparison& c = sp.comparison();
    EXPECT_DOUBLE_EQ(c.koopman(), k.timescales(1));
    koopman_slowest = c.koopman();
    EXPECT_GT(c.count_chain(), 0.0);
    EXPECT_GT(c.embedding(), 0.0);
    EXPECT_DOUBLE_EQ(c.threshold(), 0.25);
    const double lo = std::min({c.koopman(), c.count_chain(), c.embedding()});
    const double hi = std::max({c.koopman(), c.count_chain(), c.embedding()});
    EXPECT_NEAR(c.relative_disagreement(), (hi - lo) / lo, 1e-12);
    // Warned only beyond the error bars (3 s.e. of the difference, the lag scan's relative s.e.).
    const double rel = c.lag_scan_stderr() / c.lag_scan();
    EXPECT_NEAR(c.relative_stderr(), rel, 1e-12);
    EXPECT_EQ(c.warning(), c.relative_disagreement() > 0.25 && hi - lo > 3 * rel * std::hypot(hi, lo));
    // The headline: the slowest Koopman timescale within 5 % of the truth, with a finite s.e.
    // (the lag scan's relative jackknife s.e.); a stationary stream; real eigenvalues, no periods.
    const v1::KoopmanHeadline& h = k.headline();
    const double truth1 = -fw.tau / std::log(ev[1]);
    std::printf("four-well headline: %.4f +/- %.4f [%s] (truth %.4f); share %.3f in %llu epochs\n", h.timescale(),
                h.stderr(), h.view().c_str(), truth1, sp.data_share(), static_cast<unsigned long long>(sp.epochs()));
    EXPECT_EQ(h.view(), "koopman");
    EXPECT_EQ(h.timescale(), k.timescales(1));
    EXPECT_NEAR(h.timescale() / truth1, 1.0, 0.05);
    EXPECT_TRUE(std::isfinite(h.stderr()));
    EXPECT_GT(h.stderr(), 0.0);
    EXPECT_NEAR(h.stderr() / h.timescale(), rel, 1e-12);
    EXPECT_FALSE(h.nonstationary()) << h.nonstationary_reason();
    ASSERT_EQ(k.periods_size(), 4);
    for (int l = 0; l < 4; ++l) EXPECT_EQ(std::isnan(k.periods(l)), k.eigenvalues(l).im() == 0.0) << l;
    EXPECT_GE(sp.data_share(), 0.8);
    std::printf(
        "four-well koopman: timescales %.4f %.4f %.4f, score %.4f, epoch %llu (%llu samples); "
        "slowest koopman %.4f counts %.4f embedding %.4f (disagreement %.3f)\n",
        k.timescales(1), k.timescales(2), k.timescales(3), sp.heldout_score(),
        static_cast<unsigned long long>(sp.epoch()), static_cast<unsigned long long>(sp.epoch_samples()), c.koopman(),
        c.count_chain(), c.embedding(), c.relative_disagreement());
    const v1::ModelInfo described = Describe("wells");
    ASSERT_TRUE(described.has_spectrum());
    EXPECT_EQ(described.spectrum().heldout_score(), sp.heldout_score());
  }

  grpc::ClientContext ctx;
  v1::ClustersRequest req;
  req.set_model("wells");
  for (double x : {-1.5, -0.5, 0.5, 1.5}) req.add_points(x);
  v1::ClustersResponse resp;
  grpc::Status s = query_->GetClusters(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const int m = resp.representatives_size();
  ASSERT_GE(m, 4);
  EXPECT_LE(m, static_cast<int>(info.dictionary_size()));
  RowMatrixXd atoms(m, 1);
  VectorXd weights(m);
  Eigen::VectorXi labels(m);
  for (int i = 0; i < m; ++i) {
    ASSERT_EQ(resp.representatives(i).coordinates_size(), 1);
    atoms(i, 0) = resp.representatives(i).coordinates(0);
    weights(i) = resp.representatives(i).weight();
    labels(i) = static_cast<int>(resp.representatives(i).label());
  }
  const double miss = WeightedMisclassification(systems::FourWellIndex(atoms, fw), labels, weights, 4);
  std::printf("four-well: %d atoms, pi-weighted misclassification %.4f\n", m, miss);
  EXPECT_LE(miss, 0.05);
  // The four well centers get four different labels.
  ASSERT_EQ(resp.point_labels_size(), 4);
  std::set<uint32_t> distinct(resp.point_labels().begin(), resp.point_labels().end());
  EXPECT_EQ(distinct.size(), 4u);
  for (int a = 0; a < 4; ++a) EXPECT_GT(resp.transition_matrix(a * 4 + a), 0.85);
  // The reply's timescales are those of its 4 x 4 matrix (K - 1 = 3). A hard partition
  // underestimates (variational principle): the slowest is within 25 % of the Koopman view's
  // (itself within 10 % of the truth above) and not above the truth.
  ExpectTimescalesOfReplyMatrix(resp, fw.tau);
  {
    const VectorXd ev = systems::FourWellEigenvalues(4, fw);
    const double truth = -fw.tau / std::log(ev[1]);
    const double ratio = resp.timescales(0) / koopman_slowest;
    std::printf(
        "four-well clusters: coarse-chain timescales %.4f %.4f %.4f; koopman slowest %.4f (ratio %.3f), "
        "truth %.4f\n",
        resp.timescales(0), resp.timescales(1), resp.timescales(2), koopman_slowest, ratio, truth);
    EXPECT_NEAR(ratio, 1.0, 0.25);
    EXPECT_LT(resp.timescales(0), 1.05 * truth);
  }

  {  // Embedding shapes; points of the wrong kind refused.
    grpc::ClientContext ctx2;
    v1::EmbeddingRequest e;
    e.set_model("wells");
    for (double x : {-1.5, -0.5, 0.5}) e.add_points(x);
    v1::EmbeddingResponse er;
    ASSERT_TRUE(query_->GetEmbedding(&ctx2, e, &er).ok());
    EXPECT_EQ(er.rank(), 4u);
    EXPECT_EQ(er.embedding_size(), 3 * 4);
    grpc::ClientContext ctx3;
    e.add_state_ids(1);
    EXPECT_EQ(query_->GetEmbedding(&ctx3, e, &er).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // Aggregation rows carry the atoms' coordinates.
    grpc::ClientContext ctx2;
    v1::AggregationRequest a;
    a.set_model("wells");
    v1::AggregationResponse ar;
    s = query_->GetAggregation(&ctx2, a, &ar);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(ar.dim(), 1u);
    EXPECT_EQ(ar.state_coordinates_size(), ar.state_ids_size());
    for (int k = 0; k < 4; ++k) {
      double sum = 0;
      for (int i = 0; i < ar.state_ids_size(); ++i) sum += ar.v(i * 4 + k);
      EXPECT_NEAR(sum, 1.0, 1e-9);
    }
  }
}

// Binary learning HMM (paper 002 section 5) as trajectory batches into a discrete model with a
// predictive-state window: forecasts close to the exact forward filter.
TEST_F(DaemonViewsTest, DiscreteHmmForecastMatchesForwardFilter) {
  const auto hmm = systems::DiscreteHmm::BinaryLearningChain();
  const VectorXd train = hmm.Simulate(100000, 1);
  v1::ModelConfig c = Discrete("bkt", 2);
  c.set_window(3);
  c.set_clusters(1);
  ASSERT_TRUE(Create(c).ok());
  IngestTrajectory("bkt", train.size(), 10000,
                   [&](v1::IngestBatch& b, int64_t t) { b.add_state_ids(static_cast<int64_t>(train(t))); });
  EXPECT_EQ(Describe("bkt").samples(), static_cast<uint64_t>(train.size() - 1));
  ASSERT_TRUE(RefreshWait("bkt").ok());

  const VectorXd test = hmm.Simulate(3000, 99);
  double max_err = 0, mean_err = 0;
  int count = 0;
  for (int start = 0; start + 21 <= test.size(); start += 150, ++count) {
    const int len = 20;
    VectorXd window(len + 1);
    window << test.segment(start, len), 0.0;  // the last entry is a placeholder for row len
    const double exact = hmm.OneStepPredictions(window)(len, 1);
    grpc::ClientContext ctx;
    v1::ForecastRequest req;
    req.set_model("bkt");
    for (int i = 0; i < len; ++i) req.add_window_ids(static_cast<int64_t>(window(i)));
    req.set_horizon(2);
    v1::ForecastResponse resp;
    grpc::Status s = query_->Forecast(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.distribution_size(), 2 * 2);
    EXPECT_NEAR(resp.distribution(0) + resp.distribution(1), 1.0, 1e-9);
    ASSERT_EQ(resp.forecast_size(), 2);
    EXPECT_NEAR(resp.forecast(0), resp.distribution(1), 1e-9);  // E[o] = P(o = 1)
    const double err = std::abs(resp.distribution(1) - exact);
    max_err = std::max(max_err, err);
    mean_err += err;
  }
  mean_err /= count;
  std::printf("binary HMM forecast vs forward filter over %d windows: mean |dp| %.4f, max %.4f\n", count, mean_err,
              max_err);
  EXPECT_LT(mean_err, 0.01);
  EXPECT_LT(max_err, 0.02);
  {  // Horizon limit and window ids validated.
    grpc::ClientContext ctx;
    v1::ForecastRequest req;
    req.set_model("bkt");
    req.set_horizon(1001);
    v1::ForecastResponse resp;
    EXPECT_EQ(query_->Forecast(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    grpc::ClientContext ctx2;
    req.set_horizon(1);
    req.add_window_ids(2);
    grpc::Status s = query_->Forecast(&ctx2, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("field window_ids value 0 is 2"), std::string::npos) << s.error_message();
  }
}

// Three-state HMM with Gaussian / shifted-Gamma emissions (paper 001 section 7) as one
// trajectory: the latent model's weights are near the stationary weights (1/6, 2/6, 3/6).
TEST_F(DaemonViewsTest, ContinuousHmmMixtureLatentWeights) {
  const auto hmm = systems::HmmMixture::Default();
  const VectorXd pi = hmm.StationaryWeights();
  const VectorXd obs = hmm.Simulate(40000, 11);
  v1::ModelConfig c;
  c.set_name("mix");
  c.set_dim(1);
  c.set_sigma(1.0);
  c.set_rff_features(200);
  c.set_latent_states(3);  // the default reservoir (100000 at dim 1) holds every triple
  v1::ModelInfo created;
  ASSERT_TRUE(Create(c, &created).ok());
  EXPECT_EQ(created.config().reservoir(), 100000u);
  IngestTrajectory("mix", obs.size(), 8000, [&](v1::IngestBatch& b, int64_t t) { b.add_states(obs(t)); });
  ASSERT_TRUE(RefreshWait("mix").ok());
  grpc::ClientContext ctx;
  v1::LatentRequest req;
  req.set_model("mix");
  for (double x : {-3.0, 0.5, 5.0, 7.0}) req.add_points(x);
  v1::LatentResponse resp;
  grpc::Status s = query_->GetLatent(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.latent_states(), 3u);
  std::vector<double> w(resp.weights().begin(), resp.weights().end()), truth(pi.data(), pi.data() + 3);
  std::sort(w.begin(), w.end());
  std::sort(truth.begin(), truth.end());
  std::printf("latent weights %.3f %.3f %.3f (truth %.3f %.3f %.3f)\n", w[0], w[1], w[2], truth[0], truth[1], truth[2]);
  for (int h = 0; h < 3; ++h) EXPECT_NEAR(w[h], truth[h], 0.02);
  ASSERT_EQ(resp.densities_size(), 3 * 4);
  ASSERT_EQ(resp.posteriors_size(), 4 * 3);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(resp.posteriors(i * 3) + resp.posteriors(i * 3 + 1) + resp.posteriors(i * 3 + 2), 1.0, 1e-9);
  }
  // The component that owns x = -3 (N(-3, 0.8^2), weight 1/6) is not the one that owns x = 5.
  auto argmax = [&](int i) {
    int best = 0;
    for (int h = 1; h < 3; ++h)
      if (resp.posteriors(i * 3 + h) > resp.posteriors(i * 3 + best)) best = h;
    return best;
  };
  EXPECT_NE(argmax(0), argmax(2));
}

// The episode rule, observed through the predictive-state statistics of a Model: with window
// H = 1 a discrete window spans H + 2 = 3 observations, so an episode of L states adds L - 2.
TEST(ModelEpisodes, TrajectoryBatchesContinueOnlyTheSameEpisode) {
  v1::ModelConfig in;
  in.set_name("ep");
  in.set_num_states(2);
  in.set_window(1);
  const absl::StatusOr<v1::ModelConfig> config = service::NormalizeModelConfig(in, {});
  ASSERT_TRUE(config.ok()) << config.status();
  service::Metrics metrics;
  service::NullBatchLog log;
  service::Model model(*config, metrics.ForModel("ep"), &log);
  uint64_t index = 0;
  auto send = [&](const std::string& episode, uint64_t offset, std::vector<int64_t> states) {
    v1::IngestBatch b;
    b.set_model("ep");
    b.set_producer_id("p");
    b.set_episode_id(episode);
    b.set_offset(offset);
    for (int64_t s : states) b.add_state_ids(s);
    const service::BatchCheck check = service::ValidateDiscreteBatch(b, 2, index);
    ASSERT_TRUE(check.status.ok()) << check.status;
    ASSERT_TRUE(model.Ingest(check.batch, "p", offset, index++, episode).ok());
  };
  auto windows = [&] { return model.Snapshot()->predictive->windows; };
  send("e", 0, {0, 1, 0, 1});
  EXPECT_EQ(windows(), 2);
  send("e", 3, {1, 0, 1});  // same producer and episode, starts with the last state: continues
  EXPECT_EQ(windows(), 4);
  send("e", 3, {1, 0, 1});  // re-sent: every pair a duplicate, nothing applied
  EXPECT_EQ(windows(), 4);
  send("f", 5, {1, 1, 0});  // another episode id: new episode
  EXPECT_EQ(windows(), 5);
  send("f", 7, {1, 0, 0});  // same episode id but a different first state: new episode
  EXPECT_EQ(windows(), 6);
  // Offset 8 overlaps one applied pair: the first applied state is state 1 (= 0, the last
  // state applied), so the episode continues with the states 1, 1.
  send("f", 8, {0, 0, 1, 1});
  EXPECT_EQ(windows(), 8);
  EXPECT_EQ(model.stats().samples, 3u + 2u + 2u + 2u + 2u);
}

}  // namespace
}  // namespace cmestream
