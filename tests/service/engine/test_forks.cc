// on_change "fork" (ModelRegistry::Forward, docs/algorithms.md "on_change fork"): each fork
// holds, bit for bit, a model created with its config at its alarm and given the pairs from the
// alarming one to the next alarm's, wherever the parent's batches ended. Checked on a trajectory
// with delays (the row arithmetic of windows that fill up), on unordered pairs and on a
// discrete chain; and a fork refuses direct ingestion and an early end of its warm-up.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "service/engine/batch.h"
#include "service/engine/batch_log.h"
#include "service/engine/model_config.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"

namespace cmestream::service {
namespace {

constexpr int kRows = 3000;
constexpr int kChange = 1500;
constexpr int kBatch = 97;  // parent batches end at every kind of place relative to the alarms

// An AR(1) whose coefficient changes from 0.3 to 0.95 at row kChange (unit noise).
std::vector<double> Ar1(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  std::vector<double> v(kRows + 1);
  for (int t = 1; t <= kRows; ++t) v[t] = (t < kChange ? 0.3 : 0.95) * v[t - 1] + noise(rng);
  return v;
}

// A 3-state chain that stays with probability 0.6 before kChange and cycles 0 -> 1 -> 2 after.
std::vector<int64_t> Chain(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> s(kRows + 1);
  for (int t = 1; t <= kRows; ++t) {
    const double r = u(rng);
    if (t < kChange) {
      s[t] = r < 0.6 ? s[t - 1] : (s[t - 1] + (r < 0.8 ? 1 : 2)) % 3;
    } else {
      s[t] = r < 0.9 ? (s[t - 1] + 1) % 3 : s[t - 1];
    }
  }
  return s;
}

v1::ModelConfig ForkingConfig(const std::string& name) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_max_dict(40);
  c.set_rff_features(16);
  c.set_auto_sigma_warmup(200);
  c.set_on_change(kOnChangeFork);
  return c;
}

// The parent's producer: a StreamBatch views its key's strings, so this one outlives the batches.
const std::string kProducer = "p";

class ForkTest : public ::testing::Test {
 protected:
  void Ingest(const v1::IngestBatch& b) {
    auto model = registry_.Get(b.model());
    ASSERT_TRUE(model.ok());
    BatchCheck check = (*model)->discrete() ? ValidateDiscreteBatch(b, (*model)->config().num_states(), 0)
                                            : ValidateBatch(b, (*model)->dim(), 0);
    ASSERT_TRUE(check.status.ok()) << check.status;
    ASSERT_TRUE((*model)->Ingest(check.batch, b.producer_id(), b.offset(), 0).ok());
  }

  // Rows 0..kRows to `name` as trajectory batches of `batch` pairs (each repeats its first row),
  // `add_row(b, t)` appending row t.
  template <typename AddRow>
  void FeedTrajectory(const std::string& name, int batch, const AddRow& add_row) {
    for (int first = 0; first < kRows; first += batch) {
      v1::IngestBatch b;
      b.set_model(name);
      b.set_producer_id(kProducer);
      b.set_offset(first);
      for (int t = first; t <= std::min(first + batch, kRows); ++t) add_row(b, t);
      Ingest(b);
    }
  }

  // The alarm indices of `parent`, and its forks' digests against references fed `part(k)`.
  template <typename Part>
  void ExpectForksAreReferences(const std::string& parent, const Part& part) {
    auto model = registry_.Get(parent);
    ASSERT_TRUE(model.ok());
    auto alarms = (*model)->Alarms(0);
    ASSERT_TRUE(alarms.ok());
    ASSERT_GE(alarms->alarms.size(), 1u) << parent;
    for (size_t k = 1; k <= alarms->alarms.size(); ++k) {
      const int64_t index = alarms->alarms[k - 1].index;
      const int64_t next = k < alarms->alarms.size() ? alarms->alarms[k].index : -1;
      auto fork = registry_.Get(parent + "." + std::to_string(k));
      ASSERT_TRUE(fork.ok()) << fork.status();
      EXPECT_EQ((*fork)->config().fork_of(), parent);
      EXPECT_EQ((*fork)->config().fork_index(), static_cast<uint64_t>(index));
      NullBatchLog log;
      Model reference((*fork)->config(), reference_metrics_.ForModel("ref"), &log);
      reference.ApplyFork(part(index, next), 0);
      EXPECT_EQ((*fork)->StateDigest(), reference.StateDigest()) << parent << "." << k << " from " << index;
      const Model::Stats s = (*fork)->stats();
      EXPECT_EQ(s.samples + s.pending_warmup, reference.stats().samples + reference.stats().pending_warmup);
    }
    EXPECT_FALSE(registry_.Get(parent + "." + std::to_string(alarms->alarms.size() + 1)).ok());
  }

  NullBatchLog log_;
  Metrics metrics_, reference_metrics_;
  ModelRegistry registry_{ConfigDefaults{}, metrics_, log_};
};

StreamBatch Base() {
  StreamBatch b;
  b.producer = kProducer;
  b.gap = true;  // a fork's first rows start its episode
  return b;
}

TEST_F(ForkTest, AForkOfATrajectoryWithDelaysIsTheModelOfItsRows) {
  const std::vector<double> v = Ar1(7);
  // In batches of kBatch pairs, and in one batch, whose first windows fill up within it (so the
  // learner's pair j is the batch's row j + 4: the row arithmetic of PlanForksLocked).
  for (const int batch : {kBatch, kRows}) {
    const std::string name = "ar" + std::to_string(batch);
    v1::ModelConfig c = ForkingConfig(name);
    c.set_dim(1);
    c.set_delays(3);
    c.set_delay_stride(2);
    ASSERT_TRUE(registry_.Create(c).ok());
    FeedTrajectory(name, batch, [&](v1::IngestBatch& b, int t) { b.add_states(v[t]); });
    // Pair i of the windows [x_{t-4}, x_{t-2}, x_t] ends its first window at row i + 4.
    const int64_t lead = (3 - 1) * 2;
    ExpectForksAreReferences(name, [&](int64_t index, int64_t next) {
      StreamBatch part = Base();
      const int64_t row = index + lead, end = next < 0 ? kRows : next + lead;
      part.n = end - row;
      part.dim = 1;
      part.trajectory = true;
      part.x = v.data() + row;
      part.y = part.x + 1;
      return part;
    });
  }
}

TEST_F(ForkTest, AForkOfUnorderedPairsIsTheModelOfItsPairs) {
  v1::ModelConfig c = ForkingConfig("pairs");
  c.set_dim(2);
  ASSERT_TRUE(registry_.Create(c).ok());
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g(0, 1);
  std::vector<double> x(2 * kRows), y(2 * kRows);
  for (int i = 0; i < kRows; ++i) {
    x[2 * i] = g(rng);
    x[2 * i + 1] = g(rng);
    const double a = i < kChange ? 0.2 : 0.9;  // the coupling of y to x changes
    y[2 * i] = a * x[2 * i] + 0.5 * g(rng);
    y[2 * i + 1] = -a * x[2 * i + 1] + 0.5 * g(rng);
  }
  for (int first = 0; first < kRows; first += kBatch) {
    v1::IngestBatch b;
    b.set_model("pairs");
    b.set_producer_id(kProducer);
    b.set_offset(first);
    for (int i = first; i < std::min(first + kBatch, kRows); ++i) {
      b.add_x(x[2 * i]);
      b.add_x(x[2 * i + 1]);
      b.add_y(y[2 * i]);
      b.add_y(y[2 * i + 1]);
    }
    Ingest(b);
  }
  ExpectForksAreReferences("pairs", [&](int64_t index, int64_t next) {
    StreamBatch part = Base();
    part.n = (next < 0 ? kRows : next) - index;
    part.dim = 2;
    part.x = x.data() + 2 * index;
    part.y = y.data() + 2 * index;
    return part;
  });
}

TEST_F(ForkTest, AForkOfADiscreteChainIsTheModelOfItsStates) {
  v1::ModelConfig c = ForkingConfig("chain");
  c.set_num_states(3);
  ASSERT_TRUE(registry_.Create(c).ok());
  const std::vector<int64_t> s = Chain(5);
  FeedTrajectory("chain", kBatch, [&](v1::IngestBatch& b, int t) { b.add_state_ids(s[t]); });
  ExpectForksAreReferences("chain", [&](int64_t index, int64_t next) {
    StreamBatch part = Base();
    part.n = (next < 0 ? kRows : next) - index;
    part.trajectory = true;
    part.x_ids = s.data() + index;
    part.y_ids = part.x_ids + 1;
    return part;
  });
}

TEST_F(ForkTest, ForksStartWhileOtherThreadsReadAndDeleteModels) {
  // The fork path takes the parent's sequencer, then the registry, then the fork's locks
  // (service/README.md "Locks"). Against a thread that lists the models, hashes and describes
  // each and deletes fork 1: no deadlock, and under ThreadSanitizer (scripts/sanitize.sh) no race
  // or lock-order inversion.
  v1::ModelConfig c = ForkingConfig("ar");
  c.set_dim(1);
  ASSERT_TRUE(registry_.Create(c).ok());
  const std::vector<double> v = Ar1(7);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (const std::shared_ptr<Model>& m : registry_.List()) {
        EXPECT_NE(m->StateDigest(), 0u);
        EXPECT_EQ(m->Describe().config().name(), m->name());
        if (m->name() == "ar.1") registry_.Delete("ar.1").IgnoreError();  // may race another Delete: NotFound
      }
    }
  });
  FeedTrajectory("ar", kBatch, [&](v1::IngestBatch& b, int t) { b.add_states(v[t]); });
  done.store(true);
  reader.join();
  auto parent = registry_.Get("ar");
  ASSERT_TRUE(parent.ok());
  EXPECT_EQ((*parent)->stats().samples + (*parent)->stats().pending_warmup, static_cast<uint64_t>(kRows));
  auto alarms = (*parent)->Alarms(0);
  ASSERT_TRUE(alarms.ok());
  ASSERT_GE(alarms->alarms.size(), 1u);
  for (size_t k = 2; k <= alarms->alarms.size(); ++k) {
    auto fork = registry_.Get("ar." + std::to_string(k));
    ASSERT_TRUE(fork.ok()) << k;
    EXPECT_EQ((*fork)->config().fork_index(), static_cast<uint64_t>(alarms->alarms[k - 1].index));
  }
}

TEST_F(ForkTest, AForkRefusesIngestionAndAnEarlyWarmupEndAndTheClientCannotMakeOne) {
  v1::ModelConfig c = ForkingConfig("ar");
  c.set_dim(1);
  ASSERT_TRUE(registry_.Create(c).ok());
  const std::vector<double> v = Ar1(3);
  v1::IngestBatch b;
  b.set_model("ar");
  for (double value : v) b.add_states(value);
  Ingest(b);
  auto fork = registry_.Get("ar.1");
  ASSERT_TRUE(fork.ok()) << fork.status();
  b.set_model("ar.1");
  BatchCheck check = ValidateBatch(b, 1, 0);
  ASSERT_TRUE(check.status.ok());
  const uint64_t digest = (*fork)->StateDigest();
  absl::StatusOr<Model::IngestResult> refused = (*fork)->Ingest(check.batch, "q", 0, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("is a fork of 'ar'"), std::string::npos) << refused.status();
  EXPECT_EQ((*fork)->EndWarmup().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*fork)->StateDigest(), digest);

  v1::ModelConfig forged = ForkingConfig("forged");
  forged.set_dim(1);
  forged.clear_on_change();
  forged.set_fork_of("ar");
  forged.set_fork_index(3);
  EXPECT_EQ(registry_.Create(forged).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ModelConfig quiet = ForkingConfig("quiet");
  quiet.set_dim(1);
  quiet.set_alarms(kAlarmsOff);
  EXPECT_EQ(registry_.Create(quiet).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ModelConfig long_name = ForkingConfig(std::string(kMaxForkingNameBytes + 1, 'n'));
  long_name.set_dim(1);
  EXPECT_EQ(registry_.Create(long_name).status().code(), absl::StatusCode::kInvalidArgument);
}

// cmestream_forks_refused_total{reason} as exposed.
double ForksRefused(const Metrics& metrics, const std::string& reason) {
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    if (f.name != "cmestream_forks_refused_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "reason" && l.value == reason) return m.counter.value;
      }
    }
  }
  ADD_FAILURE() << "no series cmestream_forks_refused_total{reason=\"" << reason << "\"}";
  return -1;
}

// A fork whose name an ordinary model holds is not started: the parent learns on, the other
// model is untouched, and the refusal is counted by reason (every reason exists at 0 before).
TEST_F(ForkTest, AForkWhoseNameIsTakenIsRefusedAndCounted) {
  // Every reason the registry can count has a name and a series at 0 (kError is the last value),
  // and the names are the label values dashboards and alerts already match on.
  std::vector<std::string> names;
  for (int r = 0; r <= static_cast<int>(ForkRefusal::kError); ++r) {
    const char* name = NameOf(kForkRefusalNames, static_cast<ForkRefusal>(r), nullptr);
    ASSERT_NE(name, nullptr) << "ForkRefusal " << r << " has no name";
    EXPECT_EQ(ForksRefused(metrics_, name), 0) << name;
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"name_taken", "max_models", "memory", "error"}));
  v1::ModelConfig other;
  other.set_name("ar.1");
  other.set_dim(1);
  other.set_sigma(1.0);
  ASSERT_TRUE(registry_.Create(other).ok());
  v1::ModelConfig c = ForkingConfig("ar");
  c.set_dim(1);
  ASSERT_TRUE(registry_.Create(c).ok());
  const std::vector<double> v = Ar1(3);
  v1::IngestBatch b;
  b.set_model("ar");
  for (double value : v) b.add_states(value);
  Ingest(b);
  auto parent = registry_.Get("ar");
  ASSERT_TRUE(parent.ok());
  auto alarms = (*parent)->Alarms(0);
  ASSERT_TRUE(alarms.ok());
  ASSERT_GE(alarms->alarms.size(), 1u);
  auto taken = registry_.Get("ar.1");
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE((*taken)->config().has_fork_of());
  EXPECT_EQ((*taken)->stats().samples, 0);
  EXPECT_EQ(ForksRefused(metrics_, "name_taken"), 1);
  EXPECT_EQ(ForksRefused(metrics_, "max_models"), 0);
  // Later alarms start their forks as usual.
  for (size_t k = 2; k <= alarms->alarms.size(); ++k) EXPECT_TRUE(registry_.Get("ar." + std::to_string(k)).ok()) << k;
}

}  // namespace
}  // namespace cmestream::service
