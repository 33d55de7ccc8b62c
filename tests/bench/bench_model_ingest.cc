// The whole per-model ingest path in process: service::Model::Ingest on validated batches,
// i.e. the CME (micro-batched), transition counts, embedding moments and spectral moments of
// one model, with a null log (no WAL I/O). The daemon adds validation, the WAL and transport
// (docs/benchmarks.md "End-to-end ingest over loopback" measures those).
//
//   ./build/tests/bench/bench_model_ingest --benchmark_min_time=1
//
// BM_ModelIngest/B: Duffing pairs (core/systems) in batches of B, default model options with a
// fixed sigma = 0.5 (the demo's setting; about 190 X atoms on the Duffing box). The timed region
// starts once the dictionary has stopped growing (20 000 pairs fed first), so the figure is the
// steady per-pair cost at that dictionary size.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

#include "core/systems/duffing.h"
#include "service/batch.h"
#include "service/batch_log.h"
#include "service/metrics.h"
#include "service/model.h"
#include "service/model_config.h"
#include "service/refresh.h"

namespace cmestream {
namespace {

v1::IngestBatch MakeBatch(const systems::Transitions& t, int64_t start, int64_t n) {
  v1::IngestBatch b;
  b.set_model("bench");
  for (int64_t i = start; i < start + n; ++i) {
    for (int j = 0; j < 2; ++j) {
      b.add_x(t.x(i % t.x.rows(), j));
      b.add_y(t.y(i % t.y.rows(), j));
    }
  }
  return b;
}

void BM_ModelIngest(benchmark::State& state) {
  const int64_t batch = state.range(0);
  v1::ModelConfig in;
  in.set_name("bench");
  in.set_dim(2);
  in.set_sigma(0.5);
  in.set_dt(0.25);
  const absl::StatusOr<v1::ModelConfig> config = service::NormalizeModelConfig(in, {});
  if (!config.ok()) {
    state.SkipWithError(std::string(config.status().message()).c_str());
    return;
  }
  service::Metrics metrics;
  service::NullBatchLog log;
  service::Model model(*config, metrics.ForModel("bench"), &log);
  const systems::Transitions data = systems::SimulateDuffing(60000, 3);
  uint64_t index = 0;
  auto feed = [&](const v1::IngestBatch& msg) {
    const service::BatchCheck check = service::ValidateBatch(msg, 2, index);
    if (!check.status.ok() || !model.Ingest(check.batch, "", 0, index++, "").ok()) std::abort();
  };
  for (int64_t s = 0; s < 20000; s += 1000) feed(MakeBatch(data, s, 1000));
  // Pre-built messages: the loop times validation + Ingest, not protobuf construction.
  std::vector<v1::IngestBatch> msgs;
  for (int64_t s = 20000; s < 60000; s += batch) msgs.push_back(MakeBatch(data, s, batch));
  size_t next = 0;
  for (auto _ : state) {
    feed(msgs[next]);
    next = (next + 1) % msgs.size();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["dict_x"] = static_cast<double>(model.stats().dict_x);
}
BENCHMARK(BM_ModelIngest)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// BM_ModelRefresh/N: one refresh (RefreshModel: the snapshot and every sub-view the default
// model builds) after N Duffing pairs in batches of 1000, same model as above (sigma 0.5).
// Counters: seconds per sub-view, averaged over the iterations, and the dictionary size.
void BM_ModelRefresh(benchmark::State& state) {
  const int64_t n = state.range(0);
  v1::ModelConfig in;
  in.set_name("bench");
  in.set_dim(2);
  in.set_sigma(0.5);
  in.set_dt(0.25);
  const absl::StatusOr<v1::ModelConfig> config = service::NormalizeModelConfig(in, {});
  if (!config.ok()) {
    state.SkipWithError(std::string(config.status().message()).c_str());
    return;
  }
  service::Metrics metrics;
  service::NullBatchLog log;
  service::Model model(*config, metrics.ForModel("bench"), &log);
  const systems::Transitions data = systems::SimulateDuffing(n, 3);
  uint64_t index = 0;
  for (int64_t s = 0; s < n; s += 1000) {
    const service::BatchCheck check =
        service::ValidateBatch(MakeBatch(data, s, std::min<int64_t>(1000, n - s)), 2, index);
    if (!check.status.ok() || !model.Ingest(check.batch, "", 0, index++, "").ok()) std::abort();
  }
  std::map<std::string, double> seconds;
  for (auto _ : state) {
    const std::shared_ptr<const service::ModelView> view = service::RefreshModel(model);
    if (view == nullptr) std::abort();
    for (const auto& [name, s] : view->view_seconds) seconds[name] += s;
  }
  for (const auto& [name, s] : seconds) {
    state.counters[name] = benchmark::Counter(s / static_cast<double>(state.iterations()));
  }
  state.counters["dict_x"] = static_cast<double>(model.stats().dict_x);
}
BENCHMARK(BM_ModelRefresh)->Arg(20000)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
