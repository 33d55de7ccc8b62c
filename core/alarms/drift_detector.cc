#include "core/alarms/drift_detector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/alarms/change_detector.h"
#include "core/alarms/recursive_residual.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// v2: the steps (a flag after the options). v3: the holdover (a steps flag, 0 or 1, and
// holdover_pairs after the options; the held reference after the state). A detector without the
// holdover is written as v2 (steps) or v1, byte for byte what the releases before wrote.
constexpr io::ObjectFormat kFormat = {io::Fourcc("DRFT"), 3, "drift detector"};
// Holdover (docs/algorithms.md §12.9): the restart that started a holdover is confirmed (and the
// holdover ends) when any held CUSUM passes kHoldConfirmLevel h within kHoldConfirmPairs pairs.
constexpr int64_t kHoldConfirmPairs = 50;
constexpr double kHoldConfirmLevel = 0.5;
// The largest holdover_pairs.
constexpr int kMaxHoldover = 1 << 20;

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

absl::Status DriftDetector::Options::Validate() const {
  if (inputs < 1 || channels < 1 || Components(inputs, channels, steps) > kMaxComponents) {
    return absl::InvalidArgumentError(absl::StrCat("drift detector: ", channels, " channels x (", inputs,
                                                   " regressors, expected 1..", kMaxComponents, " components"));
  }
  if (arm_after < 20) {
    return absl::InvalidArgumentError(absl::StrCat("drift detector arm_after ", arm_after, ", expected >= 20"));
  }
  if (baseline_pairs < 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("drift detector baseline_pairs ", baseline_pairs, ", expected >= 10"));
  }
  if (!Finite(alarm_rate) || !(alarm_rate > 0) || 1e4 / alarm_rate < 2.0 * arm_after) {
    return absl::InvalidArgumentError(absl::StrCat("drift detector alarm_rate ", alarm_rate,
                                                   " per 10000 pairs, expected > 0 and <= ", 1e4 / (2.0 * arm_after)));
  }
  if (!Finite(drift) || !(drift > 0) || drift > 3) {
    return absl::InvalidArgumentError(absl::StrCat("drift detector drift ", drift, ", expected in (0, 3]"));
  }
  if (!Finite(clip) || clip < 1) {
    return absl::InvalidArgumentError(absl::StrCat("drift detector clip ", clip, ", expected >= 1"));
  }
  if (holdover_pairs < 0 || holdover_pairs > kMaxHoldover) {
    return absl::InvalidArgumentError(
        absl::StrCat("drift detector holdover_pairs ", holdover_pairs, ", expected 0..", kMaxHoldover));
  }
  return absl::OkStatus();
}

DriftDetector::DriftDetector(const Options& options) : options_(options) {
  // docs/algorithms.md §12.9: p pairs of one-sided CUSUMs share the budget of (12.5), so each pair
  // needs p times the monitored run length 10^4 / R - arm_after: Threshold() at the rate R' with
  // 10^4 / R' - arm_after = p (10^4 / R - arm_after).
  const int p = components();
  const double run = p * (1e4 / options_.alarm_rate - options_.arm_after);
  threshold_ = ChangeDetector::Threshold(1e4 / (run + options_.arm_after), options_.drift, options_.arm_after);
  // The live reference and, with the holdover, the held one: the regressors' means, then per
  // component a mean, a spread, two CUSUMs and their run starts, and the pair's components.
  const size_t np = static_cast<size_t>(p);
  auto size = [&](std::vector<double>& x_mean, std::vector<double>& mean, std::vector<double>& spread,
                  std::vector<double>& up, std::vector<double>& down, std::vector<int64_t>& up_start,
                  std::vector<int64_t>& down_start, std::vector<double>& g) {
    x_mean.assign(static_cast<size_t>(regressors()), 0.0);
    for (std::vector<double>* v : {&mean, &spread, &up, &down, &g}) v->assign(np, 0.0);
    up_start.assign(np, 0);
    down_start.assign(np, 0);
  };
  size(x_mean_, mean_, var_, up_, down_, up_start_, down_start_, g_);
  if (options_.holdover_pairs > 0) {
    size(hold_x_mean_, hold_mean_, hold_sd_, hold_up_, hold_down_, hold_up_start_, hold_down_start_, hold_g_);
  }
}

bool DriftDetector::Restart(bool keep) {
  bool started = false;
  if (!keep || since_restart_ >= options_.arm_after) {
    StartHoldover();
    started = hold_active_;
  }
  ResetReference();
  return started;
}

void DriftDetector::StartHoldover() {
  hold_active_ = false;
  const int64_t n = since_restart_;
  if (options_.holdover_pairs <= 0 || n < options_.arm_after) return;
  hold_active_ = true;
  hold_pairs_ = 0;
  std::copy(x_mean_.begin(), x_mean_.end(), hold_x_mean_.begin());
  std::copy(mean_.begin(), mean_.end(), hold_mean_.begin());
  for (size_t u = 0; u < var_.size(); ++u) {
    // A component without the variation to standardize (see EnoughVariation) is held unscored.
    hold_sd_[u] = EnoughVariation(var_[u], n) ? RecursiveResidualSd(var_[u], n, options_.baseline_pairs) : 0.0;
  }
  std::fill(hold_up_.begin(), hold_up_.end(), 0.0);
  std::fill(hold_down_.begin(), hold_down_.end(), 0.0);
}

void DriftDetector::ResetReference() {
  since_restart_ = 0;
  std::fill(x_mean_.begin(), x_mean_.end(), 0.0);
  std::fill(mean_.begin(), mean_.end(), 0.0);
  std::fill(var_.begin(), var_.end(), 0.0);
  std::fill(up_.begin(), up_.end(), 0.0);
  std::fill(down_.begin(), down_.end(), 0.0);
}

double DriftDetector::statistic() const {
  double s = 0;
  for (size_t i = 0; i < up_.size(); ++i) s = std::max({s, up_[i], down_[i]});
  return s;
}

void DriftDetector::Signs(const double* x, const double* residual, const double* step, const double* means,
                          double* g) const {
  const int d = options_.inputs, nc = options_.channels;
  auto side = [](double v, double mean) { return v > mean ? 1.0 : (v < mean ? -1.0 : 0.0); };
  for (int c = 0; c < nc; ++c) {
    double* gc = g + c * d;
    const double rs = residual[c] > 0 ? 1.0 : (residual[c] < 0 ? -1.0 : 0.0);
    for (int j = 0; j < d; ++j) gc[j] = rs * side(x[j], means[j]);
    if (options_.steps) g[nc * d + c] = rs * side(step[c], means[d + c]);
  }
}

bool DriftDetector::EnoughVariation(double var, int64_t n) const {
  const double pairs = static_cast<double>(std::min<int64_t>(n, options_.baseline_pairs));
  return pairs * var >= 4.0 * kMinMinorityPairs;
}

double DriftDetector::StepCusums(double z, double k, int64_t t, double& up, double& down, int64_t& up_start,
                                 int64_t& down_start) {
  const double u = std::max(0.0, up + z - k);
  if (u > 0 && up == 0) up_start = t;
  up = u;
  const double v = std::max(0.0, down - z - k);
  if (v > 0 && down == 0) down_start = t;
  down = v;
  return std::max(u, v);
}

void DriftDetector::FillAlarm(int64_t t, int component, bool up, double score, int64_t run_start) {
  const int d = options_.inputs, nc = options_.channels;
  alarm_.index = t;
  alarm_.run_start = run_start;
  alarm_.score = score;
  alarm_.threshold = threshold_;
  alarm_.channel = component < nc * d ? component / d : component - nc * d;
  alarm_.regressor = component < nc * d ? component % d : d;
  alarm_.up = up;
  ++alarms_;
}

bool DriftDetector::ObserveHoldover(int64_t t) {
  ++hold_pairs_;
  const double k = options_.drift;
  int fired = -1;
  bool fired_up = true;
  double fired_score = 0;
  bool confirmed = false;
  const double level = kHoldConfirmLevel * threshold_;
  for (size_t u = 0; u < hold_g_.size(); ++u) {
    const double sd = hold_sd_[u];
    const double z = sd > 0 ? std::clamp((hold_g_[u] - hold_mean_[u]) / sd, -options_.clip, options_.clip) : 0.0;
    const double s = StepCusums(z, k, t, hold_up_[u], hold_down_[u], hold_up_start_[u], hold_down_start_[u]);
    confirmed = confirmed || (hold_pairs_ <= kHoldConfirmPairs && s > level);
    if (s > threshold_ && s > fired_score) {
      fired = static_cast<int>(u);
      fired_up = hold_up_[u] >= hold_down_[u];
      fired_score = s;
    }
  }
  // The alarm (or refit) that started the holdover came with a change: the held reference sees
  // it go on.
  if (confirmed) {
    hold_active_ = false;
    return false;
  }
  if (fired >= 0) {
    const size_t u = static_cast<size_t>(fired);
    FillAlarm(t, fired, fired_up, fired_score, fired_up ? hold_up_start_[u] : hold_down_start_[u]);
    hold_active_ = false;
    return true;
  }
  if (hold_pairs_ >= options_.holdover_pairs) hold_active_ = false;
  return false;
}

const DriftDetector::Alarm* DriftDetector::Observe(const double* x, const double* residual, const double* step) {
  const int d = options_.inputs, nc = options_.channels, p = components();
  const bool steps = options_.steps;
  for (int j = 0; j < d; ++j)
    if (!Finite(x[j])) return nullptr;
  for (int c = 0; c < nc; ++c)
    if (!Finite(residual[c]) || (steps && !Finite(step[c]))) return nullptr;
  const int64_t t = index_++;
  // The held reference first (docs/algorithms.md §12.9): a change it sees is an alarm, and the
  // new reference, which the change would have entered, starts again from the next pair.
  if (hold_active_) {
    Signs(x, residual, step, hold_x_mean_.data(), hold_g_.data());
    if (ObserveHoldover(t)) {
      StartHoldover();
      ResetReference();
      return &alarm_;
    }
  }
  const int64_t n = since_restart_;  // reference pairs before this one
  // The components: each channel's residual times the side of each regressor's mean the pair is
  // on (docs/algorithms.md (12.9)), then (steps) times the side of its own predicted step's.
  Signs(x, residual, step, x_mean_.data(), g_.data());

  // Standardized by the reference before the pair (recursive residuals, as (12.3)); the CUSUMs
  // run once arm_after pairs built the reference.
  const bool forgetting = n > options_.baseline_pairs;
  const bool armed = n >= options_.arm_after;
  const double k = options_.drift;
  int fired = -1;
  bool fired_up = true;
  double fired_score = 0;
  for (int i = 0; i < p; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (armed) {
      // A component without the variation to standardize scores 0 (its CUSUMs decay).
      const double sd = EnoughVariation(var_[u], n) ? RecursiveResidualSd(var_[u], n, options_.baseline_pairs) : 0.0;
      const double z = sd > 0 ? std::clamp((g_[u] - mean_[u]) / sd, -options_.clip, options_.clip) : 0.0;
      const double s = StepCusums(z, k, t, up_[u], down_[u], up_start_[u], down_start_[u]);
      if (s > threshold_ && s > fired_score) {
        fired = i;
        fired_up = up_[u] >= down_[u];
        fired_score = s;
      }
    }
  }
  if (fired >= 0) {
    const size_t u = static_cast<size_t>(fired);
    FillAlarm(t, fired, fired_up, fired_score, fired_up ? up_start_[u] : down_start_[u]);
    // The reference before the pair is held: if the alarm was a change, it sees it go on.
    StartHoldover();
    ResetReference();
    return &alarm_;
  }

  // The reference takes the pair: a plain mean and population variance up to baseline_pairs
  // pairs, then an EWMA of weight w = 1 / baseline_pairs (both are v <- (1 - w) (v + w delta^2)).
  since_restart_ = n + 1;
  const double w = forgetting ? 1.0 / options_.baseline_pairs : 1.0 / static_cast<double>(n + 1);
  for (int i = 0; i < p; ++i) {
    const size_t u = static_cast<size_t>(i);
    const double delta = g_[u] - mean_[u];
    mean_[u] += w * delta;
    var_[u] = (1 - w) * (var_[u] + w * delta * delta);
  }
  for (int j = 0; j < d; ++j) x_mean_[static_cast<size_t>(j)] += w * (x[j] - x_mean_[static_cast<size_t>(j)]);
  if (steps) {
    for (int c = 0; c < nc; ++c)
      x_mean_[static_cast<size_t>(d + c)] += w * (step[c] - x_mean_[static_cast<size_t>(d + c)]);
  }
  return nullptr;
}

namespace {

// v2 adds the steps flag (1), v3 the flag (0 or 1) and holdover_pairs.
constexpr auto kDriftDetectorOptionFields = [](auto& f, auto& o, uint32_t version) {
  f.Scalars("drift detector", io::Field("inputs", o.inputs), io::Field("channels", o.channels),
            io::Field("alarm_rate", o.alarm_rate), io::Field("arm_after", o.arm_after),
            io::Field("baseline_pairs", o.baseline_pairs), io::Field("drift", o.drift), io::Field("clip", o.clip));
  if (version >= 2) f.Bool("drift detector steps", o.steps);
  if (version >= 3) f.I32("drift detector holdover_pairs", o.holdover_pairs);
};

}  // namespace

namespace {

// One reference's fields (the live one's or the held one's, `names` in this order): the
// regressors' means, per component the mean and spread, the CUSUMs and their run starts.
template <class Fields, class Doubles, class Starts>
void ReferenceFields(Fields& f, const char* const (&names)[7], int64_t regressors, Doubles& x_mean, Doubles& mean,
                     Doubles& spread, Doubles& up, Doubles& down, Starts& up_start, Starts& down_start) {
  const int64_t p = static_cast<int64_t>(mean.size());
  f.Doubles(names[0], regressors, x_mean.data());
  f.Doubles(names[1], p, mean.data());
  f.Doubles(names[2], p, spread.data());
  f.Doubles(names[3], p, up.data());
  f.Doubles(names[4], p, down.data());
  for (int64_t i = 0; i < p; ++i) f.I64(names[5], up_start[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < p; ++i) f.I64(names[6], down_start[static_cast<size_t>(i)]);
}

constexpr const char* kLiveNames[7] = {"drift detector regressor means",
                                       "drift detector means",
                                       "drift detector variances",
                                       "drift detector up",
                                       "drift detector down",
                                       "drift detector up start",
                                       "drift detector down start"};
constexpr const char* kHeldNames[7] = {"drift detector holdover regressor means",
                                       "drift detector holdover means",
                                       "drift detector holdover sds",
                                       "drift detector holdover up",
                                       "drift detector holdover down",
                                       "drift detector holdover up start",
                                       "drift detector holdover down start"};

}  // namespace

template <class Fields, class Self>
void DriftDetector::StateFields(Fields& f, Self& m) {
  f.Scalars("drift detector", io::Field("index", m.index_), io::Field("alarms", m.alarms_),
            io::Field("since_restart", m.since_restart_));
  ReferenceFields(f, kLiveNames, m.regressors(), m.x_mean_, m.mean_, m.var_, m.up_, m.down_, m.up_start_,
                  m.down_start_);
}

// v3: the holdover's state, after StateFields.
template <class Fields, class Self>
void DriftDetector::HoldoverFields(Fields& f, Self& m) {
  f.Scalars("drift detector holdover", io::Field("active", m.hold_active_), io::Field("pairs", m.hold_pairs_));
  ReferenceFields(f, kHeldNames, m.regressors(), m.hold_x_mean_, m.hold_mean_, m.hold_sd_, m.hold_up_, m.hold_down_,
                  m.hold_up_start_, m.hold_down_start_);
}

void DriftDetector::Serialize(io::Writer& w) const {
  const bool v3 = options_.holdover_pairs > 0;
  const uint32_t version = v3 ? kFormat.version : (options_.steps ? 2 : 1);
  io::FieldWriter f(w, kFormat, version);
  kDriftDetectorOptionFields(f, options_, version);
  StateFields(f, *this);
  if (v3) HoldoverFields(f, *this);
}

absl::StatusOr<DriftDetector> DriftDetector::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kDriftDetectorOptionFields);
  if (r.ok() && version == 2 && !o.steps) return r.Fail("drift detector steps flag out of range");
  if (r.ok() && version >= 3 && o.holdover_pairs <= 0) return r.Fail("drift detector v3 without a holdover");
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(std::string(s.message()));
  DriftDetector m(o);
  const int64_t p = m.components();
  io::FieldReader f(r);
  StateFields(f, m);
  if (version >= 3) HoldoverFields(f, m);
  if (!r.EndObject(kFormat.name)) return r.status();
  if (m.index_ < 0 || m.alarms_ < 0 || m.alarms_ > m.index_ || m.since_restart_ < 0 || m.since_restart_ > m.index_) {
    return r.Fail("drift detector: counters out of range");
  }
  for (int64_t i = 0; i < p; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (!(m.var_[u] >= 0) || !(m.up_[u] >= 0) || !(m.down_[u] >= 0) || !Finite(m.mean_[u]) || !Finite(m.var_[u]) ||
        !Finite(m.up_[u]) || !Finite(m.down_[u])) {
      return r.Fail("drift detector: a statistic is negative or not finite");
    }
  }
  if (m.hold_pairs_ < 0) {
    return r.Fail("drift detector holdover state out of range");
  }
  for (size_t u = 0; u < m.hold_up_.size(); ++u) {
    if (!(m.hold_sd_[u] >= 0) || !(m.hold_up_[u] >= 0) || !(m.hold_down_[u] >= 0) || !Finite(m.hold_mean_[u]) ||
        !Finite(m.hold_sd_[u]) || !Finite(m.hold_up_[u]) || !Finite(m.hold_down_[u])) {
      return r.Fail("drift detector: a held statistic is negative or not finite");
    }
  }
  return m;
}

}  // namespace cmestream
