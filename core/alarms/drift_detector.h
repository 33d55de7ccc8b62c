// DriftDetector: the change alarms' test of the forecast's coefficients (docs/algorithms.md
// §12.9). The caller passes each pair's regressors x (d values) and its forecast's residual r
// (C channels); the detector says when the residuals have become predictable from x, that is
// when the coefficients the forecast was fitted with no longer fit.
//
// WHY A SECOND TEST. ChangeDetector scores the residuals' size. A change of the dynamics reaches
// the size only through the misfit it adds to the residual variance, which is second order in the
// change: a damping change that moves the one-step forecast by 0.45 noise standard deviations
// raises the residual variance by 20 %. A residual is about as often above as below the forecast
// whichever side of its mean a regressor is, on the data the forecast was fitted on; when the
// best coefficients move by dB, the residual leans to one side with x_j, and the agreement of
// their signs moves first order in the change (a sign version of the score test of a
// regression's coefficients, monitored: Nyblom 1989; Zeileis, Leisch, Kleiber and Hornik 2005).
//
// METHOD (docs/algorithms.md §12.9). After every restart (construction, an alarm of either test,
// a refit of the forecast), per component i = (c, j), c a residual channel and j a regressor:
//   1. g_i = sign(r_c) sign(x_j - mean x_j), the mean being the regressor's running mean since
//      the restart: +1 when the residual falls on the regressor's side, -1 when not. Signs, not
//      the values: a product with x_j has a variance that follows x_j^2, which clusters in time
//      on a slow process, and the CUSUM below then wanders past its threshold (measured with
//      r_c sign(x_j): 6.8 false alarms per 10^4 on a stationary double well), and a product with
//      r_c grows with the noise, so that a noise that only doubled alarmed as a change of
//      coefficients. The signs cost a factor ~0.8 each of the shift on Gaussian variables.
//   2. x_i = clip((g_i - mu_i) / (sd_i sqrt(1 + 1/n)), +-clip): mu_i, sd_i the mean and standard
//      deviation of the n previous values since the restart (an EWMA of weight 1/baseline_pairs
//      beyond that many), the self-starting standardization of (12.3);
//   3. two one-sided CUSUMs per component, U = max(0, U + x - k), D = max(0, D - x - k), from
//      arm_after pairs after the restart on;
//   4. the threshold of (12.5) for a monitored run length of p (10^4 / R - arm_after): the first
//      of the p CUSUM pairs to cross alarms, a union (Bonferroni) bound on the false alarms.
// The alarm reports the component, its channel, the direction and the run start (the first pair
// after the alarming CUSUM's last 0, the onset estimate).
//   5. Holdover (Options::holdover_pairs, docs/algorithms.md §12.9 "After a restart"): at a
//      restart whose reference held >= arm_after pairs, that reference (the regressors' means,
//      each component's mean and standard deviation) is frozen and keeps scoring the next
//      holdover_pairs pairs with CUSUM pairs of its own, while the new reference builds. The
//      restart is confirmed (and the holdover ends) when any held CUSUM passes h / 2 within 50
//      pairs: the alarm was a change; otherwise a crossing of h is an alarm: a change that the
//      new reference would have absorbed. The size test's holdover (ChangeDetector) is the
//      model.
//
// COST. O(C d) per pair (twice that while a holdover runs), no heap allocation after
// construction; C d is capped at kMaxComponents (the monitor leaves wider forecasts to
// ChangeDetector alone).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/fwd.h"

namespace cmestream {

class DriftDetector {
 public:
  struct Options {
    int inputs = 1;         // d: regressors per pair
    int channels = 1;       // C: residual channels
    double alarm_rate = 1;  // target false alarms per 10,000 stationary pairs of this test alone
    int arm_after = 200;
    int baseline_pairs = 5000;
    double drift = 0.25;  // CUSUM reference value k, in standard deviations
    double clip = 4;
    // With steps, one more component per channel c: sign(r_c) sign(s_c - mean s_c), s_c the
    // forecast's predicted step of that channel (forecast minus its newest observation), passed
    // to Observe. A change of the dynamics' speed leaves a misfit along the predicted step,
    // whatever the regressors' mean: a double well whose state stays in one well has x on one
    // side of its long-run mean, and sign(x - mean x) no longer says where x is within the well
    // (docs/algorithms.md §12.9). Written as DRFT v2; a v1 object restores without.
    bool steps = false;
    // Holdover (item 5 above): for this many pairs after a restart the reference before it (if it
    // held >= arm_after pairs), frozen, keeps scoring. 0: off, and the object is written as DRFT
    // v1/v2 as before; with it, DRFT v3. A v1/v2 object restores with 0.
    int holdover_pairs = 0;
    absl::Status Validate() const;
  };
  // C d components at most: their 2 C d CUSUMs share one false-alarm budget, so the threshold
  // grows with log(C d); beyond this the test is not run (docs/algorithms.md §12.9).
  static constexpr int kMaxComponents = 256;
  // A component scores only once its reference holds about this many pairs on its less frequent
  // side (docs/algorithms.md §12.9 "Quantized and intermittent streams"): n var >= 4 of them, n
  // the reference's pairs (at most baseline_pairs), as n var = 4 n p (1 - p) for a sign whose
  // rarer value has share p. On a mostly-zero counter or a square wave the signs are nearly
  // constant, and the few pairs of the other sign, standardized by a spread estimated from a
  // handful of them, hit the clip and alarm.
  static constexpr double kMinMinorityPairs = 40;
  static int Components(int inputs, int channels, bool steps = false) {
    return channels * inputs + (steps ? channels : 0);
  }

  struct Alarm {
    int64_t index = 0;      // pairs seen before the alarming pair
    int64_t run_start = 0;  // first pair of the alarming CUSUM's run
    double score = 0;       // the CUSUM statistic (> threshold)
    double threshold = 0;
    int channel = 0;    // the residual channel of the alarming component
    int regressor = 0;  // the regressor j of the alarming component (inputs: the channel's step)
    bool up = true;     // the component's mean rose (true) or fell
  };

  // requires: options.Validate().ok().
  explicit DriftDetector(const Options& options);

  // One pair: x (inputs values), the residual (channels values) and, with options().steps, the
  // forecast's predicted step per channel (channels values; ignored without). Returns the alarm
  // it raised (valid until the next call), or nullptr. A pair with a non-finite value is skipped.
  const Alarm* Observe(const double* x, const double* residual, const double* step = nullptr);
  // Forget the reference: the next pairs build a new one (the monitor calls it after an alarm of
  // the other test and after the forecast refits, whose residuals are then another function).
  // With holdover_pairs, the reference before the restart is held if it is long enough (replacing
  // any held one), else no holdover runs after it; with `keep`, a running holdover goes on when
  // that reference is too short (a refit). Returns true when it started a holdover.
  bool Restart(bool keep = false);

  const Options& options() const { return options_; }
  double threshold() const { return threshold_; }
  int64_t seen() const { return index_; }
  int64_t alarms() const { return alarms_; }
  // The largest CUSUM statistic now (of the live reference).
  double statistic() const;
  // The reference before the last restart is still scoring (Options::holdover_pairs).
  bool holding() const { return hold_active_; }

  // Object "DRFT" v3: options (v2: with steps; v3: a steps flag and holdover_pairs) and the whole
  // state (bit-exact continuation; v3: the held reference and its CUSUMs after it). A detector
  // without the holdover is written as v2 with steps and v1 without, byte for byte what the
  // releases before wrote.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<DriftDetector> Deserialize(io::Reader& r);

 private:
  // The state's field list (CONTRIBUTING.md "Binary formats"), beside Serialize.
  template <class Fields, class Self>
  static void StateFields(Fields& f, Self& self);
  template <class Fields, class Self>
  static void HoldoverFields(Fields& f, Self& self);
  int components() const { return Components(options_.inputs, options_.channels, options_.steps); }
  int regressors() const { return options_.inputs + (options_.steps ? options_.channels : 0); }
  // This pair's components against the regressors' means `means` (regressors() values) into g.
  void Signs(const double* x, const double* residual, const double* step, const double* means, double* g) const;
  // One CUSUM pair's step for component u with standardized value z at pair t; returns
  // max(up, down) after it.
  static double StepCusums(double z, double k, int64_t t, double& up, double& down, int64_t& up_start,
                           int64_t& down_start);
  // Whether a component whose reference of n pairs has variance var may be standardized and
  // scored (kMinMinorityPairs).
  bool EnoughVariation(double var, int64_t n) const;
  // The live reference is held (Options::holdover_pairs) if it is long enough, else none is.
  void StartHoldover();
  // One pair against the held reference (components in hold_g_): true when it alarmed (alarm_
  // filled).
  bool ObserveHoldover(int64_t t);
  void ResetReference();
  void FillAlarm(int64_t t, int component, bool up, double score, int64_t run_start);

  Options options_;
  double threshold_ = 0;
  int64_t index_ = 0;  // pairs seen
  int64_t alarms_ = 0;
  int64_t since_restart_ = 0;
  // Reference moments (since the restart): the regressors' means, each component's mean and
  // (unnormalized, then EWMA) variance.
  std::vector<double> x_mean_;      // d, then C steps
  std::vector<double> mean_, var_;  // p
  // CUSUMs and the first pair of their current runs.
  std::vector<double> up_, down_;               // p
  std::vector<int64_t> up_start_, down_start_;  // p
  std::vector<double> g_;                       // scratch: this pair's components

  // Holdover: the reference before the last restart, frozen, and CUSUMs against it.
  bool hold_active_ = false;
  int64_t hold_pairs_ = 0;                                // pairs scored against it so far
  std::vector<double> hold_x_mean_;                       // regressors()
  std::vector<double> hold_mean_, hold_sd_;               // p
  std::vector<double> hold_up_, hold_down_;               // p
  std::vector<int64_t> hold_up_start_, hold_down_start_;  // p
  std::vector<double> hold_g_;                            // scratch: the pair's components against it
  Alarm alarm_;
};

}  // namespace cmestream
