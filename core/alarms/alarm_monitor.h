// AlarmMonitor: the change alarms of one model (docs/algorithms.md §12.8-12.14): a forecast that
// scores every pair before the model learns it, the tests below on what it and the state show, and
// the record of the alarms raised, all state of the model (a function of the pairs and their arrival
// times). One method; its parameters are Options and the constants below.
//
// WHAT IT SCORES. Continuous models: the residual of LinearForecast (core/alarms/
// linear_forecast.h) on the newest observation of y (the raw channels: the last `channels`
// components of a delay window), so the alarms run from the first pairs on, sigma warm-up or not.
// Discrete models: one channel, the transition's randomized p-value under the model's counts
// before the pair (smoothed by 1/2 per state), u = P(p(Y) < p(y)) + V P(p(Y) = p(y)), V ~ U(0,1)
// drawn from the pair's index, mapped to r = Phi^-1(1 - u/2): |N(0,1)| when the counts are the
// chain's, so the detector sees a continuous, calibrated residual (docs/algorithms.md §12.8).
//
// THE SIZE TEST (every monitor): a ChangeDetector on those residuals (§12.1-12.7), with the
// holdover of its previous reference for kHoldoverPairs pairs after each restart (§12.8 "After an
// alarm").
//
// SMALL STATES (d <= kMaxSmallState values, docs/algorithms.md §12.9-12.14) run three more tests:
//   - the coefficients' test (DriftDetector, §12.9): the forecast has cubic regressors, and the
//     test watches whether the residual's sign leans with the state's and with the forecast's
//     predicted step of its channel (a change of the coefficients, which the residuals' size shows
//     only at second order), holding its previous reference for kDriftHoldoverPairs pairs after
//     each alarm and each refit of the forecast;
//   - the step test (§12.10-12.13): a ChangeDetector on the state's step y - x per channel (the
//     residual of a persistence forecast), at kStepTestShare of alarm_rate, with the return test
//     (the reference before each change it confirmed watches for that regime's return for
//     kReturnPairs pairs, re-armed across later changes), and the late confirmation of a change
//     that builds up (the learned forecast absorbs a change of the state's amplitude once it
//     refits on it; the state's own steps cannot);
//   - the spike test (§12.14): each channel's |y - x| against a threshold extrapolated from the
//     largest steps seen so far (an exponential and a Pareto tail fitted to the top 2 %, at most
//     kSpikeTop values kept per channel) at a per-pair false-alarm probability
//     kSpikeShare x alarm_rate / 10^4; an alarm ("spike") restarts no other test and is followed
//     by kSpikeGap pairs without spike alarms.
// The size test and the step test each run a slow CUSUM pair (reference value kSlowDrift, half of
// each test's rate) beside their main one (§12.12). The size test and the coefficients' test share
// the rest of alarm_rate half and half. An alarm of the first three tests restarts the others.
//
// INDEXES. `index` counts the pairs the model was given (the warm-up's included), from 0: the
// pair whose arrival raised an alarm has index = the count before it. The detector counts the
// pairs it scored; an alarm's onset is mapped back to the stream by the distance to the alarm
// (every pair between them was scored).
//
// AFTER AN ALARM the tests restart (the new regime becomes their reference: they re-arm arm_after
// pairs later); the forecast keeps learning and refits on its schedule.
//
// OLDER MONITORS RE-ARM (CONTRIBUTING.md "Binary formats"): an object of an earlier ALRM format
// (v1-v11, which replayed the scoring of the release that wrote it) restores with its pair counter,
// its alarm count and its kept records; its scoring state is read, checked and dropped, and the
// monitor is rebuilt with this method: it re-arms from the following pairs (rearmed_from(),
// rearmed_at(), RearmNote()).
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
#include <string>
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

// AlarmMonitor's spike test state (small states): per channel the largest |y - x| seen
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
    absl::Status Validate() const;
  };
  static constexpr int kMaxRecords = 1000;
  // The spike test (§12.14): largest steps kept per channel, steps seen before it scores, pairs
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
  // The slow CUSUMs (docs/algorithms.md §12.12): their reference value and their share of each
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

  // THE PER-PAIR ANOMALY SCORE (docs/algorithms.md §12.15). While a sink is set, the j-th pair
  // observed after set_score_sink writes its score to sink[j], in [0, 1]: 1 when a test alarmed
  // on the pair; else min(1 - 2^-24, max(score() after the pair, the spike test's largest
  // |step| / bound on it)) (a statistic at its bound raises no alarm); 0 for a pair no test scored (the forecast's
  // first fit, a discrete model's first kDiscreteFirstScored pairs). The caller keeps the buffer large enough for the
  // pairs it passes and clears the sink (nullptr) before the buffer goes. Not state: a copy, a moved-to or a restored
  // monitor has no sink, and the scores change nothing.
  void set_score_sink(double* sink) {
    score_sink_.at = sink;
    score_sink_.from = pairs_;
  }

  const Options& options() const { return options_; }
  int64_t pairs() const { return pairs_; }
  int64_t scored() const { return detector_.scored(); }
  int64_t armed_at() const { return armed_at_; }  // -1 before the detector first armed
  // Every alarm raised since the model was created (a re-armed monitor's earlier ones included).
  int64_t alarms_total() const {
    return earlier_alarms_ + detector_.alarms() + (drift_ ? drift_->alarms() : 0) +
           (step_test_ ? step_test_->alarms() : 0) + (spike_ ? spike_->alarms : 0);
  }
  int64_t dropped() const { return alarms_total() - static_cast<int64_t>(records_.size()); }
  const std::deque<AlarmRecord>& records() const { return records_; }
  // The largest CUSUM statistic of the tests as a fraction of its threshold (an alarm at 1; the
  // slow CUSUMs' too).
  double score() const;
  double threshold() const { return detector_.threshold(); }

  // Restored from an object of an earlier format (OLDER MONITORS RE-ARM above): that format's
  // version and the pair count at which the monitor was rebuilt; 0 and -1 for a monitor built with
  // this method. RearmNote(): "alarm monitor from format vN re-armed at pair P", or empty.
  int rearmed_from() const { return rearmed_from_; }
  int64_t rearmed_at() const { return rearmed_at_; }
  std::string RearmNote() const;

  // Object "ALRM" v12: options, pair counter, armed_at, the re-arming (format, pair, the alarms
  // counted before it), the forecast (continuous), the size test (CHGD), for a small state the
  // coefficients' test (DRFT), the step test (CHGD) and the spike test's state (per channel the
  // steps seen (u64) and the kept largest steps (u32 count, f64 each, descending), then the pair
  // before which no spike alarm is raised and its alarm count (i64 each)), and the kept records.
  // v1-v11 objects re-arm (above).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<AlarmMonitor> Deserialize(io::Reader& r);

 private:
  void Score(const double* x, const double* residual, const double* step, double time);
  void Record(const ChangeDetector::Alarm& alarm, double time);
  void Record(const DriftDetector::Alarm& alarm, double time);
  AlarmRecord NewRecord(double score, double threshold, int64_t run_length, double time) const;
  void Keep(AlarmRecord rec);
  // A state of at most kMaxSmallState values: the four tests (SMALL STATES above).
  static bool SmallState(const Options& o) { return o.dim > 0 && o.dim <= kMaxSmallState; }
  static ChangeDetector::Options DetectorOptions(const Options& o);
  static DriftDetector::Options DriftOptions(const Options& o);
  static ChangeDetector::Options StepTestOptions(const Options& o);
  // The spike test on this pair's steps (state_step_); records its alarm unless `other_alarm`.
  void ObserveSpike(const double* step, double time, bool other_alarm);
  static double SpikeThreshold(const std::vector<double>& top, int64_t n, double q);
  // The rest of an ALRM v1-v11 object after its pair counter: its state read and checked, its
  // alarm count and records kept, the monitor rebuilt (OLDER MONITORS RE-ARM above).
  static absl::StatusOr<AlarmMonitor> Rearm(io::Reader& r, uint32_t version, const Options& o, int64_t pairs);
  // The kept records, the object's last field; kinds up to `max_kind`.
  absl::Status ReadRecords(io::Reader& r, ChangeDetector::Kind max_kind);

  Options options_;
  int64_t pairs_ = 0;
  int64_t armed_at_ = -1;
  int32_t rearmed_from_ = 0;                // the format a restored older monitor was re-armed from (0: none)
  int64_t rearmed_at_ = -1;                 // the pair it was re-armed at
  int64_t earlier_alarms_ = 0;              // the alarms it had counted before
  std::optional<LinearForecast> forecast_;  // continuous
  ChangeDetector detector_;
  std::optional<DriftDetector> drift_;       // small states: the coefficients' test
  std::optional<ChangeDetector> step_test_;  // small states: the size test of y - x
  std::vector<double> residual_;             // scratch: LinearForecast::kBlock rows of the channels
  std::vector<double> step_;                 // scratch: the forecast's predicted step per channel
  std::vector<double> state_step_;           // scratch: y - x per channel (the step test's residual)
  // Small states: see AlarmSpikeState.
  using SpikeState = AlarmSpikeState;
  std::optional<SpikeState> spike_;
  // The per-pair anomaly score's sink (set_score_sink); copies and moves do not carry it.
  struct ScoreSink {
    double* at = nullptr;
    int64_t from = 0;
    ScoreSink() = default;
    ScoreSink(const ScoreSink&) {}
    ScoreSink& operator=(const ScoreSink&) {
      at = nullptr;
      return *this;
    }
  };
  ScoreSink score_sink_;
  double spike_ratio_ = 0;  // the pair's largest |step| / spike bound (armed channels), for the sink
  // Writes the pair's score to the sink (THE PER-PAIR ANOMALY SCORE), before pairs_ counts it.
  void SinkScore(int64_t alarms_before);
  std::deque<AlarmRecord> records_;
};

// The randomized p-value of the transition x -> y under `counts` smoothed by 1/2 per state over
// num_states states: P(p(Y) < p(y)) + v P(p(Y) = p(y)) with Y ~ the smoothed row of x; uniform on
// (0, 1) for v ~ U(0, 1) when the row is the chain's (docs/algorithms.md §12.8). O(deg(x)).
double DiscretePValue(const TransitionCounts& counts, int x, int y, int num_states, double v);

}  // namespace cmestream
