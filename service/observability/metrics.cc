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
                                    "Bytes the models are charged in the memory budget, estimated from their "
                                    "dictionaries' capacities (floor of an empty model plus granted growth)")
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

ModelMetrics::ModelMetrics(Metrics& m, std::string model)
    : m_(m),
      model_(std::move(model)),
      samples_(&m.samples_.Add({{"model", model_}})),
      pending_(&m.pending_.Add({{"model", model_}})),
      dict_x_(&m.dict_.Add({{"model", model_}, {"side", "x"}})),
      dict_y_(&m.dict_.Add({{"model", model_}, {"side", "y"}})),
      dict_budget_(&m.dict_budget_.Add({{"model", model_}})),
      failed_(&m.model_failed_.Add({{"model", model_}})),
      forced_(&m.forced_.Add({{"model", model_}})),
      forced_error_(&m.forced_error_.Add({{"model", model_}})),
      drift_(&m.drift_.Add({{"model", model_}})),
      refresh_(&m.refresh_.Add({{"model", model_}}, kRefreshBuckets)),
      view_version_(&m.view_version_.Add({{"model", model_}})),
      view_age_(&m.view_age_.Add({{"model", model_}})),
      view_samples_(&m.view_samples_.Add({{"model", model_}})),
      heldout_score_(&m.heldout_score_.Add({{"model", model_}})),
      spectral_epochs_(&m.spectral_epochs_.Add({{"model", model_}})),
      spectral_data_share_(&m.spectral_data_share_.Add({{"model", model_}})),
      disagreement_(&m.disagreement_.Add({{"model", model_}})),
      slowest_{&m.slowest_timescale_.Add({{"model", model_}, {"view", "koopman"}}),
               &m.slowest_timescale_.Add({{"model", model_}, {"view", "count_chain"}}),
               &m.slowest_timescale_.Add({{"model", model_}, {"view", "embedding"}}),
               &m.slowest_timescale_.Add({{"model", model_}, {"view", "headline"}})},
      slowest_stderr_(&m.slowest_timescale_stderr_.Add({{"model", model_}})),
      ck_deviation_(&m.ck_deviation_.Add({{"model", model_}})),
      ck_stderr_(&m.ck_stderr_.Add({{"model", model_}})) {
  ck_deviation_->Set(std::numeric_limits<double>::quiet_NaN());
  ck_stderr_->Set(std::numeric_limits<double>::quiet_NaN());
  heldout_score_->Set(std::numeric_limits<double>::quiet_NaN());
  disagreement_->Set(std::numeric_limits<double>::quiet_NaN());
  for (prometheus::Gauge* g : slowest_) g->Set(std::numeric_limits<double>::quiet_NaN());
  slowest_stderr_->Set(std::numeric_limits<double>::quiet_NaN());
  spectral_data_share_->Set(0);
  // Every rejection series at 0 from the start: increase()/rate() need a sample before the
  // first rejection to see it.
  for (const char* reason : kRejectReasons) {
    rejected_.emplace(reason, &m_.rejected_.Add({{"model", model_}, {"reason", reason}}));
  }
  // --metrics-per-model none: the series go at once, and every later update is a no-op.
  if (!m_.per_model_) Remove();
}

void ModelMetrics::OnBatchApplied(uint64_t pairs_applied, uint64_t forced_delta, double forced_error_delta,
                                  const LearnerGauges& g) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  samples_->Increment(static_cast<double>(pairs_applied));
  if (forced_delta > 0) forced_->Increment(static_cast<double>(forced_delta));
  if (forced_error_delta > 0) forced_error_->Increment(forced_error_delta);
  pending_->Set(static_cast<double>(g.pending_warmup));
  dict_x_->Set(g.dict_x);
  dict_y_->Set(g.dict_y);
}

void ModelMetrics::OnRejected(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  auto it = rejected_.find(reason);
  if (it == rejected_.end())
    it = rejected_.emplace(reason, &m_.rejected_.Add({{"model", model_}, {"reason", reason}})).first;
  it->second->Increment();
}

void ModelMetrics::OnRefresh(double seconds, double inverse_drift, uint64_t version, uint64_t samples) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  refresh_->Observe(seconds);
  drift_->Set(inverse_drift);
  view_version_->Set(static_cast<double>(version));
  view_samples_->Set(static_cast<double>(samples));
  view_age_->Set(0);
}

void ModelMetrics::OnViewBuilt(const std::string& view, double seconds) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  auto it = view_build_.find(view);
  if (it == view_build_.end()) {
    it = view_build_.emplace(view, &m_.view_build_.Add({{"model", model_}, {"view", view}}, kRefreshBuckets)).first;
  }
  it->second->Observe(seconds);
}

void ModelMetrics::OnSubView(const std::string& view, bool available, bool fit_warning) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  auto it = sub_view_gauges_.find(view);
  if (it == sub_view_gauges_.end()) {
    const std::map<std::string, std::string> labels = {{"model", model_}, {"view", view}};
    it = sub_view_gauges_
             .emplace(view, std::make_pair(&m_.view_available_.Add(labels), &m_.view_fit_warning_.Add(labels)))
             .first;
  }
  it->second.first->Set(available ? 1 : 0);
  it->second.second->Set(available && fit_warning ? 1 : 0);
}

void ModelMetrics::OnSpectrum(double heldout_score, double timescale_disagreement, double epochs, double data_share) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  heldout_score_->Set(heldout_score);
  spectral_epochs_->Set(epochs);
  spectral_data_share_->Set(data_share);
  disagreement_->Set(timescale_disagreement);
}

void ModelMetrics::OnSlowestTimescales(const SlowestTimescales& t) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  slowest_[0]->Set(t.koopman);
  slowest_[1]->Set(t.count_chain);
  slowest_[2]->Set(t.embedding);
  slowest_[3]->Set(t.headline);
  slowest_stderr_->Set(t.headline_stderr);
}

void ModelMetrics::OnLags(const std::vector<int>& lags, const std::vector<std::vector<double>>& timescales,
                          const std::vector<std::vector<double>>& stderrs, double ck_deviation, double ck_stderr) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  for (size_t k = 0; k < lags.size() && k < timescales.size(); ++k) {
    for (size_t i = 0; i < timescales[k].size(); ++i) {
      const int mode = static_cast<int>(i) + 1;
      auto [it, inserted] = lag_gauges_.try_emplace({lags[k], mode});
      if (inserted) {
        const std::map<std::string, std::string> labels = {
            {"model", model_}, {"lag", std::to_string(lags[k])}, {"mode", std::to_string(mode)}};
        it->second = {&m_.lag_timescale_.Add(labels), &m_.lag_timescale_stderr_.Add(labels)};
      }
      it->second.first->Set(timescales[k][i]);
      it->second.second->Set(i < stderrs[k].size() ? stderrs[k][i] : std::numeric_limits<double>::quiet_NaN());
    }
  }
  ck_deviation_->Set(ck_deviation);
  ck_stderr_->Set(ck_stderr);
}

void ModelMetrics::OnAlarms(double score, uint64_t alarms_total) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  if (change_score_ == nullptr) {
    change_score_ = &m_.change_score_.Add({{"model", model_}});
    change_alarms_ = &m_.change_alarms_.Add({{"model", model_}});
    alarms_counted_ = alarms_total;
  }
  change_score_->Set(score);
  if (alarms_total > alarms_counted_) change_alarms_->Increment(static_cast<double>(alarms_total - alarms_counted_));
  alarms_counted_ = std::max(alarms_counted_, alarms_total);
}

void ModelMetrics::SetViewAge(double seconds) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  view_age_->Set(seconds);
}

void ModelMetrics::SetDictionaryBudget(double max_dict) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  dict_budget_->Set(max_dict);
}

void ModelMetrics::SetFailed(bool failed) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  failed_->Set(failed ? 1 : 0);
}

void ModelMetrics::SetNoView() {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  view_age_->Set(std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count());
}

void ModelMetrics::Remove() {
  if (m_.keeping_series()) return;  // the daemon exits: Metrics::KeepSeriesAtExit
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  removed_ = true;
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
    change_score_ = nullptr;
    change_alarms_ = nullptr;
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
}

}  // namespace cmestream::service
