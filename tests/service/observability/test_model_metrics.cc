// The per-model series under --metrics-per-model all, none and top-N (service/observability/
// metrics.h, per_model_series.h): which models have series, that a model entering the top N shows
// its totals, and the fleet series whatever the choice.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "service/observability/metrics.h"
#include "tests/service/registry_batches.h"

namespace cmestream::service {
namespace {

using test_helpers::Series;

// The models that have a samples_ingested series, by name.
std::vector<std::string> ModelsWithSeries(Metrics& metrics) {
  std::vector<std::string> names;
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    if (f.name != "cmestream_samples_ingested_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "model") names.push_back(l.value);
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Number of series with a model label, over every family.
int SeriesWithModelLabel(Metrics& metrics) {
  int n = 0;
  for (const prometheus::MetricFamily& f : metrics.registry()->Collect()) {
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) n += l.name == "model" && !l.value.empty();
    }
  }
  return n;
}

// A model with alarms: its first OnAlarms counts from the total it reports (a restored model's
// earlier alarms are not counted again), as the daemon's first batch of a new model does.
std::shared_ptr<ModelMetrics> NewModel(Metrics& metrics, const std::string& name) {
  std::shared_ptr<ModelMetrics> m = metrics.ForModel(name);
  m->OnAlarms(0, 0);
  return m;
}

void Feed(ModelMetrics& m, uint64_t pairs, uint64_t alarms_total) {
  m.OnBatchApplied(pairs, 0, 0, {0, 3, 4});
  m.OnAlarms(0.5, alarms_total);
}

TEST(PerModelSeries, AllKeepsEverySeriesNoneKeepsOnlyTheFleetOnes) {
  Metrics all;
  auto a = NewModel(all, "a");
  Feed(*a, 100, 0);
  Feed(*a, 50, 2);
  EXPECT_EQ(Series(all, "cmestream_samples_ingested_total", "model", "a"), 150);
  EXPECT_EQ(Series(all, "cmestream_change_alarms_total", "model", "a"), 2);
  EXPECT_EQ(Series(all, "cmestream_models_with_series"), 1);
  a->Remove();  // deleted
  EXPECT_EQ(Series(all, "cmestream_models_with_series"), 0);
  EXPECT_EQ(SeriesWithModelLabel(all), 0);
  EXPECT_EQ(Series(all, "cmestream_fleet_samples_ingested_total"), 150);

  Metrics none;
  none.SetPerModel(*PerModelSeries::Parse("none"));
  auto b = NewModel(none, "b");
  auto c = NewModel(none, "c");
  Feed(*b, 100, 0);
  Feed(*c, 70, 3);
  EXPECT_EQ(SeriesWithModelLabel(none), 0);
  EXPECT_EQ(Series(none, "cmestream_models_with_series"), 0);
  // The fleet series count every model.
  EXPECT_EQ(Series(none, "cmestream_fleet_samples_ingested_total"), 170);
  EXPECT_EQ(Series(none, "cmestream_fleet_change_alarms_total"), 3);
}

TEST(PerModelSeries, TopNFollowsAlarmsThenTrafficAndShowsTotalsOnEntry) {
  Metrics metrics;
  metrics.SetPerModel(*PerModelSeries::Parse("top-2"));
  std::vector<std::shared_ptr<ModelMetrics>> m;
  for (const char* name : {"m0", "m1", "m2", "m3"}) m.push_back(NewModel(metrics, name));
  // Free slots go to the first models created.
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"m0", "m1"}));
  const int per_model = SeriesWithModelLabel(metrics) / 2;
  EXPECT_GE(per_model, 25);  // every family of a model, as under "all"

  // A minute of traffic: m3 raises an alarm (and learns least), m2 is the busiest.
  Feed(*m[0], 10, 0);
  Feed(*m[1], 20, 0);
  Feed(*m[2], 5000, 0);
  Feed(*m[3], 5, 1);
  m[3]->SetDictionaryBudget(1000);
  metrics.RankTopModelsNow();
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"m2", "m3"}));
  EXPECT_EQ(Series(metrics, "cmestream_models_with_series"), 2);
  // Entering the top N shows the totals learned without series, not 0.
  EXPECT_EQ(Series(metrics, "cmestream_samples_ingested_total", "model", "m2"), 5000);
  EXPECT_EQ(Series(metrics, "cmestream_change_alarms_total", "model", "m3"), 1);
  EXPECT_EQ(Series(metrics, "cmestream_dictionary_budget", "model", "m3"), 1000);
  EXPECT_EQ(SeriesWithModelLabel(metrics), 2 * per_model);

  // Updates without series are kept: m0 learns 90 more and re-enters with 100.
  Feed(*m[0], 90, 0);
  Feed(*m[1], 1, 0);
  metrics.RankTopModelsNow();  // window: m0 90, m1 1, m2 0, m3 0 (ties keep the series where they are)
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"m0", "m1"}));
  EXPECT_EQ(Series(metrics, "cmestream_samples_ingested_total", "model", "m0"), 100);
  EXPECT_EQ(Series(metrics, "cmestream_samples_ingested_total", "model", "m1"), 21);

  // An idle fleet keeps its series where they are.
  metrics.RankTopModelsNow();
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"m0", "m1"}));

  // A deleted model's slot goes to the next ranking's best; the fleet totals never drop.
  m[0]->Remove();
  Feed(*m[3], 1, 1);
  metrics.RankTopModelsNow();
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"m1", "m3"}));
  EXPECT_EQ(Series(metrics, "cmestream_fleet_samples_ingested_total"), 10 + 20 + 5000 + 5 + 90 + 1 + 1);
  EXPECT_EQ(Series(metrics, "cmestream_fleet_change_alarms_total"), 1);  // m3's alarms_total stayed 1
  m.clear();
  EXPECT_EQ(SeriesWithModelLabel(metrics), 0);
}

TEST(PerModelSeries, RankingWaitsAMinuteBetweenRanks) {
  Metrics metrics;
  metrics.SetPerModel(*PerModelSeries::Parse("top-1"));
  auto a = NewModel(metrics, "a");
  auto b = NewModel(metrics, "b");
  const auto t0 = std::chrono::steady_clock::now();
  Feed(*b, 10, 0);
  metrics.MaybeRankTopModels(t0);  // the first ranking
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"b"}));
  Feed(*a, 10, 0);
  metrics.MaybeRankTopModels(t0 + std::chrono::seconds(30));  // too early: nothing moves
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"b"}));
  metrics.MaybeRankTopModels(t0 + std::chrono::seconds(61));
  EXPECT_EQ(ModelsWithSeries(metrics), (std::vector<std::string>{"a"}));
}

}  // namespace
}  // namespace cmestream::service
