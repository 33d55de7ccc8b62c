// Per-sample cost of CompressedCme::Observe at fixed dictionary sizes, and dictionary size vs
// the compression budget epsilon on Duffing. Results and the command: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include "core/cme/compressed_cme.h"
#include "core/koopman/koopman.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

// Dictionary of exactly m atoms per side (max_dict = m, tiny epsilon so it fills), then every
// timed sample takes the forced-projection path, which does the same O(m^2) work as a regular
// compression (three m-by-m matrix-vector products and one rank-1 update of W).
void BM_ObserveAtDictionarySize(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  CompressedCme::Options o;
  o.dim = 2;
  o.max_dict = m;
  o.epsilon = 1e-7;
  // A narrow kernel keeps new points far (in feature space) from the span, so both sides fill
  // to the cap; the per-sample cost does not depend on sigma.
  o.sigma = 0.1;
  CompressedCme cme(o);
  const auto data = systems::SimulateDuffing(40000, 1);
  int i = 0;
  for (int guard = 0; guard < 200000 && (cme.dict_x_size() < m || cme.dict_y_size() < m); ++guard) {
    cme.Observe(data.x.row(i).data(), data.y.row(i).data());
    i = (i + 1) % 40000;
  }
  for (auto _ : state) {
    cme.Observe(data.x.row(i).data(), data.y.row(i).data());
    i = (i + 1) % 40000;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["m_x"] = cme.dict_x_size();
  state.counters["m_y"] = cme.dict_y_size();
}
BENCHMARK(BM_ObserveAtDictionarySize)->Arg(100)->Arg(300)->Arg(1000)->Unit(benchmark::kMicrosecond);

double BasinAccuracy(const CompressedCme& cme, double dt) {
  const int side = 30;
  RowMatrixXd g(side * side, 2);
  for (int a = 0; a < side; ++a)
    for (int b = 0; b < side; ++b) g.row(a * side + b) << -2 + 4 * (a + 0.5) / side, -2 + 4 * (b + 0.5) / side;
  const Eigen::VectorXi truth = systems::DuffingBasin(g);
  KoopmanOptions ko;
  ko.top = 2;
  ko.dt = dt;
  const KoopmanDecomposition kd = ComputeKoopman(CmeSnapshot::From(cme), ko);
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
