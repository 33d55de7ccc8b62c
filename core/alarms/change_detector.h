// ChangeDetector: a calibrated sequential change detector on the one-step prediction residuals
// of a model (docs/algorithms.md §12). The caller forecasts y from its own model and passes the
// residual r = y - yhat (C channels, in the model's scaled units); the detector says when the
// distribution of the residuals has changed, when the change started, which channels changed
// most and whether the residuals only got larger ("noise") or became predictable from their
// own past ("dynamics").
//
// METHOD (numbers refer to docs/algorithms.md §12). After every restart (construction, alarm):
//   1. Scale phase, the first `scale_pairs` scored pairs: s_c^2 = mean of r_c^2 (12.1). After
//      it s_c^2 keeps learning slowly (12.1b): the running mean of r_c^2 since the restart, an
//      EWMA of weight 1 / baseline_pairs beyond that many pairs (a channel whose residual was
//      rare in the scale phase, a state of a chain not visited, would otherwise keep a scale
//      that makes each of its residuals an outlier). z uses the scale before the pair.
//   2. Score of a pair: z_c = r_c^2 / s_c^2, m = mean_c z_c, w = m^(1/3) (12.2). For Gaussian
//      residuals m ~ chi2_C / C and w is close to normal (Wilson-Hilferty); the cube root is
//      the variance-stabilizing power of a chi-square, where the log has a long left tail.
//   3. Self-starting standardization (12.3): x = (w - mu) / (sd sqrt(1 + 1/n)) with mu, sd the
//      mean and standard deviation of the previous n scores since the scale phase (an EWMA of
//      weight 1/baseline_pairs once n > baseline_pairs), x clipped to [-clip, clip]. For i.i.d.
//      Gaussian scores these are recursive residuals: independent and close to N(0, 1) whatever
//      n, so the CUSUM below sees the increments its threshold was computed for (no extra false
//      alarms from a reference estimated on few pairs; the slow scale updates of (12.1b) leave
//      this nearly intact: tests/core/alarms/test_change_detector.cc measures the rate).
//      Scores that are serially correlated (residuals whose size clusters in time) make the
//      CUSUM's sums wander more than independent ones: x is divided by a long-run standard
//      deviation sqrt(1 + 2 Gamma), Gamma = the reference mean of x_t q_{t-1}, q_t = 0.9 q_{t-1} + x_t
//      (the autocorrelations at lags 1, 2, ... weighted 1, 0.9, 0.81, ...), less one null
//      standard deviation 1 / sqrt(0.19 n), and >= 0 (12.3b).
//   4. Two one-sided CUSUMs (12.4): U = max(0, U + x - k), D = max(0, D - x - k), k = `drift`;
//      they run once `arm_after` pairs were scored since the restart. An alarm when U > h or
//      D > h; then everything restarts (the new regime becomes the reference).
//   5. Threshold (12.5): Siegmund's approximation of the in-control run length of a one-sided
//      CUSUM with N(0,1) increments, ARL(h) = (e^{2kb} - 2kb - 1) / (2k^2), b = h + 1.166,
//      solved for ARL = 2 (10^4 / R - arm_after): two CUSUMs halve the run length, and each
//      alarm is followed by arm_after pairs without alarms, so the stationary rate is R alarms
//      per 10^4 pairs.
//   6. Kind (12.6): with e = r / s and a per-channel filter of the past, f_c,t = rho f_c,t-1 + e_c,t,
//      g = sum_t sum_c e_c,t f_c,t-1 / sum_t sum_c e_c,t^2 (a weighted sum of the autocorrelations
//      at lags 1, 2, ..., pooled over channels, not centered) over the alarming run minus the
//      same over the reference; "dynamics" when the rise exceeds kind_min + kind_z /
//      sqrt((1 - rho^2) n_run), or when the rise of the lag-1 autocorrelation g1 (the same with
//      rho = 0) exceeds kind_min + kind_z / sqrt(n_run), else "noise". The filter sees a slowly
//      varying misfit best, the lag-1 term an oscillating one (whose autocorrelations at
//      longer lags cancel in the filter). A frozen forecast of changed dynamics leaves a
//      misfit that follows the state, which is autocorrelated; noise that only got larger
//      leaves the residuals white (or, behind a whitening forecast, negatively correlated).
//   7. Onset (12.7): three more CUSUM pairs with k = 0.5, 1, 2 run beside the main one; their
//      run starts (the pair after each last 0) are the candidate change times tau. With S_tau
//      the sum of x from tau on over n_tau pairs, the onset is the candidate of largest
//      S_tau^2 / n_tau: the generalized likelihood ratio of a mean shift starting at tau
//      (the last 0 of a CUSUM with k = delta / 2 is the maximum-likelihood change time for a
//      known shift delta; the candidates cover delta from 0.5 to 4 and more).
//   8. Holdover (Options::holdover_pairs, docs/algorithms.md §12.8 "After an alarm"): at a
//      restart whose reference held >= 200 pairs, that reference (scales, score mean and sd,
//      long-run factor) is frozen and keeps standardizing the next holdover_pairs pairs into a
//      CUSUM pair of its own, while the new reference calibrates. If the alarm was a change,
//      the held CUSUM of its direction (either, after Restart()) passes h / 2 within 50 pairs:
//      the alarm is confirmed and the holdover ends. Otherwise (a false alarm, the old regime
//      goes on) a crossing of h is an alarm: a change that the new reference, still calibrating
//      or young, would have absorbed (its scale and score mean are running means since the
//      restart). Kind and channels as in 6., against the held reference's statistics.
//   9. Return test (Options::return_pairs, docs/algorithms.md §12.11): when a holdover confirms
//      a change, that held reference (the regime before the change: scales, score mean and sd)
//      is kept for return_pairs more pairs. Over its first kReturnLearnPairs pairs it learns the
//      new regime's mean standardized score against it, delta; if |delta| >= 1 it then runs one
//      CUSUM of the log-likelihood ratio of "mean 0" (the old regime) against "mean delta",
//      divided by |delta|: V = max(0, V + |delta| / 2 - sign(delta) z), alarm at V > 4 h. It
//      survives the live reference's restarts, so a return to the old regime is found even when a
//      restart inside the new regime left the live reference young (it would absorb it).
//      With return_rearm (docs/algorithms.md §12.12) a running test is kept when a later change
//      is confirmed (the regime it watches for may still come back), and its alarm starts it
//      again on the same reference: it learns delta anew, and a real return (|delta| < 1 then)
//      ends it, where a dip of the new regime toward the old one leaves it watching.
//  10. Slow CUSUMs (Options::slow_drift, docs/algorithms.md §12.12): a second CUSUM pair on the
//      same standardized scores with a smaller reference value (0.1), for small shifts that
//      last; it gets slow_share of alarm_rate and the main pair the rest (a union bound).
//  11. Late confirmation (Options::late_confirm, docs/algorithms.md §12.13): a change that builds
//      up over more than 50 pairs (an oscillation whose amplitude grows) is not confirmed by the
//      holdover in time, and its held CUSUM crosses h later, in the same direction: that alarm
//      confirms the change late, and the reference before it starts the return test as in 9.
//      With return_rearm a running test is kept across later changes; one started late is not:
//      the next confirmation, timely or late, replaces it (a late alarm is the weaker evidence
//      that the held reference was a regime of its own).
//
// COST. O(C) per pair (2 O(C) while a holdover runs, one more O(C) while a return test runs), no
// heap allocation after construction (an alarm sorts C channel ids in place). State: 6 C + O(1)
// doubles, 11 C + O(1) with the holdover, 12 C + O(1) with the return test, 2 C more with the
// slow CUSUMs, whatever the stream's length.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/io/fwd.h"

namespace cmestream {

class ChangeDetector {
 public:
  struct Options {
    int channels = 1;
    // Target false alarms per 10,000 pairs on a stationary stream (R in (12.5)).
    double alarm_rate = 1;
    // Scored pairs after a restart before an alarm can be raised (the scale phase included).
    int arm_after = 200;
    // Scored pairs after a restart over which the channel scales s_c are estimated.
    int scale_pairs = 100;
    // Pairs after which the reference mean and spread of the score forget with weight
    // 1 / baseline_pairs (before: the plain mean of every pair since the scale phase).
    int baseline_pairs = 5000;
    // CUSUM reference value k, in standard deviations of the score: the CUSUM is tuned to mean
    // shifts of 2k and cannot see shifts below k.
    double drift = 0.25;
    // Standardized increments are clipped to [-clip, clip]: one outlier cannot alarm alone.
    double clip = 4;
    // Kind test (12.6): "dynamics" when the autocorrelation statistic g rose by more than
    // kind_min + kind_z / sqrt((1 - kind_memory^2) run length), its null standard deviations.
    double kind_min = 0.1;
    double kind_z = 2.0;
    // Decay of the per-channel filter of past residuals that g correlates with (12.6).
    double kind_memory = 0.8;
    // Holdover (docs/algorithms.md §12.8 "After an alarm", item 8 above): for this many pairs
    // after a restart the reference before it (if it held >= 200 pairs), frozen, keeps scoring
    // the pairs with a CUSUM pair of its own, so that a change inside the new reference's
    // calibration is not absorbed into it. 0: off (and the object is written as CHGD v1).
    int holdover_pairs = 0;
    // Return test (docs/algorithms.md §12.11, item 9 above): for this many pairs after a holdover
    // confirmed a change, the reference before the change watches for its regime's return.
    // Needs holdover_pairs > 0. 0: off (and the object is written as CHGD v2 or v1).
    int return_pairs = 0;
    // The return test re-arms (item 9 above, docs/algorithms.md §12.12): kept across later
    // confirmed changes, and started again on its reference after its alarm. Needs
    // return_pairs > 0.
    bool return_rearm = false;
    // Slow CUSUMs (item 10 above): reference value of a second CUSUM pair, in (0, drift); 0: off.
    // It gets slow_share of alarm_rate, the main pair 1 - slow_share.
    double slow_drift = 0;
    double slow_share = 0.5;
    // (return_rearm or slow_drift > 0 write the object as CHGD v4.)
    // Late confirmation (item 11 above, docs/algorithms.md §12.13): a holdover alarm in the
    // direction of the alarm that started the holdover confirms that change late, and starts the
    // return test as a timely confirmation does; the next confirmation replaces that test.
    // Needs return_pairs > 0. Writes the object as CHGD v5.
    bool late_confirm = false;

    absl::Status Validate() const;
  };

  enum class Direction : int { kUp = 0, kDown = 1 };
  // kSpike: only AlarmMonitor's spike test (ALRM v11) raises it.
  enum class Kind : int { kNoise = 0, kDynamics = 1, kSpike = 2 };

  // Valid from the Observe call that returned it until the next Observe/Deserialize.
  struct Alarm {
    int64_t index = 0;  // pairs scored before the alarming pair (0-based over the stream)
    // Estimated first pair of the new regime (12.7): among the run starts of the main and the
    // onset CUSUMs, the one of largest S^2 / n (S the sum of increments since, n the pairs).
    int64_t onset = 0;
    int64_t run_start = 0;  // first pair of the alarming CUSUM's run (after its last 0)
    double score = 0;       // the CUSUM statistic (> threshold)
    double threshold = 0;
    Direction direction = Direction::kUp;  // residuals larger (up) or smaller (down)
    Kind kind = Kind::kNoise;
    // Ratio of the run's mean m to the reference mean m (> 1 up, < 1 down).
    double energy_ratio = 1;
    // Mean standardized score over the run (in the alarm's direction), the shift estimate.
    double shift = 0;
    // g_run - g_ref of (12.6), and the bound it was compared with.
    double autocorr_change = 0;
    double autocorr_bound = 0;
    // The same for the lag-1 autocorrelation g1 (rho = 0 in (12.6)).
    double lag1_change = 0;
    double lag1_bound = 0;
    // Channels, most changed first (largest ratio of the run's mean z_c to the reference mean
    // z_c for an up alarm, smallest for a down alarm), and those ratios in the same order.
    absl::Span<const int> channels;
    absl::Span<const double> contributions;
  };

  // requires: options.Validate().ok().
  explicit ChangeDetector(const Options& options);

  // Scores one pair's residual (channels() values). Returns the alarm it raised, or nullptr.
  // A residual with a non-finite value is skipped: not scored, not counted, and the next pair
  // has no previous residual for the kind test.
  const Alarm* Observe(const double* residual);
  // Forget the reference as after an alarm (the caller saw a change another way); with
  // holdover_pairs, the reference before it keeps scoring (direction of the change unknown).
  void Restart();

  const Options& options() const { return options_; }
  int channels() const { return options_.channels; }
  double threshold() const { return threshold_; }
  int64_t scored() const { return index_; }
  int64_t skipped() const { return skipped_; }
  int64_t alarms() const { return alarms_; }
  // The largest CUSUM statistic as a fraction of its threshold (the slow pair's too): 1 alarms.
  double level() const;
  bool armed() const { return since_restart_ >= options_.arm_after; }
  double up_statistic() const { return up_; }
  double down_statistic() const { return down_; }
  // The reference before the last restart is still scoring (Options::holdover_pairs).
  bool holding() const { return hold_active_; }
  // The reference before the last confirmed change watches for its return (Options::return_pairs).
  bool watching_return() const { return ret_active_; }

  // The threshold of the slow CUSUMs (0 without them).
  double slow_threshold() const { return slow_threshold_; }
  // The threshold h of (12.5) for a CUSUM pair with reference value k whose stationary false
  // alarm rate, counting arm_after dead pairs after each alarm, is R per 10,000 pairs.
  static double Threshold(double alarm_rate, double drift, int arm_after);
  // Siegmund's in-control average run length of one one-sided CUSUM with N(0,1) increments.
  static double SiegmundArl(double h, double drift);

  // Object CHGD v4: the options, then the whole state (bit-exact continuation). A detector with
  // neither return_rearm nor the slow CUSUMs is written as v3 if it runs the return test, as v2
  // (no return_pairs, no return state) if it runs the holdover, else as v1 (no holdover_pairs, no
  // holdover state), byte for byte what the releases before wrote; a v1 object restores with
  // holdover_pairs 0, a v1 or v2 one with return_pairs 0, a v1-v3 one without v4's options. v4
  // adds return_rearm, slow_drift and slow_share to the options, and writes the holdover's and the
  // return test's state only when they run, then the slow CUSUMs' (when they run). v5 (written
  // only with late_confirm) adds late_confirm to the options and, after the return test's
  // state, whether the running test was started late.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<ChangeDetector> Deserialize(io::Reader& r);

 private:
  // The state's field list (CONTRIBUTING.md "Binary formats"), beside Serialize.
  template <class Fields, class Self>
  static void StateFields(Fields& f, Self& self);
  template <class Fields, class Self>
  static void HoldoverFields(Fields& f, Self& self);
  template <class Fields, class Self>
  static void ReturnFields(Fields& f, Self& self);
  template <class Fields, class Self>
  static void SlowFields(Fields& f, Self& self);
  struct Run;
  // The alarm of a live CUSUM (the main pair's or the slow pair's `run`, reference value k,
  // threshold h).
  void FillAlarm(Direction dir, double score, Run& run, double k, double h);
  // The reference before a restart keeps scoring (Options::holdover_pairs): started at each
  // restart whose reference held enough pairs, `direction` that of the alarm (-1: unknown).
  void StartHoldover(int direction);
  // One pair against the held reference; true when it alarmed (alarm_ filled).
  bool ObserveHoldover(const double* residual, int64_t t);
  // The run's summed channel scores `ratio` (len pairs) become ratios to the reference's `ref_z`,
  // ranked into the alarm.
  void RankChannels(std::vector<double>& ratio, double len, const std::vector<double>& ref_z, bool up);
  void ResetReference();  // the reference and CUSUMs restart (Restart() without the holdover)

  Options options_;
  double threshold_ = 0;

  // Stream counters.
  int64_t index_ = 0;  // pairs scored so far
  int64_t skipped_ = 0;
  int64_t alarms_ = 0;
  bool has_prev_ = false;
  std::vector<double> prev_r_;  // the previous scored pair's residual
  std::vector<double> memory_;  // f_c of (12.6), in units of the current scale

  // Reference (since the last restart).
  int64_t since_restart_ = 0;
  std::vector<double> scale2_;  // sum of r^2 during the scale phase, then s_c^2
  double scale_floor_ = 0;
  int64_t ref_n_ = 0;  // pairs in the reference moments below
  double ref_mean_w_ = 0, ref_var_w_ = 0;
  double ref_mean_m_ = 0;
  // Serial correlation of the standardized score (12.3b): q (the filter of past x) and the mean
  // of x_t q_{t-1} over ref_xx_n_ pairs.
  double prev_x_ = 0;
  bool has_prev_x_ = false;
  int64_t ref_xx_n_ = 0;
  double ref_xx_ = 0;
  double ref_lag_ = 0, ref_lag1_ = 0, ref_energy_ = 0;  // means of sum_c e_t f_{t-1}, e_t e_{t-1}, e_t^2
  std::vector<double> ref_z_;                           // mean z_c

  // The sums over one CUSUM's current run (the pairs since its statistic was last 0), which the
  // alarm report reads: its first pair, length, m, the lag products and e^2 of (12.6), z_c.
  struct Run {
    int64_t start = 0, len = 0;
    double m = 0, lag = 0, lag1 = 0, energy = 0;
    std::vector<double> z;
    // One step of a one-sided CUSUM (12.4) with increment `inc` (already in the side's
    // direction) at pair t: returns max(0, stat + inc - k) and, while it is above 0, adds the
    // pair to the run (begun afresh when stat was 0). z_c += min(r_c^2 / scale2_c, kMaxZ).
    double Step(double stat, double inc, double k, int64_t t, double pair_m, double pair_lag, double pair_lag1,
                double pair_energy, const double* residual, const std::vector<double>& scale2);
  };

  // A pair's score (12.2) against scales `scale2`, with its lag products (12.6) against the
  // filter `memory`, which takes the pair: the live reference's and the held one's.
  struct PairScore {
    double m = 0, lag = 0, lag1 = 0, energy = 0, w = 0;
  };
  PairScore ScorePair(const double* residual, const std::vector<double>& scale2, std::vector<double>& memory) const;
  // The kind of (12.6) of an alarming run of `len` pairs against a reference's lag products.
  void Classify(const Run& run, double len, double ref_lag, double ref_lag1, double ref_energy);
  // Gamma of (12.3b) from the reference's score lag product (0 before 10 pairs).
  double LongRunGamma() const;

  // CUSUMs and their runs.
  double up_ = 0, down_ = 0;
  Run up_run_, down_run_;
  // Slow CUSUMs (Options::slow_drift): threshold, statistics and runs.
  double slow_threshold_ = 0;
  double slow_up_ = 0, slow_down_ = 0;
  Run slow_up_run_, slow_down_run_;
  // Onset CUSUMs (12.7): statistic and the first pair of their current run.
  static constexpr int kOnsetCusums = 3;
  double onset_up_[kOnsetCusums] = {}, onset_down_[kOnsetCusums] = {};
  int64_t onset_up_start_[kOnsetCusums] = {}, onset_down_start_[kOnsetCusums] = {};
  int64_t onset_up_len_[kOnsetCusums] = {}, onset_down_len_[kOnsetCusums] = {};  // their runs' lengths

  // Holdover: the reference before the last restart, frozen, and CUSUMs against it.
  bool hold_active_ = false;
  int32_t hold_direction_ = -1;  // of the alarm that started it: 0 up, 1 down, -1 unknown
  int64_t hold_pairs_ = 0;       // pairs scored against it so far
  double hold_mean_w_ = 0, hold_sd_ = 0, hold_factor_ = 1, hold_mean_m_ = 0;
  double hold_lag_ = 0, hold_lag1_ = 0, hold_energy_ = 0;
  std::vector<double> hold_scale2_, hold_ref_z_, hold_memory_;
  double hold_up_ = 0, hold_down_ = 0;
  Run hold_up_run_, hold_down_run_;

  // Return test (Options::return_pairs): the reference before the last confirmed change, frozen,
  // its pairs since, the sum of z over the first kReturnLearnPairs (delta's), the CUSUM V and its
  // run's first pair. One pair against it; true when it alarmed (alarm_ filled).
  bool ObserveReturn(const double* residual, int64_t t);
  // The held reference (the regime before a change) becomes the return test's, at pair t; `late`:
  // the change was confirmed by a holdover alarm (Options::late_confirm).
  void StartReturnTest(int64_t t, bool late);
  bool ret_active_ = false;
  bool ret_late_ = false;  // the running test was started by a late confirmation
  int64_t ret_pairs_ = 0, ret_start_ = 0;
  double ret_mean_w_ = 0, ret_sd_ = 0, ret_shift_sum_ = 0, ret_stat_ = 0;
  std::vector<double> ret_scale2_;

  // Alarm report buffers.
  std::vector<int> ranked_;
  std::vector<double> contribution_;
  Alarm alarm_;
};

const char* DirectionName(ChangeDetector::Direction d);
const char* KindName(ChangeDetector::Kind k);

}  // namespace cmestream
