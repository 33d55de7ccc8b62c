// Refresh time of soft state aggregation (docs/algorithms.md §4) for p = 200, 1000, 3000
// states, r = 4, with the dense BDCSVD and with the truncated subspace-iteration SVD. The counts
// come from n = 1e6 transitions of a P = U V^T chain (sparse, as a model's counts are).
// Picks SoftAggregation::Options::truncated_svd_min_states; figures in docs/benchmarks.md.
//   bench_aggregation --benchmark_min_time=0.2
#include <map>

#include <benchmark/benchmark.h>

#include "core/aggregation/soft_aggregation.h"
#include "core/systems/soft_aggregation_chain.h"

namespace cmestream {
namespace {

constexpr int64_t kTransitions = 1000000;

const Eigen::SparseMatrix<double>& Counts(int p) {
  static std::map<int, Eigen::SparseMatrix<double>> cache;
  auto it = cache.find(p);
  if (it != cache.end()) return it->second;
  systems::SoftAggregationChainOptions o;
  o.states = p;
  o.meta_states = 4;
  o.seed = 17;
  const systems::SoftAggregationChain c = *systems::MakeSoftAggregationChain(o);
  const systems::DiscreteTransitions t = systems::SimulateSoftAggregationChain(c, kTransitions, 3);
  std::vector<Eigen::Triplet<double>> tr;
  tr.reserve(t.from.size());
  for (size_t s = 0; s < t.from.size(); ++s) tr.emplace_back(t.from[s], t.to[s], 1.0);
  Eigen::SparseMatrix<double> n(p, p);
  n.setFromTriplets(tr.begin(), tr.end());
  return cache.emplace(p, std::move(n)).first->second;
}

// state.range(0) = p, state.range(1) = 1 for truncated SVD, 0 for dense.
void BM_SoftAggregationFit(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const bool truncated = state.range(1) != 0;
  const Eigen::SparseMatrix<double>& n = Counts(p);
  SoftAggregation::Options o;
  o.meta_states = 4;
  o.truncated_svd_min_states = truncated ? 1 : p + 1;
  double svd = 0, total = 0, iters = 0;
  int64_t runs = 0;
  for (auto _ : state) {
    absl::StatusOr<AggregationResult> res = SoftAggregation::Fit(n, o);
    if (!res.ok()) {
      state.SkipWithError("fit failed");
      break;
    }
    svd += res->summary.svd_seconds;
    total += res->summary.total_seconds;
    iters += res->summary.svd_iterations;
    ++runs;
    benchmark::DoNotOptimize(res->V.data());
  }
  if (runs > 0) {
    state.counters["svd_ms"] = 1e3 * svd / runs;
    state.counters["fit_ms"] = 1e3 * total / runs;
    state.counters["svd_iters"] = iters / runs;
    state.counters["nnz"] = static_cast<double>(n.nonZeros());
  }
}

BENCHMARK(BM_SoftAggregationFit)->ArgsProduct({{100, 200, 400, 1000}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SoftAggregationFit)->Args({3000, 1})->Unit(benchmark::kMillisecond);
// The dense O(p^3) SVD at p = 3000 takes tens of seconds: one iteration is enough.
BENCHMARK(BM_SoftAggregationFit)->Args({3000, 0})->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
