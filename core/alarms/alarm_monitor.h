// AlarmMonitor: the change alarms of one model (docs/algorithms.md §12.8): a forecast that scores
// every pair before the model learns it, the ChangeDetector on those residuals, and the record of
// the alarms raised, all state of the model (a function of the pairs and their arrival times).
//
// WHAT IT SCORES. Continuous models: the residual of LinearForecast (core/alarms/
// linear_forecast.h) on the newest observation of y (the raw channels: the last `channels`
// components of a delay window), so the alarms run from the first pairs on, sigma warm-up or not.
// Discrete models: one channel, the transition's randomized p-value under the model's counts
// before the pair (smoothed by 1/2 per state), u = P(p(Y) < p(y)) + V P(p(Y) = p(y)), V ~ U(0,1)
// drawn from the pair's index, mapped to r = Phi^-1(1 - u/2): |N(0,1)| when the counts are the
// chain's, so the detector sees a continuous, calibrated residual (docs/algorithms.md §12.8). A
// monitor restored from an ALRM v1 object keeps the score it was created with, r = sqrt(-log p).
//
// SMALL STATES (d <= kMaxSmallState values, new monitors: docs/algorithms.md §12.9). The forecast
// has cubic regressors, and a second test (DriftDetector) watches whether the residual's sign
// leans with the state's, and (ALRM v4) with the forecast's predicted step of its channel: a
// change of the coefficients, which the residuals' size shows only at second order. The two
// tests share alarm_rate (with the step test below, after its share); an alarm of either restarts
// both.
//
// INDEXES. `index` counts the pairs the model was given (the warm-up's included), from 0: the
// pair whose arrival raised an alarm has index = the count before it. The detector counts the
// pairs it scored; an alarm's onset is mapped back to the stream by the distance to the alarm
// (every pair between them was scored).
//
// AFTER AN ALARM the detector restarts (the new regime becomes its reference: it re-arms
// arm_after pairs later); the forecast keeps learning and refits on its schedule. With the
// holdover (ALRM v5) the size test's previous reference keeps scoring for kHoldoverPairs pairs,
// and alarms if the alarm was not a change and a change comes while the new reference builds;
// with ALRM v6 the coefficients' test does the same for kDriftHoldoverPairs pairs after each
// alarm and each refit of the forecast (DriftDetector::Options::holdover_pairs).
//
// THE STEP TEST (ALRM v7, docs/algorithms.md §12.10): a small state's monitor with both
// holdovers runs a third test, a ChangeDetector on the state's step y - x per channel (the
// residual of a persistence forecast), at kStepTestShare of alarm_rate (the two others at half of
// the rest each). The learned forecast absorbs a change of the state's amplitude once it refits
// on it (an oscillator whose damping returns: its amplitude falls ~20x, its residuals' size
// barely moves); the state's own steps cannot absorb it. Any test's alarm restarts the others.
//
// THE RETURN TEST (ALRM v8, docs/algorithms.md §12.11): the step test keeps the reference before
// each change it confirmed and watches for that regime's return for kReturnPairs pairs, across
// the restarts that the alarms inside the new regime cause (a return to damping after a second
// alarm in the undamped regime: the live reference, young, would absorb it).
//
// SLOW CUSUMS AND THE RE-ARMED RETURN TEST (ALRM v9, docs/algorithms.md §12.12): the size test and
// the step test each run a second CUSUM pair with reference value kSlowDrift, for small shifts
// that last (a double well that deepens moves the residuals' score by ~0.2 standard deviations),
// at half of each test's rate; and the return test is kept across later confirmed changes and
// learns its shift again after its own alarm (a dip of the undamped oscillator's amplitude, or a
// second alarm inside the undamped regime, no longer ends the watch for the damped one).
//
// THE SPIKE TEST (ALRM v11, docs/algorithms.md §12.14): with the late confirmation, each channel's
// |y - x| is compared with a threshold extrapolated from the largest steps seen so far (an
// exponential tail fitted to the top 2 %, at most kSpikeTop values kept per channel) at a
// per-pair false-alarm probability kSpikeShare x alarm_rate / 10^4; an alarm ("spike") restarts
// no other test and is followed by kSpikeGap pairs without spike alarms.
//
// RECORDS. The last kMaxRecords alarms are kept (older ones are counted in dropped()).
// COST. Continuous: O(p^2 / 2) per pair for p regressors (the forecast's sums; p = d, or 3d for
// a small state) and O(C d) the coefficients' test; discrete: O(deg x) (the row of x for the
// p-value); O(C) the detector (and the step test's); no allocation per pair
// except when an alarm is recorded or the forecast refits.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/alarms/change_detector.h"
#include "core/alarms/drift_detector.h"
#include "core/alarms/linear_forecast.h"
#include "core/io/fwd.h"

namespace cmestream {

class TransitionCounts;

struct AlarmRecord {
  int64_t index = 0;  // the pair's position in the model's stream
  double time = 0;    // unix seconds its batch arrived
  double score = 0;
  double threshold = 0;
  std::vector<int> channels;  // raw channels, most changed first (continuous)
  ChangeDetector::Kind kind = ChangeDetector::Kind::kNoise;
  ChangeDetector::Direction direction = ChangeDetector::Direction::kUp;
  int64_t onset = 0;  // estimated first pair of the new regime
};

// AlarmMonitor's spike test state (RunsSpikeTest): per channel the largest |y - x| seen
// (descending, at most kSpikeTop, capacity reserved) and the finite steps seen; no spike alarm
// before pair quiet_until. At namespace scope, not nested: clang 14 decides std::optional's
// emplace() on a nested struct with default member initializers while the enclosing class is
// still incomplete, and refuses it.
struct AlarmSpikeState {
  std::vector<std::vector<double>> top;
  std::vector<int64_t> seen;
  std::vector<double> threshold;  // cached per channel (-1: to compute), not serialized
  int64_t quiet_until = 0;
  int64_t alarms = 0;
};

class AlarmMonitor {
 public:
  struct Options {
    int dim = 0;            // continuous: values per state (channels x delays); 0 for discrete
    int channels = 1;       // continuous: raw channels (the last `channels` values of a state)
    int num_states = 0;     // discrete: states
    double alarm_rate = 1;  // target false alarms per 10,000 stationary pairs, in (0, kMaxAlarmRate]
    // Continuous, the scoring of ALRM v3 (docs/algorithms.md §12.9): a state of at most
    // kMaxSmallState values gets a forecast with cubic regressors and a second test, of the
    // forecast's coefficients (DriftDetector); the two tests share alarm_rate half and half. Off
    // for monitors restored from ALRM v1/v2 objects.
    bool scoring_v3 = true;
    // With scoring_v3, the scoring of ALRM v4 (docs/algorithms.md §12.9): the coefficients'
    // test also watches each channel's residual against the forecast's predicted step. Off for
    // monitors restored from ALRM v1-v3.
    bool scoring_v4 = true;
    // The scoring of ALRM v5 (docs/algorithms.md §12.8 "After an alarm"): after each restart the
    // size test's previous reference keeps scoring for kHoldoverPairs pairs
    // (ChangeDetector::Options::holdover_pairs). Off for monitors restored from ALRM v1-v4.
    bool holdover = true;
    // The scoring of ALRM v6 (docs/algorithms.md §12.9 "After a restart"): the coefficients'
    // test holds its previous reference too (DriftDetector::Options::holdover_pairs =
    // kDriftHoldoverPairs) after each alarm and refit, with holdover (ignored without it, and without the coefficients'
    // test). Off for monitors restored from ALRM v1-v5 that run the coefficients' test.
    bool drift_holdover = true;
    // The scoring of ALRM v7 (docs/algorithms.md §12.10): with the coefficients' test and both
    // holdovers, a third test of the state's step y - x (see THE STEP TEST above). Off for
    // monitors restored from ALRM v1-v6 that run the coefficients' test.
    bool step_test = true;
    // The scoring of ALRM v8 (docs/algorithms.md §12.11): with the step test, that test's
    // reference before each change it confirmed watches for the old regime's return
    // (ChangeDetector::Options::return_pairs = kReturnPairs). Off for monitors restored from
    // ALRM v1-v7 that run the coefficients' test.
    bool return_test = true;
    // The scoring of ALRM v9 (docs/algorithms.md §12.12), with the return test: the size test and
    // the step test run a slow CUSUM pair beside their main one (ChangeDetector::Options::
    // slow_drift = kSlowDrift, half of each test's rate), and the return test re-arms
    // (ChangeDetector::Options::return_rearm). Off for monitors restored from ALRM v1-v8 that run
    // the coefficients' test.
    bool slow_cusums = true;
    // The scoring of ALRM v10 (docs/algorithms.md §12.13), with the slow CUSUMs: the step test's
    // holdover alarm in the direction of the alarm that started it confirms that change late and
    // starts the return test (ChangeDetector::Options::late_confirm). Off for monitors restored
    // from ALRM v1-v9 that run the coefficients' test.
    bool late_confirm = true;
    // The scoring of ALRM v11 (docs/algorithms.md §12.14), with the late confirmation: a fourth
    // test, of single steps y - x too large for the tail of the steps seen so far (see THE SPIKE
    // TEST above); its alarms are kind "spike" and restart nothing. Off for monitors restored from
    // ALRM v1-v10 that run the coefficients' test.
    bool spike_test = true;
    absl::Status Validate() const;
  };
  static constexpr int kMaxRecords = 1000;
  // The spike test (ALRM v11): largest steps kept per channel, steps seen before it scores, pairs
  // without spike alarms after one, and its share of alarm_rate (on top of the other tests').
  static constexpr int kSpikeTop = 256;
  static constexpr int64_t kSpikeWarmup = 300;
  static constexpr int64_t kSpikeGap = 50;
  static constexpr double kSpikeShare = 0.5;
  // Pairs after a restart during which the size test's previous reference keeps scoring: the
  // misses it answers followed an alarm by 10-500 pairs (docs/benchmarks.md "What the daemon runs").
  static constexpr int kHoldoverPairs = 500;
  // The same for the coefficients' test (docs/algorithms.md §12.9 "After a restart"; 300 did
  // better than 200 and 500 there, docs/benchmarks.md "What the daemon runs").
  static constexpr int kDriftHoldoverPairs = 300;
  // The step test's share of alarm_rate (docs/benchmarks.md "What the daemon runs": 0.1 did
  // better than 0.05 and 0.2 over 100 seeds).
  static constexpr double kStepTestShare = 0.1;
  // Pairs after a confirmed change during which the step test watches for the old regime's
  // return (docs/algorithms.md §12.11; the benchmark's segments last 600-1500 pairs).
  static constexpr int kReturnPairs = 3000;
  // ALRM v9 (docs/algorithms.md §12.12): the slow CUSUMs' reference value and their share of each
  // test's rate (over 100 seeds of 0.075-0.1 and 0.3-0.5, 0.1 and a half found the most
  // double-well changes within 500 pairs; the others were within noise of it).
  static constexpr double kSlowDrift = 0.1;
  static constexpr double kSlowShare = 0.5;
  // Measured (docs/algorithms.md §12.9): on states of 1-2 values (a double well, an oscillator)
  // the cubic forecast and the coefficient test find most changes the residuals' size misses; on
  // an 8-channel stream of noisy, partially observed slow processes both raised false alarms.
  static constexpr int kMaxSmallState = 2;
  // The detector re-arms 200 pairs after an alarm, so at most 10^4 / 400 = 25 alarms per 10^4
  // pairs can be calibrated (ChangeDetector::Options::Validate).
  static constexpr double kMaxAlarmRate = 25;

  // requires: options.Validate().ok().
  explicit AlarmMonitor(const Options& options);

  // One pair, before the model learns it. Continuous: x, y (dim values each).
  void ObservePair(const double* x, const double* y, double time);
  // n consecutive pairs (x and y row-major, dim values a row), before the model learns them:
  // the same records, scores and state, bit for bit, as n calls of ObservePair (the forecast
  // takes them in blocks, LinearForecast::ObserveBlock). No allocation.
  void ObservePairs(const double* x, const double* y, int64_t n, double time);
  // Discrete: ids and the model's counts before the pair.
  void ObserveIds(int64_t x, int64_t y, const TransitionCounts& counts, double time);

  const Options& options() const { return options_; }
  int64_t pairs() const { return pairs_; }
  int64_t scored() const { return detector_.scored(); }
  int64_t armed_at() const { return armed_at_; }  // -1 before the detector first armed
  int64_t alarms_total() const {
    return detector_.alarms() + (drift_ ? drift_->alarms() : 0) + (step_test_ ? step_test_->alarms() : 0) +
           (spike_ ? spike_->alarms : 0);
  }
  int64_t dropped() const { return alarms_total() - static_cast<int64_t>(records_.size()); }
  const std::deque<AlarmRecord>& records() const { return records_; }
  // The largest CUSUM statistic of the tests as a fraction of its threshold (an alarm at 1; the
  // slow CUSUMs' too, ALRM v9).
  double score() const;
  double threshold() const { return detector_.threshold(); }

  // Object "ALRM" v10: options, pair counter, armed_at, (discrete) u8 score kind (0: randomized
  // p-value, 1: the v1 surprise), (v5-v10) three u8 flags: the coefficient test, its steps, the
  // holdover (always 1), (v6-v10) a fourth, the coefficient test's holdover (always 1), (v7-v10)
  // a fifth, the step test (always 1), (v8-v10) a sixth, the return test (always 1), (v9, v10) a
  // seventh, the slow CUSUMs (always 1), and (v10) an eighth, the late confirmation (always 1),
  // or (v3, v4) u8 scoring_v3 = 1 and (v4) u8 scoring_v4 =
  // 1, the forecast (continuous), the detector (CHGD v2 with the holdover, v4 with the slow
  // CUSUMs), (coefficient test) its DRFT object (v3 with its holdover), (v7-v10) the step test's
  // CHGD object (v3 with the return test, v4 with the slow CUSUMs, v5 with the late
  // confirmation), and the kept records.
  // A monitor with the late confirmation is written as v10 (restored from v9 it keeps scoring
  // without it), one with the slow CUSUMs but without it as v9 (restored from v8 it keeps
  // scoring without them).
  // A monitor with the return test is written as v8 (restored from v7 it keeps scoring without
  // it), one with the step test but without it as v7 (restored from v6 it keeps scoring without it),
  // one with the coefficient test and both holdovers but without the step test as v6,
  // any other with the holdover as v5 (restored from v5 it keeps scoring without the coefficient
  // test's holdover); one without (restored from v1-v4) as before: v3 or v4 if it runs the coefficient test without or
  // with the steps, else v2, byte for byte, and restores with scoring_v3 false, which changes nothing for it. A
  // continuous monitor's v2 body is its v1 body; a discrete v1 object restores with the surprise.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<AlarmMonitor> Deserialize(io::Reader& r);

 private:
  void Score(const double* x, const double* residual, const double* step, double time);
  void Record(const ChangeDetector::Alarm& alarm, double time);
  void Record(const DriftDetector::Alarm& alarm, double time);
  AlarmRecord NewRecord(double score, double threshold, int64_t run_length, double time) const;
  void Keep(AlarmRecord rec);
  static bool RunsDriftTest(const Options& o);
  static ChangeDetector::Options DetectorOptions(const Options& o);
  static DriftDetector::Options DriftOptions(const Options& o);
  static bool RunsStepTest(const Options& o);
  static bool RunsReturnTest(const Options& o);
  static bool RunsSlowCusums(const Options& o);
  static bool RunsLateConfirm(const Options& o);
  static ChangeDetector::Options StepTestOptions(const Options& o);
  static bool RunsSpikeTest(const Options& o);
  // The spike test on this pair's steps (state_step_); records its alarm unless `other_alarm`.
  void ObserveSpike(const double* step, double time, bool other_alarm);
  static double SpikeThreshold(const std::vector<double>& top, int64_t n, double q);
  // The tests the releases from ALRM v7 on added, each with one u8 flag (always 1) after v6's,
  // written only by a monitor that runs it, in file order; each runs only with the ones before
  // it. Serialize and Deserialize share the list.
  struct LaterTest {
    uint32_t version;              // the ALRM version that added it
    const char* flag;              // its flag's name in corrupt-file messages
    bool Options::*option;         // off for a monitor restored from an older version
    bool (*runs)(const Options&);  // whether a monitor with these options runs it
    const char* state;             // what a flag without the test would lack, in messages
  };
  static const LaterTest kLaterTests[5];

  Options options_;
  bool surprise_score_ = false;  // discrete, restored from ALRM v1: r = sqrt(-log p)
  int64_t pairs_ = 0;
  int64_t armed_at_ = -1;
  std::optional<LinearForecast> forecast_;  // continuous
  ChangeDetector detector_;
  std::optional<DriftDetector> drift_;       // continuous, scoring_v3 and few enough components
  std::optional<ChangeDetector> step_test_;  // RunsStepTest: the size test of y - x
  std::vector<double> residual_;             // scratch: LinearForecast::kBlock rows of the channels
  std::vector<double> step_;                 // scratch: the forecast's predicted step per channel
  std::vector<double> state_step_;           // scratch: y - x per channel (the step test's residual)
  // RunsSpikeTest: see AlarmSpikeState.
  using SpikeState = AlarmSpikeState;
  std::optional<SpikeState> spike_;
  std::deque<AlarmRecord> records_;
};

// The randomized p-value of the transition x -> y under `counts` smoothed by 1/2 per state over
// num_states states: P(p(Y) < p(y)) + v P(p(Y) = p(y)) with Y ~ the smoothed row of x; uniform on
// (0, 1) for v ~ U(0, 1) when the row is the chain's (docs/algorithms.md §12.8). O(deg(x)).
double DiscretePValue(const TransitionCounts& counts, int x, int y, int num_states, double v);

}  // namespace cmestream
