// Per-sample cost of the streaming embedding moments (S_x, S_y, P_h by batched GEMM) and the
// refresh time (docs/algorithms.md §3), for N = 128, 512, 1024 random Fourier features.
#include <random>

#include <benchmark/benchmark.h>

#include "core/embedding/state_embedding.h"

namespace cmestream {
namespace {

RowMatrixXd RandomPoints(int n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  RowMatrixXd x(n, d);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < d; ++a) x(i, a) = g(rng);
  return x;
}

// One iteration = 1024 pairs through Observe (buffered, GEMM every batch_size pairs).
void BM_MomentsObserve(benchmark::State& state) {
  const int n_features = static_cast<int>(state.range(0));
  const int d = 2, chunk = 1024;
  auto f = std::make_shared<const FeatureMap>(*FeatureMap::Rff(d, n_features, 0.5, 1));
  EmbeddingMoments::Options o;
  o.batch_size = static_cast<int>(state.range(1));
  EmbeddingMoments m(f, o);
  const RowMatrixXd x = RandomPoints(chunk, d, 2), y = RandomPoints(chunk, d, 3);
  for (auto _ : state) {
    for (int t = 0; t < chunk; ++t) m.Observe(x.row(t).data(), y.row(t).data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * chunk);
}
BENCHMARK(BM_MomentsObserve)
    ->ArgNames({"N", "B"})
    ->Args({128, 64})
    ->Args({256, 64})
    ->Args({512, 64})
    ->Args({1024, 64})
    ->Args({512, 1})
    ->Unit(benchmark::kMillisecond);

// Same, on one trajectory (x_{t+1} = y_t, a noisy linear map): each state's features are
// computed once, so about half the cosines of BM_MomentsObserve (whose independent pairs cost
// what every stream cost before the reuse). Counter `reused`: fraction of pairs reusing.
void BM_MomentsObserveTrajectory(benchmark::State& state) {
  const int n_features = static_cast<int>(state.range(0));
  const int d = 2, chunk = 1024;
  auto f = std::make_shared<const FeatureMap>(*FeatureMap::Rff(d, n_features, 0.5, 1));
  EmbeddingMoments::Options o;
  o.batch_size = static_cast<int>(state.range(1));
  EmbeddingMoments m(f, o);
  const RowMatrixXd noise = RandomPoints(chunk + 1, d, 2);
  RowMatrixXd s(chunk + 1, d);
  s.row(0) = noise.row(0);
  for (int t = 0; t < chunk; ++t) s.row(t + 1) = 0.9 * s.row(t) + 0.3 * noise.row(t + 1);
  for (auto _ : state) {
    for (int t = 0; t < chunk; ++t) m.Observe(s.row(t).data(), s.row(t + 1).data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * chunk);
  state.counters["reused"] = static_cast<double>(m.reused_features()) / static_cast<double>(m.samples());
}
BENCHMARK(BM_MomentsObserveTrajectory)
    ->ArgNames({"N", "B"})
    ->Args({256, 64})
    ->Args({512, 64})
    ->Unit(benchmark::kMillisecond);

// Snapshot (copy) + ComputeStateEmbedding (two N x N eigendecompositions, whitened SVD).
void BM_Refresh(benchmark::State& state) {
  const int n_features = static_cast<int>(state.range(0));
  const int d = 2, n = 4096;
  auto f = std::make_shared<const FeatureMap>(*FeatureMap::Rff(d, n_features, 0.5, 1));
  EmbeddingMoments m(f, {});
  const RowMatrixXd x = RandomPoints(n, d, 2);
  const RowMatrixXd y = 0.9 * x + 0.3 * RandomPoints(n, d, 3);
  if (!m.ObserveBatch(x, y).ok()) state.SkipWithError("observe failed");
  StateEmbedding::Options o;
  o.rank = 4;
  int kept = 0;
  for (auto _ : state) {
    const EmbeddingMomentsSnapshot s = m.Snapshot();
    const absl::StatusOr<StateEmbedding> e = ComputeStateEmbedding(s, o);
    kept = e->summary().kept_x;
    benchmark::DoNotOptimize(e);
  }
  state.counters["J"] = kept;
}
BENCHMARK(BM_Refresh)->Arg(128)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
