// Per-pair cost of a continuous StreamingLearner (core/stream/streaming_learner.h) with the
// default estimators: the CME in runs, the counts, the embedding moments, the spectral moments,
// the lag statistics (lag 1), the forecast regression and a prequential score (installed as a
// published view would install it).
//
//   ./build/tests/bench/bench_learner --benchmark_min_time=2
//
// BM_Learner/d/traj: states of a d-dimensional delay vector of a noisy two-tone signal (sigma
// fixed at 0.5 sqrt(d)), fed in batches of 256 pairs, either as trajectories (traj = 1: y_t is
// x_{t+1}, the wire's `states` form) or as the same pairs shuffled (traj = 0: no point repeats).
// BM_LearnerDefaults/d/reduce: below.
// BM_Learner/d/traj/alarms: alarms = 1 adds the change alarms (AlarmMonitor, docs/algorithms.md
// §12.8), every pair scored before it is learned: their cost is the difference to alarms = 0.
// The timed region starts after 6000 pairs (the dictionary has about stopped growing; counter
// dict_x). One iteration is one batch.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "core/alarms/alarm_monitor.h"
#include "core/spectral/prequential_score.h"
#include "core/stream/streaming_learner.h"
#include "core/stream/streaming_learner_options.h"
#include "service/engine/helper_pool.h"
#include "tests/bench/delay_states.h"

namespace cmestream {
namespace {

using bench::DelayStates;

constexpr int64_t kWarm = 6000, kTimed = 8192, kBatch = 256;

// A rank-3 VAMP model over the spectral basis (random factors: the cost does not depend on them).
std::unique_ptr<PrequentialVampE> MakePrequential(const StreamingLearner& l) {
  std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  if (!snap || !snap->spectral || snap->spectral->basis.rows() == 0) return nullptr;
  auto model = std::make_shared<PrequentialModel>();
  model->basis = snap->spectral->basis;
  model->sigma = snap->spectral->sigma;
  const Eigen::Index m = model->basis.rows();
  std::mt19937_64 rng(4);
  std::normal_distribution<double> g;
  model->vamp.su = MatrixXd::NullaryExpr(m + 1, 3, [&] { return g(rng); });
  model->vamp.v = MatrixXd::NullaryExpr(m + 1, 3, [&] { return g(rng); });
  return std::make_unique<PrequentialVampE>(std::move(model));
}

StreamBatch Batch(const RowMatrixXd& x, const RowMatrixXd& y, int64_t first, bool trajectory) {
  StreamBatch b;
  b.n = kBatch;
  b.dim = static_cast<int>(x.cols());
  b.x = x.row(first).data();
  b.y = trajectory ? x.row(first + 1).data() : y.row(first).data();
  b.trajectory = trajectory;
  b.producer = "bench";
  return b;
}

// Feeds kWarm pairs, installs a prequential score, then times batches of kBatch pairs. With
// `helper`, the learner splits its work with that executor's thread (docs/algorithms.md §9.3).
// `uniform`: i.i.d. uniform pairs on [0, 1]^d instead of the delay states (the load generator's
// stream: the dictionary fills its cap).
void RunLearner(benchmark::State& state, const StreamingLearner::Options& o, bool trajectory,
                SideExecutor* helper = nullptr, bool uniform = false) {
  const int d = o.dim;
  StreamingLearner l(o);
  l.SetSideExecutor(helper);
  const int64_t n = kWarm + kTimed;
  RowMatrixXd s = DelayStates(n, d, 3);
  if (uniform) {
    std::mt19937_64 rng(6);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    s = RowMatrixXd::NullaryExpr(n + 1, d, [&] { return u(rng); });
  }
  RowMatrixXd x = s.topRows(n), y = s.bottomRows(n);
  if (!trajectory) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(5));
    RowMatrixXd xs(n, d), ys(n, d);
    for (int64_t i = 0; i < n; ++i) {
      xs.row(i) = s.row(perm[static_cast<size_t>(i)]);
      ys.row(i) = s.row(perm[static_cast<size_t>(i)] + 1);
    }
    x.swap(xs);
    y.swap(ys);
  }
  auto feed = [&](int64_t first) {
    if (!l.Observe(Batch(x, y, first, trajectory)).ok()) std::abort();
  };
  for (int64_t first = 0; first < kWarm; first += kBatch) feed(first);
  l.InstallPrequential(MakePrequential(l), 1);
  int64_t next = kWarm;
  for (auto _ : state) {
    feed(next);
    next += kBatch;
    if (next + kBatch > n) next = kWarm;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  state.counters["dict_x"] = snap && snap->cme ? static_cast<double>(snap->cme->x_atoms.rows()) : 0.0;
  state.counters["basis"] = snap && snap->spectral ? static_cast<double>(snap->spectral->basis.rows()) : 0.0;
}

void BM_Learner(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  StreamingLearner::Options o;
  o.dim = d;
  o.cme.dim = d;
  o.cme.sigma = 0.5 * std::sqrt(static_cast<double>(d));
  o.seed = 7;
  o.alarms = state.range(2) != 0;
  RunLearner(state, o, state.range(1) != 0);
}
BENCHMARK(BM_Learner)
    ->ArgNames({"d", "traj", "alarms"})
    ->Args({2, 1, 0})
    ->Args({2, 1, 1})
    ->Args({2, 0, 0})
    ->Args({8, 1, 0})
    ->Args({8, 1, 1})
    ->Args({8, 0, 0})
    ->Args({512, 1, 0})
    ->Args({512, 1, 1})
    ->Args({512, 0, 0})
    ->Unit(benchmark::kMillisecond);

// BM_LearnerDefaults/d/reduce/helpers/uniform: the daemon's default model of a d-dimensional
// stream (sigma auto chosen on a 1000-pair warm-up, input scaling unless reduced, change alarms)
// with input reduction to `reduce` directions (docs/algorithms.md §1.15; 0 = off; the daemon's
// default above 64 dimensions is 32), on trajectories of the same states (uniform = 1: of
// i.i.d. uniform states, whose dictionary fills its cap of 1000), on one thread (helpers = 0) or
// with the daemon's helper pool of one thread (helpers = 1, §9.3; wall time is what counts).
void BM_LearnerDefaults(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  StreamingLearner::Options o;
  o.dim = d;
  o.cme.dim = d;
  o.cme.sigma = 0;
  o.reduce = static_cast<int>(state.range(1));
  o.scale_inputs = o.reduce == 0;  // a reduced model is unscaled by default (model_config.cc)
  o.seed = 7;
  o.alarms = true;
  std::unique_ptr<service::HelperPool> helpers;
  if (state.range(2) > 0) helpers = std::make_unique<service::HelperPool>(static_cast<int>(state.range(2)));
  RunLearner(state, o, true, helpers.get(), state.range(3) != 0);
}
BENCHMARK(BM_LearnerDefaults)
    ->ArgNames({"d", "reduce", "helpers", "uniform"})
    ->Args({2, 0, 0, 0})
    ->Args({2, 0, 1, 0})
    ->Args({8, 0, 0, 0})
    ->Args({8, 0, 1, 0})
    ->Args({512, 0, 0, 0})
    ->Args({512, 32, 0, 0})
    ->Args({512, 32, 1, 0})
    ->Args({8, 0, 0, 1})
    ->Args({8, 0, 1, 1})
    ->Args({512, 32, 0, 1})
    ->Args({512, 32, 1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// BM_LearnerScalar/rff/ff: the daemon's default model of a 1-channel stream (sigma auto, scaling,
// alarms) with `rff` embedding and `ff` forecast features: 64 and 32 are the defaults for one input
// value (learner_options::DefaultRffFeatures, DefaultForecastFeatures), 64 and 128 the defaults
// before the forecast's were sized, 256 and 128 before the embedding's were.
void BM_LearnerScalar(benchmark::State& state) {
  StreamingLearner::Options o;
  o.dim = 1;
  o.cme.dim = 1;
  o.cme.sigma = 0;
  o.scale_inputs = true;
  o.seed = 7;
  o.alarms = true;
  o.rff_features = static_cast<int>(state.range(0));
  o.forecast_features = static_cast<int>(state.range(1));
  RunLearner(state, o, true);
}
BENCHMARK(BM_LearnerScalar)
    ->ArgNames({"rff", "ff"})
    ->Args({64, 32})
    ->Args({64, 64})
    ->Args({64, 128})
    ->Args({256, 128})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// BM_AlarmMonitor/d/channels/runs: the change alarms alone (what alarms = 1 adds per pair), on
// the same states; one iteration is one batch of 256 pairs, so its time compares with
// BM_Learner's. channels 1: a delay vector of one channel; channels = d: a wide stream, every
// channel forecast. runs 1: ObservePairs in runs of 128 pairs, as the learner calls it; 0: pair
// at a time (the same bits; the forecast's sums are then passed over once a pair).
void BM_AlarmMonitor(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const bool runs = state.range(2) != 0;
  const int64_t n = kWarm + kTimed;
  const RowMatrixXd s = DelayStates(n, d, 3);
  AlarmMonitor::Options o;
  o.dim = d;
  o.channels = static_cast<int>(state.range(1));
  AlarmMonitor m(o);
  m.ObservePairs(s.row(0).data(), s.row(1).data(), kWarm, 0);
  int64_t next = kWarm;
  for (auto _ : state) {
    if (runs) {
      for (int64_t t = next; t < next + kBatch; t += 128) m.ObservePairs(s.row(t).data(), s.row(t + 1).data(), 128, 0);
    } else {
      for (int64_t t = next; t < next + kBatch; ++t) m.ObservePair(s.row(t).data(), s.row(t + 1).data(), 0);
    }
    next += kBatch;
    if (next + kBatch > n) next = kWarm;
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["alarms"] = static_cast<double>(m.alarms_total());
}
BENCHMARK(BM_AlarmMonitor)
    ->ArgNames({"d", "channels", "runs"})
    ->Args({2, 1, 1})
    ->Args({8, 1, 1})
    ->Args({512, 1, 0})
    ->Args({512, 1, 1})
    ->Args({512, 512, 0})
    ->Args({512, 512, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cmestream

BENCHMARK_MAIN();
