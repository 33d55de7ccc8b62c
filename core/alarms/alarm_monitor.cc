#include "core/alarms/alarm_monitor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/counts/transition_counts.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// v12: one method (alarm_monitor.h); the layout is in the header. v1-v11 were written by the
// releases that replayed each earlier release's scoring; they re-arm (Rearm below, whose comment
// gives their layouts as far as it reads them).
constexpr io::ObjectFormat kFormat = {io::Fourcc("ALRM"), 12, "alarm monitor"};
// Discrete models: pairs of counts before the p-value is scored (the counts' first rows).
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
  return SmallState(*this) ? StepTestOptions(*this).Validate() : absl::OkStatus();
}

// The size test: the whole alarm_rate, or with the other tests of a small state (docs/algorithms.md
// §12.9-12.10) half of what the step test leaves, half of that for its slow CUSUMs (§12.12).
ChangeDetector::Options AlarmMonitor::DetectorOptions(const Options& o) {
  ChangeDetector::Options d;
  d.channels = o.dim > 0 ? o.channels : 1;
  d.alarm_rate = SmallState(o) ? o.alarm_rate * (1 - kStepTestShare) / 2 : o.alarm_rate;
  d.holdover_pairs = kHoldoverPairs;
  if (SmallState(o)) {
    d.slow_drift = kSlowDrift;
    d.slow_share = kSlowShare;
  }
  return d;
}

// The step test (§12.10-12.13): kStepTestShare of alarm_rate, the size test's holdover and slow
// CUSUMs, the re-armed return test and the late confirmation.
ChangeDetector::Options AlarmMonitor::StepTestOptions(const Options& o) {
  ChangeDetector::Options d = DetectorOptions(o);
  d.alarm_rate = o.alarm_rate * kStepTestShare;
  d.return_pairs = kReturnPairs;
  d.return_rearm = true;
  d.late_confirm = true;
  return d;
}

// The coefficients' test (§12.9): the size test's rate, with the forecast's steps and its holdover.
DriftDetector::Options AlarmMonitor::DriftOptions(const Options& o) {
  DriftDetector::Options d;
  d.inputs = o.dim;
  d.channels = o.channels;
  d.alarm_rate = o.alarm_rate * (1 - kStepTestShare) / 2;
  d.steps = true;
  d.holdover_pairs = kDriftHoldoverPairs;
  return d;
}

AlarmMonitor::AlarmMonitor(const Options& options) : options_(options), detector_(DetectorOptions(options)) {
  if (options.dim > 0) {
    LinearForecast::Options f;
    f.dim = options.dim;
    f.outputs = options.channels;
    f.degree = SmallState(options) ? 3 : 1;
    f.first_fit = LinearForecast::FirstFitFor(f.regressors());
    f.fit_every = std::max<int64_t>(f.fit_every, f.first_fit);
    forecast_.emplace(f);
  }
  if (SmallState(options)) {
    drift_.emplace(DriftOptions(options));
    step_test_.emplace(StepTestOptions(options));
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
      const int64_t alarms_before = score_sink_.at != nullptr ? alarms_total() : 0;
      spike_ratio_ = 0;
      if (scored) {
        const double* xb = x + static_cast<int64_t>(b) * d;
        const double* rb = residual_.data() + static_cast<int64_t>(b) * c;
        if (drift_) {
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
      if (score_sink_.at != nullptr) SinkScore(alarms_before);
      ++pairs_;
    }
    x += static_cast<int64_t>(k) * d;
    y += static_cast<int64_t>(k) * d;
    n -= k;
  }
}

void AlarmMonitor::SinkScore(int64_t alarms_before) {
  // A statistic exactly at its bound raises no alarm (alarms need more): capped below 1 at the
  // largest float under 1, so a score sent as a float is 1 on alarms only.
  constexpr double kBelowOne = 1 - 0x1p-24;
  const double s = alarms_total() > alarms_before ? 1.0 : std::min(kBelowOne, std::max(score(), spike_ratio_));
  score_sink_.at[pairs_ - score_sink_.from] = s;
}

void AlarmMonitor::ObserveIds(int64_t x, int64_t y, const TransitionCounts& counts, double time) {
  const int64_t alarms_before = score_sink_.at != nullptr ? alarms_total() : 0;
  spike_ratio_ = 0;
  if (pairs_ >= kDiscreteFirstScored) {
    const int xi = static_cast<int>(x), yi = static_cast<int>(y);
    // The randomized p-value of the transition, as |N(0,1)| (docs/algorithms.md §12.8).
    const double u = DiscretePValue(counts, xi, yi, options_.num_states, UniformOf(pairs_));
    residual_[0] = -NormalQuantile(std::clamp(u / 2, 1e-300, 0.5));
    Score(nullptr, residual_.data(), nullptr, time);
  }
  if (score_sink_.at != nullptr) SinkScore(alarms_before);
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
      spike_ratio_ = std::max(spike_ratio_, a / std::max(bound, 1e-300));
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

// The options written (the counters follow them).
constexpr auto kMonitorOptionFields = [](auto& f, auto& o) {
  f.Scalars("alarm monitor", io::Field("dim", o.dim), io::Field("channels", o.channels),
            io::Field("num_states", o.num_states), io::Field("alarm_rate", o.alarm_rate));
};

// Every option of a ChangeDetector: a stored test must be the one this method builds.
bool SameDetectorOptions(const ChangeDetector::Options& a, const ChangeDetector::Options& b) {
  return a.channels == b.channels && a.alarm_rate == b.alarm_rate && a.arm_after == b.arm_after &&
         a.scale_pairs == b.scale_pairs && a.baseline_pairs == b.baseline_pairs && a.drift == b.drift &&
         a.clip == b.clip && a.kind_min == b.kind_min && a.kind_z == b.kind_z && a.kind_memory == b.kind_memory &&
         a.holdover_pairs == b.holdover_pairs && a.return_pairs == b.return_pairs && a.return_rearm == b.return_rearm &&
         a.slow_drift == b.slow_drift && a.slow_share == b.slow_share && a.late_confirm == b.late_confirm;
}

bool SameDriftOptions(const DriftDetector::Options& a, const DriftDetector::Options& b) {
  return a.inputs == b.inputs && a.channels == b.channels && a.alarm_rate == b.alarm_rate &&
         a.arm_after == b.arm_after && a.baseline_pairs == b.baseline_pairs && a.drift == b.drift && a.clip == b.clip &&
         a.steps == b.steps && a.holdover_pairs == b.holdover_pairs;
}

}  // namespace

std::string AlarmMonitor::RearmNote() const {
  if (rearmed_from_ == 0) return "";
  return absl::StrCat("alarm monitor from format v", rearmed_from_, " re-armed at pair ", rearmed_at_);
}

void AlarmMonitor::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  kMonitorOptionFields(f, options_);
  f.Scalars("alarm monitor", io::Field("pairs", pairs_), io::Field("armed_at", armed_at_));
  f.Scalars("alarm monitor re-armed", io::Field("from format", rearmed_from_), io::Field("at pair", rearmed_at_),
            io::Field("earlier alarms", earlier_alarms_));
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

absl::Status AlarmMonitor::ReadRecords(io::Reader& r, ChangeDetector::Kind max_kind) {
  const int64_t n = r.Count("alarm monitor records", 0, kMaxRecords);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    AlarmRecord a;
    a.index = r.I64("alarm index");
    a.time = r.F64("alarm time");
    a.score = r.F64("alarm score");
    a.threshold = r.F64("alarm threshold");
    const uint32_t nc = r.U32("alarm channels");
    if (!r.ok()) break;
    if (nc > static_cast<uint32_t>(detector_.channels())) return r.Fail("alarm channels: more than the model has");
    for (uint32_t k = 0; k < nc; ++k) {
      const int32_t c = r.I32("alarm channel");
      if (r.ok() && (c < 0 || c >= detector_.channels())) return r.Fail("alarm channel out of range");
      a.channels.push_back(c);
    }
    const uint8_t kind = r.U8("alarm kind"), dir = r.U8("alarm direction");
    if (kind > static_cast<uint8_t>(max_kind) || dir > 1) return r.Fail("alarm kind or direction out of range");
    a.kind = static_cast<ChangeDetector::Kind>(kind);
    a.direction = static_cast<ChangeDetector::Direction>(dir);
    a.onset = r.I64("alarm onset");
    records_.push_back(std::move(a));
  }
  return r.status();
}

absl::StatusOr<AlarmMonitor> AlarmMonitor::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kMonitorOptionFields);
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(std::string(s.message()));
  // The forecast's d x d sums are in the body: nothing is allocated for a body that cannot hold them.
  if (o.dim > 0 &&
      !r.Expect(8 * static_cast<uint64_t>(o.dim) * static_cast<uint64_t>(o.dim), "alarm monitor forecast")) {
    return r.status();
  }
  int64_t pairs = 0, armed_at = 0;
  io::FieldReader f(r);
  f.Scalars("alarm monitor", io::Field("pairs", pairs), io::Field("armed_at", armed_at));
  if (!r.ok()) return r.status();
  if (pairs < 0 || armed_at < -1 || armed_at > pairs) return r.Fail("alarm monitor: counters out of range");
  if (version < kFormat.version) return Rearm(r, version, o, pairs);
  AlarmMonitor m(o);
  m.pairs_ = pairs;
  m.armed_at_ = armed_at;
  f.Scalars("alarm monitor re-armed", io::Field("from format", m.rearmed_from_), io::Field("at pair", m.rearmed_at_),
            io::Field("earlier alarms", m.earlier_alarms_));
  if (r.ok() && (m.rearmed_from_ < 0 || m.rearmed_from_ >= static_cast<int32_t>(kFormat.version) ||
                 (m.rearmed_from_ == 0) != (m.rearmed_at_ == -1) || m.rearmed_at_ < -1 || m.rearmed_at_ > pairs ||
                 m.earlier_alarms_ < 0 || (m.rearmed_from_ == 0 && m.earlier_alarms_ != 0))) {
    return r.Fail("alarm monitor: re-arming out of range");
  }
  if (!r.ok()) return r.status();
  if (m.forecast_) {
    absl::StatusOr<LinearForecast> fc = LinearForecast::Deserialize(r);
    if (!fc.ok()) return fc.status();
    if (fc->options().dim != o.dim || fc->options().outputs != o.channels ||
        fc->options().degree != m.forecast_->options().degree) {
      return r.Fail("alarm monitor: the forecast's dimensions differ from the monitor's");
    }
    m.forecast_ = std::move(*fc);
  }
  absl::StatusOr<ChangeDetector> d = ChangeDetector::Deserialize(r);
  if (!d.ok()) return d.status();
  if (!SameDetectorOptions(d->options(), m.detector_.options())) {
    return r.Fail("alarm monitor: the size test's options differ from the monitor's");
  }
  m.detector_ = std::move(*d);
  if (m.drift_) {
    absl::StatusOr<DriftDetector> drift = DriftDetector::Deserialize(r);
    if (!drift.ok()) return drift.status();
    if (!SameDriftOptions(drift->options(), m.drift_->options())) {
      return r.Fail("alarm monitor: the coefficient test's options differ from the monitor's");
    }
    m.drift_ = std::move(*drift);
  }
  if (m.step_test_) {
    absl::StatusOr<ChangeDetector> s = ChangeDetector::Deserialize(r);
    if (!s.ok()) return s.status();
    if (!SameDetectorOptions(s->options(), m.step_test_->options())) {
      return r.Fail("alarm monitor: the step test's options differ from the monitor's");
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
  if (absl::Status s = m.ReadRecords(r, ChangeDetector::Kind::kSpike); !s.ok()) return s;
  if (!r.EndObject(kFormat.name)) return r.status();
  return m;
}

// An ALRM v1-v11 object after its pair counter and armed_at. The layout of the releases that wrote
// them: (discrete, v2-v11) u8 score kind (0: the randomized p-value, 1: the surprise of v1); (v5-v11)
// three u8 flags (coefficient test, its steps, holdover = 1), a fourth (v6-v11: the coefficient
// test's holdover) and one more per version from v7 on (step test, return test, slow CUSUMs, late
// confirmation, spike test), each 1 and written only by a monitor that ran the coefficient test;
// (v3, v4) u8 coefficient test = 1 and (v4) u8 steps = 1; then the forecast (continuous), the size
// test's CHGD object, the coefficient test's DRFT object (when it ran), the step test's CHGD object
// (v7-v11), the spike test's state (v11, the layout of v12) and the records (kind "spike" from v11).
// Each object is read by its own Deserialize, so a damaged one is refused as before; what the
// monitor keeps is the pair counter, the alarm count (the tests' counts, at least the records
// kept) and the records.
absl::StatusOr<AlarmMonitor> AlarmMonitor::Rearm(io::Reader& r, uint32_t version, const Options& o, int64_t pairs) {
  if (o.num_states > 0 && version >= 2) {
    const uint8_t kind = r.U8("alarm monitor score kind");
    if (r.ok() && kind > 1) return r.Fail("alarm monitor score kind out of range");
  }
  bool coefficient_test = false;
  if (version >= 5) {
    const uint8_t v3 = r.U8("alarm monitor coefficient test"), v4 = r.U8("alarm monitor coefficient test steps"),
                  hold = r.U8("alarm monitor holdover");
    if (r.ok() && (v3 > 1 || v4 > v3 || hold != 1)) {
      return r.Fail(absl::StrCat("alarm monitor v", version, " flags out of range"));
    }
    coefficient_test = v3 == 1;
    for (uint32_t v = 6; v <= version && r.ok(); ++v) {
      const uint8_t flag = r.U8("alarm monitor test flag");
      if (r.ok() && (flag != 1 || !coefficient_test)) {
        return r.Fail(absl::StrCat("alarm monitor v", version, " flags out of range"));
      }
    }
  } else if (version >= 3) {
    for (uint32_t v = 3; v <= version && r.ok(); ++v) {
      const uint8_t flag = r.U8("alarm monitor coefficient test");
      if (r.ok() && flag != 1) return r.Fail("alarm monitor coefficient test flag out of range");
    }
    coefficient_test = true;
  }
  if (r.ok() && coefficient_test && !SmallState(o)) {
    return r.Fail("alarm monitor with a coefficient test on a state it does not run on");
  }
  if (!r.ok()) return r.status();
  int64_t earlier = 0;
  if (o.dim > 0) {
    absl::StatusOr<LinearForecast> fc = LinearForecast::Deserialize(r);
    if (!fc.ok()) return fc.status();
    if (fc->options().dim != o.dim || fc->options().outputs != o.channels) {
      return r.Fail("alarm monitor: the forecast's dimensions differ from the monitor's");
    }
  }
  const int channels = o.dim > 0 ? o.channels : 1;
  absl::StatusOr<ChangeDetector> d = ChangeDetector::Deserialize(r);
  if (!d.ok()) return d.status();
  if (d->channels() != channels) return r.Fail("alarm monitor: the detector's channels differ from the monitor's");
  earlier += d->alarms();
  if (coefficient_test) {
    absl::StatusOr<DriftDetector> drift = DriftDetector::Deserialize(r);
    if (!drift.ok()) return drift.status();
    if (drift->options().inputs != o.dim || drift->options().channels != o.channels) {
      return r.Fail("alarm monitor: the coefficient test's dimensions differ from the monitor's");
    }
    earlier += drift->alarms();
  }
  if (version >= 7) {
    absl::StatusOr<ChangeDetector> s = ChangeDetector::Deserialize(r);
    if (!s.ok()) return s.status();
    if (s->channels() != channels) return r.Fail("alarm monitor: the step test's channels differ from the monitor's");
    earlier += s->alarms();
  }
  if (version >= 11) {
    for (int c = 0; c < o.channels && r.ok(); ++c) {
      r.U64("alarm monitor spike test steps seen");
      const uint32_t count = r.U32("alarm monitor spike test kept steps");
      if (r.ok() && count > kSpikeTop) return r.Fail("alarm monitor spike test: kept steps out of range");
      if (r.ok()) r.Skip(8 * static_cast<uint64_t>(count), "alarm monitor spike test steps");
    }
    r.I64("alarm monitor spike test quiet until");
    const int64_t spikes = r.I64("alarm monitor spike test alarms");
    if (r.ok() && spikes < 0) return r.Fail("alarm monitor spike test: alarm count out of range");
    earlier += spikes;
  }
  if (!r.ok()) return r.status();
  AlarmMonitor m(o);
  m.pairs_ = pairs;
  m.rearmed_from_ = static_cast<int32_t>(version);
  m.rearmed_at_ = pairs;
  if (absl::Status s = m.ReadRecords(r, version >= 11 ? ChangeDetector::Kind::kSpike : ChangeDetector::Kind::kDynamics);
      !s.ok()) {
    return s;
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  m.earlier_alarms_ = std::max(earlier, static_cast<int64_t>(m.records_.size()));
  return m;
}

}  // namespace cmestream
