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

constexpr uint32_t kTag = io::Fourcc("DRFT");
constexpr uint32_t kVersion = 2;

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
  return absl::OkStatus();
}

DriftDetector::DriftDetector(const Options& options) : options_(options) {
  // docs/algorithms.md §12.9: p pairs of one-sided CUSUMs share the budget of (12.5), so each pair
  // needs p times the monitored run length 10^4 / R - arm_after: Threshold() at the rate R' with
  // 10^4 / R' - arm_after = p (10^4 / R - arm_after).
  const int p = components();
  const double run = p * (1e4 / options_.alarm_rate - options_.arm_after);
  threshold_ = ChangeDetector::Threshold(1e4 / (run + options_.arm_after), options_.drift, options_.arm_after);
  x_mean_.assign(static_cast<size_t>(regressors()), 0.0);
  mean_.assign(static_cast<size_t>(p), 0.0);
  var_.assign(static_cast<size_t>(p), 0.0);
  up_.assign(static_cast<size_t>(p), 0.0);
  down_.assign(static_cast<size_t>(p), 0.0);
  up_start_.assign(static_cast<size_t>(p), 0);
  down_start_.assign(static_cast<size_t>(p), 0);
  g_.assign(static_cast<size_t>(p), 0.0);
}

void DriftDetector::Restart() {
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

const DriftDetector::Alarm* DriftDetector::Observe(const double* x, const double* residual, const double* step) {
  const int d = options_.inputs, nc = options_.channels, p = components();
  const bool steps = options_.steps;
  for (int j = 0; j < d; ++j)
    if (!Finite(x[j])) return nullptr;
  for (int c = 0; c < nc; ++c)
    if (!Finite(residual[c]) || (steps && !Finite(step[c]))) return nullptr;
  const int64_t t = index_++;
  const int64_t n = since_restart_++;  // reference pairs before this one
  // The components: each channel's residual times the side of each regressor's mean the pair is
  // on (docs/algorithms.md (12.9)), then (steps) times the side of its own predicted step's.
  auto side = [](double v, double mean) { return v > mean ? 1.0 : (v < mean ? -1.0 : 0.0); };
  for (int c = 0; c < nc; ++c) {
    double* g = &g_[static_cast<size_t>(c * d)];
    const double rs = residual[c] > 0 ? 1.0 : (residual[c] < 0 ? -1.0 : 0.0);
    for (int j = 0; j < d; ++j) g[j] = rs * side(x[j], x_mean_[static_cast<size_t>(j)]);
    if (steps) g_[static_cast<size_t>(nc * d + c)] = rs * side(step[c], x_mean_[static_cast<size_t>(d + c)]);
  }

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
      const double sd = RecursiveResidualSd(var_[u], n, options_.baseline_pairs);
      const double z = sd > 0 ? std::clamp((g_[u] - mean_[u]) / sd, -options_.clip, options_.clip) : 0.0;
      const double up = std::max(0.0, up_[u] + z - k);
      if (up > 0 && up_[u] == 0) up_start_[u] = t;
      up_[u] = up;
      const double down = std::max(0.0, down_[u] - z - k);
      if (down > 0 && down_[u] == 0) down_start_[u] = t;
      down_[u] = down;
      const double s = std::max(up, down);
      if (s > threshold_ && s > fired_score) {
        fired = i;
        fired_up = up >= down;
        fired_score = s;
      }
    }
  }
  if (fired >= 0) {
    alarm_.index = t;
    alarm_.run_start = fired_up ? up_start_[static_cast<size_t>(fired)] : down_start_[static_cast<size_t>(fired)];
    alarm_.score = fired_score;
    alarm_.threshold = threshold_;
    alarm_.channel = fired < nc * d ? fired / d : fired - nc * d;
    alarm_.regressor = fired < nc * d ? fired % d : d;
    alarm_.up = fired_up;
    ++alarms_;
    Restart();
    return &alarm_;
  }

  // The reference takes the pair: a plain mean and population variance up to baseline_pairs
  // pairs, then an EWMA of weight w = 1 / baseline_pairs (both are v <- (1 - w) (v + w delta^2)).
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

template <class Fields, class Options>
void DriftDetectorOptionFields(Fields& f, Options& o) {
  f.I32("drift detector inputs", o.inputs);
  f.I32("drift detector channels", o.channels);
  f.F64("drift detector alarm_rate", o.alarm_rate);
  f.I32("drift detector arm_after", o.arm_after);
  f.I32("drift detector baseline_pairs", o.baseline_pairs);
  f.F64("drift detector drift", o.drift);
  f.F64("drift detector clip", o.clip);
}

}  // namespace

template <class Fields, class Self>
void DriftDetector::StateFields(Fields& f, Self& m) {
  const int64_t p = m.components();
  f.I64("drift detector index", m.index_);
  f.I64("drift detector alarms", m.alarms_);
  f.I64("drift detector since_restart", m.since_restart_);
  f.Doubles("drift detector regressor means", m.regressors(), m.x_mean_.data());
  f.Doubles("drift detector means", p, m.mean_.data());
  f.Doubles("drift detector variances", p, m.var_.data());
  f.Doubles("drift detector up", p, m.up_.data());
  f.Doubles("drift detector down", p, m.down_.data());
  for (int64_t i = 0; i < p; ++i) f.I64("drift detector up start", m.up_start_[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < p; ++i) f.I64("drift detector down start", m.down_start_[static_cast<size_t>(i)]);
}

void DriftDetector::Serialize(io::Writer& w) const {
  const size_t h = w.BeginObject(kTag, options_.steps ? kVersion : 1);
  io::FieldWriter f(w);
  DriftDetectorOptionFields(f, options_);
  if (options_.steps) w.U8(1);  // v2
  StateFields(f, *this);
  w.EndObject(h);
}

absl::StatusOr<DriftDetector> DriftDetector::Deserialize(io::Reader& r) {
  uint32_t version = 0;
  if (!r.BeginObject(kTag, kVersion, "drift detector", &version)) return r.status();
  io::FieldReader f(r);
  Options o;
  DriftDetectorOptionFields(f, o);
  if (version >= 2) {
    const uint8_t steps = r.U8("drift detector steps");
    if (r.ok() && steps != 1) return r.Fail("drift detector steps flag out of range");
    o.steps = true;
  }
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(std::string(s.message()));
  DriftDetector m(o);
  const int64_t p = m.components();
  StateFields(f, m);
  if (!r.EndObject("drift detector")) return r.status();
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
  return m;
}

}  // namespace cmestream
