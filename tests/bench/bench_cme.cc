// Per-sample cost of CompressedCme::Observe at fixed dictionary sizes, and dictionary size vs
// the compression budget epsilon on Duffing. Results and the command: docs/benchmarks.md.
#include <algorithm>
#include <vector>

#include <benchmark/benchmark.h>

#include "core/cme/compressed_cme.h"
#include "core/koopman/koopman.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

// Dictionary of exactly m atoms per side (max_dict = m, tiny epsilon so it fills), then every
// timed sample takes the forced-projection path, which does the same O(m^2) work as a regular
// compression (three m-by-m matrix-vector products and one rank-1 update of W).
// A narrow kernel keeps new points far (in feature space) from the span, so both sides fill
// to the cap; the per-sample cost does not depend on sigma.
CompressedCme FilledLearner(int m, const systems::Transitions& data, int* next) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = m;
  o.epsilon = 1e-7;
  o.sigma = 0.1;
  CompressedCme cme(o);
  const int n = static_cast<int>(data.x.rows());
  int i = 0;
  for (int guard = 0; guard < 200 && (cme.dict_x_size() < m || cme.dict_y_size() < m); ++guard) {
    const int len = std::min(500, n - i);
    cme.ObserveBatch(data.x.middleRows(i, len), data.y.middleRows(i, len));
    i = (i + len) % n;
  }
  *next = i;
  return cme;
}

// Sequential: one Observe() per pair (the pre-batching hot path).
void BM_ObserveAtDictionarySize(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const auto data = systems::SimulateDuffing(40000, 1);
  int i = 0;
  CompressedCme cme = FilledLearner(m, data, &i);
  for (auto _ : state) {
    cme.Observe(data.x.row(i).data(), data.y.row(i).data());
    i = (i + 1) % 40000;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["m_x"] = cme.dict_x_size();
  state.counters["m_y"] = cme.dict_y_size();
}
BENCHMARK(BM_ObserveAtDictionarySize)->Arg(160)->Arg(500)->Arg(1000)->Unit(benchmark::kMicrosecond);

// Batched: ObserveBatch() of B pairs per call, with the per-pair nearest atoms returned (what
// the daemon needs for the transition counts). items/s = pairs/s.
void BM_ObserveBatchAtDictionarySize(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  const auto data = systems::SimulateDuffing(40000, 1);
  int i = 0;
  CompressedCme cme = FilledLearner(m, data, &i);
  std::vector<int> nx(batch), ny(batch);
  for (auto _ : state) {
    if (i + batch > 40000) i = 0;
    cme.ObserveBatch(data.x.middleRows(i, batch), data.y.middleRows(i, batch), absl::MakeSpan(nx), absl::MakeSpan(ny));
    i += batch;
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["m_x"] = cme.dict_x_size();
  state.counters["m_y"] = cme.dict_y_size();
}
BENCHMARK(BM_ObserveBatchAtDictionarySize)
    ->ArgsProduct({{160, 500, 1000}, {64, 256, 1000}})
    ->Unit(benchmark::kMicrosecond);

// Memory that follows use: heap bytes held by an empty learner and after 200 X atoms (Duffing,
// default options but max_dict = 1000 and epsilon 1e-4 so that 200 atoms come quickly). Before
// capacity growth, every learner held 6-7 max_dict^2 doubles from construction (48 MB here).
void BM_LearnerMemory(benchmark::State& state) {
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = 1000;
  o.epsilon = 1e-4;
  const auto data = systems::SimulateDuffing(8000, 8);
  int64_t empty = 0, after = 0, mx = 0, cap = 0;
  for (auto _ : state) {
    CompressedCme cme(o);
    empty = cme.HeapBytes() + static_cast<int64_t>(sizeof(CompressedCme));
    for (int t = 0; t < 8000 && cme.dict_x_size() < 200; t += 50) {
      cme.ObserveBatch(data.x.middleRows(t, 50), data.y.middleRows(t, 50));
    }
    after = cme.HeapBytes() + static_cast<int64_t>(sizeof(CompressedCme));
    mx = cme.dict_x_size();
    cap = cme.capacity();
  }
  state.counters["bytes_empty"] = static_cast<double>(empty);
  state.counters["bytes_after"] = static_cast<double>(after);
  state.counters["m_x_after"] = static_cast<double>(mx);
  state.counters["capacity_after"] = static_cast<double>(cap);
}
BENCHMARK(BM_LearnerMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

double BasinAccuracy(const CompressedCme& cme, double dt) {
  const int side = 30;
  RowMatrixXd g(side * side, 2);
  for (int a = 0; a < side; ++a)
    for (int b = 0; b < side; ++b) g.row(a * side + b) << -2 + 4 * (a + 0.5) / side, -2 + 4 * (b + 0.5) / side;
  const Eigen::VectorXi truth = systems::DuffingBasin(g);
  KoopmanOptions ko;
  ko.top = 2;
  ko.dt = dt;
  const KoopmanDecomposition kd = KoopmanDecomposition::Fit(CmeSnapshot::From(cme), ko).value();
  RowMatrixXd att(2, 2);
  att << 1, 0, -1, 0;
  const MatrixXcd ga = kd.Evaluate(att), gp = kd.Evaluate(g);
  int ok = 0;
  for (int p = 0; p < g.rows(); ++p) {
    const int label = (gp.row(p) - ga.row(0)).squaredNorm() <= (gp.row(p) - ga.row(1)).squaredNorm() ? 1 : -1;
    ok += label == truth[p];
  }
  return static_cast<double>(ok) / g.rows();
}

// Dictionary size and basin accuracy after n = 5000 Duffing pairs, per epsilon (x 1e-5 in the arg).
void BM_DuffingDictionaryVsEpsilon(benchmark::State& state) {
  const double eps = state.range(0) * 1e-5;
  const bool one_sided = state.range(1) != 0;
  const auto data = systems::SimulateDuffing(5000, 7);
  CompressedCme::Options o;
  o.dim = 2;
  o.epsilon = eps;
  o.one_sided = one_sided;
  o.max_dict = 1500;  // memory 6 * 1500^2 doubles; no run reaches it
  int mx = 0, my = 0;
  double acc = 0;
  for (auto _ : state) {
    CompressedCme cme(o);
    cme.ObserveBatch(data.x, data.y);
    mx = cme.dict_x_size();
    my = cme.dict_y_size();
    state.PauseTiming();
    acc = BasinAccuracy(cme, 0.25);
    state.ResumeTiming();
  }
  state.counters["epsilon"] = eps;
  state.counters["one_sided"] = one_sided;
  state.counters["m_x"] = mx;
  state.counters["m_y"] = my;
  state.counters["basin_acc"] = acc;
}
BENCHMARK(BM_DuffingDictionaryVsEpsilon)
    ->ArgsProduct({{25, 50, 100, 200, 400, 800}, {1, 0}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
