#include "core/alarms/alarm_monitor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// v3: the scoring of a small state (a flag, the cubic forecast, and the coefficients' test's DRFT
// object after the detector). v4: a second flag, the coefficients' test with the forecast's steps
// (DRFT v2). Every other monitor is written as v2, byte for byte what the release before wrote,
// and restores as such; a v3 object restores without the steps. v5: the holdover of the size test
// (CHGD v2), any monitor; three flags (coefficient test, steps, holdover) in place of v3/v4's.
// v6: a fourth flag, the coefficients' test's holdover (DRFT v3); written only by a monitor that
// runs that test, every other new monitor stays v5. v7: a fifth flag, the step test (§12.10),
// and its CHGD object after the DRFT one; written only by a monitor that runs it. v8: a sixth
// flag, the return test (§12.11, the step test's CHGD v3); written only by a monitor that runs it.
// v9: a seventh flag, the slow CUSUMs and the re-armed return test (§12.12: the size test's and
// the step test's CHGD v4); written only by a monitor that runs them. v10: an eighth flag, the
// late confirmation (§12.13, the step test's CHGD v5); written only by a monitor that runs it.
// v11: a ninth flag, the spike test (§12.14), and its state after the step test's CHGD object:
// per channel the steps seen (u64), the kept largest steps (u32 count, f64 each, descending),
// then the pair before which no spike alarm is raised and its alarm count (i64 each); written
// only by a monitor that runs it.
constexpr io::ObjectFormat kFormat = {io::Fourcc("ALRM"), 11, "alarm monitor"};
// Discrete models: pairs of counts before the surprise is scored (the counts' first rows).
constexpr int64_t kDiscreteFirstScored = 64;
// Discrete smoothing: 1/2 pseudo-count per state.
constexpr double kPseudoCount = 0.5;

// Phi^-1(p) for p in (0, 1): Acklam's rational approximation (relative error 1.15e-9), then one
// Halley step on erfc (to ~1e-15).
double NormalQuantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - 0.02425) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

// A uniform draw in (0, 1) that is a function of the pair's index alone (replay draws it again).
double UniformOf(int64_t index) {
  uint64_t z = static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ULL;  // SplitMix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

double DiscretePValue(const TransitionCounts& counts, int x, int y, int num_states, double v) {
  // Every probability has the denominator n_x + P/2, so they compare as counts do.
  const double ny = counts.Count(x, y);
  double less = 0, equal = 0;  // in counts + 1/2
  int seen = 0;
  counts.ForEachInRow(x, [&](int, double n) {
    ++seen;
    if (n < ny) less += n + kPseudoCount;
    if (n == ny) equal += n + kPseudoCount;
  });
  // The states never seen after x (count 0): below y's count, or level with it.
  const double unseen = (num_states - seen) * kPseudoCount;
  if (ny > 0) {
    less += unseen;
  } else {
    equal += unseen;
  }
  const double total = counts.Visits(x) + kPseudoCount * num_states;
  return std::clamp((less + v * equal) / total, 0.0, 1.0);
}

absl::Status AlarmMonitor::Options::Validate() const {
  const bool continuous = dim > 0;
  if (continuous == (num_states > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alarms: exactly one of dim (", dim, ") and num_states (", num_states, ") must be positive"));
  }
  if (continuous && (channels < 1 || channels > dim || dim % channels != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alarms: channels is ", channels, ", expected a divisor of dim (", dim, ")"));
  }
  if (absl::Status s = DetectorOptions(*this).Validate(); !s.ok()) return s;
  return RunsStepTest(*this) ? StepTestOptions(*this).Validate() : absl::OkStatus();
}

bool AlarmMonitor::RunsDriftTest(const Options& o) { return o.dim > 0 && o.dim <= kMaxSmallState && o.scoring_v3; }

bool AlarmMonitor::RunsStepTest(const Options& o) {
  return RunsDriftTest(o) && o.holdover && o.drift_holdover && o.step_test;
}

bool AlarmMonitor::RunsReturnTest(const Options& o) { return RunsStepTest(o) && o.return_test; }

bool AlarmMonitor::RunsSlowCusums(const Options& o) { return RunsReturnTest(o) && o.slow_cusums; }

bool AlarmMonitor::RunsLateConfirm(const Options& o) { return RunsSlowCusums(o) && o.late_confirm; }

bool AlarmMonitor::RunsSpikeTest(const Options& o) { return RunsLateConfirm(o) && o.spike_test; }

// With both tests each gets half the false-alarm budget (docs/algorithms.md §12.9); with the step
// test (§12.10) it takes kStepTestShare first.
ChangeDetector::Options AlarmMonitor::DetectorOptions(const Options& o) {
  ChangeDetector::Options d;
  d.channels = o.dim > 0 ? o.channels : 1;
  d.alarm_rate = RunsDriftTest(o) ? o.alarm_rate / 2 : o.alarm_rate;
  if (RunsStepTest(o)) d.alarm_rate = o.alarm_rate * (1 - kStepTestShare) / 2;
  d.holdover_pairs = o.holdover ? kHoldoverPairs : 0;
  if (RunsSlowCusums(o)) {
    d.slow_drift = kSlowDrift;
    d.slow_share = kSlowShare;
  }
  return d;
}

ChangeDetector::Options AlarmMonitor::StepTestOptions(const Options& o) {
  ChangeDetector::Options d = DetectorOptions(o);
  d.alarm_rate = o.alarm_rate * kStepTestShare;
  d.return_pairs = RunsReturnTest(o) ? kReturnPairs : 0;
  d.return_rearm = RunsSlowCusums(o);
  d.late_confirm = RunsLateConfirm(o);
  return d;
}

DriftDetector::Options AlarmMonitor::DriftOptions(const Options& o) {
  DriftDetector::Options d;
  d.inputs = o.dim;
  d.channels = o.channels;
  d.alarm_rate = RunsStepTest(o) ? o.alarm_rate * (1 - kStepTestShare) / 2 : o.alarm_rate / 2;
  d.steps = o.scoring_v4;
  d.holdover_pairs = o.holdover && o.drift_holdover ? kDriftHoldoverPairs : 0;
  return d;
}

AlarmMonitor::AlarmMonitor(const Options& options) : options_(options), detector_(DetectorOptions(options)) {
  if (options.dim > 0) {
    LinearForecast::Options f;
    f.dim = options.dim;
    f.outputs = options.channels;
    f.degree = RunsDriftTest(options) ? 3 : 1;
    f.first_fit = LinearForecast::FirstFitFor(f.regressors());
    f.fit_every = std::max<int64_t>(f.fit_every, f.first_fit);
    forecast_.emplace(f);
  }
  if (RunsDriftTest(options)) drift_.emplace(DriftOptions(options));
  if (RunsStepTest(options)) step_test_.emplace(StepTestOptions(options));
  if (RunsSpikeTest(options)) {
    spike_.emplace();
    spike_->top.resize(static_cast<size_t>(options.channels));
    for (std::vector<double>& t : spike_->top) t.reserve(kSpikeTop);
    spike_->seen.assign(static_cast<size_t>(options.channels), 0);
    spike_->threshold.assign(static_cast<size_t>(options.channels), -1.0);
  }
  residual_.assign(static_cast<size_t>(detector_.channels()) * LinearForecast::kBlock, 0.0);
  step_.assign(static_cast<size_t>(detector_.channels()), 0.0);
  state_step_.assign(static_cast<size_t>(detector_.channels()), 0.0);
}

double AlarmMonitor::score() const {
  double s = detector_.level();
  if (drift_) s = std::max(s, drift_->statistic() / drift_->threshold());
  if (step_test_) s = std::max(s, step_test_->level());
  return s;
}

void AlarmMonitor::ObservePair(const double* x, const double* y, double time) { ObservePairs(x, y, 1, time); }

void AlarmMonitor::ObservePairs(const double* x, const double* y, int64_t n, double time) {
  const int d = options_.dim, c = detector_.channels();
  while (n > 0) {
    const int64_t next_fit = forecast_->next_fit();
    bool scored = false;
    // A refit can only come after the block's last pair: every pair is scored with one fit.
    const int k = forecast_->ObserveBlock(x, y, n, residual_.data(), &scored);
    for (int b = 0; b < k; ++b) {
      if (scored) {
        const double* xb = x + static_cast<int64_t>(b) * d;
        const double* rb = residual_.data() + static_cast<int64_t>(b) * c;
        if (drift_ && drift_->options().steps) {
          // The forecast's step of channel o: its forecast (y_new - r) minus the newest value of
          // that channel in x.
          const double* yb = y + static_cast<int64_t>(b) * d + (d - c);
          for (int o = 0; o < c; ++o) step_[static_cast<size_t>(o)] = (yb[o] - rb[o]) - xb[d - c + o];
        }
        if (step_test_) {
          // The step test's residual (docs/algorithms.md §12.10): the state's step per channel.
          const double* yb = y + static_cast<int64_t>(b) * d + (d - c);
          for (int o = 0; o < c; ++o) state_step_[static_cast<size_t>(o)] = yb[o] - xb[d - c + o];
        }
        Score(xb, rb, step_.data(), time);
      }
      // A refit makes the residual another function of x: the coefficient test's reference
      // restarts (after the pair the refit followed, as pair at a time). Its holdover
      // (docs/algorithms.md §12.9 "After a restart") holds the reference the refit ended, or
      // keeps a held one running if that reference is too short.
      if (b == k - 1 && drift_ && forecast_->next_fit() != next_fit) drift_->Restart(/*keep=*/true);
      ++pairs_;
    }
    x += static_cast<int64_t>(k) * d;
    y += static_cast<int64_t>(k) * d;
    n -= k;
  }
}

void AlarmMonitor::ObserveIds(int64_t x, int64_t y, const TransitionCounts& counts, double time) {
  if (pairs_ >= kDiscreteFirstScored) {
    const int xi = static_cast<int>(x), yi = static_cast<int>(y);
    if (surprise_score_) {
      const double p = (counts.Count(xi, yi) + kPseudoCount) / (counts.Visits(xi) + kPseudoCount * options_.num_states);
      residual_[0] = std::sqrt(std::max(0.0, -std::log(p)));
    } else {
      // The randomized p-value of the transition, as |N(0,1)| (docs/algorithms.md §12.8).
      const double u = DiscretePValue(counts, xi, yi, options_.num_states, UniformOf(pairs_));
      residual_[0] = -NormalQuantile(std::clamp(u / 2, 1e-300, 0.5));
    }
    Score(nullptr, residual_.data(), nullptr, time);
  }
  ++pairs_;
}

void AlarmMonitor::Score(const double* x, const double* residual, const double* step, double time) {
  const ChangeDetector::Alarm* alarm = detector_.Observe(residual);
  const DriftDetector::Alarm* drift = drift_ ? drift_->Observe(x, residual, step) : nullptr;
  // The step test (docs/algorithms.md §12.10) scores the pair only when neither test above
  // alarmed on it: otherwise it restarts with them, and every alarm it counts is recorded.
  const ChangeDetector::Alarm* stepped =
      step_test_ && alarm == nullptr && drift == nullptr ? step_test_->Observe(state_step_.data()) : nullptr;
  if (armed_at_ < 0 && detector_.armed()) armed_at_ = pairs_;
  // One change, one alarm: the tests that did not alarm restart with the one that did (the
  // residuals' size test first when both cross on the same pair: it labels the kind).
  if (alarm != nullptr) {
    Record(*alarm, time);
    if (drift_ && drift == nullptr) drift_->Restart();
    if (step_test_) step_test_->Restart();
  } else if (drift != nullptr) {
    Record(*drift, time);
    detector_.Restart();
    if (step_test_) step_test_->Restart();
  } else if (stepped != nullptr) {
    // The state's own steps changed in size before the forecast's residuals showed it: a change of
    // how the state moves, "dynamics" (§12.10).
    Record(*stepped, time);
    records_.back().kind = ChangeDetector::Kind::kDynamics;
    detector_.Restart();
    if (drift_) drift_->Restart();
  }
  // The spike test (§12.14) learns every step and alarms only on a pair the others left alone; it
  // restarts nothing (one step out of the tail is no evidence against the others' references).
  if (spike_) ObserveSpike(state_step_.data(), time, alarm != nullptr || drift != nullptr || stepped != nullptr);
}

// docs/algorithms.md (12.14): with the top k = clamp(n / 50, 8, kSpikeTop - 1) of the n steps
// seen (n rounded down to a multiple of 50), u = the (k+1)-th largest and the j of them above u
// (p = j / n), the exponential tail
// P(|step| > u + t) = p e^{-t / b} (b their mean excess over u) puts the threshold at
// T_e = u + b log(p / q), the Pareto tail P(|step| > u s) = p s^{-1/g} (g = their mean log(x / u),
// Hill's estimate; u > 0) at T_p = u (p / q)^g, q = kSpikeShare R / 10^4; the larger one holds for
// tails from light to polynomial. An alarm when |step| > max(T_e, T_p, u).
double AlarmMonitor::SpikeThreshold(const std::vector<double>& top, int64_t n, double q) {
  const int64_t k =
      std::clamp<int64_t>(n / 50, 8, std::min<int64_t>(kSpikeTop - 1, static_cast<int64_t>(top.size()) - 1));
  const double u = top[static_cast<size_t>(k)];
  double excess = 0, logs = 0;
  int64_t j = 0;
  for (int64_t i = 0; i < k && top[static_cast<size_t>(i)] > u; ++i, ++j) {
    excess += top[static_cast<size_t>(i)] - u;
    if (u > 0) logs += std::log(top[static_cast<size_t>(i)] / u);
  }
  if (j == 0) return u;
  const double ratio = (static_cast<double>(j) / static_cast<double>(n)) / q;
  double threshold = u + (excess / j) * std::log(ratio);
  if (u > 0) threshold = std::max(threshold, u * std::pow(ratio, logs / j));
  return std::max(threshold, u);
}

void AlarmMonitor::ObserveSpike(const double* step, double time, bool other_alarm) {
  const double q = kSpikeShare * options_.alarm_rate / 1e4;
  int best = -1;
  double best_step = 0, best_threshold = 0, best_ratio = 0;
  for (int c = 0; c < options_.channels; ++c) {
    const double a = std::abs(step[c]);
    if (!std::isfinite(a)) continue;
    std::vector<double>& top = spike_->top[static_cast<size_t>(c)];
    int64_t& n = spike_->seen[static_cast<size_t>(c)];
    if (n >= kSpikeWarmup && pairs_ >= spike_->quiet_until) {
      // A function of the kept steps and of n rounded down to a multiple of 50 (so that k and p
      // move together, and a restored monitor computes what the original did): cached between.
      double& cached = spike_->threshold[static_cast<size_t>(c)];
      if (!(cached >= 0) || n % 50 == 0) cached = SpikeThreshold(top, n - n % 50, q);
      const double bound = cached;
      if (a > bound && (best < 0 || a / std::max(bound, 1e-300) > best_ratio)) {
        best = c;
        best_step = a;
        best_threshold = bound;
        best_ratio = a / std::max(bound, 1e-300);
      }
    }
    // The step joins the kept largest ones (capacity reserved: no allocation); the cached
    // threshold is then recomputed.
    if (static_cast<int>(top.size()) < kSpikeTop || a > top.back()) {
      if (static_cast<int>(top.size()) < kSpikeTop) {
        top.push_back(a);
      } else {
        top.back() = a;
      }
      for (size_t i = top.size() - 1; i > 0 && top[i] > top[i - 1]; --i) std::swap(top[i], top[i - 1]);
      spike_->threshold[static_cast<size_t>(c)] = -1;
    }
    ++n;
  }
  if (best < 0) return;
  ++spike_->alarms;
  spike_->quiet_until = pairs_ + kSpikeGap;
  if (other_alarm) return;  // counted (alarms_total) as the other tests count theirs; one record a pair
  AlarmRecord rec = NewRecord(best_step, best_threshold, 0, time);
  rec.channels.push_back(best);
  for (int c = 0; c < options_.channels; ++c)
    if (c != best) rec.channels.push_back(c);
  rec.kind = ChangeDetector::Kind::kSpike;
  rec.direction = ChangeDetector::Direction::kUp;
  Keep(std::move(rec));
}

// Either test's alarm at the current pair; `run_length` = the pairs from its onset to it (every one
// of them was scored: the onset follows the test's restart).
AlarmRecord AlarmMonitor::NewRecord(double score, double threshold, int64_t run_length, double time) const {
  AlarmRecord rec;
  rec.index = pairs_;
  rec.time = time;
  rec.score = score;
  rec.threshold = threshold;
  rec.onset = std::max<int64_t>(0, pairs_ - run_length);
  return rec;
}

void AlarmMonitor::Record(const ChangeDetector::Alarm& alarm, double time) {
  AlarmRecord rec = NewRecord(alarm.score, alarm.threshold, alarm.index - alarm.onset, time);
  if (forecast_) rec.channels.assign(alarm.channels.begin(), alarm.channels.end());
  rec.kind = alarm.kind;
  rec.direction = alarm.direction;
  Keep(std::move(rec));
}

// A coefficient alarm: the residuals became predictable from the state, which is a change of the
// dynamics (docs/algorithms.md §12.9); its channel leads, the others follow in order.
void AlarmMonitor::Record(const DriftDetector::Alarm& alarm, double time) {
  AlarmRecord rec = NewRecord(alarm.score, alarm.threshold, alarm.index - alarm.run_start, time);
  rec.channels.push_back(alarm.channel);
  for (int c = 0; c < options_.channels; ++c)
    if (c != alarm.channel) rec.channels.push_back(c);
  rec.kind = ChangeDetector::Kind::kDynamics;
  rec.direction = alarm.up ? ChangeDetector::Direction::kUp : ChangeDetector::Direction::kDown;
  Keep(std::move(rec));
}

void AlarmMonitor::Keep(AlarmRecord rec) {
  records_.push_back(std::move(rec));
  if (static_cast<int>(records_.size()) > kMaxRecords) records_.pop_front();
  // The forecast keeps its fit and its schedule (docs/algorithms.md §12.8: resetting it made the
  // early, noisy refits raise alarms of their own).
}

namespace {

// The options written (the scoring's flags follow the counters).
constexpr auto kMonitorOptionFields = [](auto& f, auto& o) {
  f.Scalars("alarm monitor", io::Field("dim", o.dim), io::Field("channels", o.channels),
            io::Field("num_states", o.num_states), io::Field("alarm_rate", o.alarm_rate));
};

}  // namespace

// In file order (kFormat above says what each version added); a monitor restored from the version
// before one keeps scoring without its test.
const AlarmMonitor::LaterTest AlarmMonitor::kLaterTests[5] = {
    {7, "alarm monitor step test", &Options::step_test, &AlarmMonitor::RunsStepTest, "the step test's state"},
    {8, "alarm monitor return test", &Options::return_test, &AlarmMonitor::RunsReturnTest, "the return test's state"},
    {9, "alarm monitor slow cusums", &Options::slow_cusums, &AlarmMonitor::RunsSlowCusums, "the slow CUSUMs' state"},
    {10, "alarm monitor late confirmation", &Options::late_confirm, &AlarmMonitor::RunsLateConfirm,
     "the late confirmation's state"},
    {11, "alarm monitor spike test", &Options::spike_test, &AlarmMonitor::RunsSpikeTest, "the spike test's state"},
};

void AlarmMonitor::Serialize(io::Writer& w) const {
  const bool v3 = RunsDriftTest(options_), v4 = v3 && options_.scoring_v4, v5 = options_.holdover;
  const bool v6 = v3 && v5 && options_.drift_holdover;
  uint32_t version = v6 ? 6 : (v5 ? 5 : (v4 ? 4 : (v3 ? 3 : 2)));
  for (const LaterTest& l : kLaterTests) {
    if (l.runs(options_)) version = l.version;
  }
  io::FieldWriter f(w, kFormat, version);
  kMonitorOptionFields(f, options_);
  f.Scalars("alarm monitor", io::Field("pairs", pairs_), io::Field("armed_at", armed_at_));
  if (options_.num_states > 0) w.U8(surprise_score_ ? 1 : 0);  // v2
  if (v5) {
    w.U8(v3 ? 1 : 0);
    w.U8(v4 ? 1 : 0);
    w.U8(1);
    if (v6) w.U8(1);
    for (const LaterTest& l : kLaterTests) {
      if (l.runs(options_)) w.U8(1);
    }
  } else {
    if (v3) w.U8(1);
    if (v4) w.U8(1);
  }
  if (forecast_) forecast_->Serialize(w);
  detector_.Serialize(w);
  if (drift_) drift_->Serialize(w);
  if (step_test_) step_test_->Serialize(w);
  if (spike_) {
    for (int c = 0; c < options_.channels; ++c) {
      w.U64(static_cast<uint64_t>(spike_->seen[static_cast<size_t>(c)]));
      const std::vector<double>& top = spike_->top[static_cast<size_t>(c)];
      w.U32(static_cast<uint32_t>(top.size()));
      for (double v : top) w.F64(v);
    }
    w.I64(spike_->quiet_until);
    w.I64(spike_->alarms);
  }
  w.U64(records_.size());
  for (const AlarmRecord& a : records_) {
    w.I64(a.index);
    w.F64(w.for_digest() ? 0.0 : a.time);  // arrival time: not learned state
    w.F64(a.score);
    w.F64(a.threshold);
    w.U32(static_cast<uint32_t>(a.channels.size()));
    for (int c : a.channels) w.I32(c);
    w.U8(static_cast<uint8_t>(a.kind));
    w.U8(static_cast<uint8_t>(a.direction));
    w.I64(a.onset);
  }
}

absl::StatusOr<AlarmMonitor> AlarmMonitor::Deserialize(io::Reader& r) {
  auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kMonitorOptionFields);
  if (!r.ok()) return r.status();
  // Monitors written as v1/v2 have no coefficient test and keep running without one; v3 ones run
  // it without the steps.
  o.scoring_v3 = o.scoring_v4 = o.holdover = o.drift_holdover = o.step_test = o.return_test = o.slow_cusums =
      o.late_confirm = o.spike_test = false;
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(std::string(s.message()));
  // The forecast's d x d sums are in the body: nothing is allocated for a body that cannot hold them.
  if (o.dim > 0 &&
      !r.Expect(8 * static_cast<uint64_t>(o.dim) * static_cast<uint64_t>(o.dim), "alarm monitor forecast")) {
    return r.status();
  }
  int64_t pairs = 0, armed_at = 0;
  io::FieldReader f(r);
  f.Scalars("alarm monitor", io::Field("pairs", pairs), io::Field("armed_at", armed_at));
  bool surprise_score = false;
  if (o.num_states > 0) {
    // v1 discrete monitors scored the surprise and keep it (their detector is calibrated on it).
    const uint8_t kind = version >= 2 ? r.U8("alarm monitor score kind") : 1;
    if (r.ok() && kind > 1) return r.Fail("alarm monitor score kind out of range");
    surprise_score = kind == 1;
  }
  if (version >= 5) {
    const uint8_t v3 = r.U8("alarm monitor coefficient test"), v4 = r.U8("alarm monitor coefficient test steps"),
                  hold = r.U8("alarm monitor holdover");
    if (r.ok() && (v3 > 1 || v4 > v3 || hold != 1)) return r.Fail("alarm monitor v5 flags out of range");
    o.scoring_v3 = v3 == 1;
    o.scoring_v4 = v4 == 1;
    o.holdover = true;
    if (r.ok() && o.scoring_v3 && !RunsDriftTest(o))
      return r.Fail("alarm monitor with a coefficient test on a state it does not run on");
    // v6: the coefficients' test's holdover (written only by a monitor that runs that test); a
    // v5 monitor without the test is what a new one is.
    if (version >= 6) {
      const uint8_t drift_hold = r.U8("alarm monitor coefficient test holdover");
      if (r.ok() && (drift_hold != 1 || !o.scoring_v3)) return r.Fail("alarm monitor v6 flags out of range");
    }
    o.drift_holdover = version >= 6 || !o.scoring_v3;
    // v7-v10 (kLaterTests): a monitor without the coefficients' test is what a new one is.
    for (const LaterTest& l : kLaterTests) {
      const bool written = version >= l.version;
      if (written) {
        const uint8_t flag = r.U8(l.flag);
        if (r.ok() && flag != 1) return r.Fail(absl::StrCat("alarm monitor v", l.version, " flags out of range"));
      }
      o.*l.option = written || !o.scoring_v3;
      if (r.ok() && written && !l.runs(o))
        return r.Fail(absl::StrCat("alarm monitor v", l.version, " without ", l.state));
    }
  } else if (version >= 3) {
    const uint8_t flag = r.U8("alarm monitor coefficient test");
    if (r.ok() && flag != 1) return r.Fail("alarm monitor coefficient test flag out of range");
    o.scoring_v3 = true;
    if (r.ok() && !RunsDriftTest(o))
      return r.Fail("alarm monitor v3 with a state the coefficient test does not run on");
  }
  if (version == 4) {
    const uint8_t flag = r.U8("alarm monitor coefficient test steps");
    if (r.ok() && flag != 1) return r.Fail("alarm monitor coefficient test steps flag out of range");
    o.scoring_v4 = true;
  }
  if (!r.ok()) return r.status();
  AlarmMonitor m(o);
  m.pairs_ = pairs;
  m.armed_at_ = armed_at;
  m.surprise_score_ = surprise_score;
  if (m.forecast_) {
    absl::StatusOr<LinearForecast> f = LinearForecast::Deserialize(r);
    if (!f.ok()) return f.status();
    if (f->options().dim != o.dim || f->options().outputs != o.channels ||
        f->options().degree != m.forecast_->options().degree) {
      return r.Fail("alarm monitor: the forecast's dimensions differ from the monitor's");
    }
    m.forecast_ = std::move(*f);
  }
  absl::StatusOr<ChangeDetector> d = ChangeDetector::Deserialize(r);
  if (!d.ok()) return d.status();
  if (d->channels() != m.detector_.channels() || d->options().holdover_pairs != m.detector_.options().holdover_pairs ||
      d->options().slow_drift != m.detector_.options().slow_drift) {
    return r.Fail("alarm monitor: the detector's channels, holdover or slow CUSUMs differ from the monitor's");
  }
  m.detector_ = std::move(*d);
  if (m.drift_) {
    absl::StatusOr<DriftDetector> drift = DriftDetector::Deserialize(r);
    if (!drift.ok()) return drift.status();
    if (drift->options().inputs != o.dim || drift->options().channels != o.channels ||
        drift->options().steps != o.scoring_v4 ||
        drift->options().holdover_pairs != m.drift_->options().holdover_pairs) {
      return r.Fail("alarm monitor: the coefficient test's dimensions differ from the monitor's");
    }
    m.drift_ = std::move(*drift);
  }
  if (m.step_test_) {
    absl::StatusOr<ChangeDetector> s = ChangeDetector::Deserialize(r);
    if (!s.ok()) return s.status();
    if (s->channels() != m.step_test_->channels() ||
        s->options().holdover_pairs != m.step_test_->options().holdover_pairs ||
        s->options().alarm_rate != m.step_test_->options().alarm_rate ||
        s->options().return_pairs != m.step_test_->options().return_pairs ||
        s->options().return_rearm != m.step_test_->options().return_rearm ||
        s->options().late_confirm != m.step_test_->options().late_confirm ||
        s->options().slow_drift != m.step_test_->options().slow_drift) {
      return r.Fail(
          "alarm monitor: the step test's channels, rate, holdover, return test, slow CUSUMs or late confirmation "
          "differ from the monitor's");
    }
    m.step_test_ = std::move(*s);
  }
  if (m.spike_) {
    for (int c = 0; c < o.channels && r.ok(); ++c) {
      const uint64_t seen = r.U64("alarm monitor spike test steps seen");
      const uint32_t count = r.U32("alarm monitor spike test kept steps");
      if (!r.ok()) break;
      // Every step is kept until kSpikeTop are: the count is min(seen, kSpikeTop).
      if (count != std::min<uint64_t>(seen, kSpikeTop) || seen > (uint64_t{1} << 62))
        return r.Fail("alarm monitor spike test: kept steps out of range");
      std::vector<double>& top = m.spike_->top[static_cast<size_t>(c)];
      for (uint32_t i = 0; i < count && r.ok(); ++i) {
        const double v = r.F64("alarm monitor spike test step");
        if (r.ok() && (!(v >= 0) || !std::isfinite(v) || (!top.empty() && v > top.back())))
          return r.Fail("alarm monitor spike test: kept steps not finite, >= 0 and descending");
        top.push_back(v);
      }
      m.spike_->seen[static_cast<size_t>(c)] = static_cast<int64_t>(seen);
    }
    m.spike_->quiet_until = r.I64("alarm monitor spike test quiet until");
    m.spike_->alarms = r.I64("alarm monitor spike test alarms");
    if (r.ok() && m.spike_->alarms < 0) return r.Fail("alarm monitor spike test: alarm count out of range");
  }
  const int64_t n = r.Count("alarm monitor records", 0, kMaxRecords);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    AlarmRecord a;
    a.index = r.I64("alarm index");
    a.time = r.F64("alarm time");
    a.score = r.F64("alarm score");
    a.threshold = r.F64("alarm threshold");
    const uint32_t nc = r.U32("alarm channels");
    if (!r.ok()) break;
    if (nc > static_cast<uint32_t>(m.detector_.channels())) return r.Fail("alarm channels: more than the model has");
    for (uint32_t k = 0; k < nc; ++k) {
      const int32_t c = r.I32("alarm channel");
      if (r.ok() && (c < 0 || c >= m.detector_.channels())) return r.Fail("alarm channel out of range");
      a.channels.push_back(c);
    }
    const uint8_t kind = r.U8("alarm kind"), dir = r.U8("alarm direction");
    if (kind > (version >= 11 ? 2 : 1) || dir > 1) return r.Fail("alarm kind or direction out of range");
    a.kind = static_cast<ChangeDetector::Kind>(kind);
    a.direction = static_cast<ChangeDetector::Direction>(dir);
    a.onset = r.I64("alarm onset");
    m.records_.push_back(std::move(a));
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  if (m.pairs_ < 0 || m.armed_at_ < -1 || m.armed_at_ > m.pairs_) return r.Fail("alarm monitor: counters out of range");
  return m;
}

}  // namespace cmestream
