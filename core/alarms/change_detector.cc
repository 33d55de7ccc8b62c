#include "core/alarms/change_detector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/alarms/recursive_residual.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

// v2: the holdover (docs/algorithms.md §12.8): its option after v1's, its state after v1's. A
// detector without it is written as v1, byte for byte what the release before wrote. v3: the
// return test (§12.11). v4: the re-armed return test and the slow CUSUMs (§12.12). v5: the late
// confirmation (§12.13).
constexpr io::ObjectFormat kFormat = {io::Fourcc("CHGD"), 5, "change detector"};
constexpr int kMaxChannels = 1 << 20;
// Siegmund's correction of the CUSUM's overshoot for normal increments: -2 zeta(1/2) / sqrt(2 pi).
constexpr double kOvershoot = 1.166;
// z_c is capped so that every later quantity stays finite whatever the residual.
constexpr double kMaxZ = 1e12;
// Reference scores above mean + kWinsor sd enter the reference moments as that bound.
constexpr double kWinsor = 6;
// Reference values of the onset CUSUMs (12.7).
constexpr double kOnsetDrift[3] = {0.5, 1.0, 2.0};
// Decay of the filter q of past scores and the largest Gamma of (12.3b).
constexpr double kScoreMemory = 0.9;
constexpr double kMaxGamma = 4;
// Holdover (docs/algorithms.md §12.8): a reference of fewer pairs is not held; the alarm that
// started a holdover is confirmed (and the holdover ends) when the held CUSUM of its direction
// passes kHoldConfirmLevel h within kHoldConfirmPairs pairs.
constexpr int64_t kHoldMinReference = 200;
constexpr int64_t kHoldConfirmPairs = 50;
constexpr double kHoldConfirmLevel = 0.5;
// Return test (docs/algorithms.md §12.11): pairs over which delta is learned, the smallest
// |delta| that runs it, and its threshold as a multiple of h.
constexpr int64_t kReturnLearnPairs = 100;
constexpr double kReturnMinShift = 1.0;
constexpr double kReturnLevel = 4.0;
// The largest holdover_pairs (and return_pairs).
constexpr int kMaxHoldover = 1 << 20;

bool Finite(double v) { return std::isfinite(v); }

// One onset CUSUM of (12.7) at pair t with score x (-x for a down one): its statistic, and the
// pair its current run started at and the run's length (the statistic's pairs above 0).
void StepOnsetCusum(double x, double drift, int64_t t, double& stat, int64_t& start, int64_t& length) {
  const double next = std::max(0.0, stat + x - drift);
  if (next > 0) {
    if (stat == 0) {
      start = t;
      length = 0;
    }
    ++length;
  }
  stat = next;
}

}  // namespace

const char* DirectionName(ChangeDetector::Direction d) { return d == ChangeDetector::Direction::kUp ? "up" : "down"; }

const char* KindName(ChangeDetector::Kind k) {
  switch (k) {
    case ChangeDetector::Kind::kNoise:
      return "noise";
    case ChangeDetector::Kind::kSpike:
      return "spike";
    default:
      return "dynamics";
  }
}

absl::Status ChangeDetector::Options::Validate() const {
  if (channels < 1 || channels > kMaxChannels) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector channels ", channels, ", expected 1..", kMaxChannels));
  }
  if (scale_pairs < 2) {
    return absl::InvalidArgumentError(absl::StrCat("change detector scale_pairs ", scale_pairs, ", expected >= 2"));
  }
  if (arm_after < scale_pairs + 20) {
    return absl::InvalidArgumentError(absl::StrCat("change detector arm_after ", arm_after,
                                                   ", expected >= scale_pairs + 20 = ", scale_pairs + 20,
                                                   " (the score's reference needs pairs of its own)"));
  }
  if (baseline_pairs < 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector baseline_pairs ", baseline_pairs, ", expected >= 10"));
  }
  if (!Finite(alarm_rate) || !(alarm_rate > 0) || 1e4 / alarm_rate < 2.0 * arm_after) {
    return absl::InvalidArgumentError(absl::StrCat(
        "change detector alarm_rate ", alarm_rate, " per 10000 pairs, expected > 0 and <= ", 1e4 / (2.0 * arm_after),
        " (10000 / (2 arm_after): an alarm is followed by arm_after pairs ", "that cannot alarm)"));
  }
  if (!Finite(drift) || !(drift > 0) || drift > 3) {
    return absl::InvalidArgumentError(absl::StrCat("change detector drift ", drift, ", expected in (0, 3]"));
  }
  if (!Finite(clip) || clip < 1) {
    return absl::InvalidArgumentError(absl::StrCat("change detector clip ", clip, ", expected >= 1"));
  }
  if (!Finite(kind_memory) || kind_memory < 0 || kind_memory > 0.99) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector kind_memory ", kind_memory, ", expected in [0, 0.99]"));
  }
  if (!Finite(kind_min) || kind_min < 0 || !Finite(kind_z) || kind_z < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector kind_min ", kind_min, " and kind_z ", kind_z, ", expected finite and >= 0"));
  }
  if (holdover_pairs < 0 || holdover_pairs > kMaxHoldover) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector holdover_pairs ", holdover_pairs, ", expected 0..", kMaxHoldover));
  }
  if (return_pairs < 0 || return_pairs > kMaxHoldover || (return_pairs > 0 && holdover_pairs <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("change detector return_pairs ", return_pairs, ", expected 0..",
                                                   kMaxHoldover, " (and > 0 only with holdover_pairs > 0)"));
  }
  if (return_rearm && return_pairs <= 0) {
    return absl::InvalidArgumentError("change detector return_rearm needs the return test (return_pairs > 0)");
  }
  if (late_confirm && return_pairs <= 0) {
    return absl::InvalidArgumentError("change detector late_confirm needs the return test (return_pairs > 0)");
  }
  if (!Finite(slow_drift) || slow_drift < 0 || (slow_drift > 0 && !(slow_drift < drift))) {
    return absl::InvalidArgumentError(
        absl::StrCat("change detector slow_drift ", slow_drift, ", expected 0 (off) or in (0, drift = ", drift, ")"));
  }
  if (slow_drift > 0 && !(slow_share > 0 && slow_share < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("change detector slow_share ", slow_share, ", expected in (0, 1)"));
  }
  const double main_rate = slow_drift > 0 ? alarm_rate * (1 - slow_share) : alarm_rate;
  if (!(Threshold(main_rate, drift, arm_after) > 0) ||
      (slow_drift > 0 && !(Threshold(alarm_rate * slow_share, slow_drift, arm_after) > 0))) {
    return absl::InvalidArgumentError(absl::StrCat("change detector: alarm_rate ", alarm_rate, " with drift ", drift,
                                                   " (slow_drift ", slow_drift,
                                                   ") gives a threshold <= 0; lower either"));
  }
  return absl::OkStatus();
}

double ChangeDetector::SiegmundArl(double h, double drift) {
  const double u = 2 * drift * (h + kOvershoot);
  return (std::exp(u) - u - 1) / (2 * drift * drift);
}

double ChangeDetector::Threshold(double alarm_rate, double drift, int arm_after) {
  // Two one-sided CUSUMs: each needs twice the pair's run length; arm_after dead pairs follow an
  // alarm, so the monitored run length is 10^4 / R - arm_after. docs/algorithms.md (12.5).
  const double arl = 2 * (1e4 / alarm_rate - arm_after);
  const double target = 2 * drift * drift * arl;  // e^u - u - 1 = target, u = 2 k b
  double u = std::log1p(target);
  for (int it = 0; it < 200; ++it) {
    const double next = std::log1p(target + u);  // contraction: derivative 1 / (1 + target + u)
    if (next == u) break;
    u = next;
  }
  return u / (2 * drift) - kOvershoot;
}

double ChangeDetector::Run::Step(double stat, double inc, double k, int64_t t, double pair_m, double pair_lag,
                                 double pair_lag1, double pair_energy, const double* residual,
                                 const std::vector<double>& scale2) {
  const double next = std::max(0.0, stat + inc - k);
  if (next > 0) {
    if (stat == 0) {
      start = t;
      len = 0;
      m = lag = lag1 = energy = 0;
      std::fill(z.begin(), z.end(), 0.0);
    }
    ++len;
    m += pair_m;
    lag += pair_lag;
    lag1 += pair_lag1;
    energy += pair_energy;
    for (size_t c = 0; c < z.size(); ++c) z[c] += std::min(residual[c] * residual[c] / scale2[c], kMaxZ);
  }
  return next;
}

ChangeDetector::ChangeDetector(const Options& options) : options_(options) {
  const size_t c = static_cast<size_t>(options_.channels);
  if (options_.slow_drift > 0) {
    // docs/algorithms.md §12.12: two CUSUM pairs share the rate (a union bound).
    threshold_ = Threshold(options_.alarm_rate * (1 - options_.slow_share), options_.drift, options_.arm_after);
    slow_threshold_ = Threshold(options_.alarm_rate * options_.slow_share, options_.slow_drift, options_.arm_after);
    slow_up_run_.z.assign(c, 0.0);
    slow_down_run_.z.assign(c, 0.0);
  } else {
    threshold_ = Threshold(options_.alarm_rate, options_.drift, options_.arm_after);
  }
  prev_r_.assign(c, 0.0);
  memory_.assign(c, 0.0);
  scale2_.assign(c, 0.0);
  ref_z_.assign(c, 0.0);
  up_run_.z.assign(c, 0.0);
  down_run_.z.assign(c, 0.0);
  ranked_.assign(c, 0);
  contribution_.assign(c, 0.0);
  if (options_.return_pairs > 0) ret_scale2_.assign(c, 0.0);
  if (options_.holdover_pairs > 0) {
    hold_scale2_.assign(c, 0.0);
    hold_ref_z_.assign(c, 0.0);
    hold_memory_.assign(c, 0.0);
    hold_up_run_.z.assign(c, 0.0);
    hold_down_run_.z.assign(c, 0.0);
  }
}

void ChangeDetector::Restart() {
  StartHoldover(-1);
  ResetReference();
}

void ChangeDetector::StartHoldover(int direction) {
  hold_active_ = false;
  const int64_t n = ref_n_;
  if (options_.holdover_pairs <= 0 || n < kHoldMinReference) return;
  const double sd = RecursiveResidualSd(ref_var_w_, n, options_.baseline_pairs);
  if (!(sd > 0)) return;
  const double factor = 1 / std::sqrt(1 + 2 * LongRunGamma());
  hold_active_ = true;
  hold_direction_ = direction;
  hold_pairs_ = 0;
  hold_mean_w_ = ref_mean_w_;
  hold_sd_ = sd;
  hold_factor_ = factor;
  hold_mean_m_ = ref_mean_m_;
  hold_lag_ = ref_lag_;
  hold_lag1_ = ref_lag1_;
  hold_energy_ = ref_energy_;
  std::copy(scale2_.begin(), scale2_.end(), hold_scale2_.begin());
  std::copy(ref_z_.begin(), ref_z_.end(), hold_ref_z_.begin());
  std::copy(memory_.begin(), memory_.end(), hold_memory_.begin());
  hold_up_ = hold_down_ = 0;
  hold_up_run_.len = hold_down_run_.len = 0;
}

bool ChangeDetector::ObserveHoldover(const double* residual, int64_t t) {
  ++hold_pairs_;
  const PairScore ps = ScorePair(residual, hold_scale2_, hold_memory_);
  const double x = std::clamp((ps.w - hold_mean_w_) / hold_sd_, -options_.clip, options_.clip) * hold_factor_;
  const double k = options_.drift;
  hold_up_ = hold_up_run_.Step(hold_up_, x, k, t, ps.m, ps.lag, ps.lag1, ps.energy, residual, hold_scale2_);
  hold_down_ = hold_down_run_.Step(hold_down_, -x, k, t, ps.m, ps.lag, ps.lag1, ps.energy, residual, hold_scale2_);
  // The alarm that started the holdover was a change: the held reference sees it go on.
  if (hold_pairs_ <= kHoldConfirmPairs) {
    const double level = kHoldConfirmLevel * threshold_;
    if ((hold_direction_ != 1 && hold_up_ > level) || (hold_direction_ != 0 && hold_down_ > level)) {
      hold_active_ = false;
      // docs/algorithms.md §12.11: the change is confirmed; the reference before it watches for
      // its regime's return.
      StartReturnTest(t, /*late=*/false);
      return false;
    }
  }
  if (hold_up_ > threshold_ || hold_down_ > threshold_) {
    const bool is_up = hold_up_ > threshold_;
    const double score = is_up ? hold_up_ : hold_down_;
    const double len = static_cast<double>(is_up ? hold_up_run_.len : hold_down_run_.len);
    alarm_.index = t;
    alarm_.run_start = is_up ? hold_up_run_.start : hold_down_run_.start;
    alarm_.onset = alarm_.run_start;
    alarm_.shift = (score + k * len) / len;
    alarm_.score = score;
    alarm_.threshold = threshold_;
    alarm_.direction = is_up ? Direction::kUp : Direction::kDown;
    alarm_.energy_ratio = hold_mean_m_ > 0 ? (is_up ? hold_up_run_.m : hold_down_run_.m) / len / hold_mean_m_ : 1;
    const Run& run = is_up ? hold_up_run_ : hold_down_run_;
    Classify(run, len, hold_lag_, hold_lag1_, hold_energy_);
    RankChannels(is_up ? hold_up_run_.z : hold_down_run_.z, len, hold_ref_z_, is_up);
    ++alarms_;
    hold_active_ = false;
    // docs/algorithms.md §12.13: the change that started the holdover went on in its direction
    // and was confirmed late.
    if (options_.late_confirm && hold_direction_ == (is_up ? 0 : 1)) StartReturnTest(t, /*late=*/true);
    return true;
  }
  if (hold_pairs_ >= options_.holdover_pairs) hold_active_ = false;
  return false;
}

void ChangeDetector::StartReturnTest(int64_t t, bool late) {
  // docs/algorithms.md §12.12: a re-armed return test that runs stays (the regime it watches for
  // may still come back after this change); without the re-arming the newest change replaces it.
  // §12.13: one started by a late confirmation gives way to the next confirmation, timely or late.
  if (options_.return_pairs <= 0 || (options_.return_rearm && ret_active_ && !ret_late_)) return;
  ret_active_ = true;
  ret_late_ = late;
  ret_pairs_ = 0;
  ret_start_ = t;
  ret_mean_w_ = hold_mean_w_;
  ret_sd_ = hold_sd_;
  ret_shift_sum_ = 0;
  ret_stat_ = 0;
  std::copy(hold_scale2_.begin(), hold_scale2_.end(), ret_scale2_.begin());
}

// docs/algorithms.md §12.11.
bool ChangeDetector::ObserveReturn(const double* residual, int64_t t) {
  const int nc = options_.channels;
  double m = 0;
  for (int c = 0; c < nc; ++c) m += std::min(residual[c] * residual[c] / ret_scale2_[c], kMaxZ);
  const double z = std::clamp((std::cbrt(m / nc) - ret_mean_w_) / ret_sd_, -options_.clip, options_.clip);
  ++ret_pairs_;
  if (ret_pairs_ <= kReturnLearnPairs) {
    ret_shift_sum_ += z;
    // Regimes whose scores differ by less than one standard deviation of the old one: no test.
    if (ret_pairs_ == kReturnLearnPairs && std::abs(ret_shift_sum_) < kReturnMinShift * kReturnLearnPairs) {
      ret_active_ = false;
    }
    return false;
  }
  if (ret_pairs_ > options_.return_pairs) {
    ret_active_ = false;
    return false;
  }
  const double delta = ret_shift_sum_ / static_cast<double>(kReturnLearnPairs);
  const double inc = std::abs(delta) / 2 - (delta > 0 ? z : -z);
  if (ret_stat_ == 0 && inc > 0) ret_start_ = t;
  ret_stat_ = std::max(0.0, ret_stat_ + inc);
  const double level = kReturnLevel * threshold_;
  if (!(ret_stat_ > level)) return false;
  alarm_.index = t;
  alarm_.run_start = ret_start_;
  alarm_.onset = ret_start_;
  alarm_.shift = -delta;
  alarm_.score = ret_stat_;
  alarm_.threshold = level;
  // The scores went back toward the old regime's: down when they had risen.
  alarm_.direction = delta > 0 ? Direction::kDown : Direction::kUp;
  alarm_.kind = Kind::kNoise;
  alarm_.energy_ratio = 1;
  alarm_.autocorr_change = alarm_.autocorr_bound = alarm_.lag1_change = alarm_.lag1_bound = 0;
  std::iota(ranked_.begin(), ranked_.end(), 0);
  std::fill(contribution_.begin(), contribution_.end(), 1.0);
  alarm_.channels = absl::MakeConstSpan(ranked_);
  alarm_.contributions = absl::MakeConstSpan(contribution_);
  ++alarms_;
  if (options_.return_rearm) {
    // docs/algorithms.md §12.12: the same reference learns delta again. A real return gives
    // |delta| < 1 and ends the test; a dip of the new regime toward the old one leaves it watching.
    ret_pairs_ = 0;
    ret_shift_sum_ = 0;
    ret_stat_ = 0;
  } else {
    ret_active_ = false;
  }
  return true;
}

void ChangeDetector::RankChannels(std::vector<double>& ratio, double len, const std::vector<double>& ref_z, bool up) {
  const int nc = options_.channels;
  // Channel ratios into the run's own buffer (the run ends here), then ranked.
  for (int c = 0; c < nc; ++c) ratio[c] = (ratio[c] / len) / std::max(ref_z[c], 1e-300);
  std::iota(ranked_.begin(), ranked_.end(), 0);
  std::sort(ranked_.begin(), ranked_.end(), [&](int i, int j) {
    if (ratio[i] != ratio[j]) return up ? ratio[i] > ratio[j] : ratio[i] < ratio[j];
    return i < j;
  });
  for (int i = 0; i < nc; ++i) contribution_[i] = ratio[ranked_[i]];
  alarm_.channels = absl::MakeConstSpan(ranked_);
  alarm_.contributions = absl::MakeConstSpan(contribution_);
}

void ChangeDetector::ResetReference() {
  since_restart_ = 0;
  std::fill(scale2_.begin(), scale2_.end(), 0.0);
  std::fill(ref_z_.begin(), ref_z_.end(), 0.0);
  ref_n_ = 0;
  ref_mean_w_ = ref_var_w_ = ref_mean_m_ = ref_lag_ = ref_lag1_ = ref_energy_ = 0;
  has_prev_x_ = false;
  prev_x_ = ref_xx_ = 0;
  ref_xx_n_ = 0;
  up_ = down_ = 0;
  up_run_.len = down_run_.len = 0;
  slow_up_ = slow_down_ = 0;
  slow_up_run_.len = slow_down_run_.len = 0;
  for (int j = 0; j < kOnsetCusums; ++j) onset_up_[j] = onset_down_[j] = 0;
}

const ChangeDetector::Alarm* ChangeDetector::Observe(const double* residual) {
  const int nc = options_.channels;
  for (int c = 0; c < nc; ++c) {
    if (!Finite(residual[c])) {
      ++skipped_;
      has_prev_ = false;
      return nullptr;
    }
  }
  const int64_t t = index_++;
  // The held reference saw a change the new one is calibrating on, or the regime before the last
  // confirmed change came back (the return test, checked only when the holdover did not alarm):
  // an alarm, and the live reference starts again from the next pair (its own reference, if
  // long enough, is held as after any alarm).
  if ((hold_active_ && ObserveHoldover(residual, t)) || (ret_active_ && ObserveReturn(residual, t))) {
    StartHoldover(alarm_.direction == Direction::kUp ? 0 : 1);
    ResetReference();
    std::copy(residual, residual + nc, prev_r_.begin());
    has_prev_ = true;
    return &alarm_;
  }
  const int64_t phase = since_restart_++;  // this pair's position since the restart

  if (phase < options_.scale_pairs) {
    // docs/algorithms.md (12.1): s_c^2 = mean r_c^2 over the scale phase, floored so that a
    // channel that is exactly predicted does not divide by zero.
    for (int c = 0; c < nc; ++c) scale2_[c] += residual[c] * residual[c];
    if (phase + 1 == options_.scale_pairs) {
      double largest = 0;
      for (int c = 0; c < nc; ++c) {
        scale2_[c] /= options_.scale_pairs;
        largest = std::max(largest, scale2_[c]);
      }
      scale_floor_ = std::max(1e-12 * largest, 1e-300);
      for (int c = 0; c < nc; ++c) scale2_[c] = std::max(scale2_[c], scale_floor_);
    }
    std::copy(residual, residual + nc, prev_r_.begin());
    has_prev_ = true;
    if (phase + 1 == options_.scale_pairs) std::fill(memory_.begin(), memory_.end(), 0.0);
    return nullptr;
  }

  // docs/algorithms.md (12.2): the pair's score.
  const PairScore ps = ScorePair(residual, scale2_, memory_);
  const double m = ps.m, lag = ps.lag, lag1 = ps.lag1, energy = ps.energy, w = ps.w;

  // (12.3): standardized by the reference of the previous pairs, as a recursive residual.
  double x = 0;
  const int64_t n = ref_n_;
  const bool forgetting = n > options_.baseline_pairs;
  if (n >= 2) {
    const double sd = RecursiveResidualSd(ref_var_w_, n, options_.baseline_pairs);
    if (sd > 0) x = std::clamp((w - ref_mean_w_) / sd, -options_.clip, options_.clip);
  }
  // (12.3b): the long-run standard deviation of serially correlated scores.
  const double x_raw = x;
  const double gamma = LongRunGamma();
  if (gamma > 0) x /= std::sqrt(1 + 2 * gamma);

  if (phase >= options_.arm_after) {
    // (12.4): the CUSUMs and their runs (onset = the first pair after the statistic was 0).
    const double k = options_.drift;
    up_ = up_run_.Step(up_, x, k, t, m, lag, lag1, energy, residual, scale2_);
    down_ = down_run_.Step(down_, -x, k, t, m, lag, lag1, energy, residual, scale2_);
    for (int j = 0; j < kOnsetCusums; ++j) {
      StepOnsetCusum(x, kOnsetDrift[j], t, onset_up_[j], onset_up_start_[j], onset_up_len_[j]);
      StepOnsetCusum(-x, kOnsetDrift[j], t, onset_down_[j], onset_down_start_[j], onset_down_len_[j]);
    }
    const double ks = options_.slow_drift;
    if (ks > 0) {
      // docs/algorithms.md §12.12: the slow pair, on the same increments.
      slow_up_ = slow_up_run_.Step(slow_up_, x, ks, t, m, lag, lag1, energy, residual, scale2_);
      slow_down_ = slow_down_run_.Step(slow_down_, -x, ks, t, m, lag, lag1, energy, residual, scale2_);
    }
    const bool main_alarm = up_ > threshold_ || down_ > threshold_;
    if (main_alarm || (ks > 0 && (slow_up_ > slow_threshold_ || slow_down_ > slow_threshold_))) {
      if (main_alarm) {
        const bool up = up_ > threshold_;
        FillAlarm(up ? Direction::kUp : Direction::kDown, up ? up_ : down_, up ? up_run_ : down_run_, k, threshold_);
      } else {
        const bool up = slow_up_ > slow_threshold_;
        FillAlarm(up ? Direction::kUp : Direction::kDown, up ? slow_up_ : slow_down_,
                  up ? slow_up_run_ : slow_down_run_, ks, slow_threshold_);
      }
      StartHoldover(alarm_.direction == Direction::kUp ? 0 : 1);
      ResetReference();
      std::copy(residual, residual + nc, prev_r_.begin());
      has_prev_ = true;
      return &alarm_;
    }
  }

  // The reference takes the pair after it was scored: plain means up to baseline_pairs pairs,
  // then an EWMA of weight 1 / baseline_pairs.
  ref_n_ = n + 1;
  const double a = forgetting ? 1.0 / options_.baseline_pairs : 1.0 / static_cast<double>(ref_n_);
  double wr = w;
  if (n >= 10) wr = std::min(w, ref_mean_w_ + kWinsor * std::sqrt(ref_var_w_));
  const double dw = wr - ref_mean_w_;
  ref_mean_w_ += a * dw;
  ref_var_w_ = (1 - a) * (ref_var_w_ + a * dw * dw);
  ref_mean_m_ += a * (wr * wr * wr - ref_mean_m_);
  if (has_prev_) {
    ref_lag_ += a * (lag - ref_lag_);
    ref_lag1_ += a * (lag1 - ref_lag1_);
    ref_energy_ += a * (energy - ref_energy_);
  }
  // (12.1b): the scales keep learning, slowly: a channel whose residual was rare in the scale
  // phase (a state not visited) does not keep a scale that makes its every residual an outlier.
  const int64_t ns = phase + 1;
  const double as = ns > options_.baseline_pairs ? 1.0 / options_.baseline_pairs : 1.0 / static_cast<double>(ns);
  for (int c = 0; c < nc; ++c) {
    const double z = std::min(residual[c] * residual[c] / scale2_[c], kMaxZ);
    ref_z_[c] += a * (z - ref_z_[c]);
    scale2_[c] = std::max(scale2_[c] + as * (residual[c] * residual[c] - scale2_[c]), scale_floor_);
  }
  if (n >= 2) {
    if (has_prev_x_) {
      ++ref_xx_n_;
      const double b =
          ref_xx_n_ > options_.baseline_pairs ? 1.0 / options_.baseline_pairs : 1.0 / static_cast<double>(ref_xx_n_);
      ref_xx_ += b * (x_raw * prev_x_ - ref_xx_);
    }
    prev_x_ = kScoreMemory * prev_x_ + x_raw;
    has_prev_x_ = true;
  }
  std::copy(residual, residual + nc, prev_r_.begin());
  has_prev_ = true;
  return nullptr;
}

void ChangeDetector::FillAlarm(Direction dir, double score, Run& run, double k, double h) {
  const bool up = dir == Direction::kUp;
  const double len = static_cast<double>(run.len);
  const double run_m = run.m / len;

  alarm_.index = index_ - 1;
  alarm_.run_start = run.start;
  // docs/algorithms.md (12.7): the candidate change times are the run starts of the four
  // CUSUMs (the pair after each last 0). For a start tau with n pairs and increment sum
  // S = stat + k n since tau, the maximized Gaussian log-likelihood ratio of "mean delta from
  // tau on" against "mean 0" is S^2 / (2 n), at delta = S / n; the onset is the candidate of
  // largest S^2 / n (a generalized likelihood ratio estimate over these candidates).
  double best_sum = score + k * len;
  alarm_.shift = best_sum / len;
  alarm_.onset = alarm_.run_start;
  double best = best_sum * best_sum / len;
  for (int j = 0; j < kOnsetCusums; ++j) {
    const double stat = up ? onset_up_[j] : onset_down_[j];
    const double n_j = static_cast<double>(up ? onset_up_len_[j] : onset_down_len_[j]);
    if (!(stat > 0) || n_j < 1) continue;
    const double sum = stat + kOnsetDrift[j] * n_j;
    if (sum * sum / n_j > best) {
      best = sum * sum / n_j;
      alarm_.shift = sum / n_j;
      alarm_.onset = up ? onset_up_start_[j] : onset_down_start_[j];
    }
  }
  alarm_.score = score;
  alarm_.threshold = h;
  alarm_.direction = dir;
  alarm_.energy_ratio = ref_mean_m_ > 0 ? run_m / ref_mean_m_ : 1;
  Classify(run, len, ref_lag_, ref_lag1_, ref_energy_);
  RankChannels(run.z, len, ref_z_, up);
  ++alarms_;
}

double ChangeDetector::level() const {
  double v = threshold_ > 0 ? std::max(up_, down_) / threshold_ : 0;
  if (slow_threshold_ > 0) v = std::max(v, std::max(slow_up_, slow_down_) / slow_threshold_);
  return v;
}

// docs/algorithms.md (12.3b): Gamma of the reference's standardized scores (0 before 10 pairs).
double ChangeDetector::LongRunGamma() const {
  if (ref_xx_n_ < 10) return 0;
  const double n_eff = static_cast<double>(std::min<int64_t>(ref_xx_n_, options_.baseline_pairs));
  return std::clamp(ref_xx_ - 1 / std::sqrt((1 - kScoreMemory * kScoreMemory) * n_eff), 0.0, kMaxGamma);
}

// docs/algorithms.md (12.6): the run's autocorrelation statistics against the reference's.
void ChangeDetector::Classify(const Run& run, double len, double ref_lag, double ref_lag1, double ref_energy) {
  const double g_run = run.energy > 0 ? run.lag / run.energy : 0;
  // A negative reference (a forecast that passes part of the noise on, as a whitening filter
  // does) counts as 0: residuals becoming whiter again are no evidence of a misfit.
  const double g_ref = ref_energy > 0 ? std::max(ref_lag / ref_energy, 0.0) : 0;
  const double g1_run = run.energy > 0 ? run.lag1 / run.energy : 0;
  const double g1_ref = ref_energy > 0 ? std::max(ref_lag1 / ref_energy, 0.0) : 0;
  alarm_.autocorr_change = g_run - g_ref;
  const double rho = options_.kind_memory;
  alarm_.autocorr_bound = options_.kind_min + options_.kind_z / std::sqrt((1 - rho * rho) * len);
  alarm_.lag1_change = g1_run - g1_ref;
  alarm_.lag1_bound = options_.kind_min + options_.kind_z / std::sqrt(len);
  alarm_.kind = alarm_.autocorr_change > alarm_.autocorr_bound || alarm_.lag1_change > alarm_.lag1_bound
                    ? Kind::kDynamics
                    : Kind::kNoise;
}

ChangeDetector::PairScore ChangeDetector::ScorePair(const double* residual, const std::vector<double>& scale2,
                                                    std::vector<double>& memory) const {
  const int nc = options_.channels;
  PairScore ps;
  for (int c = 0; c < nc; ++c) {
    const double z = std::min(residual[c] * residual[c] / scale2[c], kMaxZ);
    ps.m += z;
    // (12.6): e_t times the filter of the past residuals, then the filter takes e_t.
    const double e = residual[c] / std::sqrt(scale2[c]);
    if (has_prev_) {
      ps.lag += e * memory[c];
      ps.lag1 += e * prev_r_[c] / std::sqrt(scale2[c]);
      ps.energy += e * e;
      memory[c] = options_.kind_memory * memory[c] + e;
    } else {
      memory[c] = e;
    }
  }
  ps.m /= nc;
  ps.w = std::cbrt(ps.m);
  return ps;
}

namespace {

// v2 adds holdover_pairs, v3 return_pairs, v4 return_rearm and the slow CUSUMs', v5 late_confirm.
constexpr auto kChangeDetectorOptionFields = [](auto& f, auto& o, uint32_t version) {
  f.Scalars("change detector", io::Field("channels", o.channels), io::Field("alarm_rate", o.alarm_rate),
            io::Field("arm_after", o.arm_after), io::Field("scale_pairs", o.scale_pairs),
            io::Field("baseline_pairs", o.baseline_pairs), io::Field("drift", o.drift), io::Field("clip", o.clip),
            io::Field("kind_min", o.kind_min), io::Field("kind_z", o.kind_z), io::Field("kind_memory", o.kind_memory));
  if (version >= 2) f.I32("change detector holdover_pairs", o.holdover_pairs);
  if (version >= 3) f.I32("change detector return_pairs", o.return_pairs);
  if (version >= 4) {
    f.Bool("change detector return_rearm", o.return_rearm);
    f.Scalars("change detector", io::Field("slow_drift", o.slow_drift), io::Field("slow_share", o.slow_share));
  }
  if (version >= 5) f.Bool("change detector late_confirm", o.late_confirm);
};

// The up and the down CUSUM's runs after their starts, of the live reference (prefix "change
// detector") or the held one ("change detector holdover"): StateFields and HoldoverFields.
constexpr auto kRunFields = [](auto& f, const char* prefix, int64_t nc, auto& up, auto& down) {
  f.Scalars(prefix, io::Field("up run length", up.len), io::Field("down run length", down.len),
            io::Field("up run energy", up.m), io::Field("down run energy", down.m),
            io::Field("up run lag product", up.lag), io::Field("up run lag-1 product", up.lag1),
            io::Field("up run square", up.energy), io::Field("down run lag product", down.lag),
            io::Field("down run lag-1 product", down.lag1), io::Field("down run square", down.energy));
  f.Doubles(absl::StrCat(prefix, " up run channel scores").c_str(), nc, up.z.data());
  f.Doubles(absl::StrCat(prefix, " down run channel scores").c_str(), nc, down.z.data());
};

}  // namespace

// The detector's state after its options, in file order (Serialize and Deserialize share it).
// The counters' consistency is checked by Deserialize after the whole object is read.
template <class Fields, class Self>
void ChangeDetector::StateFields(Fields& f, Self& d) {
  const int64_t nc = d.options_.channels;
  const char* const kPrefix = "change detector";
  f.Scalars(kPrefix, io::Field("scored pairs", d.index_), io::Field("skipped pairs", d.skipped_),
            io::Field("alarms", d.alarms_), io::Field("has previous residual", d.has_prev_));
  f.Doubles("change detector previous residual", nc, d.prev_r_.data());
  f.Doubles("change detector residual memory", nc, d.memory_.data());
  f.I64("change detector pairs since restart", d.since_restart_);
  f.Doubles("change detector scales", nc, d.scale2_.data());
  f.Scalars(kPrefix, io::Field("scale floor", d.scale_floor_), io::Field("reference pairs", d.ref_n_),
            io::Field("reference mean", d.ref_mean_w_), io::Field("reference variance", d.ref_var_w_),
            io::Field("reference energy", d.ref_mean_m_), io::Field("has previous score", d.has_prev_x_),
            io::Field("previous score", d.prev_x_), io::Field("score lag pairs", d.ref_xx_n_),
            io::Field("score lag product", d.ref_xx_), io::Field("reference lag product", d.ref_lag_),
            io::Field("reference lag-1 product", d.ref_lag1_), io::Field("reference square", d.ref_energy_));
  f.Doubles("change detector reference channel scores", nc, d.ref_z_.data());
  f.Scalars(kPrefix, io::Field("up statistic", d.up_), io::Field("down statistic", d.down_),
            io::Field("up onset", d.up_run_.start), io::Field("down onset", d.down_run_.start));
  for (int j = 0; j < kOnsetCusums; ++j) {
    f.Scalars(
        kPrefix, io::Field("onset up statistic", d.onset_up_[j]), io::Field("onset down statistic", d.onset_down_[j]),
        io::Field("onset up start", d.onset_up_start_[j]), io::Field("onset down start", d.onset_down_start_[j]),
        io::Field("onset up run length", d.onset_up_len_[j]), io::Field("onset down run length", d.onset_down_len_[j]));
  }
  kRunFields(f, kPrefix, nc, d.up_run_, d.down_run_);
}

// v2: the holdover's state, after StateFields.
template <class Fields, class Self>
void ChangeDetector::HoldoverFields(Fields& f, Self& d) {
  const int64_t nc = d.options_.channels;
  const char* const kPrefix = "change detector holdover";
  f.Scalars(kPrefix, io::Field("active", d.hold_active_), io::Field("direction", d.hold_direction_),
            io::Field("pairs", d.hold_pairs_), io::Field("mean", d.hold_mean_w_), io::Field("sd", d.hold_sd_),
            io::Field("long-run factor", d.hold_factor_), io::Field("energy", d.hold_mean_m_),
            io::Field("lag product", d.hold_lag_), io::Field("lag-1 product", d.hold_lag1_),
            io::Field("square", d.hold_energy_));
  f.Doubles("change detector holdover scales", nc, d.hold_scale2_.data());
  f.Doubles("change detector holdover channel scores", nc, d.hold_ref_z_.data());
  f.Doubles("change detector holdover residual memory", nc, d.hold_memory_.data());
  f.Scalars(kPrefix, io::Field("up statistic", d.hold_up_), io::Field("down statistic", d.hold_down_),
            io::Field("up start", d.hold_up_run_.start), io::Field("down start", d.hold_down_run_.start));
  kRunFields(f, kPrefix, nc, d.hold_up_run_, d.hold_down_run_);
}

// v3: the return test's state, after HoldoverFields.
template <class Fields, class Self>
void ChangeDetector::ReturnFields(Fields& f, Self& d) {
  f.Scalars("change detector return", io::Field("active", d.ret_active_), io::Field("pairs", d.ret_pairs_),
            io::Field("start", d.ret_start_), io::Field("mean", d.ret_mean_w_), io::Field("sd", d.ret_sd_),
            io::Field("shift sum", d.ret_shift_sum_), io::Field("statistic", d.ret_stat_));
  f.Doubles("change detector return scales", d.options_.channels, d.ret_scale2_.data());
  // v5: whether the running test was started by a late confirmation (§12.13).
  if (d.options_.late_confirm) f.Bool("change detector return late", d.ret_late_);
}

// v4: the slow CUSUMs' state, after the return test's (when they run).
template <class Fields, class Self>
void ChangeDetector::SlowFields(Fields& f, Self& d) {
  const char* const kPrefix = "change detector slow";
  f.Scalars(kPrefix, io::Field("up statistic", d.slow_up_), io::Field("down statistic", d.slow_down_),
            io::Field("up start", d.slow_up_run_.start), io::Field("down start", d.slow_down_run_.start));
  kRunFields(f, kPrefix, d.options_.channels, d.slow_up_run_, d.slow_down_run_);
}

namespace {

// The object's version: the oldest that holds the options (byte for byte what the release that
// introduced it wrote).
uint32_t FormatVersion(const ChangeDetector::Options& o) {
  if (o.late_confirm) return 5;
  if (o.return_rearm || o.slow_drift > 0) return 4;
  if (o.return_pairs > 0) return 3;
  return o.holdover_pairs > 0 ? 2 : 1;
}

}  // namespace

void ChangeDetector::Serialize(io::Writer& w) const {
  const uint32_t version = FormatVersion(options_);
  io::FieldWriter f(w, kFormat, version);
  kChangeDetectorOptionFields(f, options_, version);
  StateFields(f, *this);
  if (options_.holdover_pairs > 0) HoldoverFields(f, *this);
  if (options_.return_pairs > 0) ReturnFields(f, *this);
  if (options_.slow_drift > 0) SlowFields(f, *this);
}

absl::StatusOr<ChangeDetector> ChangeDetector::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kChangeDetectorOptionFields);
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(std::string(s.message()));
  // Each version is written only by a detector that needs it (FormatVersion).
  if (FormatVersion(o) != version) {
    return r.Fail(absl::StrCat("change detector v", version, " with the options of a v", FormatVersion(o), " one"));
  }
  const int64_t nc = o.channels;
  // Six channel vectors with their u64 counts (Serialize: previous residual, memory, scales,
  // reference, up and down run scores), five more with the holdover, one more with the return
  // test, two more with the slow CUSUMs: nothing is allocated for a body that cannot hold them.
  const int64_t vectors =
      6 + (o.holdover_pairs > 0 ? 5 : 0) + (o.return_pairs > 0 ? 1 : 0) + (o.slow_drift > 0 ? 2 : 0);
  if (!r.Expect(static_cast<uint64_t>(vectors * (8 * nc + 8)), "change detector channel vectors")) return r.status();
  ChangeDetector d(o);
  io::FieldReader f(r);
  StateFields(f, d);
  if (o.holdover_pairs > 0) HoldoverFields(f, d);
  if (o.return_pairs > 0) ReturnFields(f, d);
  if (o.slow_drift > 0) SlowFields(f, d);
  bool onset_ok = true;
  for (int j = 0; j < kOnsetCusums; ++j) {
    onset_ok = onset_ok && d.onset_up_len_[j] >= 0 && d.onset_down_len_[j] >= 0 && d.onset_up_[j] >= 0 &&
               d.onset_down_[j] >= 0 && Finite(d.onset_up_[j]) && Finite(d.onset_down_[j]);
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  if (d.index_ < 0 || d.skipped_ < 0 || d.alarms_ < 0 || d.since_restart_ < 0 || d.since_restart_ > d.index_ ||
      d.ref_n_ < 0 || d.ref_n_ > d.since_restart_ || d.ref_xx_n_ < 0 || d.ref_xx_n_ > d.ref_n_ || d.up_run_.len < 0 ||
      d.down_run_.len < 0 || d.up_run_.len > d.index_ || d.down_run_.len > d.index_) {
    return r.Fail(absl::StrCat("change detector counters are inconsistent: scored ", d.index_, ", since restart ",
                               d.since_restart_, ", reference ", d.ref_n_, ", runs ", d.up_run_.len, " and ",
                               d.down_run_.len));
  }
  if (d.hold_pairs_ < 0 || d.hold_up_run_.len < 0 || d.hold_down_run_.len < 0 || d.hold_direction_ < -1 ||
      d.hold_direction_ > 1 || (d.hold_active_ && !(d.hold_sd_ > 0)) || !(d.hold_up_ >= 0) || !(d.hold_down_ >= 0) ||
      !Finite(d.hold_up_) || !Finite(d.hold_down_)) {
    return r.Fail("change detector holdover state out of range");
  }
  if (d.ret_pairs_ < 0 || (d.ret_active_ && !(d.ret_sd_ > 0)) || !(d.ret_stat_ >= 0) || !Finite(d.ret_stat_) ||
      !Finite(d.ret_shift_sum_) || !Finite(d.ret_mean_w_) ||
      (d.ret_active_ &&
       std::any_of(d.ret_scale2_.begin(), d.ret_scale2_.end(), [](double v) { return !(v > 0) || !Finite(v); }))) {
    return r.Fail("change detector return test state out of range");
  }
  if (!(d.slow_up_ >= 0) || !(d.slow_down_ >= 0) || !Finite(d.slow_up_) || !Finite(d.slow_down_) ||
      d.slow_up_run_.len < 0 || d.slow_down_run_.len < 0 || d.slow_up_run_.len > d.index_ ||
      d.slow_down_run_.len > d.index_) {
    return r.Fail("change detector slow CUSUM state out of range");
  }
  if (!(d.up_ >= 0) || !(d.down_ >= 0) || !Finite(d.up_) || !Finite(d.down_) || !(d.ref_var_w_ >= 0) || !onset_ok) {
    return r.Fail(absl::StrCat("change detector statistics ", d.up_, ", ", d.down_, " and reference variance ",
                               d.ref_var_w_, ", expected finite and >= 0"));
  }
  return d;
}

}  // namespace cmestream
