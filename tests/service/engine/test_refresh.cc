// The refresh scheduler's budget (service/engine/refresh.h, REFRESH BUDGET): background
// refreshes of all models together are held to --refresh-budget (counted in refreshes, with a
// fixed charge per refresh and a test clock, so no wall time enters), due models are served
// oldest refresh first (none starved), explicit requests and waiters are served whatever the
// credit, and the views the budget deferred are stated (ModelInfo.view.lag_pairs, the fleet's
// cmestream_views_stale and cmestream_view_lag_pairs); Stop ends a pass of refreshes after the view
// being built.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "service/daemon.h"
#include "service/engine/batch_log.h"
#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/flags.h"
#include "service/observability/metrics.h"
#include "tests/service/registry_batches.h"

namespace cmestream::service {
namespace {

using Clock = RefreshScheduler::Clock;

using test_helpers::Series;

// A registry of `n` small 2-d models (no warm-up) with a refresh interval of 0.5 s, and a
// scheduler on a test clock that the test advances; each refresh is charged `charge` CPU seconds
// and the credit holds at most `burst` seconds of the budget. The test clock moves by seconds a
// tick, so a periodic refresh's other rest (9 times the last build's wall time: a few ms here)
// never decides.
class Fleet {
 public:
  Fleet(int n, double budget, double charge, double burst = RefreshScheduler::kBurstSeconds)
      : registry_({}, metrics_, log_) {
    for (int i = 0; i < n; ++i) {
      v1::ModelConfig c = test_helpers::SmallMapConfig("m" + std::to_string(i));
      c.set_refresh_interval_seconds(0.5);
      EXPECT_TRUE(registry_.Create(c).ok());
      names_.push_back(c.name());
    }
    RefreshScheduler::Options o;
    o.refresh_budget = budget;
    o.charge_per_refresh_for_testing = charge;
    o.burst_seconds = burst;
    o.clock = [this] {
      if (on_clock) on_clock();
      return now_;
    };
    scheduler_ = std::make_unique<RefreshScheduler>(registry_, o);
  }

  // Every model gets `pairs` new pairs (so each has something its view does not reflect).
  void Feed(int pairs) {
    for (const std::string& name : names_) {
      ASSERT_TRUE(
          test_helpers::ApplyBatch(registry_, test_helpers::SmallMapBatch(name, "p", offset_, pairs, offset_)).ok());
    }
    offset_ += static_cast<uint64_t>(pairs);
  }
  // Advances the clock by `seconds` and runs one tick.
  void Tick(double seconds) {
    now_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    scheduler_->RunOnceForTesting();
  }
  uint64_t Version(const std::string& name) {
    std::shared_ptr<const ModelView> v = Get(name)->view();
    return v ? v->version : 0;
  }
  std::shared_ptr<Model> Get(const std::string& name) { return *registry_.Get(name); }
  uint64_t TotalVersions() {
    uint64_t total = 0;
    for (const std::string& name : names_) total += Version(name);
    return total;
  }

  // Called each time the scheduler reads its clock (a tick's start, each refresh's start).
  std::function<void()> on_clock;

  Metrics metrics_;
  NullBatchLog log_;
  ModelRegistry registry_;
  std::vector<std::string> names_;
  Clock::time_point now_ = Clock::now();
  uint64_t offset_ = 0;
  std::unique_ptr<RefreshScheduler> scheduler_;
};

// Ten models always due (new pairs every tick, interval 0.5 s), ticks 10 s apart, a budget of
// a quarter core (2.5 CPU seconds a tick, up to 10 s of it held) and 1.25 CPU seconds a
// refresh: two refreshes a tick, whatever the number of models due. Oldest refresh first: every
// model gets its turn every five ticks (4 of the 40 refreshes in 20 ticks each, never more than
// one apart).
TEST(RefreshBudget, BackgroundRefreshesStayWithinTheBudgetAndReachEveryModel) {
  constexpr double kBudget = 0.25, kCharge = 1.25, kTick = 10, kBurst = 10;
  constexpr int kModels = 10, kTicks = 20;
  Fleet fleet(kModels, kBudget, kCharge, kBurst);
  for (int s = 0; s < kTicks; ++s) {
    fleet.Feed(5);
    fleet.Tick(kTick);
  }
  uint64_t total = 0, least = UINT64_MAX, most = 0;
  for (const std::string& name : fleet.names_) {
    const uint64_t v = fleet.Version(name);
    total += v;
    least = std::min(least, v);
    most = std::max(most, v);
  }
  // The budget: kBudget CPU seconds a second of credit, at most kBurst seconds' worth held.
  const double allowed = (kBudget * kTick * kTicks + kBudget * kBurst) / kCharge;
  EXPECT_LE(static_cast<double>(total), allowed);        // 42
  EXPECT_GE(static_cast<double>(total), allowed - 3.0);  // measured 40: the budget is used
  EXPECT_GE(least, 3u) << "a model was starved";         // measured 4 each
  EXPECT_LE(most - least, 1u) << "unfair: " << least << " to " << most << " refreshes";
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_refreshes_total", "trigger", "periodic"), static_cast<double>(total));
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_refreshes_total", "trigger", "requested"), 0.0);
  EXPECT_DOUBLE_EQ(Series(fleet.metrics_, "cmestream_refresh_cpu_seconds_total"), kCharge * static_cast<double>(total));
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_refresh_budget"), kBudget);
  // Stale views stated: at the last scan 10 models were due and 2 refreshed.
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_views_stale"), kModels - kBudget * kTick / kCharge);
  // Each model's lag is what it learned after its view's snapshot; the fleet's is their sum
  // (reported at the last scan, before that tick's refreshes: at least the current sum).
  double lag_sum = 0;
  for (const std::string& name : fleet.names_) {
    std::shared_ptr<Model> m = fleet.Get(name);
    const v1::ModelInfo info = m->Describe();
    EXPECT_EQ(info.view().lag_pairs(), m->stats().progress - m->view()->progress) << name;
    EXPECT_EQ(info.view().lag_pairs() % 5, 0u);
    lag_sum += static_cast<double>(info.view().lag_pairs());
  }
  EXPECT_GT(lag_sum, 0);
  EXPECT_GE(Series(fleet.metrics_, "cmestream_view_lag_pairs"), lag_sum);
  EXPECT_GT(Series(fleet.metrics_, "cmestream_view_stale_age_max_seconds"), 30.0);  // a turn: 50 s
}

// A budget large enough for every due model: each is refreshed once per interval it has new
// pairs in, nothing is stale, and a model with nothing new is never rebuilt.
TEST(RefreshBudget, AnAmpleBudgetRefreshesEveryDueModelAndNoModelWithoutNewPairs) {
  Fleet fleet(4, /*budget=*/100, /*charge=*/0.01);
  for (int s = 0; s < 5; ++s) {
    fleet.Feed(5);
    fleet.Tick(20.0);
  }
  for (const std::string& name : fleet.names_) EXPECT_EQ(fleet.Version(name), 5u) << name;
  for (int s = 0; s < 5; ++s) fleet.Tick(20.0);  // no new pairs: no refresh
  for (const std::string& name : fleet.names_) EXPECT_EQ(fleet.Version(name), 5u) << name;
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_views_stale"), 0.0);
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_view_lag_pairs"), 0.0);
  EXPECT_EQ(fleet.Get("m0")->Describe().view().lag_pairs(), 0u);
}

// With the credit spent (one refresh charged 100 CPU seconds against a quarter core: 400 s of
// debt), no background refresh runs, but a waiter and a Request are answered at the next tick.
TEST(RefreshBudget, RequestsAndWaitersAreServedWhenTheBudgetIsSpent) {
  Fleet fleet(3, /*budget=*/0.25, /*charge=*/100);
  fleet.Feed(20);
  fleet.Tick(1.0);  // one background refresh, then the debt
  EXPECT_EQ(fleet.Version("m0") + fleet.Version("m1") + fleet.Version("m2"), 1u);
  EXPECT_LT(fleet.scheduler_->credit_for_testing(), -99);
  const uint64_t before = fleet.Version("m0") + fleet.Version("m1") + fleet.Version("m2");
  fleet.Feed(20);
  for (int s = 0; s < 10; ++s) fleet.Tick(1.0);
  EXPECT_EQ(fleet.Version("m0") + fleet.Version("m1") + fleet.Version("m2"), before)
      << "a background refresh ran in debt";
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_views_stale"), 3.0);

  // A waiter: answered with a view reflecting every pair at the next tick.
  std::shared_ptr<Model> m1 = fleet.Get("m1");
  const uint64_t target = m1->stats().progress;
  absl::StatusOr<std::shared_ptr<const ModelView>> answer = absl::UnknownError("not called");
  fleet.scheduler_->Wait(m1, target, fleet.now_ + std::chrono::seconds(60),
                         [&](absl::StatusOr<std::shared_ptr<const ModelView>> v) { answer = std::move(v); });
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnknown);  // not yet: the next tick
  fleet.Tick(0.01);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ((*answer)->progress, target);
  EXPECT_EQ(m1->Describe().view().lag_pairs(), 0u);

  // A Request (Refresh without wait): built at the next tick.
  std::shared_ptr<Model> m2 = fleet.Get("m2");
  const uint64_t v2 = fleet.Version("m2");
  fleet.scheduler_->Request(m2);
  fleet.Tick(0.01);
  EXPECT_EQ(fleet.Version("m2"), v2 + 1);
  EXPECT_EQ(m2->view()->progress, m2->stats().progress);
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_refreshes_total", "trigger", "requested"), 2.0);
  EXPECT_EQ(Series(fleet.metrics_, "cmestream_refreshes_total", "trigger", "periodic"), 1.0);
  EXPECT_LT(fleet.scheduler_->credit_for_testing(), -290);  // -297.2: requests are charged too
}

// Stop during a pass of background refreshes (an ample budget, 20 models due) ends the pass
// after the view being built, so a shutdown does not wait for every due model's view. Stop is
// called when the third refresh reads the clock (two views built): that view is finished, no
// other.
TEST(RefreshBudget, StopEndsAPassOfRefreshesAfterTheViewBeingBuilt) {
  Fleet fleet(20, /*budget=*/1000, /*charge=*/0.001);
  fleet.Feed(5);
  bool stopped = false;
  fleet.on_clock = [&] {
    if (!stopped && fleet.TotalVersions() == 2) {
      stopped = true;
      fleet.scheduler_->Stop();
    }
  };
  fleet.Tick(1.0);
  ASSERT_TRUE(stopped);
  EXPECT_EQ(fleet.TotalVersions(), 3u);  // without the check: all 20
}

// --refresh-budget: 0.25 of a core by default (the scheduler's default), parsed in both forms,
// and a value outside (0, 1024] (or not a number) is refused with the flag named.
TEST(RefreshBudget, FlagAndItsChecks) {
  auto defaults = ParseFlags({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->options.refresh_budget, RefreshScheduler::kDefaultRefreshBudget);
  EXPECT_EQ(defaults->options.refresh_budget, 0.25);
  EXPECT_TRUE(defaults->options.Validate().ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--refresh-budget", "1.5"}, std::vector<std::string>{"--refresh-budget=1.5"}}) {
    auto set = ParseFlags(args);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->options.refresh_budget, 1.5);
    EXPECT_TRUE(set->options.Validate().ok()) << set->options.Validate();
  }
  EXPECT_FALSE(ParseFlags({"--refresh-budget", "a quarter"}).ok());
  for (double bad : std::vector<double>{0.0, -0.25, 1025.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    DaemonOptions o;
    o.refresh_budget = bad;
    const absl::Status s = o.Validate();
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--refresh-budget is"), std::string::npos) << s;
  }
  DaemonOptions most;
  most.refresh_budget = 1024;
  EXPECT_TRUE(most.Validate().ok()) << most.Validate();
}

}  // namespace
}  // namespace cmestream::service
