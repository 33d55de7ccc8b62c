// Per-sample cost of SpectralMoments::Observe (docs/algorithms.md §7) at basis sizes m = 160
// and 500 (plus 1000), amortized over its batch flushes, the refresh-time FitSpectrum, and the
// per-pair cost of the prequential score (PrequentialVampE::Observe, rank k = 6).
// Results and the command: docs/benchmarks.md.
#include <memory>
#include <random>

#include <benchmark/benchmark.h>

#include "core/spectral/prequential_score.h"
#include "core/spectral/spectral_estimate.h"
#include "core/spectral/spectral_moments.h"
#include "core/validation/lag_statistics.h"

namespace cmestream {
namespace {

struct Data {
  RowMatrixXd atoms, x;
};

Data MakeData(int m, int d, int n) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> nd;
  Data out;
  out.atoms.resize(m, d);
  out.x.resize(n + 1, d);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < d; ++j) out.atoms(i, j) = nd(rng);
  for (int i = 0; i <= n; ++i)
    for (int j = 0; j < d; ++j) out.x(i, j) = nd(rng);
  return out;
}

void BM_SpectralObserve(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), d = 2, n = 8192;
  const Data data = MakeData(m, d, n);
  SpectralMoments::Options o;
  o.dim = d;
  o.sigma = 0.5;
  o.max_basis = m;
  SpectralMoments acc(o);
  acc.StartEpoch(data.atoms);
  int i = 0;
  for (auto _ : state) {
    acc.Observe(data.x.row(i).data(), data.x.row(i + 1).data());
    i = (i + 1) % n;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["m"] = m;
}
BENCHMARK(BM_SpectralObserve)->Arg(160)->Arg(500)->Arg(1000)->Unit(benchmark::kMicrosecond);

void BM_FitSpectrum(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), d = 2, n = 5000;
  const Data data = MakeData(m, d, n);
  SpectralMoments::Options o;
  o.dim = d;
  o.sigma = 0.5;
  o.max_basis = m;
  SpectralMoments acc(o);
  acc.StartEpoch(data.atoms);
  for (int i = 0; i < n; ++i) acc.Observe(data.x.row(i).data(), data.x.row(i + 1).data());
  const SpectralMomentsSnapshot snap = acc.Snapshot();
  for (auto _ : state) benchmark::DoNotOptimize(FitSpectrum(snap, SpectralFitOptions{}));
  state.counters["m"] = m;
}
BENCHMARK(BM_FitSpectrum)->Arg(160)->Arg(500)->Unit(benchmark::kMillisecond);

void BM_PrequentialObserve(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), d = 2, n = 8192, k = 6;
  const Data data = MakeData(m, d, n);
  auto model = std::make_shared<PrequentialModel>();
  model->basis = data.atoms;
  model->sigma = 0.5;
  model->vamp.su = MatrixXd::Random(m + 1, k);
  model->vamp.v = MatrixXd::Random(m + 1, k);
  PrequentialVampE score(model);
  int i = 0;
  for (auto _ : state) {
    score.Observe(data.x.row(i).data(), data.x.row(i + 1).data());
    i = (i + 1) % n;
  }
  benchmark::DoNotOptimize(score.Score());
  state.SetItemsProcessed(state.iterations());
  state.counters["m"] = m;
}
BENCHMARK(BM_PrequentialObserve)->Arg(160)->Arg(500)->Arg(1000)->Unit(benchmark::kMicrosecond);
// Per-state cost of the lag statistics (docs/algorithms.md §8): 1 vs 4 lags (2, 4, 8 for the
// scaling), basis of 32 atoms in 2-D, Koopman features and count chain together.
void BM_LaggedMomentsObserve(benchmark::State& state) {
  const int lags = static_cast<int>(state.range(0)), d = 2, n = 4096;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  RowMatrixXd atoms(100, d), x(n, d);
  for (int i = 0; i < atoms.rows(); ++i)
    for (int j = 0; j < d; ++j) atoms(i, j) = nd(rng);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) x(i, j) = nd(rng);
  LagStatistics::Options o;
  o.lags.clear();
  for (int k = 1; k <= lags; ++k) o.lags.push_back(k == 1 ? 1 : 5 * (k - 1));
  o.dim = d;
  o.sigma = 0.5;
  LagStatistics acc(o);
  acc.Rebase(atoms, 1);
  int64_t t = 0;
  for (auto _ : state) {
    acc.ObserveState(x.row(t % n).data());
    ++t;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LaggedMomentsObserve)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
