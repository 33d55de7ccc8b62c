#include "service/observability/metrics.h"

#include <algorithm>
#include <limits>

#include "grpcpp/support/status_code_enum.h"
#include "service/observability/metric_families.h"

namespace cmestream::service {
namespace {

// Refresh: from a few ms (small dictionary) to tens of seconds (m = 4000, O(m^3)).
const prometheus::Histogram::BucketBoundaries kRefreshBuckets = {0.001, 0.005, 0.02, 0.05, 0.1, 0.25,
                                                                 0.5,   1,     2.5,  5,    10,  30};
// RPCs: sub-millisecond queries up to waits of a minute (Refresh with wait).
const prometheus::Histogram::BucketBoundaries kRpcBuckets = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                             0.05,   0.1,    0.25,  0.5,    1,     5,    30};

const char* CodeName(int code) {
  static const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      samples_(CounterFamily(*registry_, "cmestream_samples_ingested_total",
                             "Transition pairs accepted into the model (learner plus sigma warm-up buffer)")),
      pending_(
          GaugeFamily(*registry_, "cmestream_pending_warmup", "Pairs buffered while sigma 'auto' is being chosen")),
      dict_(GaugeFamily(*registry_, "cmestream_dictionary_size", "Dictionary atoms per side (x, y)")),
      dict_budget_(GaugeFamily(*registry_, "cmestream_dictionary_budget",
                               "Dictionary cap max_dict per side (0 for discrete models)")),
      model_failed_(GaugeFamily(*registry_, "cmestream_model_failed",
                                "1 once the model failed (it refuses data and queries until deleted; "
                                "ModelInfo.failure gives the record and the reason), else 0")),
      forced_(CounterFamily(*registry_, "cmestream_forced_compressions_total",
                            "Admissions refused by the dictionary cap max_dict (forced projections)")),
      forced_error_(
          CounterFamily(*registry_, "cmestream_forced_error_sum_total", "Summed HS-norm error of forced projections")),
      drift_(GaugeFamily(*registry_, "cmestream_inverse_drift",
                         "CME factor drift max ||R (G + gamma I) R^T - I||_F over both sides, from the learner's last "
                         "periodic "
                         "check (probe estimate), as of the last refresh")),
      refresh_(HistogramFamily(*registry_, "cmestream_refresh_duration_seconds",
                               "Time to build a view (snapshot, drift check, Koopman)")),
      view_build_(HistogramFamily(*registry_, "cmestream_view_build_seconds",
                                  "Time to build one sub-view of a refresh, by view")),
      view_version_(GaugeFamily(*registry_, "cmestream_view_version", "Version of the latest view")),
      view_age_(GaugeFamily(*registry_, "cmestream_view_age_seconds", "Seconds since the latest view was built")),
      view_samples_(GaugeFamily(*registry_, "cmestream_view_samples", "Samples the latest view reflects")),
      heldout_score_(GaugeFamily(*registry_, "cmestream_spectrum_heldout_score",
                                 "Held-out VAMP-E score (contiguous blocks) of the Koopman spectrum at the last "
                                 "refresh; higher is better, NaN while the CME fallback serves")),
      spectral_epochs_(GaugeFamily(*registry_, "cmestream_spectral_epochs",
                                   "Epochs of the spectral-moments basis begun so far (1 + re-bases; "
                                   "docs/algorithms.md §7) at the last refresh")),
      spectral_data_share_(GaugeFamily(*registry_, "cmestream_spectral_data_share",
                                       "Share of the stream's pairs inside the Koopman spectral estimate at the last "
                                       "refresh (0 while the CME fallback serves)")),
      disagreement_(GaugeFamily(*registry_, "cmestream_timescale_disagreement",
                                "Relative disagreement of the slowest timescales of the koopman, count-chain and "
                                "embedding views at the last refresh (warning above 0.25)")),
      slowest_timescale_(GaugeFamily(*registry_, "cmestream_slowest_timescale",
                                     "Slowest resolved timescale (time units) of view `view` (koopman, count_chain, "
                                     "embedding) at the last refresh, and the Koopman reply's headline (view "
                                     "\"headline\"); NaN when the view has none")),
      slowest_timescale_stderr_(GaugeFamily(*registry_, "cmestream_slowest_timescale_stderr",
                                            "Standard error of the headline slowest timescale (the lag scan's "
                                            "jackknife as a relative error); NaN without one")),
      view_available_(GaugeFamily(*registry_, "cmestream_view_available",
                                  "1 when the sub-view `view` of the latest view was built, 0 when it is missing "
                                  "(ModelInfo.sub_views gives the reason)")),
      view_fit_warning_(GaugeFamily(*registry_, "cmestream_view_fit_warning",
                                    "1 when the sub-view `view` was built but its fit did not terminate with "
                                    "success (FitSummary.termination / message), else 0")),
      lag_timescale_(GaugeFamily(*registry_, "cmestream_lag_timescale",
                                 "Implied timescale (time units: -lag*dt/ln|mu|) of slow mode `mode` at lag `lag` "
                                 "from the lag statistics at the last refresh (docs/algorithms.md section 8)")),
      lag_timescale_stderr_(
          GaugeFamily(*registry_, "cmestream_lag_timescale_stderr",
                      "Jackknife standard error (contiguous time blocks) of cmestream_lag_timescale")),
      ck_deviation_(GaugeFamily(*registry_, "cmestream_ck_max_deviation",
                                "Chapman-Kolmogorov test at the model's first lag and clusters: max |T(tau)^k - "
                                "T(k tau)| over the set-to-set probabilities and steps (NaN when unavailable)")),
      ck_stderr_(GaugeFamily(*registry_, "cmestream_ck_max_deviation_stderr",
                             "Jackknife standard error of cmestream_ck_max_deviation's entry")),
      rejected_(
          CounterFamily(*registry_, "cmestream_ingest_batches_rejected_total", "Ingest batches refused, by reason")),
      change_score_(GaugeFamily(*registry_, "cmestream_change_score",
                                "Change detector's CUSUM statistic as a fraction of its threshold: an alarm at 1 "
                                "(docs/algorithms.md section 12; models with alarms on)")),
      change_alarms_(CounterFamily(*registry_, "cmestream_change_alarms_total",
                                   "Change alarms raised (cmestream alarms NAME lists them)")),
      forks_refused_(CounterFamily(*registry_, "cmestream_forks_refused_total",
                                   "Forks (--on-change fork) not started at a change alarm, by reason: name_taken, "
                                   "max_models, memory (--max-memory or an allocation), error; the log names them")),
      rpc_(HistogramFamily(*registry_, "cmestream_rpc_duration_seconds",
                           "Server-side RPC latency per method (Ingest: per batch)")),
      rpc_completed_(CounterFamily(*registry_, "cmestream_rpc_completed_total",
                                   "RPCs (Ingest: batches) completed, by method and status code")),
      models_family_(GaugeFamily(*registry_, "cmestream_models",
                                 "Models in the registry, by state: live (learner in memory) or evicted (idle, "
                                 "learner in its file under DATA_DIR/evicted; --evict-idle-seconds)")),
      models_live_(models_family_.Add({{"state", "live"}})),
      models_evicted_(models_family_.Add({{"state", "evicted"}})),
      evictions_(CounterFamily(*registry_, "cmestream_model_evictions_total",
                               "Idle models evicted (written to their file, learner freed)")
                     .Add({})),
      reloads_(CounterFamily(*registry_, "cmestream_model_reloads_total",
                             "Evicted models loaded back (by a batch, a fork share or an end of warm-up)")
                   .Add({})),
      reload_seconds_(HistogramFamily(*registry_, "cmestream_model_reload_seconds",
                                      "Time to load an evicted model back: read, checksum, decode, digest check")
                          .Add({}, kRefreshBuckets)),
      memory_budget_(GaugeFamily(*registry_, "cmestream_memory_budget_bytes",
                                 "The daemon's memory budget for its models (--max-memory)")
                         .Add({})),
      memory_committed_(GaugeFamily(*registry_, "cmestream_memory_committed_bytes",
                                    "Bytes the models are charged in the memory budget: what their state is "
                                    "allocated at, part by part (floor of an empty model plus granted growth)")
                            .Add({})),
      growth_denied_(CounterFamily(*registry_, "cmestream_dictionary_growth_denied_total",
                                   "Batches whose dictionary reached the cap the memory budget set: admissions "
                                   "beyond it were forced projections")
                         .Add({})),
      refreshes_(CounterFamily(*registry_, "cmestream_refreshes_total",
                               "Views built by the refresh scheduler, by trigger: periodic (interval, "
                               "refresh_every_samples; within --refresh-budget) or requested (Refresh, Wait)")),
      refreshes_periodic_(refreshes_.Add({{"trigger", "periodic"}})),
      refreshes_requested_(refreshes_.Add({{"trigger", "requested"}})),
      refresh_cpu_(CounterFamily(*registry_, "cmestream_refresh_cpu_seconds_total",
                                 "CPU seconds the refresh scheduler spent building views")
                       .Add({})),
      refresh_budget_(GaugeFamily(*registry_, "cmestream_refresh_budget",
                                  "Share of one core the background refreshes may use (--refresh-budget)")
                          .Add({})),
      views_stale_(
          GaugeFamily(*registry_, "cmestream_views_stale",
                      "Models whose background refresh was due and not yet done (deferred by --refresh-budget, "
                      "or the refresh thread is behind)")
              .Add({})),
      view_lag_pairs_(GaugeFamily(*registry_, "cmestream_view_lag_pairs",
                                  "Pairs learned and not yet reflected in a view, summed over the models")
                          .Add({})),
      view_stale_age_max_(GaugeFamily(*registry_, "cmestream_view_stale_age_max_seconds",
                                      "Seconds since the last refresh of the model deferred longest (0: none)")
                              .Add({})),
      models_with_series_(GaugeFamily(*registry_, "cmestream_models_with_series",
                                      "Models whose series with a model label exist (--metrics-per-model: all, "
                                      "none, or the top N re-ranked every minute)")
                              .Add({})),
      fleet_samples_(CounterFamily(*registry_, "cmestream_fleet_samples_ingested_total",
                                   "Transition pairs applied, summed over every model (whatever "
                                   "--metrics-per-model)")
                         .Add({})),
      fleet_alarms_(CounterFamily(*registry_, "cmestream_fleet_change_alarms_total",
                                  "Change alarms raised, summed over every model (whatever --metrics-per-model)")
                        .Add({})) {
  rejected_.Add({{"model", ""}, {"reason", "unknown_model"}});  // exists at 0 from the start
  for (const EnumName<ForkRefusal>& reason : kForkRefusalNames) forks_refused_.Add({{"reason", reason.name}});
}

void ModelMetrics::OnMemory(double committed_bytes, bool growth_denied) {
  m_.memory_committed_.Set(committed_bytes);
  if (growth_denied) m_.growth_denied_.Increment();
}

void Metrics::SetModelCount(size_t n) {
  models_total_.store(static_cast<int64_t>(n));
  UpdateModelGauges();
}

void Metrics::UpdateModelGauges() {
  const int64_t evicted = std::max<int64_t>(0, evicted_.load());
  models_live_.Set(static_cast<double>(std::max<int64_t>(0, models_total_.load() - evicted)));
  models_evicted_.Set(static_cast<double>(evicted));
}

void ModelMetrics::OnEvicted() {
  m_.evictions_.Increment();
  m_.evicted_.fetch_add(1);
  m_.UpdateModelGauges();
}

void ModelMetrics::OnRestoredEvicted() {
  m_.evicted_.fetch_add(1);
  m_.UpdateModelGauges();
}

void ModelMetrics::OnReloaded(double seconds) {
  m_.reloads_.Increment();
  m_.reload_seconds_.Observe(seconds);
  m_.evicted_.fetch_sub(1);
  m_.UpdateModelGauges();
}

void ModelMetrics::OnEvictedDeleted() {
  m_.evicted_.fetch_sub(1);
  m_.UpdateModelGauges();
}

void Metrics::OnForkRefused(ForkRefusal reason) {
  forks_refused_.Add({{"reason", NameOf(kForkRefusalNames, reason, "error")}}).Increment();
}

void Metrics::OnUnknownModelBatch() { rejected_.Add({{"model", ""}, {"reason", "unknown_model"}}).Increment(); }

void Metrics::ObserveRpc(const std::string& method, double seconds, int code) {
  prometheus::Histogram* h;
  {
    absl::MutexLock lock(&rpc_mu_);
    auto it = rpc_hist_.find(method);
    if (it == rpc_hist_.end()) it = rpc_hist_.emplace(method, &rpc_.Add({{"method", method}}, kRpcBuckets)).first;
    h = it->second;
  }
  h->Observe(seconds);
  // Family::Add returns the existing series for known labels; it locks internally.
  rpc_completed_.Add({{"method", method}, {"code", CodeName(code)}}).Increment();
}

ModelMetrics::ModelMetrics(Metrics& m, std::string model) : m_(m), model_(std::move(model)) {
  // Every rejection series at 0 from the start: increase()/rate() need a sample before the
  // first rejection to see it.
  absl::MutexLock lock(&mu_);
  for (const char* reason : kRejectReasons) values_.rejected.emplace(reason, 0.0);
}

void ModelMetrics::Attach() {
  absl::MutexLock lock(&mu_);
  if (removed_ || attached_) return;
  attached_ = true;
  m_.with_series_.fetch_add(1);
  m_.models_with_series_.Increment();
  const Values& v = values_;
  const std::map<std::string, std::string> model = {{"model", model_}};
  samples_ = &m_.samples_.Add(model);
  samples_->Increment(v.samples);
  pending_ = &m_.pending_.Add(model);
  pending_->Set(v.pending);
  dict_x_ = &m_.dict_.Add({{"model", model_}, {"side", "x"}});
  dict_x_->Set(v.dict_x);
  dict_y_ = &m_.dict_.Add({{"model", model_}, {"side", "y"}});
  dict_y_->Set(v.dict_y);
  dict_budget_ = &m_.dict_budget_.Add(model);
  dict_budget_->Set(v.dict_budget);
  failed_ = &m_.model_failed_.Add(model);
  failed_->Set(v.failed);
  forced_ = &m_.forced_.Add(model);
  forced_->Increment(v.forced);
  forced_error_ = &m_.forced_error_.Add(model);
  forced_error_->Increment(v.forced_error);
  drift_ = &m_.drift_.Add(model);
  drift_->Set(v.drift);
  refresh_ = &m_.refresh_.Add(model, kRefreshBuckets);
  view_version_ = &m_.view_version_.Add(model);
  view_version_->Set(v.view_version);
  view_age_ = &m_.view_age_.Add(model);
  view_age_->Set(v.view_age);
  view_samples_ = &m_.view_samples_.Add(model);
  view_samples_->Set(v.view_samples);
  heldout_score_ = &m_.heldout_score_.Add(model);
  heldout_score_->Set(v.heldout);
  spectral_epochs_ = &m_.spectral_epochs_.Add(model);
  spectral_epochs_->Set(v.epochs);
  spectral_data_share_ = &m_.spectral_data_share_.Add(model);
  spectral_data_share_->Set(v.data_share);
  disagreement_ = &m_.disagreement_.Add(model);
  disagreement_->Set(v.disagreement);
  static constexpr const char* kSlowestViews[] = {"koopman", "count_chain", "embedding", "headline"};
  for (size_t i = 0; i < slowest_.size(); ++i) {
    slowest_[i] = &m_.slowest_timescale_.Add({{"model", model_}, {"view", kSlowestViews[i]}});
    slowest_[i]->Set(v.slowest[i]);
  }
  slowest_stderr_ = &m_.slowest_timescale_stderr_.Add(model);
  slowest_stderr_->Set(v.slowest_stderr);
  ck_deviation_ = &m_.ck_deviation_.Add(model);
  ck_deviation_->Set(v.ck_deviation);
  ck_stderr_ = &m_.ck_stderr_.Add(model);
  ck_stderr_->Set(v.ck_stderr);
  for (const auto& [key, values] : v.lags) SetLagSeries(key);
  for (const auto& [reason, count] : v.rejected) RejectedSeries(reason);
  if (v.alarms) {
    change_score_ = &m_.change_score_.Add(model);
    change_score_->Set(v.change_score);
    change_alarms_ = &m_.change_alarms_.Add(model);
    change_alarms_->Increment(v.change_alarms);
  }
  for (const auto& [view, flags] : v.sub_views) SetSubViewSeries(view);
}

prometheus::Counter* ModelMetrics::RejectedSeries(const std::string& reason) {
  auto it = rejected_.find(reason);
  if (it == rejected_.end()) {
    it = rejected_.emplace(reason, &m_.rejected_.Add({{"model", model_}, {"reason", reason}})).first;
    it->second->Increment(values_.rejected[reason]);
  }
  return it->second;
}

void ModelMetrics::SetSubViewSeries(const std::string& view) {
  auto it = sub_view_gauges_.find(view);
  if (it == sub_view_gauges_.end()) {
    const std::map<std::string, std::string> labels = {{"model", model_}, {"view", view}};
    it = sub_view_gauges_
             .emplace(view, std::make_pair(&m_.view_available_.Add(labels), &m_.view_fit_warning_.Add(labels)))
             .first;
  }
  const auto [available, warning] = values_.sub_views[view];
  it->second.first->Set(available ? 1 : 0);
  it->second.second->Set(available && warning ? 1 : 0);
}

void ModelMetrics::SetLagSeries(std::pair<int, int> key) {
  auto [it, inserted] = lag_gauges_.try_emplace(key);
  if (inserted) {
    const std::map<std::string, std::string> labels = {
        {"model", model_}, {"lag", std::to_string(key.first)}, {"mode", std::to_string(key.second)}};
    it->second = {&m_.lag_timescale_.Add(labels), &m_.lag_timescale_stderr_.Add(labels)};
  }
  const auto [timescale, stderr_] = values_.lags[key];
  it->second.first->Set(timescale);
  it->second.second->Set(stderr_);
}

ModelMetrics::Activity ModelMetrics::TakeActivity() {
  absl::MutexLock lock(&mu_);
  Activity a{window_alarms_, window_pairs_, attached_, removed_};
  window_alarms_ = window_pairs_ = 0;
  return a;
}

void ModelMetrics::OnBatchApplied(uint64_t pairs_applied, uint64_t forced_delta, double forced_error_delta,
                                  const LearnerGauges& g) {
  m_.fleet_samples_.Increment(static_cast<double>(pairs_applied));
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  window_pairs_ += pairs_applied;
  Values& v = values_;
  v.samples += static_cast<double>(pairs_applied);
  if (forced_delta > 0) v.forced += static_cast<double>(forced_delta);
  if (forced_error_delta > 0) v.forced_error += forced_error_delta;
  v.pending = static_cast<double>(g.pending_warmup);
  v.dict_x = g.dict_x;
  v.dict_y = g.dict_y;
  if (!attached_) return;
  samples_->Increment(static_cast<double>(pairs_applied));
  if (forced_delta > 0) forced_->Increment(static_cast<double>(forced_delta));
  if (forced_error_delta > 0) forced_error_->Increment(forced_error_delta);
  pending_->Set(v.pending);
  dict_x_->Set(v.dict_x);
  dict_y_->Set(v.dict_y);
}

void ModelMetrics::OnRejected(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.rejected[reason] += 1;
  if (attached_) RejectedSeries(reason)->Increment();  // a new reason's series starts at its count
}

void ModelMetrics::OnRefresh(double seconds, double inverse_drift, uint64_t version, uint64_t samples) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.drift = inverse_drift;
  values_.view_version = static_cast<double>(version);
  values_.view_samples = static_cast<double>(samples);
  values_.view_age = 0;
  if (!attached_) return;
  refresh_->Observe(seconds);
  drift_->Set(values_.drift);
  view_version_->Set(values_.view_version);
  view_samples_->Set(values_.view_samples);
  view_age_->Set(0);
}

void ModelMetrics::OnViewBuilt(const std::string& view, double seconds) {
  absl::MutexLock lock(&mu_);
  if (removed_ || !attached_) return;  // histograms count while the series exist
  auto it = view_build_.find(view);
  if (it == view_build_.end()) {
    it = view_build_.emplace(view, &m_.view_build_.Add({{"model", model_}, {"view", view}}, kRefreshBuckets)).first;
  }
  it->second->Observe(seconds);
}

void ModelMetrics::OnSubView(const std::string& view, bool available, bool fit_warning) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.sub_views[view] = {available, fit_warning};
  if (attached_) SetSubViewSeries(view);
}

void ModelMetrics::OnSpectrum(double heldout_score, double timescale_disagreement, double epochs, double data_share) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.heldout = heldout_score;
  values_.epochs = epochs;
  values_.data_share = data_share;
  values_.disagreement = timescale_disagreement;
  if (!attached_) return;
  heldout_score_->Set(heldout_score);
  spectral_epochs_->Set(epochs);
  spectral_data_share_->Set(data_share);
  disagreement_->Set(timescale_disagreement);
}

void ModelMetrics::OnSlowestTimescales(const SlowestTimescales& t) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.slowest = {t.koopman, t.count_chain, t.embedding, t.headline};
  values_.slowest_stderr = t.headline_stderr;
  if (!attached_) return;
  for (size_t i = 0; i < slowest_.size(); ++i) slowest_[i]->Set(values_.slowest[i]);
  slowest_stderr_->Set(t.headline_stderr);
}

void ModelMetrics::OnLags(const std::vector<int>& lags, const std::vector<std::vector<double>>& timescales,
                          const std::vector<std::vector<double>>& stderrs, double ck_deviation, double ck_stderr) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  for (size_t k = 0; k < lags.size() && k < timescales.size(); ++k) {
    for (size_t i = 0; i < timescales[k].size(); ++i) {
      const std::pair<int, int> key = {lags[k], static_cast<int>(i) + 1};
      values_.lags[key] = {timescales[k][i], i < stderrs[k].size() ? stderrs[k][i] : kNaN};
      if (attached_) SetLagSeries(key);
    }
  }
  values_.ck_deviation = ck_deviation;
  values_.ck_stderr = ck_stderr;
  if (!attached_) return;
  ck_deviation_->Set(ck_deviation);
  ck_stderr_->Set(ck_stderr);
}

void ModelMetrics::OnAlarms(double score, uint64_t alarms_total) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  Values& v = values_;
  if (!v.alarms) {  // the first call: a restored model's earlier alarms are not counted again
    v.alarms = true;
    alarms_counted_ = alarms_total;
    if (attached_) {
      change_score_ = &m_.change_score_.Add({{"model", model_}});
      change_alarms_ = &m_.change_alarms_.Add({{"model", model_}});
    }
  }
  v.change_score = score;
  const uint64_t raised = alarms_total > alarms_counted_ ? alarms_total - alarms_counted_ : 0;
  alarms_counted_ = std::max(alarms_counted_, alarms_total);
  v.change_alarms += static_cast<double>(raised);
  window_alarms_ += raised;
  if (raised > 0) m_.fleet_alarms_.Increment(static_cast<double>(raised));
  if (!attached_) return;
  change_score_->Set(score);
  if (raised > 0) change_alarms_->Increment(static_cast<double>(raised));
}

void ModelMetrics::SetViewAge(double seconds) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.view_age = seconds;
  if (attached_) view_age_->Set(seconds);
}

void ModelMetrics::SetDictionaryBudget(double max_dict) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.dict_budget = max_dict;
  if (attached_) dict_budget_->Set(max_dict);
}

void ModelMetrics::SetFailed(bool failed) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.failed = failed ? 1 : 0;
  if (attached_) failed_->Set(values_.failed);
}

void ModelMetrics::SetNoView() {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  values_.view_age = std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
  if (attached_) view_age_->Set(values_.view_age);
}

void ModelMetrics::Remove() {
  if (m_.keeping_series()) return;  // the daemon exits: Metrics::KeepSeriesAtExit
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  removed_ = true;
  DetachLocked();
}

void ModelMetrics::Detach() {
  absl::MutexLock lock(&mu_);
  DetachLocked();
}

void ModelMetrics::DetachLocked() {
  if (!attached_) return;
  attached_ = false;
  m_.with_series_.fetch_sub(1);
  m_.models_with_series_.Decrement();
  m_.samples_.Remove(samples_);
  m_.pending_.Remove(pending_);
  m_.dict_.Remove(dict_x_);
  m_.dict_.Remove(dict_y_);
  m_.dict_budget_.Remove(dict_budget_);
  m_.model_failed_.Remove(failed_);
  m_.forced_.Remove(forced_);
  m_.forced_error_.Remove(forced_error_);
  m_.drift_.Remove(drift_);
  m_.refresh_.Remove(refresh_);
  m_.view_version_.Remove(view_version_);
  m_.view_age_.Remove(view_age_);
  m_.view_samples_.Remove(view_samples_);
  m_.heldout_score_.Remove(heldout_score_);
  m_.spectral_epochs_.Remove(spectral_epochs_);
  m_.spectral_data_share_.Remove(spectral_data_share_);
  m_.disagreement_.Remove(disagreement_);
  for (prometheus::Gauge* g : slowest_) m_.slowest_timescale_.Remove(g);
  m_.slowest_timescale_stderr_.Remove(slowest_stderr_);
  m_.ck_deviation_.Remove(ck_deviation_);
  m_.ck_stderr_.Remove(ck_stderr_);
  for (auto& [key, gauges] : lag_gauges_) {
    m_.lag_timescale_.Remove(gauges.first);
    m_.lag_timescale_stderr_.Remove(gauges.second);
  }
  lag_gauges_.clear();
  if (change_score_ != nullptr) {
    m_.change_score_.Remove(change_score_);
    m_.change_alarms_.Remove(change_alarms_);
  }
  for (auto& [reason, counter] : rejected_) m_.rejected_.Remove(counter);
  rejected_.clear();
  for (auto& [view, histogram] : view_build_) m_.view_build_.Remove(histogram);
  view_build_.clear();
  for (auto& [view, gauges] : sub_view_gauges_) {
    m_.view_available_.Remove(gauges.first);
    m_.view_fit_warning_.Remove(gauges.second);
  }
  sub_view_gauges_.clear();
  samples_ = nullptr;
  pending_ = dict_x_ = dict_y_ = dict_budget_ = failed_ = drift_ = nullptr;
  forced_ = forced_error_ = change_alarms_ = nullptr;
  refresh_ = nullptr;
  view_version_ = view_age_ = view_samples_ = heldout_score_ = spectral_epochs_ = spectral_data_share_ = nullptr;
  disagreement_ = slowest_stderr_ = ck_deviation_ = ck_stderr_ = change_score_ = nullptr;
  slowest_ = {};
}

// ---------------------------------------------------------------------------------------------
// --metrics-per-model

std::shared_ptr<ModelMetrics> Metrics::ForModel(const std::string& model) {
  auto handle = std::make_shared<ModelMetrics>(*this, model);
  switch (per_model_.mode) {
    case PerModelSeries::Mode::kAll:
      handle->Attach();
      break;
    case PerModelSeries::Mode::kNone:
      break;
    case PerModelSeries::Mode::kTop: {
      absl::MutexLock lock(&top_mu_);
      handles_.push_back(handle);
      // Free slots go to new models at once; the ranking moves them later.
      if (with_series_.load() < per_model_.top) handle->Attach();
      break;
    }
  }
  return handle;
}

void Metrics::MaybeRankTopModels(std::chrono::steady_clock::time_point now) {
  if (per_model_.mode != PerModelSeries::Mode::kTop) return;
  {
    absl::MutexLock lock(&top_mu_);
    if (std::chrono::duration<double>(now - ranked_at_).count() < PerModelSeries::kTopRankSeconds) return;
    ranked_at_ = now;
  }
  RankTopModelsNow();
}

void Metrics::RankTopModelsNow() {
  if (per_model_.mode != PerModelSeries::Mode::kTop) return;
  absl::MutexLock lock(&top_mu_);
  struct Ranked {
    std::shared_ptr<ModelMetrics> handle;
    ModelMetrics::Activity activity;
  };
  std::vector<Ranked> ranked;
  ranked.reserve(handles_.size());
  std::vector<std::weak_ptr<ModelMetrics>> kept;
  kept.reserve(handles_.size());
  for (std::weak_ptr<ModelMetrics>& weak : handles_) {
    std::shared_ptr<ModelMetrics> handle = weak.lock();
    if (!handle) continue;
    ModelMetrics::Activity a = handle->TakeActivity();
    if (a.removed) continue;
    kept.push_back(std::move(weak));
    ranked.push_back({std::move(handle), a});
  }
  handles_.swap(kept);
  // Alarms first (the models a user looks at), then traffic; ties keep the series where they
  // are (no churn in an idle fleet), then by name (deterministic).
  const auto before = [](const Ranked& a, const Ranked& b) {
    if (a.activity.alarms != b.activity.alarms) return a.activity.alarms > b.activity.alarms;
    if (a.activity.pairs != b.activity.pairs) return a.activity.pairs > b.activity.pairs;
    if (a.activity.attached != b.activity.attached) return a.activity.attached;
    return a.handle->model_ < b.handle->model_;
  };
  const size_t top = std::min(ranked.size(), static_cast<size_t>(per_model_.top));
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(top), ranked.end(), before);
  for (size_t i = top; i < ranked.size(); ++i) ranked[i].handle->Detach();  // slots first
  for (size_t i = 0; i < top; ++i) ranked[i].handle->Attach();
}

}  // namespace cmestream::service
