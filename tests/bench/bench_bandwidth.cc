// Cost of the automatic bandwidth selection (core/cme/bandwidth.h, docs/algorithms.md §1.11) on
// the warm-up a scalar stream gives a default model: 1,000 pairs (x_t, x_{t+1}) of one value.
//
//   ./build/tests/bench/bench_bandwidth --benchmark_min_time=1
//
// BM_SelectBandwidthScalar/stream/landmarks: one SelectBandwidth call per iteration, with
// scalar_landmarks = landmarks (64: the default, docs/algorithms.md §1.11.2; 0: the general
// rule's 200 strided landmarks, with the sorted median of §1.11.2), on
//   0 double well (systems::SimulateDoubleWell, beta 3, dt 0.1),
//   1 a noisy sine (period 40 samples, noise 0.2),
//   2 NAB-like level shifts (a level held for ~200 samples, noise, rare spikes),
//   3 a quantized series (a noisy sine rounded to integers: most distances repeat).
// Counters: sigma (the choice), frac (sigma / the median distance: which candidate won).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include "core/cme/bandwidth.h"
#include "core/systems/duffing.h"

namespace cmestream {
namespace {

constexpr int kPairs = 1000;

// States 0..kPairs of stream `which` (see the header comment).
VectorXd ScalarStream(int which) {
  VectorXd s(kPairs + 1);
  std::mt19937_64 rng(11 + which);
  std::normal_distribution<double> g;
  constexpr double kTwoPi = 6.283185307179586;
  switch (which) {
    case 0: {
      const auto w = systems::SimulateDoubleWell(kPairs, 1);
      s.head(kPairs) = w.x.col(0);
      s(kPairs) = w.y(kPairs - 1, 0);
      break;
    }
    case 1:
      for (int t = 0; t <= kPairs; ++t) s(t) = std::sin(kTwoPi * t / 40.0) + 0.2 * g(rng);
      break;
    case 2: {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      double level = 10.0;
      for (int t = 0; t <= kPairs; ++t) {
        if (u(rng) < 1.0 / 200) level = 10.0 + 3.0 * g(rng);
        s(t) = level + 0.3 * g(rng) + (u(rng) < 0.005 ? 5.0 : 0.0);
      }
      break;
    }
    default:
      for (int t = 0; t <= kPairs; ++t) s(t) = std::round(4.0 * std::sin(kTwoPi * t / 60.0) + 0.5 * g(rng));
      break;
  }
  return s;
}

void BM_SelectBandwidthScalar(benchmark::State& state) {
  const VectorXd s = ScalarStream(static_cast<int>(state.range(0)));
  const RowMatrixXd x = s.head(kPairs), y = s.tail(kPairs);
  BandwidthSelectionOptions options;
  options.scalar_landmarks = static_cast<int>(state.range(1));
  BandwidthSelection sel;
  for (auto _ : state) {
    sel = SelectBandwidth(x, y, options);
    // Not DoNotOptimize(sel.chosen): Debian's Benchmark 1.7 ("+r,m" on a double) corrupted the
    // value under gcc 12 -O2.
    benchmark::DoNotOptimize(sel.scores.data());
  }
  state.SetItemsProcessed(state.iterations() * kPairs);
  state.counters["sigma"] = sel.chosen;
  state.counters["frac"] = sel.chosen / sel.median_distance;
}
BENCHMARK(BM_SelectBandwidthScalar)
    ->ArgsProduct({{0, 1, 2, 3}, {64, 0}})
    ->ArgNames({"stream", "landmarks"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
