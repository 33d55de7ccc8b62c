// AlarmMonitor and LinearForecast (core/alarms/, docs/algorithms.md §12.8-12.14): the forecast's
// fit against the closed-form AR(1) coefficient, arming within the first 300 pairs, an OU whose
// rate changes found with its onset, an oscillator's damping change and its return found
// (the coefficients' test, the step test and its return test, §12.9-12.12), a double well that
// deepens found by the slow CUSUMs, the tests' shares of the rate, a v12 round trip continuing bit
// for bit, monitors written by earlier releases (ALRM v1-v11) restored with every record and
// re-armed with this method, a discrete chain whose matrix changes found, alarms kept in the
// learner state with a bit-exact continuation through serialization, and the monitor in the
// learner changes nothing else (the state of a model without alarms is unchanged).
#include "core/alarms/alarm_monitor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/stream/streaming_learner.h"
#include "gtest/gtest.h"
#include "tests/core/alarms/older_monitors_fixture.inc"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

using test_support::Bytes;

// OU sampled exactly: x' = a x + sqrt(1 - a^2) N(0, 1), a = exp(-theta dt); rate changes at `at`.
std::vector<double> Ou(int n, double a0, double a1, int at, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  std::vector<double> x(n);
  x[0] = 0;
  for (int t = 1; t < n; ++t) {
    const double a = t <= at ? a0 : a1;
    x[t] = a * x[t - 1] + std::sqrt(1 - a * a) * g(rng);
  }
  return x;
}

TEST(LinearForecast, FitsTheAutoregressionCoefficient) {
  const double a = 0.9;
  const std::vector<double> x = Ou(20001, a, a, 1 << 30, 3);
  LinearForecast::Options o;
  LinearForecast f(o);
  double r = 0, sse = 0;
  int64_t scored = 0;
  for (int t = 0; t + 1 < static_cast<int>(x.size()); ++t) {
    if (f.Observe(&x[t], &x[t + 1], &r)) {
      sse += r * r;
      ++scored;
    }
  }
  EXPECT_EQ(scored, 20000 - 64);  // scored from the first fit on
  // The one-step error variance of the exact AR(1): 1 - a^2 = 0.19.
  EXPECT_NEAR(sse / scored, 1 - a * a, 0.01);
}

TEST(AlarmMonitor, ArmsWithinThreeHundredPairsAndFindsARateChange) {
  const int change = 3000;
  const std::vector<double> x = Ou(6001, std::exp(-0.1), std::exp(-0.5), change, 5);
  AlarmMonitor::Options o;
  o.dim = 1;
  o.channels = 1;
  AlarmMonitor m(o);
  for (int t = 0; t + 1 < static_cast<int>(x.size()); ++t) m.ObservePair(&x[t], &x[t + 1], 1000.0 + t);
  EXPECT_GE(m.armed_at(), 0);
  EXPECT_LE(m.armed_at(), 300);
  // A stationary false alarm before the change is possible (~0.27 per stream at R = 1 over these
  // ~2,700 armed pairs; this seed has one, of the coefficients' test, at pair 2798): the change
  // is the first alarm after it.
  int before = 0;
  for (const AlarmRecord& r : m.records()) before += r.index <= change;
  EXPECT_LE(before, 1);
  ASSERT_GE(m.records().size(), static_cast<size_t>(before) + 1);
  const AlarmRecord& a = m.records()[static_cast<size_t>(before)];
  EXPECT_GT(a.index, change);
  EXPECT_LT(a.index, change + 500);
  EXPECT_NEAR(static_cast<double>(a.onset), change, 60);
  EXPECT_EQ(a.time, 1000.0 + a.index);
  EXPECT_EQ(a.channels, std::vector<int>{0});
  // The reported threshold is the CUSUM's calibrated level (12.5) at the default settings (a
  // one-value state runs three tests, the size test at 0.45 R, §12.9-12.10, its main CUSUM pair at
  // half of that beside the slow one, §12.12), and the score a fraction of it: above 1 at an alarm
  // (the detector then restarts), below after.
  EXPECT_EQ(m.threshold(),
            ChangeDetector::Threshold((1 - AlarmMonitor::kStepTestShare) / 2 * (1 - AlarmMonitor::kSlowShare),
                                      ChangeDetector::Options{}.drift, 200));
  EXPECT_EQ(a.threshold, m.threshold());
  EXPECT_GT(a.score, a.threshold);
  EXPECT_GE(m.score(), 0);
  EXPECT_LT(m.score(), 1);
}

// The kind label on the monitor path (docs/algorithms.md (12.6)), over 60 seeds of an AR(1)
// stream x' = a x + s N(0, 1) whose change at pair 3000 is either a slower relaxation (a 0.5 ->
// 0.95, s fixed: the frozen forecast's misfit follows the state, autocorrelated: "dynamics") or a
// doubled noise (s 0.3 -> 0.6, a fixed: residuals stay white: "noise"). White residuals pass the
// dynamics bound with probability ~2-5 %, so a few "dynamics" labels of the noise change are
// expected; the documented limit (a faster relaxation reads as "noise") is not tested here.
TEST(AlarmMonitor, LabelsASlowerRelaxationDynamicsAndADoubledNoiseNoise) {
  // 60 seeds: at 20 the noise streams' share labelled "noise" moved between 70 % and 78 % from
  // one scoring release to the next on the ~10 streams that reach it (over 100 seeds: 91 %, 92 %).
  const int change = 3000, seeds = 60;
  int dynamics_as_dynamics = 0, noise_as_noise = 0, dynamics_streams = 0, noise_streams = 0, alarmed_before = 0;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    for (bool noise_change : {false, true}) {
      std::mt19937_64 rng(seed);
      std::normal_distribution<double> g;
      std::vector<double> x(6001, 0.0);
      for (int t = 1; t < 6001; ++t) {
        const bool after = t > change;
        const double a = !noise_change && after ? 0.95 : (noise_change ? 0.9 : 0.5);
        const double s = noise_change && after ? 0.6 : 0.3;
        x[t] = a * x[t - 1] + s * g(rng);
      }
      AlarmMonitor::Options o;
      o.dim = 1;
      o.channels = 1;
      AlarmMonitor m(o);
      for (int t = 0; t + 1 < 6001; ++t) m.ObservePair(&x[t], &x[t + 1], t);
      // A stationary false alarm before the change is expected now and then (~0.27 per stream at
      // the target rate of 1 per 10^4 pairs over the ~2,700 armed pairs, more while the forecast's
      // early refits move the residuals: measured 36 of 120 streams); the detector then re-arms
      // 200 pairs later and may take a change inside that gap as its new reference. Such streams
      // are counted, not labelled.
      // The size test's label is what is tested: the spike test's alarms (ALRM v11, kind "spike",
      // a doubled noise makes single steps out of the old tail) are left out.
      const AlarmRecord* first = nullptr;
      for (const AlarmRecord& a : m.records()) {
        if (a.kind != ChangeDetector::Kind::kSpike) {
          first = &a;
          break;
        }
      }
      ASSERT_NE(first, nullptr) << seed;
      if (first->index <= change) {
        ++alarmed_before;
        continue;
      }
      EXPECT_LT(first->index, change + 500) << seed;
      ++(noise_change ? noise_streams : dynamics_streams);
      if (noise_change) {
        noise_as_noise += first->kind == ChangeDetector::Kind::kNoise;
      } else {
        dynamics_as_dynamics += first->kind == ChangeDetector::Kind::kDynamics;
      }
    }
  }
  std::printf(
      "kind on the monitor path: slower relaxation 'dynamics' %d of %d, doubled noise 'noise' %d of %d; %d of %d "
      "streams with a false alarm before the change\n",
      dynamics_as_dynamics, dynamics_streams, noise_as_noise, noise_streams, alarmed_before, 2 * seeds);
  EXPECT_LE(alarmed_before, 48);  // measured 36 of 120
  // Held to >= 75 % each (measured 50 of 50 and 31 of 34; a coin labelling 34 streams passes with
  // probability ~0.2 %).
  EXPECT_GE(dynamics_as_dynamics, 0.75 * dynamics_streams);
  EXPECT_GE(noise_as_noise, 0.75 * noise_streams);
  EXPECT_GE(dynamics_streams + noise_streams, 72);
}

// A wide stream's monitor (512 channels: its forecast's sums and the detector's channel vectors
// are most of its body) round-trips: the daemon's snapshot verification decodes every model.
TEST(AlarmMonitor, AWideMonitorRoundTrips) {
  AlarmMonitor::Options o;
  o.dim = 512;
  o.channels = 512;
  AlarmMonitor m(o);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n01;
  std::vector<double> x(512), y(512);
  for (double& v : x) v = n01(rng);
  // The forecast fits first at max(64, 2 (d + 1)) = 1026 pairs; the detector arms 200 later.
  for (int t = 0; t < 1400; ++t) {
    for (int j = 0; j < 512; ++j) y[j] = 0.8 * x[j] + 0.3 * n01(rng);
    m.ObservePair(x.data(), y.data(), 1000.0 + t);
    x.swap(y);
  }
  ASSERT_GE(m.armed_at(), 0);
  io::Writer w;
  m.Serialize(w);
  io::Reader r(w.data(), "test");
  absl::StatusOr<AlarmMonitor> back = AlarmMonitor::Deserialize(r);
  ASSERT_TRUE(back.ok()) << back.status();
  io::Writer w2;
  back->Serialize(w2);
  EXPECT_EQ(w.data(), w2.data());
}

// Runs of pairs (ObservePairs: the forecast in blocks of LinearForecast::kBlock) give the state
// and the records of pairs one at a time, bit for bit, whatever the runs' lengths: on a
// 64-channel stream (degree-1 forecast) and a 2-value one (cubic forecast and the coefficients'
// test), each with a change that raises alarms and refits inside the runs.
TEST(AlarmMonitor, PairsInRunsEqualPairsOneAtATime) {
  // 64: the forecast's sums in register tiles of 16 only; 37: tiles of 16 and 4 and single
  // elements; 2: single elements (linear_forecast.cc AddBlockProducts).
  for (const int dim : {64, 37, 2}) {
    AlarmMonitor::Options o;
    o.dim = dim;
    o.channels = dim;
    AlarmMonitor one(o), runs(o);
    std::mt19937_64 rng(11);
    std::normal_distribution<double> n01;
    const int n = 5000, change = 3000;
    std::vector<double> rows(static_cast<size_t>(n + 1) * dim);
    for (int j = 0; j < dim; ++j) rows[j] = n01(rng);
    for (int t = 0; t < n; ++t) {
      for (int j = 0; j < dim; ++j) {
        const double a = t >= change ? 0.3 : 0.8;
        rows[static_cast<size_t>(t + 1) * dim + j] = a * rows[static_cast<size_t>(t) * dim + j] + 0.3 * n01(rng);
      }
    }
    // Pairs (row t, row t + 1), row-major: x rows from `rows`, y rows one row on.
    for (int t = 0; t < n; ++t)
      one.ObservePair(&rows[static_cast<size_t>(t) * dim], &rows[static_cast<size_t>(t + 1) * dim], 0);
    std::uniform_int_distribution<int> run_length(1, 300);
    for (int t = 0; t < n;) {
      const int k = std::min(n - t, run_length(rng));
      runs.ObservePairs(&rows[static_cast<size_t>(t) * dim], &rows[static_cast<size_t>(t + 1) * dim], k, 0);
      t += k;
    }
    EXPECT_GE(one.alarms_total(), 1) << "dim " << dim;
    EXPECT_EQ(one.alarms_total(), runs.alarms_total());
    io::Writer a, b;
    one.Serialize(a);
    runs.Serialize(b);
    EXPECT_EQ(a.data(), b.data()) << "dim " << dim;
  }
}

// docs/algorithms.md §12.15: the per-pair anomaly score is 1 exactly on the pairs that raised an
// alarm, in [0, 1) elsewhere, 0 before any test scores; it follows score() (the tests' statistics
// over their thresholds) and the spike test's |step| / bound, is written in runs as pair at a time,
// changes nothing in the monitor, and a copy does not carry the sink.
TEST(AlarmMonitor, ThePerPairAnomalyScoreIsOneOnAlarmsAndChangesNothing) {
  AlarmMonitor::Options o;
  o.dim = 1;
  std::vector<double> x = Ou(8001, 0.9, 0.5, 5000, 5);
  x[3000] += 12;  // a spike
  const int n = static_cast<int>(x.size()) - 1;
  AlarmMonitor plain(o), scored(o);
  std::vector<double> scores(static_cast<size_t>(n), -1.0);
  scored.set_score_sink(scores.data());
  std::vector<int64_t> alarm_pairs;
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> run_length(1, 300);
  for (int t = 0; t < n;) {
    const int k = std::min(n - t, run_length(rng));
    plain.ObservePairs(&x[static_cast<size_t>(t)], &x[static_cast<size_t>(t) + 1], k, 0);
    for (int j = 0; j < k; ++j) {
      const int64_t before = scored.alarms_total();
      scored.ObservePair(&x[static_cast<size_t>(t + j)], &x[static_cast<size_t>(t + j) + 1], 0);
      if (scored.alarms_total() > before) alarm_pairs.push_back(t + j);
      // the score of a pair without an alarm is score() after it, or the spike ratio above it
      if (scored.alarms_total() == before) {
        EXPECT_GE(scores[static_cast<size_t>(t + j)], std::min(1 - 0x1p-24, scored.score()) - 1e-12);
      }
    }
    t += k;
  }
  scored.set_score_sink(nullptr);
  io::Writer a, b;
  plain.Serialize(a);
  scored.Serialize(b);
  EXPECT_EQ(a.data(), b.data());
  ASSERT_GE(alarm_pairs.size(), 2u);  // the spike and the rate change
  EXPECT_TRUE(std::find(alarm_pairs.begin(), alarm_pairs.end(), 2999) != alarm_pairs.end() ||
              std::find(alarm_pairs.begin(), alarm_pairs.end(), 3000) != alarm_pairs.end());
  int ones = 0;
  for (int t = 0; t < n; ++t) {
    const double s = scores[static_cast<size_t>(t)];
    ASSERT_GE(s, 0.0) << t;
    ASSERT_LE(s, 1.0) << t;
    if (s == 1.0) ++ones;
  }
  EXPECT_EQ(ones, static_cast<int>(alarm_pairs.size()));
  for (const int64_t t : alarm_pairs) EXPECT_EQ(scores[static_cast<size_t>(t)], 1.0) << t;
  EXPECT_EQ(scores[0], 0.0);  // no test scores before the forecast's first fit
  // Stationary stretches score mostly low: the median well below the alarm level.
  std::vector<double> quiet(scores.begin() + 1000, scores.begin() + 2900);
  std::nth_element(quiet.begin(), quiet.begin() + quiet.size() / 2, quiet.end());
  EXPECT_LT(quiet[quiet.size() / 2], 0.5);
  // A copy made while a sink is set does not write to it.
  std::vector<double> sink(4, -1.0);
  AlarmMonitor original(o);
  original.set_score_sink(sink.data());
  AlarmMonitor copy = original;
  copy.ObservePair(&x[0], &x[1], 0);
  EXPECT_EQ(sink[0], -1.0);
  original.ObservePair(&x[0], &x[1], 0);
  EXPECT_EQ(sink[0], 0.0);
}

// The per-pair score on the degenerate streams real metrics have (a flat line for 10^6 pairs, a
// two-level signal, a mostly-zero counter): every score finite in [0, 1], 1 exactly on the pairs
// with an alarm (two tests may alarm on one pair), and a flat line scores 0 and raises nothing.
// The square wave's rate is asserted (104 alarms before the coefficients' test needed a minimum
// variation, docs/algorithms.md (12.9c); 5 with it); the counter's is printed, not asserted: 198
// alarms in 2 10^5 pairs (578 before), ~10 per 10^4 at R = 1, from the size and step tests.
TEST(AlarmMonitor, DegenerateStreamsScoreWithinZeroAndOne) {
  AlarmMonitor::Options o;
  o.dim = 1;
  std::mt19937_64 rng(11);
  std::vector<std::pair<const char*, std::vector<double>>> streams;
  streams.emplace_back("flat", std::vector<double>(1000001, 42.0));
  std::vector<double> two_level(200001), counter(200001);
  std::bernoulli_distribution rare(0.01);
  std::poisson_distribution<int> count(3);
  for (size_t t = 0; t < two_level.size(); ++t) {
    two_level[t] = (t / 97) % 2 == 0 ? 0.0 : 5.0;  // a square wave, not a multiple of any block
    counter[t] = rare(rng) ? count(rng) : 0.0;
  }
  streams.emplace_back("two-level", std::move(two_level));
  streams.emplace_back("mostly-zero counter", std::move(counter));
  for (const auto& [name, x] : streams) {
    SCOPED_TRACE(name);
    AlarmMonitor m(o);
    const size_t n = x.size() - 1;
    std::vector<double> scores(n, -1.0);
    m.set_score_sink(scores.data());
    int64_t alarms = 0;
    int ones = 0;
    for (size_t t = 0; t < n; t += 1000) {
      const int k = static_cast<int>(std::min<size_t>(1000, n - t));
      m.ObservePairs(&x[t], &x[t + 1], k, 0);
    }
    alarms = m.alarms_total();
    std::vector<int64_t> alarmed;  // pairs with an alarm (two tests may alarm on one pair)
    for (const AlarmRecord& r : m.records()) alarmed.push_back(r.index);
    std::sort(alarmed.begin(), alarmed.end());
    alarmed.erase(std::unique(alarmed.begin(), alarmed.end()), alarmed.end());
    std::printf("%s: %lld alarms on %zu pairs\n", name, static_cast<long long>(alarms), alarmed.size());
    for (size_t t = 0; t < n; ++t) {
      ASSERT_TRUE(std::isfinite(scores[t])) << t;
      ASSERT_GE(scores[t], 0.0) << t;
      ASSERT_LE(scores[t], 1.0) << t;
      ones += scores[t] == 1.0;
    }
    ASSERT_LE(alarms, 1000);  // every record kept
    EXPECT_EQ(ones, static_cast<int>(alarmed.size()));
    for (const int64_t t : alarmed) EXPECT_EQ(scores[static_cast<size_t>(t)], 1.0) << t;
    if (std::string(name) == "two-level") {
      EXPECT_LE(alarms, 40);  // 2 per 10^4
    }
    if (std::string(name) == "flat") {
      EXPECT_EQ(alarms, 0);
      EXPECT_EQ(*std::max_element(scores.begin(), scores.end()), 0.0);
    }
  }
}

// A quantized stream whose spikes all have one size (NAB's art_increase_spike_density): once the
// spike test's bound is that size, a spike sits exactly at it and raises no alarm; its score stays
// below 1, so 1 still marks the alarms alone.
TEST(AlarmMonitor, ASpikeExactlyAtItsBoundScoresBelowOne) {
  AlarmMonitor::Options o;
  o.dim = 1;
  std::vector<double> x(6001, 20.0);
  for (size_t t = 0; t < x.size(); ++t) {
    if (t % 37 == 0) x[t] = 80.0;
  }
  AlarmMonitor m(o);
  std::vector<double> scores(x.size() - 1, -1.0);
  m.set_score_sink(scores.data());
  m.ObservePairs(x.data(), x.data() + 1, static_cast<int64_t>(scores.size()), 0);
  m.set_score_sink(nullptr);
  int ones = 0, near = 0;
  for (const double s : scores) {
    ones += s == 1.0;
    near += s >= 1 - 0x1p-24 && s < 1.0;
  }
  EXPECT_EQ(ones, m.alarms_total());
  EXPECT_GT(near, 10);  // the case this test is for: spikes at their bound
}

// The monitor's first kept alarm at or after pair `index`, or nullptr.
const AlarmRecord* FirstAlarmFrom(const AlarmMonitor& m, int64_t index) {
  for (const AlarmRecord& a : m.records()) {
    if (a.index >= index) return &a;
  }
  return nullptr;
}

// An oscillator (state (q, p), sampled every 0.5) whose damping rises from 0.05 to 1 at pair 3000,
// the forecast having learned the nearly undamped regime: the new regime's amplitude is small, so
// the misfit adds little to the residual variance, and the size test alone rarely finds it within
// 500 pairs (2 of 12 when the coefficients' test was added, docs/algorithms.md §12.9); the
// coefficients' test does, as "dynamics". `damped_until` > 0: damped (1) before it too, the
// undamped regime from it to `change`.
int OscillatorChangesFound(int* as_dynamics, int change = 3000, int damped_until = 0, int seeds = 12) {
  int found = 0;
  *as_dynamics = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> g;
    AlarmMonitor::Options o;
    o.dim = 2;
    o.channels = 2;
    AlarmMonitor m(o);
    double s[2] = {0, 0};
    for (int t = 0; t < change + 500; ++t) {
      const double gamma = t >= change || t < damped_until ? 1.0 : 0.05, h = 0.5 / 50;
      double next[2] = {s[0], s[1]};
      for (int i = 0; i < 50; ++i) {
        next[1] += (-next[0] - gamma * next[1]) * h + 0.5 * std::sqrt(h) * g(rng);
        next[0] += next[1] * h;
      }
      m.ObservePair(s, next, 0);
      s[0] = next[0];
      s[1] = next[1];
    }
    if (const AlarmRecord* a = FirstAlarmFrom(m, change)) {
      ++found;
      *as_dynamics += a->kind == ChangeDetector::Kind::kDynamics;
    }
  }
  return found;
}

TEST(AlarmMonitor, FindsADampingChangeTheSizeTestAloneMisses) {
  int dynamics = 0;
  const int found = OscillatorChangesFound(&dynamics);
  std::printf("damping change found within 500 pairs: %d of 12 (%d 'dynamics')\n", found, dynamics);
  EXPECT_GE(found, 8);  // measured 10 of 12
  EXPECT_GE(dynamics, found - 2);
}

// A return to damping as in the benchmark: damped for 3,000 pairs, undamped to pair 9,000 (the
// forecast refitted on the undamped regime at 4,096 and 8,192, which then dominates its fit), damped
// again: the step test (docs/algorithms.md §12.10) sees the state's steps shrink with its
// amplitude, which the learned forecast's residuals barely show. Measured: 12 of 12 found within
// 500 pairs (8 of 12 without the step test when it was added).
TEST(AlarmMonitor, FindsAReturnToDampingAfterALongUndampedRegime) {
  int dynamics = 0;
  const int found = OscillatorChangesFound(&dynamics, 9000, /*damped_until=*/3000);
  std::printf("return to damping at pair 9000 found within 500 pairs: %d of 12\n", found);
  EXPECT_GE(found, 11);
  EXPECT_GE(dynamics, found - 2);
}

// docs/algorithms.md §12.11: damped for 3,000 pairs, undamped for 400, damped again. The undamped
// regime's amplitude wanders, its tests alarm again inside it, and a return soon after such a
// restart is absorbed by the young references; the step test's reference of the damped regime,
// kept after the first change it confirmed, finds it. Measured over 60 seeds: 60 found within 500
// pairs (46 without the return test when it was added).
TEST(AlarmMonitor, TheReturnTestFindsReturnsToDampingAfterShortUndampedRegimes) {
  int dynamics = 0;
  const int found = OscillatorChangesFound(&dynamics, 3400, /*damped_until=*/3000, 60);
  std::printf("return to damping after 400 undamped pairs, found within 500 pairs: %d of 60\n", found);
  EXPECT_GE(found, 52);
  EXPECT_GE(dynamics, found - 6);
}

// docs/algorithms.md §12.12: damped for 3,000 pairs, undamped for 1,200, damped again. Inside a
// long undamped regime the amplitude dips and wanders, raising alarms whose confirmations would
// replace the damped regime's return test, or whose dips it would take for the return and end on;
// kept and re-armed, it finds the real return (measured 59 of 60; 48 without the re-arming when it
// was added).
TEST(AlarmMonitor, TheReArmedReturnTestFindsReturnsAfterLongUndampedRegimes) {
  int dynamics = 0;
  const int found = OscillatorChangesFound(&dynamics, 4200, /*damped_until=*/3000, 60);
  std::printf("return to damping after 1200 undamped pairs, found within 500 pairs: %d of 60\n", found);
  EXPECT_GE(found, 55);
}

// A double well (dx = -4 D x (x^2 - 1) dt + 0.7 dW, sampled every 0.1) whose depth D goes from 1
// to 4 at pair `change`: the state stays in one well, its steps and the forecast's residuals shrink by
// a factor ~0.7 in standard deviation, a shift of ~0.2 standard deviations of the size tests'
// cube-root score, and the shallow regime's barrier crossings make those scores heavy-tailed and
// serially correlated. The slow CUSUMs (docs/algorithms.md §12.12) find it.
int DoubleWellDeepeningsFound(int seeds, int change) {
  int found = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
    std::mt19937_64 rng(1000 + seed);
    std::normal_distribution<double> g;
    AlarmMonitor::Options o;
    o.dim = 1;
    o.channels = 1;
    AlarmMonitor m(o);
    double x = 1;
    for (int t = 0; t < change + 500; ++t) {
      const double depth = t >= change ? 4 : 1, h = 0.1 / 20;
      double next = x;
      for (int i = 0; i < 20; ++i) next += -4 * depth * next * (next * next - 1) * h + 0.7 * std::sqrt(h) * g(rng);
      m.ObservePair(&x, &next, 0);
      x = next;
    }
    found += FirstAlarmFrom(m, change) != nullptr;
  }
  return found;
}

TEST(AlarmMonitor, TheSlowCusumsFindADoubleWellThatDeepens) {
  // The changes at pairs 1,200 and 1,600: the forecast refitted at 1,024 (and 2,048 after the
  // second), the references a thousand pairs long, where most of the benchmark's misses were.
  const int found = DoubleWellDeepeningsFound(60, 1200) + DoubleWellDeepeningsFound(60, 1600);
  std::printf("double well deepening found within 500 pairs: %d of 120\n", found);
  EXPECT_GE(found, 100);  // measured 107 (97 without the slow CUSUMs when they were added)
}

// The tests' shares of alarm_rate (docs/algorithms.md §12.9-12.12): a state of more than
// kMaxSmallState values runs the size test alone at the whole rate; a small one runs it at
// (1 - kStepTestShare) / 2 of it, half of that for its main CUSUM pair beside the slow one.
TEST(AlarmMonitor, TheSizeTestsThresholdIsItsShareOfTheRate) {
  AlarmMonitor::Options small, wide, discrete;
  small.dim = small.channels = 1;
  wide.dim = wide.channels = 3;
  discrete.num_states = 4;
  EXPECT_EQ(AlarmMonitor(wide).threshold(), ChangeDetector::Threshold(1, 0.25, 200));
  EXPECT_EQ(AlarmMonitor(discrete).threshold(), ChangeDetector::Threshold(1, 0.25, 200));
  EXPECT_EQ(
      AlarmMonitor(small).threshold(),
      ChangeDetector::Threshold((1 - AlarmMonitor::kStepTestShare) / 2 * (1 - AlarmMonitor::kSlowShare), 0.25, 200));
}

// A monitor round-trips (ALRM v12) and continues bit for bit, cut 50 pairs after its first alarm
// while the held references score (docs/algorithms.md §12.8 "After an alarm", §12.9 "After a
// restart"): a small state (every test), a wider one (the size test) and a discrete one.
TEST(AlarmMonitor, RoundTripsAndContinuesBitForBit) {
  const std::vector<double> x = Ou(8001, 0.9, 0.6, 3000, 7);
  for (const int dim : {1, 3}) {
    AlarmMonitor::Options o;
    o.dim = dim;
    o.channels = dim;
    AlarmMonitor m(o);
    // Each row: `dim` lagged copies of the series (a delay state), so one series drives every channel.
    auto row = [&](int t, std::vector<double>& v) {
      for (int j = 0; j < dim; ++j) v[static_cast<size_t>(j)] = x[static_cast<size_t>(std::max(0, t - j))];
    };
    std::vector<double> a(static_cast<size_t>(dim)), b(static_cast<size_t>(dim));
    int cut = 0;
    for (; cut < 6000; ++cut) {
      row(cut, a);
      row(cut + 1, b);
      m.ObservePair(a.data(), b.data(), cut);
      if (m.alarms_total() > 0 && m.pairs() == m.records().front().index + 50) break;
    }
    ASSERT_LT(cut, 6000) << dim;
    ++cut;
    io::Writer w;
    m.Serialize(w);
    EXPECT_EQ(static_cast<uint8_t>(w.data()[4]), 12);
    io::Reader r(w.data(), "test");
    absl::StatusOr<AlarmMonitor> back = AlarmMonitor::Deserialize(r);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->rearmed_from(), 0);
    EXPECT_EQ(back->RearmNote(), "");
    EXPECT_EQ(back->threshold(), m.threshold()) << dim;
    io::Writer w2;
    back->Serialize(w2);
    EXPECT_EQ(w.data(), w2.data()) << dim;
    for (int t = cut; t < 8000; ++t) {
      row(t, a);
      row(t + 1, b);
      m.ObservePair(a.data(), b.data(), t);
      back->ObservePair(a.data(), b.data(), t);
    }
    io::Writer c, d;
    m.Serialize(c);
    back->Serialize(d);
    EXPECT_EQ(c.data(), d.data()) << dim;
    EXPECT_EQ(m.alarms_total(), back->alarms_total());
  }
  AlarmMonitor::Options d;
  d.num_states = 4;
  io::Writer w;
  AlarmMonitor(d).Serialize(w);
  EXPECT_EQ(static_cast<uint8_t>(w.data()[4]), 12);
  io::Reader r(w.data(), "test");
  absl::StatusOr<AlarmMonitor> back = AlarmMonitor::Deserialize(r);
  ASSERT_TRUE(back.ok()) << back.status();
  io::Writer w2;
  back->Serialize(w2);
  EXPECT_EQ(w.data(), w2.data());
}

// A v12 object is checked as it is read: a future version, a truncation and a re-arming that no
// monitor writes (from its own format, or a pair beyond its counter) are refused with a message.
TEST(AlarmMonitor, AV12ObjectIsChecked) {
  AlarmMonitor::Options o;
  o.dim = o.channels = 1;
  AlarmMonitor m(o);
  const std::vector<double> x = Ou(401, 0.9, 0.9, 1 << 30, 3);
  for (int t = 0; t < 400; ++t) m.ObservePair(&x[t], &x[t + 1], t);
  const std::string good = Bytes(m);
  auto refused = [](std::string bytes, const std::string& says) {
    io::Reader r(bytes, "test");
    absl::StatusOr<AlarmMonitor> back = AlarmMonitor::Deserialize(r);
    ASSERT_FALSE(back.ok()) << says;
    EXPECT_NE(back.status().message().find(says), std::string::npos) << back.status();
  };
  std::string future = good;
  future[4] = 13;
  refused(future, "reads 1..12");
  refused(good.substr(0, good.size() - 9), "test");
  // Header 16, options 20, pairs and armed_at 16: the re-arming's format (i32), pair and count.
  std::string own = good;
  own[52] = 12;
  refused(own, "alarm monitor: re-arming out of range");
  std::string beyond = good;
  beyond[52] = 5;
  const int64_t past = 401;
  std::memcpy(&beyond[56], &past, 8);
  refused(beyond, "alarm monitor: re-arming out of range");
}

// The bytes of the kept records as an ALRM object stores them (its last field: count, then each).
size_t RecordsBytes(const AlarmMonitor& m) {
  size_t n = 8;
  for (const AlarmRecord& a : m.records()) n += 8 + 8 + 8 + 8 + 4 + 4 * a.channels.size() + 1 + 1 + 8;
  return n;
}

// The body's tail before the object's end: the records of `bytes`, RecordsBytes long.
std::string Tail(const std::string& bytes, size_t n) { return bytes.substr(bytes.size() - n); }

// Monitors written by the releases before this method (ALRM v2-v11, older_monitors_fixture.inc)
// restore with their pair counter, alarm count and every record, byte for byte; their tests are
// rebuilt and re-arm: fed the same pairs, the re-armed monitor raises what a new monitor raises
// (indexes shifted by the pairs before), arms when it does, and says so; it round-trips as v12.
TEST(AlarmMonitor, OlderMonitorsReArmAndKeepTheirRecords) {
  for (const test_support::OlderMonitorFixture& fx : test_support::kOlderMonitors) {
    SCOPED_TRACE(fx.name);
    std::string old;
    ASSERT_TRUE(absl::Base64Unescape(fx.base64, &old));
    ASSERT_EQ(static_cast<uint8_t>(old[4]), fx.version);
    io::Reader r(old, "fixture");
    absl::StatusOr<AlarmMonitor> m = AlarmMonitor::Deserialize(r);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->rearmed_from(), static_cast<int>(fx.version));
    EXPECT_EQ(m->rearmed_at(), fx.pairs);
    EXPECT_EQ(m->RearmNote(), absl::StrCat("alarm monitor from format v", fx.version, " re-armed at pair ", fx.pairs));
    EXPECT_EQ(m->pairs(), fx.pairs);
    EXPECT_EQ(m->alarms_total(), fx.alarms_total);
    ASSERT_EQ(static_cast<int64_t>(m->records().size()), fx.records);
    EXPECT_EQ(m->dropped(), fx.alarms_total - fx.records);
    EXPECT_EQ(m->armed_at(), -1);
    EXPECT_EQ(m->scored(), 0);
    // No record lost or changed: the object's last field is the records, in both formats.
    const std::string now = Bytes(*m);
    EXPECT_EQ(static_cast<uint8_t>(now[4]), 12);
    EXPECT_EQ(Tail(now, RecordsBytes(*m)), Tail(old, RecordsBytes(*m)));
    // v12 round trip keeps the re-arming.
    io::Reader r2(now, "v12");
    absl::StatusOr<AlarmMonitor> again = AlarmMonitor::Deserialize(r2);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->RearmNote(), m->RearmNote());
    EXPECT_EQ(Bytes(*again), now);
    const AlarmMonitor::Options o = m->options();
    if (o.dim == 0) {
      // Discrete: the counts are the model's (mature here): it scores at once and arms on its 200th
      // scored pair.
      TransitionCounts::Options co;
      co.max_states = o.num_states;
      TransitionCounts counts(co);
      std::mt19937_64 rng(5);
      std::uniform_int_distribution<int64_t> next(0, o.num_states - 1);
      int64_t s = 0;
      for (int t = 0; t < 400; ++t) {
        const int64_t y = t % 3 == 0 ? next(rng) : s;
        m->ObserveIds(s, y, counts, 0);
        ASSERT_TRUE(counts.AddBatch(&s, &y, 1).ok());
        s = y;
      }
      EXPECT_EQ(m->armed_at(), fx.pairs + 199);
      continue;
    }
    // Continuous: a new monitor fed the same pairs is what the re-armed one runs.
    AlarmMonitor fresh(o);
    const std::vector<double> x = Ou(5001, 0.9, 0.4, 3000, 21);
    std::vector<double> a(static_cast<size_t>(o.dim)), b(static_cast<size_t>(o.dim));
    for (int t = 0; t < 5000; ++t) {
      for (int j = 0; j < o.dim; ++j) {
        a[static_cast<size_t>(j)] = x[static_cast<size_t>(std::max(0, t - j))];
        b[static_cast<size_t>(j)] = x[static_cast<size_t>(std::max(0, t + 1 - j))];
      }
      m->ObservePair(a.data(), b.data(), 5000.0 + t);
      fresh.ObservePair(a.data(), b.data(), 5000.0 + t);
    }
    ASSERT_GE(fresh.armed_at(), 0);
    EXPECT_EQ(m->armed_at(), fx.pairs + fresh.armed_at());
    EXPECT_EQ(m->scored(), fresh.scored());
    EXPECT_EQ(m->score(), fresh.score());
    ASSERT_GE(fresh.alarms_total(), 1);
    EXPECT_EQ(m->alarms_total(), fx.alarms_total + fresh.alarms_total());
    ASSERT_EQ(m->records().size(), static_cast<size_t>(fx.records) + fresh.records().size());
    for (size_t i = 0; i < fresh.records().size(); ++i) {
      const AlarmRecord& p = m->records()[static_cast<size_t>(fx.records) + i];
      const AlarmRecord& q = fresh.records()[i];
      EXPECT_EQ(p.index, q.index + fx.pairs);
      EXPECT_EQ(p.onset, q.onset + fx.pairs);
      EXPECT_EQ(p.kind, q.kind);
      EXPECT_EQ(p.score, q.score);
      EXPECT_EQ(p.channels, q.channels);
    }
  }
}

// The method is the scoring of the last release that replayed earlier ones (ALRM v11 for a small
// state, v5 for a wider one and a discrete one, every flag on): fed the fixtures' streams, a new
// monitor's forecast, tests and records are those objects' bytes after their flags, bit for bit.
TEST(AlarmMonitor, ScoresAsTheLastReleaseDid) {
  auto fixture = [](const char* name) {
    for (const test_support::OlderMonitorFixture& fx : test_support::kOlderMonitors) {
      if (std::string(fx.name) == name) {
        std::string bytes;
        EXPECT_TRUE(absl::Base64Unescape(fx.base64, &bytes));
        return bytes;
      }
    }
    ADD_FAILURE() << name;
    return std::string();
  };
  // Header 16, options 20, pairs and armed_at 16; then v11: 9 flags, v5: 3 (a discrete one: the
  // score kind first); v12: the re-arming, 20 bytes.
  auto same_after_flags = [](const std::string& old, size_t old_flags, const std::string& now) {
    ASSERT_GT(old.size(), 52 + old_flags);
    EXPECT_EQ(old.substr(52 + old_flags), now.substr(72));
  };
  {
    const std::vector<double> x = Ou(4001, 0.9, 0.6, 3000, 7);
    AlarmMonitor::Options o;
    o.dim = o.channels = 1;
    o.alarm_rate = 25;
    AlarmMonitor m(o);
    for (int t = 0; t < 4000; ++t) m.ObservePair(&x[t], &x[t + 1], 1000.0 + t);
    EXPECT_EQ(m.alarms_total(), 10);
    same_after_flags(fixture("d1v11"), 9, Bytes(m));
  }
  {
    const std::vector<double> a = Ou(4001, 0.9, 0.9, 1 << 30, 8), b = Ou(4001, 0.9, 0.5, 2000, 9),
                              c = Ou(4001, 0.8, 0.8, 1 << 30, 10);
    AlarmMonitor::Options o;
    o.dim = o.channels = 3;
    o.alarm_rate = 25;
    AlarmMonitor m(o);
    for (int t = 0; t < 4000; ++t) {
      const double xs[3] = {a[t], b[t], c[t]}, ys[3] = {a[t + 1], b[t + 1], c[t + 1]};
      m.ObservePair(xs, ys, 2000.0 + t);
    }
    EXPECT_EQ(m.alarms_total(), 11);
    same_after_flags(fixture("d3v5"), 3, Bytes(m));
  }
  {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u;
    TransitionCounts::Options co;
    co.max_states = 4;
    TransitionCounts counts(co);
    AlarmMonitor::Options o;
    o.num_states = 4;
    o.alarm_rate = 25;
    AlarmMonitor m(o);
    int64_t s = 0;
    for (int t = 0; t < 4000; ++t) {
      int64_t next = s;
      const double v = u(rng);
      if (t < 2500) {
        if (v > 0.9) next = static_cast<int64_t>(u(rng) * 4) % 4;
      } else if (v < 0.6) {
        next = (s + 1) % 4;
      }
      m.ObserveIds(s, next, counts, 3000.0 + t);
      ASSERT_TRUE(counts.AddBatch(&s, &next, 1).ok());
      s = next;
    }
    EXPECT_EQ(m.alarms_total(), 8);
    same_after_flags(fixture("discretev5"), 4, Bytes(m));
  }
}

// An older object whose flags contradict its version, or whose tests are damaged, is refused with
// a message, as before; so is a discrete ALRM v1 object (no score kind byte) accepted and re-armed.
TEST(AlarmMonitor, OlderMonitorsAreCheckedBeforeTheyReArm) {
  const test_support::OlderMonitorFixture* v7 = nullptr;
  for (const test_support::OlderMonitorFixture& fx : test_support::kOlderMonitors) {
    if (std::string(fx.name) == "d1v7") v7 = &fx;
  }
  ASSERT_NE(v7, nullptr);
  std::string old;
  ASSERT_TRUE(absl::Base64Unescape(v7->base64, &old));
  // Header 16 bytes, options 20, pairs and armed_at 16: the first two flags (the coefficient test
  // and its steps) say "no coefficient test", which a v7 monitor ran.
  old[52] = 0;
  old[53] = 0;
  io::Reader r(old, "fixture");
  absl::StatusOr<AlarmMonitor> bad = AlarmMonitor::Deserialize(r);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("alarm monitor v7 flags out of range"), std::string::npos) << bad.status();
  // Truncated inside the size test's object.
  std::string cut;
  ASSERT_TRUE(absl::Base64Unescape(v7->base64, &cut));
  cut.resize(cut.size() / 2);
  io::Reader rc(cut, "fixture");
  EXPECT_FALSE(AlarmMonitor::Deserialize(rc).ok());

  io::Writer v1;
  const size_t h = v1.BeginObject(io::Fourcc("ALRM"), 1);
  v1.I32(0);    // dim
  v1.I32(1);    // channels
  v1.I32(4);    // num_states
  v1.F64(1.0);  // alarm_rate
  v1.I64(700);  // pairs
  v1.I64(264);  // armed_at
  ChangeDetector::Options d;
  d.channels = 1;
  d.alarm_rate = 1.0;
  ChangeDetector(d).Serialize(v1);
  v1.U64(0);  // records
  v1.EndObject(h);
  io::Reader r1(v1.data(), "v1");
  absl::StatusOr<AlarmMonitor> m = AlarmMonitor::Deserialize(r1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->RearmNote(), "alarm monitor from format v1 re-armed at pair 700");
  EXPECT_EQ(m->pairs(), 700);
  EXPECT_EQ(m->armed_at(), -1);
  AlarmMonitor::Options o;
  o.num_states = 4;
  EXPECT_EQ(m->threshold(), AlarmMonitor(o).threshold());
}

// The discrete score's p-value (docs/algorithms.md §12.8) is uniform when y is drawn from the
// smoothed row itself: its mean is 1/2 and its variance 1/12, and the share below 0.05 is 5 %.
// Without the randomization a row with ties (here the unseen states) would give atoms instead.
TEST(AlarmMonitor, TheDiscretePValueIsUniformUnderTheCounts) {
  TransitionCounts::Options co;
  co.max_states = 6;
  TransitionCounts counts(co);
  // Row 0: counts 30, 10, 10, 0, 0, 0 (ties among the seen and the unseen states).
  const int64_t from[] = {0}, to_ids[] = {0, 1, 2};
  const int reps[] = {30, 10, 10};
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < reps[k]; ++i) ASSERT_TRUE(counts.AddBatch(from, &to_ids[k], 1).ok());
  }
  const int p = 6;
  std::vector<double> prob(p);
  for (int j = 0; j < p; ++j) prob[j] = (counts.Count(0, j) + 0.5) / (counts.Visits(0) + 0.5 * p);
  std::mt19937_64 rng(11);
  std::discrete_distribution<int> row(prob.begin(), prob.end());
  std::uniform_real_distribution<double> v;
  const int n = 200000;
  double sum = 0, sum2 = 0;
  int low = 0;
  for (int i = 0; i < n; ++i) {
    const double u = DiscretePValue(counts, 0, row(rng), p, v(rng));
    ASSERT_GE(u, 0.0);
    ASSERT_LE(u, 1.0);
    sum += u;
    sum2 += u * u;
    low += u < 0.05;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.005);      // s.e. 0.0006
  EXPECT_NEAR(var, 1.0 / 12, 0.002);  // s.e. ~0.0002
  EXPECT_NEAR(low / double(n), 0.05, 0.003);
  // The rarest transition has the smallest p-values: an unseen state's is in [0, 3 x 0.5 / 53].
  EXPECT_LE(DiscretePValue(counts, 0, 5, p, 1.0), 1.5 / 53 + 1e-12);
  EXPECT_NEAR(DiscretePValue(counts, 0, 0, p, 1.0), 1.0, 1e-12);  // the likeliest: up to 1
}

TEST(AlarmMonitor, FindsAChangeOfTransitionMatrixInADiscreteChain) {
  // 4 states: sticky (0.9 stay) for 4000 pairs, then a cycle 0 -> 1 -> 2 -> 3 -> 0 (0.6 move);
  // 10 seeds. The ~3700 scored stationary pairs of a stream start while the counts are young:
  // over 100 seeds this gave 1.4 false alarms per 10^4 pairs (0.5 per stream) and 98 of 100
  // changes detected within 500 pairs.
  int detected = 0, false_alarms = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u;
    TransitionCounts::Options co;
    co.max_states = 4;
    TransitionCounts counts(co);
    AlarmMonitor::Options o;
    o.num_states = 4;
    AlarmMonitor m(o);
    int64_t s = 0;
    for (int t = 0; t < 6000; ++t) {
      int64_t next = s;
      const double v = u(rng);
      if (t < 4000) {
        if (v > 0.9) next = static_cast<int64_t>(u(rng) * 4) % 4;
      } else if (v < 0.6) {
        next = (s + 1) % 4;
      } else if (v > 0.9) {
        next = static_cast<int64_t>(u(rng) * 4) % 4;
      }
      m.ObserveIds(s, next, counts, 0);
      ASSERT_TRUE(counts.AddBatch(&s, &next, 1).ok());
      s = next;
    }
    bool found = false;
    for (const AlarmRecord& a : m.records()) {
      false_alarms += a.index < 4000;
      found = found || (a.index >= 4000 && a.index < 4000 + 500);
    }
    detected += found;
  }
  std::printf(
      "discrete chain: change detected within 500 pairs in %d of 10 streams; %d false alarms in 10 x 4000 "
      "stationary pairs\n",
      detected, false_alarms);
  EXPECT_GE(detected, 9);
  EXPECT_LE(false_alarms, 12);  // Poisson(5.1): P(> 12) < 0.5 %
}

StreamingLearner::Options LearnerOptions(bool alarms) {
  StreamingLearner::Options o;
  o.dim = 2;
  o.cme.dim = 2;
  o.cme.max_dict = 40;
  o.cme.sigma = 0;  // auto
  o.auto_sigma_warmup = 200;
  o.scale_inputs = true;
  o.rff_features = 16;
  o.alarms = alarms;
  return o;
}

// A 2-channel trajectory whose second channel's dynamics change at row 2500.
std::vector<double> Trajectory(int rows) {
  const std::vector<double> a = Ou(rows, 0.95, 0.95, 1 << 30, 11);
  const std::vector<double> b = Ou(rows, 0.95, 0.3, 2500, 12);
  std::vector<double> x(2 * rows);
  for (int t = 0; t < rows; ++t) {
    x[2 * t] = 100 + 50 * a[t];  // another scale and offset: the forecast is affine-invariant
    x[2 * t + 1] = b[t];
  }
  return x;
}

void Feed(StreamingLearner& l, const std::vector<double>& x, int from, int to, double time) {
  StreamBatch b;
  b.n = to - from - 1;
  b.dim = 2;
  b.x = x.data() + 2 * from;
  b.y = b.x + 2;
  b.trajectory = true;
  b.time = time;
  ASSERT_TRUE(l.Observe(b).ok());
}

TEST(AlarmMonitor, LivesInTheLearnerStateAndContinuesBitExactly) {
  ASSERT_TRUE(LearnerOptions(true).Validate().ok()) << LearnerOptions(true).Validate().message();
  const std::vector<double> x = Trajectory(5001);
  StreamingLearner whole(LearnerOptions(true));
  for (int from = 0; from < 5000; from += 250) Feed(whole, x, from, std::min(from + 251, 5001), 7.0);
  ASSERT_NE(whole.alarms(), nullptr);
  // One stationary false alarm before the change is possible: this stream has one, of the size
  // test's slow CUSUMs 163 pairs after the forecast's refit at 2,048 (docs/algorithms.md §12.12).
  // A channel scaled wrongly raised four (§12.8).
  const auto& records = whole.alarms()->records();
  const size_t before = static_cast<size_t>(
      std::count_if(records.begin(), records.end(), [](const AlarmRecord& a) { return a.index <= 2500; }));
  EXPECT_LE(before, 1u);
  ASSERT_GE(records.size(), before + 1);
  const AlarmRecord& first = records[before];
  EXPECT_GT(first.index, 2500);
  EXPECT_LT(first.index, 3000);
  EXPECT_EQ(first.channels.front(), 1);  // the channel that changed
  EXPECT_EQ(first.time, 7.0);

  // Stop at row 2600 (in the middle of the change), serialize, restore, go on.
  StreamingLearner head(LearnerOptions(true));
  for (int from = 0; from < 2600; from += 200) Feed(head, x, from, std::min(from + 201, 2601), 7.0);
  const std::string image = Bytes(head);
  io::Reader r(image, "test");
  absl::StatusOr<StreamingLearner> restored =
      StreamingLearner::Deserialize(r, LearnerOptions(true), StreamingLearner::kStateVersion, head.sigma_selection());
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (int from = 2600; from < 5000; from += 300) Feed(*restored, x, from, std::min(from + 301, 5001), 7.0);
  EXPECT_EQ(Bytes(*restored), Bytes(whole));

  // The digest writer zeroes the arrival times only.
  io::Writer digest;
  digest.set_for_digest(true);
  whole.Serialize(digest);
  EXPECT_EQ(digest.size(), Bytes(whole).size());
  EXPECT_NE(digest.data(), Bytes(whole));
}

// A learner state whose alarm monitor an earlier release wrote (here the d = 3 ALRM v5 fixture
// spliced into a learner of that configuration in place of its own v12 monitor) restores: the
// monitor re-arms with every record, and the learner goes on scoring and learning.
TEST(AlarmMonitor, ALearnerRestoredWithAnOlderMonitorReArmsIt) {
  StreamingLearner::Options o = LearnerOptions(true);
  o.dim = 3;
  o.cme.dim = 3;
  o.alarm_rate = 25;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate().message();
  const std::vector<double> a = Ou(5001, 0.9, 0.9, 1 << 30, 31), b = Ou(5001, 0.9, 0.3, 4500, 32),
                            c = Ou(5001, 0.8, 0.8, 1 << 30, 33);
  std::vector<double> rows(3 * 5001);
  for (int t = 0; t < 5001; ++t) {
    rows[3 * t] = a[t];
    rows[3 * t + 1] = b[t];
    rows[3 * t + 2] = c[t];
  }
  auto feed = [&](StreamingLearner& l, int from, int to) {
    StreamBatch batch;
    batch.n = to - from - 1;
    batch.dim = 3;
    batch.x = rows.data() + 3 * from;
    batch.y = batch.x + 3;
    batch.trajectory = true;
    batch.time = 9.0;
    ASSERT_TRUE(l.Observe(batch).ok());
  };
  StreamingLearner head(o);
  for (int from = 0; from < 4000; from += 500) feed(head, from, from + 501);
  ASSERT_EQ(head.alarms()->pairs(), 4000);
  const std::string image = Bytes(head);
  const size_t at = image.find(std::string("ALRM\x0c\0\0\0", 8));
  ASSERT_NE(at, std::string::npos);
  uint64_t length = 0;
  std::memcpy(&length, image.data() + at + 8, 8);
  std::string old;
  for (const test_support::OlderMonitorFixture& fx : test_support::kOlderMonitors) {
    if (std::string(fx.name) == "d3v5") {
      ASSERT_TRUE(absl::Base64Unescape(fx.base64, &old));
    }
  }
  ASSERT_FALSE(old.empty());
  const std::string spliced = image.substr(0, at) + old + image.substr(at + 16 + length);
  io::Reader r(spliced, "test");
  absl::StatusOr<StreamingLearner> restored =
      StreamingLearner::Deserialize(r, o, StreamingLearner::kStateVersion, head.sigma_selection());
  ASSERT_TRUE(restored.ok()) << restored.status();
  const AlarmMonitor& m = *restored->alarms();
  EXPECT_EQ(m.RearmNote(), "alarm monitor from format v5 re-armed at pair 4000");
  EXPECT_EQ(m.alarms_total(), 11);
  EXPECT_EQ(m.records().size(), 11u);
  EXPECT_EQ(m.armed_at(), -1);
  // Everything but the monitor is what the learner wrote.
  EXPECT_EQ(Bytes(*restored).substr(0, at), image.substr(0, at));
  for (int from = 4000; from < 5000; from += 500) feed(*restored, from, from + 501);
  const AlarmMonitor& after = *restored->alarms();
  EXPECT_EQ(after.pairs(), 5000);
  // Re-armed after the forecast's first fit (64 pairs) and 200 scored pairs.
  EXPECT_EQ(after.armed_at(), 4000 + 64 + 199);
  EXPECT_GE(after.alarms_total(), 11);
  EXPECT_EQ(after.records().front().index, m.records().front().index);
}

TEST(AlarmMonitor, ALearnerWithoutAlarmsIsUnchangedByThem) {
  // Everything but the alarms is the same with and without them: the monitor only reads pairs.
  const std::vector<double> x = Trajectory(3001);
  StreamingLearner with(LearnerOptions(true)), without(LearnerOptions(false));
  for (int from = 0; from < 3000; from += 500) {
    Feed(with, x, from, from + 501, 1.0);
    Feed(without, x, from, from + 501, 1.0);
  }
  EXPECT_EQ(without.alarms(), nullptr);
  const std::string a = Bytes(with), b = Bytes(without);
  ASSERT_GT(a.size(), b.size());
  EXPECT_EQ(a.substr(0, b.size()), b);  // the alarms are appended after the version-7 body
}

TEST(AlarmMonitor, ResetRestartsEveryEstimatorAtTheAlarmingPair) {
  // on_change "reset": after the last alarm the learner holds, bit for bit, what a new learner
  // fed the pairs from that alarm's pair on holds (and the alarms go on).
  StreamingLearner::Options o = LearnerOptions(true);
  o.cme.sigma = 0.5;  // fixed: no warm-up, no scaler
  o.scale_inputs = false;
  o.lags.clear();  // no sequence estimator: the episode bytes stay untouched
  o.reset_on_alarm = true;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate().message();
  const std::vector<double> x = Trajectory(5001);
  StreamingLearner reset(o);
  for (int from = 0; from < 5000; from += 250) Feed(reset, x, from, std::min(from + 251, 5001), 1.0);
  ASSERT_GE(reset.alarms()->records().size(), 1u);
  const int64_t last = reset.alarms()->records().back().index;
  EXPECT_EQ(reset.samples(), 5000 - last);
  EXPECT_EQ(reset.learned_total(), 5000);

  StreamingLearner::Options fresh_options = o;
  fresh_options.alarms = false;
  fresh_options.reset_on_alarm = false;
  StreamingLearner fresh(fresh_options);
  Feed(fresh, x, static_cast<int>(last), 5001, 1.0);
  const std::string want = Bytes(fresh), got = Bytes(reset);
  ASSERT_GT(got.size(), want.size());
  EXPECT_EQ(got.substr(0, want.size()), want);

  o.alarms = false;
  EXPECT_FALSE(o.Validate().ok());  // a reset needs alarms
}

}  // namespace
}  // namespace cmestream

namespace cmestream {
namespace {

// What alarm_rate promises on stationary streams that are not Gaussian (issue "alarms that hold
// on real streams", item 1), through the whole monitor at R = 1, 3 seeds x 200,000 pairs each:
// heavy-tailed (AR(1) 0.5 with Student t3 innovations), strongly autocorrelated (AR(1) 0.95),
// quantized (AR(1) 0.9 rounded to integers, 0.43 of its standard deviation), counts (Poisson(2),
// i.i.d.) and a square wave. Measured (alarms per 10^4): 1.67, 0.85, 1.98, 1.37, 0.25. A mostly-zero
// counter (Poisson(3) events on 1 % of pairs) raises 9.7 (printed, not asserted: docs/algorithms.md
// §12.9, "Quantized and intermittent streams", says where they come from).
TEST(AlarmMonitor, StationaryRatesOnNonGaussianStreams) {
  const int n = 200'000, seeds = 3;
  const char* names[] = {"heavy-tailed", "autocorrelated", "quantized", "counts", "square wave", "counter"};
  for (int stream = 0; stream < 6; ++stream) {
    int64_t alarms = 0;
    for (uint64_t seed = 1; seed <= seeds; ++seed) {
      std::mt19937_64 rng(seed);
      std::normal_distribution<double> g;
      std::student_t_distribution<double> t3(3.0);
      std::poisson_distribution<int> counts(2), events(3);
      std::bernoulli_distribution rare(0.01);
      std::vector<double> x(n + 1);
      double a = 0;
      for (int t = 0; t <= n; ++t) {
        switch (stream) {
          case 0:
            x[t] = a = 0.5 * a + t3(rng);
            break;
          case 1:
            x[t] = a = 0.95 * a + g(rng);
            break;
          case 2:
            a = 0.9 * a + g(rng), x[t] = std::round(a);
            break;
          case 3:
            x[t] = counts(rng);
            break;
          case 4:
            x[t] = (t / 97) % 2 == 0 ? 0.0 : 5.0;
            break;
          default:
            x[t] = rare(rng) ? events(rng) : 0.0;
            break;
        }
      }
      AlarmMonitor::Options o;
      o.dim = 1;
      AlarmMonitor m(o);
      for (int t = 0; t < n; t += 1000) m.ObservePairs(&x[t], &x[t + 1], 1000, t);
      alarms += m.alarms_total();
    }
    const double rate = 1e4 * static_cast<double>(alarms) / (static_cast<double>(n) * seeds);
    std::printf("%s: %lld alarms, %.2f per 10^4 pairs (R = 1)\n", names[stream], static_cast<long long>(alarms), rate);
    // Within a factor 2 of R, with room for the quantized stream's 1.98 on another processor's
    // rounding of the forecast's refits.
    if (stream < 5) {
      EXPECT_LE(rate, stream == 2 ? 2.5 : 2.0) << names[stream];
    }
  }
}

// The spike test (ALRM v11, docs/algorithms.md §12.14). Its calibration on stationary streams
// whose steps are far from Gaussian: autocorrelated (AR(1), a = 0.95), heavy-tailed (Student t
// with 3 degrees of freedom), and quantized (the AR(1) rounded to a tenth of its standard
// deviation): spike alarms per 10^4 pairs within a factor 2 of its share, kSpikeShare R, at R = 1
// (measured at 20 x 50,000 pairs each: see the printout). And a single outlier of 12 standard
// deviations on an AR(1) stream is alarmed at its pair as "spike", up, on channel 0.
TEST(AlarmMonitor, SpikeTestHoldsItsRateOnNonGaussianStepsAndFindsAnOutlier) {
  const int n = 50000, seeds = 20;
  for (const int stream : {0, 1, 2}) {
    int64_t spikes = 0, pairs = 0;
    for (uint64_t seed = 1; seed <= seeds; ++seed) {
      std::mt19937_64 rng(seed);
      std::normal_distribution<double> g;
      std::student_t_distribution<double> t3(3.0);
      std::vector<double> x(n + 1, 0.0);
      for (int t = 1; t <= n; ++t) {
        x[t] = stream == 1 ? 0.5 * x[t - 1] + t3(rng) : 0.95 * x[t - 1] + std::sqrt(1 - 0.95 * 0.95) * g(rng);
      }
      if (stream == 2)
        for (double& v : x) v = std::round(v * 10) / 10;
      AlarmMonitor::Options o;
      o.dim = 1;
      AlarmMonitor m(o);
      for (int t = 0; t < n; ++t) m.ObservePair(&x[t], &x[t + 1], t);
      for (const AlarmRecord& a : m.records()) spikes += a.kind == ChangeDetector::Kind::kSpike;
      pairs += n - AlarmMonitor::kSpikeWarmup;
    }
    const double rate = 1e4 * static_cast<double>(spikes) / static_cast<double>(pairs);
    std::printf("spike test, stream %d (0 AR(1), 1 t3, 2 quantized): %lld spike alarms, %.3f per 10^4 (share %.2f)\n",
                stream, static_cast<long long>(spikes), rate, AlarmMonitor::kSpikeShare);
    EXPECT_LE(rate, 2 * AlarmMonitor::kSpikeShare) << stream;
  }
  std::vector<double> x = Ou(6001, 0.9, 0.9, 1 << 30, 11);
  x[4000] += 12;
  AlarmMonitor::Options o;
  o.dim = 1;
  AlarmMonitor m(o);
  for (int t = 0; t < 6000; ++t) m.ObservePair(&x[t], &x[t + 1], t);
  bool found = false;
  for (const AlarmRecord& a : m.records()) {
    if (a.index == 3999) {
      found = true;
      EXPECT_EQ(a.kind, ChangeDetector::Kind::kSpike);
      EXPECT_EQ(a.direction, ChangeDetector::Direction::kUp);
      EXPECT_EQ(a.channels.front(), 0);
      EXPECT_GT(a.score, a.threshold);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace cmestream
