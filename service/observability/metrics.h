// Prometheus metrics of the daemon. One Metrics object per daemon owns the
// registry and the metric families; each model owns a ModelMetrics handle with its series.
//
// Series (all prefixed cmestream_):
//   samples_ingested_total{model}            counter  pairs applied to the learner (incl. warm-up)
//   pending_warmup{model}                    gauge    pairs buffered while sigma "auto" is chosen
//   dictionary_size{model,side="x"|"y"}      gauge    atoms per side
//   dictionary_budget{model}                 gauge    max_dict, the cap per side (0: discrete)
//   model_failed{model}                      gauge    1 once the model failed (ModelInfo.failure
//                                            says why; it refuses data and queries), else 0
//   forced_compressions_total{model}         counter  admissions refused by max_dict
//   forced_error_sum_total{model}            counter  summed HS error of forced projections
//   inverse_drift{model}                     gauge    max ||G G^-1 - I||_F at the last refresh
//   refresh_duration_seconds{model}          histogram
//   view_build_seconds{model,view}           histogram  per sub-view build time in a refresh
//   view_version{model}, view_age_seconds{model}, view_samples{model}   gauges (age updated by
//                                            the refresh scheduler every second). A model that has
//                                            no view yet reports view_version 0 and, as its age,
//                                            the seconds since its series were created (model
//                                            creation, or recovery at daemon start): never 0, so
//                                            the stale-view alert fires for a model that takes
//                                            data but never builds a view.
//   ingest_batches_rejected_total{model,reason} counter, one series per reason of
//                                            kRejectReasons from the model's creation at 0 (so
//                                            increase() sees the first rejection); model="",
//                                            reason="unknown_model" for batches naming no model,
//                                            so a client's typos cannot create unbounded series)
//   spectrum_heldout_score{model}            gauge    prequential VAMP-E of the last scored view on
//                                            the pairs after it (SpectrumInfo.heldout_score;
//                                            NaN before a 1000-pair window completed)
//   timescale_disagreement{model}            gauge    relative disagreement of the slowest
//                                            timescales of koopman / count chain / embedding
//   slowest_timescale{model,view}            gauge    slowest resolved timescale (time units) of
//                                            view koopman / count_chain / embedding, and the
//                                            Koopman reply's headline (view="headline"); NaN: none
//   slowest_timescale_stderr{model}          gauge    the headline's standard error (NaN: none)
//   spectral_epochs{model}                   gauge    spectral-moments epochs begun (1 + re-bases)
//   spectral_data_share{model}               gauge    share of the pairs inside the spectral estimate
//   view_available{model,view}               gauge    1 when the sub-view of the latest view was
//                                            built, 0 when it is missing (ModelInfo.sub_views says why)
//   view_fit_warning{model,view}             gauge    1 when the sub-view was built but its fit
//                                            summary's termination is not "success" (rank clipped,
//                                            numerical trouble: FitSummary.message), else 0
//                                            (NaN with < 2 views; warning above 0.25)
//   lag_timescale{model,lag,mode}            gauge    implied timescale (time units) of slow mode
//                                            1..3 at each lag of the model (service/engine/lags.h)
//   lag_timescale_stderr{model,lag,mode}     gauge    its jackknife standard error
//   ck_max_deviation{model}                  gauge    CK test max |T(tau)^k - T(k tau)| at the first
//                                            lag, the model's clusters (NaN when unavailable)
//   ck_max_deviation_stderr{model}           gauge    its jackknife standard error
//   rpc_duration_seconds{method}             histogram (Ingest: per batch)
//   rpc_completed_total{method,code}         counter
//   fleet_samples_ingested_total, fleet_change_alarms_total   counters  pairs applied and change
//                                            alarms raised, summed over every model (whatever
//                                            --metrics-per-model; an imported or restored model
//                                            adds what it holds, as its own counter does)
//   models_with_series                       gauge    models whose {model} series exist
//                                            (--metrics-per-model all|none|top-N: per_model_series.h)
//   models{state="live"|"evicted"}          gauge    models held, by whether their learner is in
//                                            memory (service/README.md "Eviction")
//   model_evictions_total, model_reloads_total counters  idle models evicted, evicted models loaded back
//   model_reload_seconds                     histogram  time to load an evicted model back
//   memory_budget_bytes, memory_committed_bytes   gauges   the budget (--max-memory) and what the
//                                            models are charged by their dictionaries' capacities
//                                            (service/engine/memory_budget.h, MemoryLedger)
//   dictionary_growth_denied_total           counter  batches whose dictionary growth the budget
//                                            denied (the model learned on at its capacity)
//   refreshes_total{trigger="periodic"|"requested"}  counter  views built by the refresh scheduler:
//                                            background (interval, refresh_every_samples) or asked
//                                            for (Refresh, Wait, the eviction sweep)
//   refresh_cpu_seconds_total                counter  CPU time of those builds (the refresh budget's
//                                            debits; RefreshScheduler)
//   refresh_budget                           gauge    --refresh-budget: the share of one core the
//                                            background refreshes may use
//   views_stale                              gauge    models whose background refresh was due at a
//                                            scan and not done by the next (deferred by the
//                                            budget, or the refresh thread is behind)
//   view_lag_pairs                           gauge    pairs learned and not yet in a view, summed
//                                            over the models
//   view_stale_age_max_seconds               gauge    seconds since the last refresh of the model
//                                            deferred longest (0: none deferred)
// plus the process_* series of process_metrics.h (RSS, ...).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "service/enum_names.h"
#include "service/observability/per_model_series.h"
#include "service/observability/process_metrics.h"

namespace cmestream::service {

class Metrics;

// Why a fork (--on-change fork) was not started at its parent's alarm: the `reason` label of
// cmestream_forks_refused_total. The registry counts an enum value and the metrics create every
// series at 0 from the same table, so the two cannot name a reason differently.
// kError stays the last value (tests/service/engine/test_forks.cc walks them up to it).
enum class ForkRefusal { kNameTaken, kMaxModels, kMemory, kError };
inline constexpr EnumName<ForkRefusal> kForkRefusalNames[] = {{ForkRefusal::kNameTaken, "name_taken"},
                                                              {ForkRefusal::kMaxModels, "max_models"},
                                                              {ForkRefusal::kMemory, "memory"},
                                                              {ForkRefusal::kError, "error"}};

// Every `reason` label of cmestream_ingest_batches_rejected_total a model's series can carry:
// batch validation (service/engine/batch.h: id_length, payload_form, size, empty, non_finite,
// magnitude, state_id), the
// batch size limit, a full learner queue, a producer offset gap, a WAL append failure.
inline constexpr const char* kRejectReasons[] = {"payload_form", "size",        "empty",      "non_finite",
                                                 "state_id",     "batch_limit", "queue_full", "offset_gap",
                                                 "log_error",    "id_length",   "magnitude"};

// The series of one model. Thread-safe. Every update is kept in the handle's values, and written
// to its series while it has them (Attach/Detach: PerModelSeries). Remove() (on model deletion)
// drops every series from the exposition for good; later updates through a removed handle are
// ignored, so an RPC still holding a deleted model cannot resurrect or touch a recreated model's
// series.
class ModelMetrics {
 public:
  ModelMetrics(Metrics& metrics, std::string model);
  ~ModelMetrics() { Remove(); }
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;
  struct LearnerGauges {
    uint64_t pending_warmup = 0;
    int dict_x = 0, dict_y = 0;
  };
  void OnBatchApplied(uint64_t pairs_applied, uint64_t forced_delta, double forced_error_delta,
                      const LearnerGauges& gauges) ABSL_LOCKS_EXCLUDED(mu_);
  void OnRejected(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  void SetDictionaryBudget(double max_dict) ABSL_LOCKS_EXCLUDED(mu_);
  void SetFailed(bool failed) ABSL_LOCKS_EXCLUDED(mu_);  // model_failed{model}
  void OnRefresh(double seconds, double inverse_drift, uint64_t version, uint64_t samples) ABSL_LOCKS_EXCLUDED(mu_);
  void SetViewAge(double seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // No view yet: the age is the time since these series were created (see the header comment).
  void SetNoView() ABSL_LOCKS_EXCLUDED(mu_);
  // Spectrum quality of the latest view.
  // epochs: spectral-moments epochs begun; data_share: share of the pairs inside the estimate.
  void OnSpectrum(double heldout_score, double timescale_disagreement, double epochs, double data_share)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The slowest resolved timescale (time units) of each view of the latest view (NaN: none) and
  // the Koopman reply's headline with its standard error (NaN: no error bar).
  struct SlowestTimescales {
    double koopman, count_chain, embedding, headline, headline_stderr;
  };
  void OnSlowestTimescales(const SlowestTimescales& t) ABSL_LOCKS_EXCLUDED(mu_);
  // Lag scan of the primary estimator: timescales[k][i], stderrs[k][i] at lags[k]; the CK
  // test's max deviation and its s.e. (NaN when unavailable).
  void OnLags(const std::vector<int>& lags, const std::vector<std::vector<double>>& timescales,
              const std::vector<std::vector<double>>& stderrs, double ck_deviation, double ck_stderr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Time to build one sub-view ("koopman", "counts", "embedding", "clusters", "aggregation",
  // "latent", "predictive") in a refresh.
  void OnViewBuilt(const std::string& view, double seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // One sub-view of the published view: built or not, and whether its fit reported a warning.
  void OnSubView(const std::string& view, bool available, bool fit_warning) ABSL_LOCKS_EXCLUDED(mu_);
  // Change alarms (models with alarms on): the CUSUM statistic as a fraction of its threshold
  // and the model's alarm count. The first call creates the series and counts from
  // `alarms_total` on (a restored model's earlier alarms are not counted again).
  void OnAlarms(double score, uint64_t alarms_total) ABSL_LOCKS_EXCLUDED(mu_);
  // The daemon's memory ledger after this model's batch (fleet series, no model label): what
  // its models are charged, and one more batch whose growth the budget denied.
  void OnMemory(double committed_bytes, bool growth_denied);
  // Eviction (fleet series, no model label): this model was evicted, loaded back after
  // `seconds`, or deleted while evicted; OnRestoredEvicted: restored evicted at start (counted
  // as evicted, not as an eviction).
  void OnEvicted();
  void OnRestoredEvicted();
  void OnReloaded(double seconds);
  void OnEvictedDeleted();
  void Remove() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class Metrics;
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  // What every series shows, kept with or without the series.
  struct Values {
    double samples = 0, forced = 0, forced_error = 0, pending = 0, dict_x = 0, dict_y = 0, dict_budget = 0;
    double failed = 0, drift = 0, view_version = 0, view_age = 0, view_samples = 0;
    double heldout = kNaN, epochs = 0, data_share = 0, disagreement = kNaN;
    std::array<double, 4> slowest = {kNaN, kNaN, kNaN, kNaN};  // koopman, count_chain, embedding, headline
    double slowest_stderr = kNaN, ck_deviation = kNaN, ck_stderr = kNaN;
    std::map<std::pair<int, int>, std::pair<double, double>> lags;  // (lag, mode) -> (timescale, s.e.)
    std::map<std::string, double> rejected;                         // reason -> batches
    bool alarms = false;  // the model has alarms (OnAlarms was called): change series exist
    double change_score = 0, change_alarms = 0;
    std::map<std::string, std::pair<bool, bool>> sub_views;  // view -> (available, fit warning)
  };
  // Creates every series from values_ (Metrics: creation, ranking). No-op once removed.
  void Attach() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every series (values_ stay).
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);
  void DetachLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ranking's key since the last call, which starts the next window.
  struct Activity {
    uint64_t alarms = 0, pairs = 0;
    bool attached = false, removed = false;
  };
  Activity TakeActivity() ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::Counter* RejectedSeries(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetSubViewSeries(const std::string& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetLagSeries(std::pair<int, int> key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Metrics& m_;
  const std::string model_;
  // A leaf lock (prometheus-cpp's own family locks are taken under it). Guards the values, the
  // flags and every series below: while not attached (or once removed) the series are null.
  absl::Mutex mu_;
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  Values values_ ABSL_GUARDED_BY(mu_);
  uint64_t window_pairs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t window_alarms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t alarms_counted_ ABSL_GUARDED_BY(mu_) = 0;
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  prometheus::Counter* samples_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* pending_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* dict_x_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* dict_y_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* dict_budget_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* failed_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* forced_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* forced_error_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* drift_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Histogram* refresh_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* view_version_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* view_age_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* view_samples_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* heldout_score_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* spectral_epochs_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* spectral_data_share_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* disagreement_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  std::array<prometheus::Gauge*, 4> slowest_ ABSL_GUARDED_BY(mu_) = {};
  prometheus::Gauge* slowest_stderr_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* ck_deviation_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Gauge* ck_stderr_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  std::map<std::pair<int, int>, std::pair<prometheus::Gauge*, prometheus::Gauge*>> lag_gauges_
      ABSL_GUARDED_BY(mu_);  // (lag, mode)
  std::map<std::string, prometheus::Counter*> rejected_ ABSL_GUARDED_BY(mu_);
  prometheus::Gauge* change_score_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  prometheus::Counter* change_alarms_ ABSL_PT_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, prometheus::Histogram*> view_build_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<prometheus::Gauge*, prometheus::Gauge*>> sub_view_gauges_
      ABSL_GUARDED_BY(mu_);  // view -> (available, fit warning)
};

class Metrics {
 public:
  Metrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // process_* series; the daemon registers it with the exposer next to registry().
  std::shared_ptr<ProcessMetrics> process() const { return process_; }

  // The series handle of a new model (with series under "all", and under "top N" while fewer
  // than N models have them).
  std::shared_ptr<ModelMetrics> ForModel(const std::string& model) ABSL_LOCKS_EXCLUDED(top_mu_);
  // A batch for a model that does not exist.
  void OnUnknownModelBatch();
  void ObserveRpc(const std::string& method, double seconds, int grpc_code) ABSL_LOCKS_EXCLUDED(rpc_mu_);
  // --metrics-per-model (PerModelSeries). requires: before the first ForModel.
  void SetPerModel(PerModelSeries per_model) { per_model_ = per_model; }
  // Under "top N": ranks the models and moves the series to the top N, at most every
  // PerModelSeries::kTopRankSeconds (the refresh scheduler calls it at its reports); Now: at
  // once (tests). Otherwise no-op.
  void MaybeRankTopModels(std::chrono::steady_clock::time_point now) ABSL_LOCKS_EXCLUDED(top_mu_);
  void RankTopModelsNow() ABSL_LOCKS_EXCLUDED(top_mu_);
  // At the daemon's exit, after the last scrape: the models' series stay until the registry
  // goes with the daemon. prometheus-cpp's Family::Remove searches its family linearly, so
  // removing every model's ~30 series one by one made the exit of 10,000 models quadratic
  // (minutes, after the shutdown snapshot).
  void KeepSeriesAtExit() { keep_series_.store(true); }
  bool keeping_series() const { return keep_series_.load(); }
  // Models held; the live/evicted split follows the evictions and reloads (ModelMetrics).
  void SetModelCount(size_t n);
  // The memory budget (--max-memory) and what the models are charged (MemoryLedger).
  void SetMemory(double budget_bytes, double committed_bytes) {
    memory_budget_.Set(budget_bytes);
    memory_committed_.Set(committed_bytes);
  }
  // A fork (--on-change fork) not started at its parent's alarm (the daemon's log names the
  // parent, the alarm and the message).
  void OnForkRefused(ForkRefusal reason);
  // The refresh scheduler (RefreshScheduler): a view built, background or requested, and the
  // CPU seconds it took; the budget and the fleet's staleness at its last scan.
  void OnSchedulerRefresh(bool requested, double cpu_seconds) {
    (requested ? refreshes_requested_ : refreshes_periodic_).Increment();
    refresh_cpu_.Increment(cpu_seconds);
  }
  void SetViewStaleness(double budget, size_t stale_views, double lag_pairs, double stale_age_max_seconds) {
    refresh_budget_.Set(budget);
    views_stale_.Set(static_cast<double>(stale_views));
    view_lag_pairs_.Set(lag_pairs);
    view_stale_age_max_.Set(stale_age_max_seconds);
  }

 private:
  friend class ModelMetrics;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ProcessMetrics> process_ = std::make_shared<ProcessMetrics>();
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Gauge>& pending_;
  prometheus::Family<prometheus::Gauge>& dict_;
  prometheus::Family<prometheus::Gauge>& dict_budget_;
  prometheus::Family<prometheus::Gauge>& model_failed_;
  prometheus::Family<prometheus::Counter>& forced_;
  prometheus::Family<prometheus::Counter>& forced_error_;
  prometheus::Family<prometheus::Gauge>& drift_;
  prometheus::Family<prometheus::Histogram>& refresh_;
  prometheus::Family<prometheus::Histogram>& view_build_;
  prometheus::Family<prometheus::Gauge>& view_version_;
  prometheus::Family<prometheus::Gauge>& view_age_;
  prometheus::Family<prometheus::Gauge>& view_samples_;
  prometheus::Family<prometheus::Gauge>& heldout_score_;
  prometheus::Family<prometheus::Gauge>& spectral_epochs_;
  prometheus::Family<prometheus::Gauge>& spectral_data_share_;
  prometheus::Family<prometheus::Gauge>& disagreement_;
  prometheus::Family<prometheus::Gauge>& slowest_timescale_;
  prometheus::Family<prometheus::Gauge>& slowest_timescale_stderr_;
  prometheus::Family<prometheus::Gauge>& view_available_;
  prometheus::Family<prometheus::Gauge>& view_fit_warning_;
  prometheus::Family<prometheus::Gauge>& lag_timescale_;
  prometheus::Family<prometheus::Gauge>& lag_timescale_stderr_;
  prometheus::Family<prometheus::Gauge>& ck_deviation_;
  prometheus::Family<prometheus::Gauge>& ck_stderr_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Family<prometheus::Gauge>& change_score_;
  prometheus::Family<prometheus::Counter>& change_alarms_;
  prometheus::Family<prometheus::Counter>& forks_refused_;
  prometheus::Family<prometheus::Histogram>& rpc_;
  prometheus::Family<prometheus::Counter>& rpc_completed_;
  void UpdateModelGauges();
  prometheus::Family<prometheus::Gauge>& models_family_;
  prometheus::Gauge& models_live_;
  prometheus::Gauge& models_evicted_;
  prometheus::Counter& evictions_;
  prometheus::Counter& reloads_;
  prometheus::Histogram& reload_seconds_;
  PerModelSeries per_model_;
  // Under "top N": every model's handle (expired ones pruned at a ranking), and how many have
  // series. A leaf lock but for the handles' own locks, taken under it at a ranking.
  absl::Mutex top_mu_;
  std::vector<std::weak_ptr<ModelMetrics>> handles_ ABSL_GUARDED_BY(top_mu_);
  std::chrono::steady_clock::time_point ranked_at_ ABSL_GUARDED_BY(top_mu_){};
  std::atomic<int64_t> with_series_{0};
  std::atomic<bool> keep_series_{false};
  std::atomic<int64_t> models_total_{0};
  std::atomic<int64_t> evicted_{0};
  prometheus::Gauge& memory_budget_;
  prometheus::Gauge& memory_committed_;
  prometheus::Counter& growth_denied_;
  prometheus::Family<prometheus::Counter>& refreshes_;
  prometheus::Counter& refreshes_periodic_;
  prometheus::Counter& refreshes_requested_;
  prometheus::Counter& refresh_cpu_;
  prometheus::Gauge& refresh_budget_;
  prometheus::Gauge& views_stale_;
  prometheus::Gauge& view_lag_pairs_;
  prometheus::Gauge& view_stale_age_max_;
  prometheus::Gauge& models_with_series_;
  prometheus::Counter& fleet_samples_;
  prometheus::Counter& fleet_alarms_;
  absl::Mutex rpc_mu_;  // guards the lazily created per-method series below; a leaf lock
  std::map<std::string, prometheus::Histogram*> rpc_hist_ ABSL_GUARDED_BY(rpc_mu_);
};

}  // namespace cmestream::service
