// The memory budget by what models hold (service/engine/memory_budget.h, MemoryLedger): a
// model is admitted by its floor (an empty model's estimate), its dictionary grows in capacity
// steps while the budget allows (fair share once the ledger is past kTight of it), a denied
// growth caps the dictionary of that batch (forced projections; nothing refused), the cap is
// logged with the batch and a replay under any budget learns the same state.
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/stream/learner_view.h"
#include "core/stream/streaming_learner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/engine/batch.h"
#include "service/engine/batch_log.h"
#include "service/engine/memory_budget.h"
#include "service/engine/model_config.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "tests/service/engine/real_shaped_series.h"

namespace cmestream::service {
namespace {

using ::testing::HasSubstr;

// The ledger's rules in closed form: admission by the budget, growth by 95 % of it (kReserve)
// and, past kTight (0.9) of it, by the fair share kTight x budget / models.
TEST(MemoryLedgerTest, AdmitsAndGrowsByTheBudgetAndTheFairShare) {
  MemoryLedger ledger(1000);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ledger.TryAdmit(100));
  EXPECT_EQ(ledger.committed(), 400);
  EXPECT_EQ(ledger.models(), 4);
  EXPECT_FALSE(ledger.TryAdmit(601));  // 400 + 601 > 1000: nothing counted
  EXPECT_EQ(ledger.committed(), 400);
  EXPECT_EQ(ledger.models(), 4);
  // Below 900 any model grows: one to 550 (committed 850).
  EXPECT_TRUE(ledger.TryGrow(100, 450));
  EXPECT_EQ(ledger.committed(), 850);
  // 850 + 100 = 950 > 900: only a model within its share 0.9 x 1000 / 4 = 225 may grow.
  EXPECT_FALSE(ledger.TryGrow(550, 100));  // 650 > 225
  EXPECT_FALSE(ledger.TryGrow(200, 100));  // 300 > 225
  EXPECT_TRUE(ledger.TryGrow(100, 100));   // 200 <= 225, 950 <= 950 (the 5 % reserve kept)
  EXPECT_EQ(ledger.committed(), 950);
  EXPECT_FALSE(ledger.TryGrow(100, 1));  // 951 > 950, whatever the share
  EXPECT_TRUE(ledger.TryAdmit(50));      // admission may use the reserve
  EXPECT_EQ(ledger.committed(), 1000);
  ledger.Remove(50);
  ledger.Adjust(-150);  // a batch's unused grant released
  EXPECT_EQ(ledger.committed(), 800);
  ledger.Remove(100);
  EXPECT_EQ(ledger.committed(), 700);
  EXPECT_EQ(ledger.models(), 3);
  MemoryLedger unlimited;  // budget 0: everything allowed, still counted
  EXPECT_TRUE(unlimited.TryAdmit(1e12));
  EXPECT_TRUE(unlimited.TryGrow(1e12, 1e12));
  EXPECT_EQ(unlimited.committed(), 2e12);
}

// Models that grew to their shares leave (1 - kTight) of the budget for the floors of new ones:
// a fleet at its shares still admits (with shares of the whole budget the fifth was refused).
TEST(MemoryLedgerTest, GrowthToTheSharesLeavesRoomForNewModels) {
  MemoryLedger ledger(1000);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ledger.TryAdmit(100));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ledger.TryGrow(100, 100));  // 800 <= 900
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ledger.TryGrow(200, 25));   // to 900, each at 225
  EXPECT_FALSE(ledger.TryGrow(225, 1));                               // 901 > 900 and 226 > 225
  EXPECT_EQ(ledger.committed(), 900);
  EXPECT_TRUE(ledger.TryAdmit(100));  // a new model's floor fits the 10 % kept
  EXPECT_EQ(ledger.models(), 5);
}

TEST(MemoryLedgerTest, CapacitiesFollowTheCmeRule) {
  EXPECT_EQ(DictionaryCapacity(0, 1000), 16);
  EXPECT_EQ(DictionaryCapacity(16, 1000), 16);
  EXPECT_EQ(DictionaryCapacity(17, 1000), 32);
  EXPECT_EQ(DictionaryCapacity(600, 1000), 1000);
  EXPECT_EQ(DictionaryCapacity(5000, 1000), 1000);
  EXPECT_EQ(DictionaryCapacity(0, 10), 10);
}

v1::ModelConfig Normalized(v1::ModelConfig c) {
  absl::StatusOr<v1::ModelConfig> n = NormalizeModelConfig(c, ConfigDefaults{});
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : c;
}

v1::ModelConfig OneChannel(const std::string& name) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_dim(1);
  return c;
}

// Issue "fleets", item 1: 1,000 default 1-channel models fit a budget sized for 1,000 empty
// ones, where the worst-case admission (every model at max_dict) refused all but a few; the
// 1,001st is refused naming what an empty model needs.
TEST(MemoryBudgetFleetTest, AThousandDefaultOneChannelModelsFitWhereTheWorstCaseAdmittedFew) {
  const v1::ModelConfig c = Normalized(OneChannel("m"));
  const double floor = std::ceil(EstimateEmptyModelBytes(c)), worst = EstimateModelBytes(c);
  // measured: floor 0.93 MiB (RFF moments 0.09 at the scalar default of 64 features, forecast sums
  // 0.06 at its 32, lag sums over its 16 atoms 0.14, the micro-batch scratch 0.30), worst 154 MiB
  EXPECT_GT(floor, 0.6 * (1 << 20));
  EXPECT_LT(floor, 1.3 * (1 << 20));
  EXPECT_GT(worst, 40 * floor);
  const double budget = 1000.5 * floor;
  EXPECT_LT(std::floor(budget / worst), 30);  // what the worst-case admission let in
  Metrics metrics;
  NullBatchLog log;
  ModelRegistry registry(ConfigDefaults{}, metrics, log);
  LimitOptions limits;
  limits.max_models = 2000;
  limits.max_memory_bytes = budget;
  registry.SetLimits(limits);
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::shared_ptr<Model>> m = registry.Create(OneChannel("m" + std::to_string(i)));
    ASSERT_TRUE(m.ok()) << i << ": " << m.status();
  }
  EXPECT_EQ(registry.committed_bytes(), 1000 * floor);
  absl::StatusOr<std::shared_ptr<Model>> refused = registry.Create(OneChannel("one-more"));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("even empty it needs about"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--max-memory"));
  // A deletion frees its floor for the next creation.
  ASSERT_TRUE(registry.Delete("m0").ok());
  EXPECT_EQ(registry.committed_bytes(), 999 * floor);
  EXPECT_TRUE(registry.Create(OneChannel("one-more")).ok());
}

// Keeps the dictionary cap of every batch written, as the WAL does (IngestBatch.dictionary_cap).
class CapLog final : public BatchLog {
 public:
  absl::StatusOr<uint64_t> WriteBatch(const std::string&, const std::string&, uint64_t, const PairBatch& batch, int64_t,
                                      const std::string&) override {
    caps.push_back(batch.dictionary_cap);
    return 0;
  }
  absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig&) override { return 0; }
  absl::StatusOr<uint64_t> AppendModelDeleted(const std::string&) override { return 0; }
  absl::StatusOr<uint64_t> AppendModelImported(const std::string&, const std::string&) override { return 0; }
  uint64_t last_sequence() const override { return 0; }
  std::vector<uint32_t> caps;
};

// 2-D pairs spread over a square: a small epsilon admits an atom for most of them.
std::vector<double> Spread(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<double> v(2 * n);
  for (double& x : v) x = u(rng);
  return v;
}

v1::ModelConfig Growing(const std::string& name) {
  v1::ModelConfig c;
  c.set_name(name);
  c.set_dim(2);
  c.set_sigma(0.3);
  c.set_epsilon(1e-5);
  c.set_max_dict(400);
  c.set_rff_features(16);
  return c;
}

PairBatch Pairs(const std::vector<double>& x, const std::vector<double>& y, int first, int n) {
  PairBatch b;
  b.dim = 2;
  b.n = n;
  b.x = x.data() + 2 * first;
  b.y = y.data() + 2 * first;
  return b;
}

// A tight budget. Alone under a budget whose kTight part is exactly the most it may hold at 64
// atoms, a growing model reaches 64 (past kTight, but within its fair share, kTight x budget).
// Beside an empty model under floor + the least it holds at 64, growth to 64 would put the ledger
// at 100 % of the budget with the model above its fair share (kTight x budget / 2), so it stops
// at 32. Either way the
// model learns every pair (nothing refused) with its dictionary capped (forced projections),
// the ledger never passes the budget, and the caps it logged make a replay under an unlimited
// budget learn the same state, bit for bit. With room to spare, no cap is logged.
struct TightRun {
  Model::Stats stats;
  Model::MemoryStatus memory;
  ModelShape shape;
  v1::ModelInfo info;
  std::vector<uint32_t> caps;
  uint64_t digest = 0;
  double committed = 0;
};

constexpr int kPairs = 1500, kBatch = 100;

TightRun RunTight(double budget, bool with_empty_neighbour) {
  const std::vector<double> x = Spread(kPairs, 1), y = Spread(kPairs, 2);
  Metrics metrics;
  CapLog log;
  ModelRegistry registry(ConfigDefaults{}, metrics, log);
  registry.SetLimits(LimitOptions{.max_memory_bytes = budget});
  TightRun run;
  EXPECT_TRUE(registry.Create(Growing("a")).ok());
  if (with_empty_neighbour) {
    EXPECT_TRUE(registry.Create(Growing("b")).ok());
  }
  std::shared_ptr<Model> a = *registry.Get("a");
  for (int first = 0; first < kPairs; first += kBatch) {
    absl::StatusOr<Model::IngestResult> r = a->Ingest(Pairs(x, y, first, kBatch), "p", first, 0);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      EXPECT_EQ(r->applied, static_cast<uint64_t>(kBatch));
    }
    EXPECT_LE(registry.committed_bytes(), budget);
  }
  run.stats = a->stats();
  run.memory = a->memory();
  run.shape = a->Shape();
  run.info = a->Describe(/*with_memory=*/true);
  EXPECT_FALSE(a->Describe().has_memory());  // only when asked (GetModelRequest.with_memory)
  run.caps = log.caps;
  run.digest = a->StateDigest();
  run.committed = registry.committed_bytes();
  return run;
}

uint64_t ReplayDigest(const std::vector<uint32_t>& caps) {
  const std::vector<double> x = Spread(kPairs, 1), y = Spread(kPairs, 2);
  Metrics metrics;
  NullBatchLog log;
  ModelRegistry unlimited(ConfigDefaults{}, metrics, log);
  unlimited.SetLimits(LimitOptions{.max_memory_bytes = 1e15});
  EXPECT_TRUE(unlimited.Create(Growing("a")).ok());
  std::shared_ptr<Model> replayed = *unlimited.Get("a");
  for (int first = 0, k = 0; first < kPairs; first += kBatch, ++k) {
    PairBatch b = Pairs(x, y, first, kBatch);
    b.dictionary_cap = caps[k];
    EXPECT_TRUE(replayed->Ingest(b, "p", first, 0, "", static_cast<uint64_t>(k + 2)).ok());
  }
  return replayed->StateDigest();
}

// The least a model holds at `capacity` atoms: its CME and view at that size, no spectral basis.
double LeastAt(const v1::ModelConfig& c, double capacity) {
  ModelShape s;
  s.capacity = s.atoms = capacity;
  return std::ceil(EstimateModelMemory(c, s).total());
}

TEST(MemoryBudgetFleetTest, ATightBudgetCapsGrowthAndReplayLearnsTheSame) {
  const v1::ModelConfig c = Normalized(Growing("a"));
  const double floor = std::ceil(EstimateEmptyModelBytes(c));
  // A growth step to capacity k is granted what the model would hold there with the spectral
  // bases it has: between LeastAt(k) and the most at k (EstimateModelBytesAt).
  const double at32 = std::ceil(EstimateModelBytesAt(c, 32)), at64 = std::ceil(EstimateModelBytesAt(c, 64));
  const double least64 = LeastAt(c, 64), least128 = LeastAt(c, 128);
  constexpr double kTight = MemoryLedger::kTight;
  // Alone under at64 / kTight: every step to 64 is within its share (kTight x budget = at64),
  // none to 128 is.
  ASSERT_GT(least128, at64);
  // Beside an empty model under floor + least64: a step to 64 would put the ledger at >= 100 %
  // of the budget with the model above its fair share (kTight x half of it); one to 32 stays
  // below kTight of the budget or within the share.
  const double pair_budget = floor + least64;
  ASSERT_GT(least64, kTight * pair_budget / 2);
  ASSERT_TRUE(floor + at32 <= kTight * pair_budget ||
              (at32 <= kTight * pair_budget / 2 && floor + at32 <= (1 - MemoryLedger::kReserve) * pair_budget));

  for (const bool neighbour : {false, true}) {
    const double budget = neighbour ? pair_budget : at64 / kTight;
    const uint32_t cap = neighbour ? 32 : 64;
    SCOPED_TRACE(neighbour ? "beside an empty model" : "alone");
    const TightRun run = RunTight(budget, neighbour);
    EXPECT_EQ(run.stats.samples, static_cast<uint64_t>(kPairs));
    EXPECT_EQ(std::max(run.stats.dict_x, run.stats.dict_y), static_cast<int>(cap));  // the cap binds
    EXPECT_GT(run.stats.forced, 0u);
    EXPECT_EQ(run.memory.dictionary_cap, cap);
    // Every batch from the third on ends at the cap (the first 200 pairs wait in the CME's open
    // 256-pair run: docs/algorithms.md §9.2).
    EXPECT_EQ(run.memory.growth_denied, 13u);
    // Charged what it holds: the CME and view at the cap, the spectral bases it reached.
    EXPECT_EQ(run.shape.capacity, cap);
    EXPECT_EQ(run.shape.atoms, cap);
    EXPECT_GT(run.shape.spectral_live, 0);
    EXPECT_EQ(run.memory.charged_bytes, std::ceil(EstimateModelMemory(c, run.shape).total()));
    EXPECT_GE(run.memory.charged_bytes, LeastAt(c, cap));
    EXPECT_LE(run.memory.charged_bytes, neighbour ? at32 : at64);
    EXPECT_EQ(run.committed, (neighbour ? floor : 0) + run.memory.charged_bytes);
    ASSERT_EQ(run.caps.size(), 15u);
    for (uint32_t logged : run.caps) EXPECT_EQ(logged, cap);
    EXPECT_EQ(run.info.memory().dictionary_cap(), cap);
    EXPECT_EQ(run.info.memory().budget_bytes(), budget);
    EXPECT_EQ(run.info.memory().models(), neighbour ? 2u : 1u);
    EXPECT_EQ(ReplayDigest(run.caps), run.digest);
  }

  // With room to spare the whole growth is granted: no cap in any record, the model grows past
  // 64, and it is charged at the capacity it reached.
  const TightRun roomy = RunTight(1e15, true);
  for (uint32_t logged : roomy.caps) EXPECT_EQ(logged, 0u);
  const int atoms = std::max(roomy.stats.dict_x, roomy.stats.dict_y);
  EXPECT_GT(atoms, 100);
  EXPECT_EQ(roomy.memory.growth_denied, 0u);
  EXPECT_EQ(roomy.shape.capacity, DictionaryCapacity(atoms, 400));
  EXPECT_EQ(roomy.memory.charged_bytes, std::ceil(EstimateModelMemory(c, roomy.shape).total()));
  EXPECT_LT(roomy.memory.charged_bytes, EstimateModelBytesAt(c, DictionaryCapacity(atoms, 400)));
  EXPECT_NE(roomy.digest, RunTight(at64, false).digest);  // the cap changed what was learned
}

// What a fed model holds against what it is charged (EstimateModelMemory at its sizes): the
// heap its learner and its latest view hold, counted by glibc (in-use bytes after building and
// feeding, transients freed), for default models of 1 and 8 channels fed 2,000 pairs of a
// real-shaped series (two cycles mixed into the channels, noise, level shifts: the recipe of
// scripts/fleet_loadgen.py; tests/bench/model_memory prints the parts). The charge may exceed
// the heap by at most 50 % for 1 channel, 35 % for 8, and never falls below it; the most a model holds at its capacity
// (EstimateModelBytesAt, the rule before) is at least twice it for the 8-channel models.
double HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

TEST(MemoryBudgetTest, EstimateFollowsWhatALearnerHolds) {
  constexpr int kFed = 2000;
  for (const int channels : {1, 8}) {
    v1::ModelConfig raw;
    raw.set_name("m");
    raw.set_dim(static_cast<uint32_t>(channels));
    const v1::ModelConfig c = Normalized(raw);
    for (int k = 0; k < 3; ++k) {
      SCOPED_TRACE(std::to_string(channels) + " channels, series " + std::to_string(k));
      const std::vector<double> rows = test_support::RealShapedSeries(k, kFed + 1, channels, 1);
      const double before = HeapInUse();
      auto learner = std::make_unique<StreamingLearner>(LearnerOptionsFor(c));
      for (int off = 0; off < kFed; off += 200) {
        StreamBatch b;
        b.n = 200;
        b.dim = channels;
        b.x = rows.data() + static_cast<size_t>(off) * channels;
        b.y = b.x + channels;
        b.trajectory = true;
        b.producer = "p";
        b.episode = "e";
        ASSERT_TRUE(learner->Observe(b).ok());
      }
      ASSERT_NE(learner->cme(), nullptr);
      const StreamingLearner::SpectralBases bases = learner->SpectralBasesNow();
      std::optional<StreamingLearnerSnapshot> snap = learner->Snapshot();
      ASSERT_TRUE(snap.has_value());
      absl::StatusOr<LearnerView> view = FitViews(*snap, ViewOptionsFor(c));
      ASSERT_TRUE(view.ok()) << view.status();
      snap.reset();  // the refresh's copy goes; the view stays, as in the daemon
      const double held = HeapInUse() - before;
      ModelShape shape;
      shape.capacity = learner->cme()->capacity();
      shape.atoms = std::max(learner->cme()->dict_x_size(), learner->cme()->dict_y_size());
      shape.spectral_live = bases.live;
      shape.spectral_frozen = bases.frozen;
      const ModelMemoryEstimate e = EstimateModelMemory(c, shape);
      // measured (held -> charged / held): 1 channel 1.00, 1.00, 0.76 MiB (capacities 16-32, 32
      // forecast features) -> 1.37, 1.15, 1.15 (the view and lag parts are counted over the
      // capacity's atoms, the glibc heap's in-use count moves by tens of kB with what ran before);
      // 8 channels 19.6, 19.9, 54.7 MiB (capacities 512, 512, 1000) -> 1.14, 1.12, 1.08
      EXPECT_GE(e.total(), held);
      EXPECT_LE(e.total(), (channels == 1 ? 1.5 : 1.35) * held);
      // The CME's part against the CME's own count of its matrices (same allocations).
      const double cme = static_cast<double>(learner->cme()->HeapBytes());
      EXPECT_GE(e.cme + e.micro_batch, cme);
      EXPECT_LE(e.cme + e.micro_batch, 1.3 * cme);  // measured 1.06-1.24
      if (channels == 8) {
        EXPECT_GE(EstimateModelBytesAt(c, shape.capacity), 2 * held);
      }
    }
  }
}

}  // namespace
}  // namespace cmestream::service
