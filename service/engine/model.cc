#include "service/engine/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/stream/learner_cost.h"
#include "service/engine/fit_summary.h"
#include "service/engine/model_config.h"

namespace cmestream::service {
namespace {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Model::SetFailOnValueForTesting: set once at startup, before any model exists.
std::atomic<bool> g_fail_on_value_set{false};
std::atomic<double> g_fail_on_value{0};

// Whether the testing hook fails this batch (a value of it equals the hook's exactly).
bool FailsForTesting(const StreamBatch& b) {
  if (!g_fail_on_value_set.load(std::memory_order_relaxed) || b.discrete() || b.n == 0) return false;
  const double v = g_fail_on_value.load(std::memory_order_relaxed);
  const int64_t values = (b.trajectory ? b.n + 1 : b.n) * b.dim;
  for (int64_t i = 0; i < values; ++i) {
    if (b.x[i] == v) return true;
  }
  if (!b.trajectory) {
    for (int64_t i = 0; i < values; ++i) {
      if (b.y[i] == v) return true;
    }
  }
  return false;
}

}  // namespace

void Model::SetFailOnValueForTesting(std::optional<double> value) {
  g_fail_on_value.store(value.value_or(0));
  g_fail_on_value_set.store(value.has_value());
}

std::optional<Model::Failure> Model::failure() const {
  absl::MutexLock lock(&stats_mu_);
  return failure_;
}

absl::Status Model::Failed() const {
  const std::optional<Failure> f = failure();
  if (!f) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "model '", name(), "' failed", f->sequence ? absl::StrCat(" at WAL record ", f->sequence) : "", ": ", f->reason,
      "; it keeps no learner state and refuses data and queries: delete it (", "`cmestream model delete ", name(),
      "`) and create it again; the daemon and other models are unaffected"));
}

void Model::MarkFailedLocked(uint64_t sequence, absl::string_view reason) {
  {
    absl::MutexLock lock(&stats_mu_);
    failure_ = Failure{sequence, std::string(reason)};
  }
  failed_.store(true);
  Publish(nullptr);  // a view of the state before the failure would answer for a model that has none
  metrics_->SetFailed(true);
  std::cerr << "cmestreamd: model '" << name() << "' failed" << (sequence ? " at WAL record " : "")
            << (sequence ? std::to_string(sequence) : "") << ": " << reason
            << " (it refuses data and queries until deleted; other models go on)\n";
}

absl::Status Model::RefusedForkIngest() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "model '", name(), "' is a fork of '", config_.fork_of(), "' (started at its alarm index ", config_.fork_index(),
      ") and learns only from that model's stream; ingest into '", config_.fork_of(),
      "' (a fork's warm-up ends when its parent's stream has brought ", config_.auto_sigma_warmup(), " pairs)"));
}

Model::Model(const v1::ModelConfig& config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log)
    : Model(config, std::move(metrics), log, StreamingLearner(LearnerOptionsFor(config))) {}

Model::Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log, StreamingLearner learner)
    : config_(std::move(config)),
      metrics_(std::move(metrics)),
      log_(log),
      created_unix_seconds_(UnixNow()),
      learner_(std::make_unique<StreamingLearner>(std::move(learner))) {
  Touch();
  metrics_->SetDictionaryBudget(discrete() ? 0 : static_cast<double>(config_.max_dict()));
  // Not shared yet, so the locks are uncontended; taken to keep the analysis exact.
  absl::MutexLock learner_lock(&learner_mu_);
  absl::MutexLock stats_lock(&stats_mu_);
  stats_ = LearnerStatsLocked();
  published_sigma_ = SigmaSelectionProto(learner_->sigma_selection());
  published_scaling_ = InputScalingProto(config_, learner_->scaler(), learner_->reduction());
  if (stats_.alarms) metrics_->OnAlarms(stats_.change_score, stats_.alarms_total);
}

Model::Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log, EvictedState state)
    : config_(std::move(config)), metrics_(std::move(metrics)), log_(log), created_unix_seconds_(UnixNow()) {
  Touch();
  metrics_->SetDictionaryBudget(discrete() ? 0 : static_cast<double>(config_.max_dict()));
  applied_sequence_.store(state.applied_sequence);
  // Not shared yet, so the locks are uncontended; taken to keep the analysis exact.
  absl::MutexLock evict_lock(&evict_mu_);
  evicted_path_ = std::move(state.path);
  evicted_digest_ = state.digest;
  evicted_alarms_ = std::move(state.alarms);
  evicted_.store(true);
  awaiting_view_.store(true);
  {
    absl::MutexLock stats_lock(&stats_mu_);
    stats_ = std::move(state.stats);
    producer_offsets_ = std::move(state.producer_offsets);
    published_sigma_ = std::move(state.sigma);
    published_scaling_ = std::move(state.scaling);
    if (stats_.alarms) metrics_->OnAlarms(stats_.change_score, stats_.alarms_total);
    // The counters' series start where the model is, as for a model restored live.
    const Stats& s = stats_;
    metrics_->OnBatchApplied(s.samples + s.pending_warmup, s.forced, s.forced_error_sum,
                             {s.pending_warmup, s.dict_x, s.dict_y});
  }
  {
    absl::MutexLock lock(&mem_mu_);
    counted_ = false;  // charged when loaded back
  }
  metrics_->OnRestoredEvicted();
}

Model::Stats Model::LearnerStatsLocked() const {
  Stats s;
  s.learner_ready = learner_->ready();
  s.pending_warmup = static_cast<uint64_t>(learner_->pending_warmup());
  s.samples = static_cast<uint64_t>(learner_->samples());
  s.progress = static_cast<uint64_t>(learner_->learned_total());
  if (const CompressedCme* cme = learner_->cme()) {
    const CompressedCme::Counters& c = cme->counters();
    s.dict_x = cme->dict_x_size();
    s.dict_y = cme->dict_y_size();
    s.forced = static_cast<uint64_t>(c.forced);
    s.forced_error_sum = c.forced_error_sum;
    s.inverse_drift = cme->last_drift();
  }
  s.spectral_basis = learner_->spectral_basis();
  if (const AlarmMonitor* a = learner_->alarms()) {
    s.alarms = true;
    s.alarms_scored = static_cast<uint64_t>(a->scored());
    s.armed_at = a->armed_at();
    s.alarms_total = static_cast<uint64_t>(a->alarms_total());
    s.change_score = a->score();
    s.change_threshold = a->threshold();
    s.alarm_note = a->RearmNote();
  }
  return s;
}

absl::StatusOr<Model::AlarmList> Model::Alarms(uint64_t since) const {
  absl::MutexLock evict_lock(&evict_mu_);
  if (evicted_alarms_) {
    // Evicted: the alarms kept at the eviction (nothing was learned since, so nothing changed).
    AlarmList list;
    list.armed_at = evicted_alarms_->armed_at;
    for (const AlarmRecord& r : evicted_alarms_->alarms) {
      if (r.index >= 0 && static_cast<uint64_t>(r.index) >= since) list.alarms.push_back(r);
    }
    const bool older_match =
        evicted_alarms_->alarms.empty() || since <= static_cast<uint64_t>(evicted_alarms_->alarms.front().index);
    list.dropped = older_match ? evicted_alarms_->dropped : 0;
    return list;
  }
  absl::MutexLock lock(&learner_mu_);
  const AlarmMonitor* a = learner_ ? learner_->alarms() : nullptr;
  if (a == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name(), "' keeps no change alarms (create it with alarms 'on', the default)"));
  }
  AlarmList list;
  list.armed_at = a->armed_at();
  for (const AlarmRecord& r : a->records()) {
    if (r.index >= 0 && static_cast<uint64_t>(r.index) >= since) list.alarms.push_back(r);
  }
  // The dropped alarms are older than every kept one: they match unless `since` passes the first kept.
  const bool older_match = a->records().empty() || since <= static_cast<uint64_t>(a->records().front().index);
  list.dropped = older_match ? static_cast<uint64_t>(a->dropped()) : 0;
  return list;
}

absl::StatusOr<Model::Admission> Model::AdmitAndLog(const PairBatch& batch, const std::string& producer_id,
                                                    uint64_t offset, uint64_t batch_index,
                                                    const std::string& episode_id,
                                                    std::optional<uint64_t> replay_sequence) {
  absl::MutexLock log_lock(&log_mu_);
  if (deleted_) return absl::NotFoundError(absl::StrCat("model '", name(), "' does not exist (deleted)"));
  if (IsFork(config_)) return RefusedForkIngest();
  if (failed()) return Failed();  // before anything is logged
  const uint64_t received = static_cast<uint64_t>(batch.n);
  Admission a;

  // De-duplication against the producer's applied offset.
  if (!producer_id.empty()) {
    const uint64_t applied = ProducerOffset(producer_id);
    if (offset > applied) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch ", batch_index, ": producer '", producer_id, "' sent offset ", offset, " but model '",
                       name(), "' has applied its pairs up to offset ", applied, " (a gap of ", offset - applied,
                       " pairs); expected offset <= ", applied, ": resume from GetProducer's applied_offset"));
    }
    if (applied == 0 && offset == 0 && !producer_offsets_known(producer_id) &&
        static_cast<int64_t>(producer_count()) >= kMaxProducersPerModel) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "batch ", batch_index, ": model '", name(), "' already tracks the offsets of ", kMaxProducersPerModel,
          " producers, its limit; reuse a producer_id, or send without one (no de-duplication)"));
    }
    const uint64_t duplicates = applied - offset;
    a.first = duplicates >= received ? batch.n : static_cast<int64_t>(duplicates);
    a.offset_after = std::max(applied, offset + received);
  }
  if (a.first >= batch.n) return a;

  // The one place an accepted batch is made durable before it is applied and acked (not
  // again when it is being replayed from the log).
  if (replay_sequence) {
    a.sequence = *replay_sequence;
    return a;
  }
  // Pending before the record exists (1 <= any cut): a snapshot that reads the log's last
  // sequence right after the write must wait for this batch (WaitAppliedThrough).
  SetPending(1);
  absl::StatusOr<uint64_t> logged = log_->WriteBatch(name(), producer_id, a.offset_after, batch, a.first, episode_id);
  if (!logged.ok() || *logged == 0) SetPending(0);
  if (!logged.ok()) return logged.status();
  a.sequence = *logged;
  a.written = a.sequence != 0;
  if (a.written) SetPending(a.sequence);
  return a;  // the log lock is released: a deletion may be logged meanwhile, after this record
}

absl::StatusOr<Model::IngestResult> Model::Ingest(const PairBatch& batch, const std::string& producer_id,
                                                  uint64_t offset, uint64_t batch_index, const std::string& episode_id,
                                                  std::optional<uint64_t> replay_sequence) {
  // (a) de-duplicate and write the record (under log_mu_), (b) wait until it is durable (no
  // lock but the sequencer), (c) apply it (under learner_mu_). The sequencer keeps one batch
  // of this model in flight, so batches are de-duplicated against the offsets of every batch
  // before them and applied in WAL order; the learner lock is never held across I/O.
  absl::MutexLock sequencer(&ingest_mu_);
  Touch();
  if (absl::Status resident = ReloadLocked(); !resident.ok()) return resident;
  // The dictionary cap of this batch: granted by the memory budget now, or the logged one.
  PairBatch capped = batch;
  if (!replay_sequence && !batch.discrete()) capped.dictionary_cap = GrantDictionaryCap(batch.n);
  // However the batch ends (applied, refused, failed): the charge follows what the model holds,
  // and an unused grant goes back. Runs under the sequencer, after every other lock is released.
  absl::Cleanup settle = [this, &capped] { SettleMemory(capped.dictionary_cap); };
  absl::StatusOr<Admission> admitted =
      AdmitAndLog(capped, producer_id, offset, batch_index, episode_id, replay_sequence);
  if (!admitted.ok()) return admitted.status();
  const int64_t first = admitted->first;
  const uint64_t offset_after = admitted->offset_after;
  const uint64_t sequence = admitted->sequence;
  IngestResult r;
  r.received = static_cast<uint64_t>(batch.n);
  // (b) without any lock another thread needs: one fdatasync covers many models' records.
  if (admitted->written) {
    if (absl::Status durable = log_->WaitDurable(sequence); !durable.ok()) {
      SetPending(0);
      return durable;
    }
  }

  // (c) apply under the learner lock: the pairs not seen before, with the episode key (a
  // re-sent tail continues what its head started: PairsOf keeps the gap only from pair 0).
  StreamBatch whole;
  whole.n = batch.n;
  whole.dim = batch.dim;
  whole.x = batch.x;
  whole.y = batch.y;
  whole.x_ids = batch.x_ids;
  whole.y_ids = batch.y_ids;
  whole.trajectory = batch.trajectory;
  whole.gap = batch.gap;
  whole.producer = producer_id;
  whole.episode = episode_id;
  whole.time = batch.time;
  const StreamBatch applied = PairsOf(whole, first, batch.n);
  Stats s;
  std::optional<ForkPlan> forks;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    if (sequence != 0) applied_sequence_.store(sequence);
    const AlarmMonitor* monitor = learner_->alarms();
    const int64_t alarms_before = monitor ? monitor->alarms_total() : 0;
    const int64_t pairs_before = monitor ? monitor->pairs() : 0;
    const int64_t index_before = monitor && !monitor->records().empty() ? monitor->records().back().index : 0;
    learner_->SetDictionaryCap(static_cast<int>(capped.dictionary_cap));
    // The per-pair anomaly scores, when asked: at most one a pair (a model with delays scores
    // fewer while its windows fill); the sink goes before the buffer can move.
    const bool scores = batch.anomaly_scores && monitor != nullptr;
    if (scores) {
      r.anomaly_scores.assign(static_cast<size_t>(applied.n), 0.0);
      r.anomaly_scores_index = static_cast<uint64_t>(pairs_before);
      learner_->SetAnomalyScoreSink(r.anomaly_scores.data());
    }
    absl::StatusOr<ObserveSummary> learned =
        FailsForTesting(applied) ? absl::InternalError("the testing hook --testing-fail-on-value matched a value")
                                 : learner_->Observe(applied);
    if (scores) learner_->SetAnomalyScoreSink(nullptr);  // before any return: the buffer may go
    if (!learned.ok()) {
      if (admitted->written) SetPending(0);
      // Internal: an estimator could not go on (the learner is unusable); the model fails,
      // the daemon goes on. Anything else is unreachable for a batch that passed ValidateBatch
      // (the same checks), and nothing was applied.
      if (!absl::IsInternal(learned.status())) return learned.status();
      MarkFailedLocked(sequence, learned.status().message());
      return Failed();
    }
    // The wire's pairs (a model with delays learns fewer: an episode's first windows fill up).
    r.applied = static_cast<uint64_t>(applied.n);
    r.learned = *learned;
    if (monitor) r.alarms_raised = static_cast<uint64_t>(monitor->alarms_total() - alarms_before);
    if (scores) r.anomaly_scores.resize(static_cast<size_t>(monitor->pairs() - pairs_before));
    if (fork_sink_ != nullptr && ForksOnChange(config_) && (alarms_before > 0 || r.alarms_raised > 0)) {
      forks = PlanForksLocked(alarms_before, index_before, pairs_before, applied.n, learned->pairs);
    }
    s = PublishLocked(learned->warmup_finished, r.applied > 0 ? 1 : 0, producer_id.empty() ? nullptr : &producer_id,
                      offset_after);
  }
  // The forks learn their share under this model's sequencer and before the batch stops being
  // pending, so the snapshot writer's WaitAppliedThrough covers them too (snapshot.cc).
  if (forks) fork_sink_->Forward(*this, *forks, applied, sequence);
  if (admitted->written) SetPending(0);
  metrics_->OnBatchApplied(r.applied, static_cast<uint64_t>(r.learned.forced), r.learned.forced_error,
                           {s.pending_warmup, s.dict_x, s.dict_y});
  if (s.alarms) metrics_->OnAlarms(s.change_score, s.alarms_total);
  r.producer_offset = offset_after;
  r.model_samples = s.samples + s.pending_warmup;
  return r;
}

StreamBatch PairsOf(const StreamBatch& b, int64_t begin, int64_t end) {
  StreamBatch part = b;
  part.n = end - begin;
  if (b.discrete()) {
    part.x_ids = b.x_ids + begin;
    part.y_ids = b.y_ids + begin;
  } else {
    part.x = b.x_at(begin);
    part.y = b.y_at(begin);
  }
  part.gap = b.gap && begin == 0;
  return part;
}

ForkPlan Model::PlanForksLocked(int64_t alarms_before, int64_t index_before, int64_t pairs_before, int64_t applied_rows,
                                int64_t learned_pairs) const {
  ForkPlan plan;
  plan.current = alarms_before;
  plan.current_index = index_before;
  // The learner's pair j of this batch starts at row (applied - learned) + j: with delays the
  // first windows of an episode fill up, so its pairs are the batch's last ones.
  const int64_t first_row = applied_rows - learned_pairs;
  for (const AlarmRecord& a : learner_->alarms()->records()) {
    if (a.index >= pairs_before) plan.starts.push_back({first_row + (a.index - pairs_before), a.index});
  }
  return plan;
}

void Model::ApplyFork(const StreamBatch& part, uint64_t sequence) {
  absl::MutexLock sequencer(&ingest_mu_);
  Touch();
  if (absl::Status resident = ReloadLocked(); !resident.ok()) {
    if (!absl::IsNotFound(resident)) {
      std::cerr << "cmestreamd: fork '" << name() << "' cannot be loaded back: " << resident << "\n";
    }
    return;
  }
  {
    absl::MutexLock log_lock(&log_mu_);
    if (deleted_) return;
  }
  Stats s;
  ObserveSummary learned;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    if (sequence != 0 && sequence <= applied_sequence_.load()) return;
    if (failed()) return;
    learner_->SetDictionaryCap(0);  // forks learn uncapped; their growth is charged after
    absl::StatusOr<ObserveSummary> observed = learner_->Observe(part);
    if (!observed.ok() && absl::IsInternal(observed.status())) {
      MarkFailedLocked(sequence, observed.status().message());
      return;
    }
    if (!observed.ok()) {
      // Unreachable: the parent's learner took the same rows with the same options.
      std::cerr << "cmestreamd: fork '" << name() << "' refused its parent's pairs: " << observed.status() << "\n";
      return;
    }
    learned = *observed;
    if (sequence != 0) applied_sequence_.store(sequence);
    s = PublishLocked(learned.warmup_finished, part.n > 0 ? 1 : 0, nullptr, 0);
  }
  SettleMemory(0);
  metrics_->OnBatchApplied(static_cast<uint64_t>(part.n), static_cast<uint64_t>(learned.forced), learned.forced_error,
                           {s.pending_warmup, s.dict_x, s.dict_y});
  if (s.alarms) metrics_->OnAlarms(s.change_score, s.alarms_total);
}

void Model::AttachLedger(MemoryLedger* ledger, double charged) {
  absl::MutexLock lock(&mem_mu_);
  ledger_ = ledger;
  charged_ = charged;
  floor_ = std::ceil(EstimateEmptyModelBytes(config_));
}

void Model::DetachLedger() {
  absl::MutexLock lock(&mem_mu_);
  if (ledger_ != nullptr && counted_) ledger_->Remove(charged_);
  ledger_ = nullptr;
  charged_ = 0;
}

double Model::HeldBytesEstimate() const { return HeldBytesAndAtoms(nullptr); }

double Model::HeldBytesAndAtoms(int* atoms) const {
  ModelShape shape;
  {
    absl::MutexLock lock(&learner_mu_);
    if (!learner_) {  // evicted: it holds nothing the budget counts
      if (atoms != nullptr) *atoms = 0;
      return 0;
    }
    shape = ShapeLocked();
  }
  if (atoms != nullptr) *atoms = static_cast<int>(shape.atoms);
  return EstimateModelMemory(config_, shape).total();
}

ModelShape Model::Shape() const {
  absl::MutexLock lock(&learner_mu_);
  return learner_ ? ShapeLocked() : ModelShape{};
}

ModelShape Model::ShapeLocked(StreamingLearner::SpectralBases* bases) const {
  ModelShape shape;
  const int max_dict = static_cast<int>(config_.max_dict());
  shape.capacity = DictionaryCapacity(0, max_dict);  // before the warm-up ends: the first capacity
  if (const CompressedCme* cme = learner_->cme()) {
    shape.capacity = DictionaryCapacity(cme->capacity(), max_dict);
    shape.atoms = std::max(cme->dict_x_size(), cme->dict_y_size());
  }
  const StreamingLearner::SpectralBases now = learner_->SpectralBasesNow();
  shape.spectral_live = now.live;
  shape.spectral_frozen = now.frozen;
  if (bases != nullptr) *bases = now;
  return shape;
}

Model::MemoryStatus Model::memory() const {
  absl::MutexLock lock(&mem_mu_);
  return MemoryStatus{charged_, last_cap_, growth_denied_};
}

uint32_t Model::GrantDictionaryCap(int64_t pairs) {
  int atoms = 0, capacity = 0;
  int64_t pending = 0, run = 0;
  ModelShape shape;
  StreamingLearner::SpectralBases bases;
  bool ready = false;
  {
    absl::MutexLock lock(&learner_mu_);
    run = learner_->options().run_pairs();
    if (const CompressedCme* cme = learner_->cme()) {
      atoms = std::max(cme->dict_x_size(), cme->dict_y_size());
      capacity = cme->capacity();
    }
    pending = learner_->pending_warmup();
    ready = learner_->ready();
    shape = ShapeLocked(&bases);
  }
  const int max_dict = static_cast<int>(config_.max_dict());
  // Each pair learned admits at most one atom per side: the pairs of this batch, the warm-up
  // buffer it may end and the open micro-batch run (< its run length) bound the growth.
  const int64_t need = std::min<int64_t>(max_dict, atoms + pairs + pending + run);
  const int want = DictionaryCapacity(static_cast<int>(need), max_dict);
  const int have = DictionaryCapacity(std::max(atoms, capacity), max_dict);
  absl::MutexLock lock(&mem_mu_);
  if (ledger_ == nullptr) return 0;
  // A spectral re-base may come in this batch (its schedule allows one within the pairs the
  // batch brings; without spectral moments yet, the batch that ends the warm-up starts them).
  const bool may_rebase = !ready || bases.live == 0 || bases.samples + pairs + pending + run >= bases.rebase_from;
  // Candidate caps, largest first: want, want / 2, ..., and the capacity it has (growth within it).
  std::vector<int> caps;
  for (int cap = want; cap > have; cap = DictionaryCapacity(cap / 2, max_dict)) {
    caps.push_back(cap);
    if (cap <= kInitialDictionaryCapacity) break;
  }
  caps.push_back(have);
  // Nothing granted: the dictionary stays as it is (never below the first capacity, which the
  // floor charged), so that only a re-base within it is charged after the batch.
  int granted = std::min(have, std::max(atoms, kInitialDictionaryCapacity));
  for (const int cap : caps) {
    // The batch's committed growth: the CME at capacity `cap`, its atoms and view at what the
    // batch may reach within it, and, if a re-base may come, the spectral moments re-based to
    // those atoms (the live basis frozen). Granted for the batch; SettleMemory charges what it
    // reached. What a denied growth still brings (a re-base to the atoms it has, or the up to 12
    // landmarks of a warm-up ended early) is charged after the batch.
    ModelShape grown = shape;
    grown.capacity = cap;
    grown.atoms = std::min<double>(cap, static_cast<double>(need));
    if (may_rebase) {
      grown.spectral_frozen = std::max(shape.spectral_frozen, shape.spectral_live);
      grown.spectral_live = std::max(shape.spectral_live, grown.atoms);
    }
    const double extra = std::ceil(EstimateModelMemory(config_, grown).total()) - charged_;
    if (extra <= 0 || ledger_->TryGrow(charged_, extra)) {
      if (extra > 0) charged_ += extra;
      granted = cap;
      break;
    }
  }
  // The whole growth granted: no cap (the record is as without a budget). A cap below what the
  // batch could need binds only if the dictionary reaches it (counted at SettleMemory).
  last_cap_ = granted >= want ? 0 : static_cast<uint32_t>(granted);
  return last_cap_;
}

void Model::SettleMemory(uint32_t cap) {
  int atoms = 0;
  const double held = std::max(std::ceil(HeldBytesAndAtoms(&atoms)), 0.0);
  absl::MutexLock lock(&mem_mu_);
  if (ledger_ == nullptr) return;
  const double target = std::max(held, floor_);
  if (target != charged_) ledger_->Adjust(target - charged_);
  charged_ = target;
  // Denied: the dictionary reached the cap the budget set (admissions beyond it were forced).
  const bool denied = cap > 0 && atoms >= static_cast<int>(cap);
  if (denied) ++growth_denied_;
  metrics_->OnMemory(ledger_->committed(), denied);
}

Model::Stats Model::PublishLocked(bool warmup_finished, uint64_t batches_added, const std::string* producer_id,
                                  uint64_t offset_after) {
  Stats s = LearnerStatsLocked();
  // Converted before the stats lock (they allocate), once: when the warm-up ended.
  std::optional<v1::SigmaSelection> chosen;
  std::optional<v1::InputScaling> scaling;
  if (warmup_finished) {
    chosen = SigmaSelectionProto(learner_->sigma_selection());
    scaling = InputScalingProto(config_, learner_->scaler(), learner_->reduction());
  }
  absl::MutexLock stats_lock(&stats_mu_);
  s.batches_applied = stats_.batches_applied + batches_added;
  stats_ = s;
  if (producer_id != nullptr) producer_offsets_[*producer_id] = offset_after;
  if (chosen) published_sigma_ = std::move(*chosen);
  if (scaling) published_scaling_ = std::move(*scaling);
  return s;
}

absl::Status Model::EndWarmup(std::optional<uint64_t> replay_sequence) {
  // The same three steps as Ingest, for a record without pairs: check and log under the
  // sequencer and log lock, wait for durability, apply under the learner lock.
  absl::MutexLock sequencer(&ingest_mu_);
  Touch();
  if (absl::Status resident = ReloadLocked(); !resident.ok()) return resident;
  uint64_t sequence = 0;
  bool written = false;
  {
    absl::MutexLock log_lock(&log_mu_);
    if (deleted_) return absl::NotFoundError(absl::StrCat("model '", name(), "' does not exist (deleted)"));
    // A fork's records are its parent's: a record of its own could overtake a parent's batch
    // in flight, which the fork would then skip as already held (ApplyFork).
    if (IsFork(config_)) return RefusedForkIngest();
    if (failed()) return Failed();
    {
      // The sequencer keeps every batch out, so the check holds until the record is applied.
      absl::MutexLock learner_lock(&learner_mu_);
      if (learner_->ready()) {
        return absl::FailedPreconditionError(absl::StrCat("model '", name(), "' has ended its warm-up already"));
      }
      if (learner_->pending_warmup() < StreamingLearner::kMinEarlyWarmup) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model '", name(), "' cannot build a view yet: it is still choosing sigma (", learner_->pending_warmup(),
            " of ", config_.auto_sigma_warmup(), " warm-up pairs buffered; a refresh ends the warm-up from ",
            StreamingLearner::kMinEarlyWarmup, " pairs on); ingest more pairs first"));
      }
    }
    if (replay_sequence) {
      sequence = *replay_sequence;
    } else {
      SetPending(1);
      PairBatch marker;
      marker.dim = dim();
      marker.end_warmup = true;
      absl::StatusOr<uint64_t> logged = log_->WriteBatch(name(), "", 0, marker, 0, "");
      if (!logged.ok() || *logged == 0) SetPending(0);
      if (!logged.ok()) return logged.status();
      sequence = *logged;
      written = sequence != 0;
      if (written) SetPending(sequence);
    }
  }
  if (written) {
    if (absl::Status durable = log_->WaitDurable(sequence); !durable.ok()) {
      SetPending(0);
      return durable;
    }
  }
  absl::Status ended;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    if (sequence != 0) applied_sequence_.store(sequence);
    learner_->SetDictionaryCap(0);  // uncapped (MEMORY in model.h); charged after
    ended = learner_->EndWarmup();  // checked above: fails only as an estimator (Internal)
    if (ended.ok()) PublishLocked(/*warmup_finished=*/true, 0, nullptr, 0);
    if (written) SetPending(0);
    if (absl::IsInternal(ended)) {
      MarkFailedLocked(sequence, ended.message());
      return Failed();
    }
  }
  SettleMemory(0);
  return ended;
}

bool Model::producer_offsets_known(const std::string& producer_id) const {
  absl::MutexLock lock(&stats_mu_);
  return producer_offsets_.count(producer_id) > 0;
}

size_t Model::producer_count() const {
  absl::MutexLock lock(&stats_mu_);
  return producer_offsets_.size();
}

uint64_t Model::ProducerOffset(const std::string& producer_id) const {
  absl::MutexLock lock(&stats_mu_);
  auto it = producer_offsets_.find(producer_id);
  return it == producer_offsets_.end() ? 0 : it->second;
}

Model::Stats Model::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

v1::ModelInfo Model::Describe(bool with_memory) const {
  v1::ModelInfo info;
  *info.mutable_config() = config_;
  info.set_state_dim(static_cast<uint32_t>(state_dim()));
  uint64_t progress = 0;  // learned pairs, against which the view's lag is counted
  {
    absl::MutexLock lock(&stats_mu_);
    progress = stats_.progress;
    info.set_samples(stats_.samples);
    info.set_pending_warmup(stats_.pending_warmup);
    info.set_dictionary_size(static_cast<uint32_t>(stats_.dict_x));
    info.set_dictionary_size_y(static_cast<uint32_t>(stats_.dict_y));
    info.set_forced_compressions(stats_.forced);
    info.set_forced_error_sum(stats_.forced_error_sum);
    info.set_inverse_drift(stats_.inverse_drift);
    info.set_batches_applied(stats_.batches_applied);
    *info.mutable_sigma_selection() = published_sigma_;
    for (const EstimatorCost& e : PerPairCost(LearnerOptionsFor(config_), stats_.dict_x, stats_.spectral_basis)) {
      v1::EstimatorCost* p = info.add_estimators();
      p->set_name(e.name);
      p->set_multiply_adds(e.multiply_adds);
      p->set_formula(e.formula);
    }
    if (!discrete()) *info.mutable_input_scaling() = published_scaling_;
    if (stats_.alarms) {
      v1::AlarmStatus* a = info.mutable_alarms();
      a->set_enabled(true);
      a->set_scored(stats_.alarms_scored);
      a->set_armed_at(stats_.armed_at);
      a->set_alarms_total(stats_.alarms_total);
      a->set_score(stats_.change_score);
      a->set_threshold(stats_.change_threshold);
      a->set_alarm_rate(config_.alarm_rate());
      if (!stats_.alarm_note.empty()) a->set_rearmed(stats_.alarm_note);
    }
  }
  if (auto v = view()) {
    *info.mutable_view() = v->Info();
    info.mutable_view()->set_lag_pairs(progress > v->progress ? progress - v->progress : 0);
    if (v->cme) *info.mutable_spectrum() = ToSpectrumInfo(v->cme->spectrum, v->heldout);
    AddSubViewStatuses(*v, info.mutable_sub_views());
  }
  info.set_created_unix_seconds(created_unix_seconds_);
  info.set_evicted(evicted());
  info.set_idle_seconds(idle_seconds());
  info.set_last_reload_seconds(last_reload_seconds());
  if (const std::optional<Failure> f = failure()) {
    info.mutable_failure()->set_sequence(f->sequence);
    info.mutable_failure()->set_reason(f->reason);
  }
  {
    absl::MutexLock lock(&mem_mu_);
    if (with_memory && ledger_ != nullptr) {
      v1::ModelMemory* m = info.mutable_memory();
      m->set_charged_bytes(charged_);
      m->set_dictionary_cap(last_cap_);
      m->set_growth_denied(growth_denied_);
      m->set_budget_bytes(ledger_->budget());
      m->set_committed_bytes(ledger_->committed());
      m->set_models(static_cast<uint64_t>(std::max<int64_t>(0, ledger_->models())));
    }
  }
  return info;
}

std::optional<Model::LearnerSnapshot> Model::Snapshot() {
  std::optional<StreamingLearner::SnapshotCopy> copy;
  uint64_t applied_sequence = 0, progress = 0;
  {
    // Only the copy under the learner lock; the open CME run is folded in after it.
    absl::MutexLock learner_lock(&learner_mu_);
    if (failed()) return std::nullopt;   // no state to build views from
    if (!learner_) return std::nullopt;  // evicted: its view reflects every pair it learned
    copy = learner_->CopyForSnapshot();
    applied_sequence = applied_sequence_.load();
    progress = static_cast<uint64_t>(learner_->learned_total());
  }
  if (!copy) return std::nullopt;
  LearnerSnapshot snap;
  static_cast<StreamingLearnerSnapshot&>(snap) = std::move(*copy).Finish();
  snap.applied_sequence = applied_sequence;
  snap.progress = progress;
  absl::MutexLock stats_lock(&stats_mu_);
  stats_.inverse_drift = snap.inverse_drift;
  return snap;
}

void Model::SetPending(uint64_t sequence) {
  absl::MutexLock lock(&pending_mu_);
  pending_sequence_ = sequence;
  pending_cv_.SignalAll();
}

void Model::WaitAppliedThrough(uint64_t sequence) {
  absl::MutexLock lock(&pending_mu_);
  while (pending_sequence_ != 0 && pending_sequence_ <= sequence) pending_cv_.Wait(&pending_mu_);
}

absl::Status Model::MarkDeleted(const std::function<absl::Status()>& log_deletion) {
  // The log lock only (held while a batch is de-duplicated and written, not while it waits
  // for durability or applies), so a deletion never waits for an fdatasync of a batch.
  absl::MutexLock log_lock(&log_mu_);
  if (absl::Status s = log_deletion(); !s.ok()) return s;
  deleted_ = true;
  return absl::OkStatus();
}

std::shared_ptr<const ModelView> Model::view() const {
  absl::MutexLock lock(&view_mu_);
  return view_;
}

void Model::SetSideExecutor(SideExecutor* executor) {
  absl::MutexLock learner_lock(&learner_mu_);
  side_executor_ = executor;
  if (learner_) learner_->SetSideExecutor(executor);
}

void Model::InstallPrequential(std::unique_ptr<PrequentialVampE> score, uint64_t view_version) {
  std::unique_ptr<PrequentialVampE> previous;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    if (!learner_) return;  // evicted: the window is not state (it restarts after a reload)
    previous = learner_->InstallPrequential(std::move(score), view_version);
  }
  // The previous window is freed here, outside the lock.
}

void Model::Publish(std::shared_ptr<const ModelView> view) {
  absl::MutexLock lock(&view_mu_);
  if (failed() && view) return;  // a refresh that copied the learner before it failed
  if (view) awaiting_view_.store(false);
  view_ = std::move(view);
}

// ---------------------------------------------------------------------------------------------
// Eviction (EVICTION in model.h)

Model::~Model() {
  absl::MutexLock evict_lock(&evict_mu_);
  if (!evicted_path_.empty() && spill_ != nullptr) spill_->Remove(evicted_path_);
}

void Model::Touch() const { last_used_ns_.store(SteadyNanos(), std::memory_order_relaxed); }

double Model::idle_seconds() const {
  return 1e-9 * static_cast<double>(SteadyNanos() - last_used_ns_.load(std::memory_order_relaxed));
}

uint64_t Model::StateDigest() {
  absl::MutexLock evict_lock(&evict_mu_);
  if (!evicted_path_.empty()) return evicted_digest_;
  // Resident: hashed under the eviction lock, so no eviction frees the learner meanwhile.
  return ResidentDigest();
}

absl::StatusOr<bool> Model::EvictIfIdle(double idle) {
  if (spill_ == nullptr || evicted() || failed()) return false;
  if (!ingest_mu_.TryLock()) return false;  // a batch in flight: not idle
  absl::StatusOr<bool> evicted_now = EvictLocked(idle);
  ingest_mu_.Unlock();
  return evicted_now;
}

absl::StatusOr<bool> Model::EvictLocked(double idle) {
  absl::MutexLock evict_lock(&evict_mu_);
  if (!evicted_path_.empty() || idle_seconds() < idle) return false;
  {
    absl::MutexLock log_lock(&log_mu_);
    if (deleted_) return false;
  }
  // The digest and alarms first, then the file: the sequencer keeps every batch, fork share
  // and end of warm-up out, so the learner is the same until it is freed below.
  const uint64_t digest = ResidentDigest();
  std::optional<AlarmList> alarms;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    if (failed()) return false;
    if (const AlarmMonitor* a = learner_->alarms()) {
      AlarmList kept;
      kept.armed_at = a->armed_at();
      kept.alarms.assign(a->records().begin(), a->records().end());
      kept.dropped = static_cast<uint64_t>(a->dropped());
      alarms = std::move(kept);
    }
  }
  absl::StatusOr<std::string> path = spill_->Write(*this);  // no learner lock across the I/O
  if (!path.ok()) return path.status();
  std::unique_ptr<StreamingLearner> freed;
  {
    absl::MutexLock learner_lock(&learner_mu_);
    freed = std::move(learner_);
  }
  evicted_path_ = *path;
  evicted_digest_ = digest;
  evicted_alarms_ = std::move(alarms);
  evicted_.store(true);
  {
    absl::MutexLock lock(&mem_mu_);
    if (ledger_ != nullptr && counted_) ledger_->Remove(charged_);
    counted_ = false;
    charged_ = 0;
  }
  metrics_->OnEvicted();
  freed.reset();  // freed under the sequencer, off the learner lock
  return true;
}

absl::Status Model::EnsureResident() {
  if (!evicted()) return absl::OkStatus();
  absl::MutexLock sequencer(&ingest_mu_);
  return ReloadLocked();
}

absl::Status Model::ReloadLocked() {
  if (!evicted()) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  absl::MutexLock evict_lock(&evict_mu_);
  if (evicted_path_.empty()) return absl::OkStatus();
  {
    absl::MutexLock log_lock(&log_mu_);
    if (deleted_) return absl::NotFoundError(absl::StrCat("model '", name(), "' does not exist (deleted)"));
  }
  absl::StatusOr<std::unique_ptr<StreamingLearner>> learner = spill_->Read(evicted_path_, *this);
  if (!learner.ok()) {
    // The spill's message says whether a restart recovers it (ModelSpill::Read).
    return absl::DataLossError(absl::StrCat("model '", name(), "' was evicted to ", evicted_path_,
                                            " and cannot be loaded back: ", learner.status().message()));
  }
  (*learner)->SetSideExecutor(side_executor_);
  {
    absl::MutexLock learner_lock(&learner_mu_);
    learner_ = *std::move(learner);
  }
  if (const uint64_t digest = ResidentDigest(); digest != evicted_digest_) {
    absl::MutexLock learner_lock(&learner_mu_);
    learner_.reset();
    return absl::DataLossError(absl::StrCat("model '", name(), "': the state loaded back from ", evicted_path_,
                                            " differs from the state evicted (digest ", digest, " instead of ",
                                            evicted_digest_,
                                            "); restart the daemon to recover it from its snapshot "
                                            "and log"));
  }
  spill_->Remove(evicted_path_);
  evicted_path_.clear();
  evicted_alarms_.reset();
  evicted_.store(false);
  {
    const double held = std::max(std::ceil(HeldBytesAndAtoms(nullptr)), 0.0);
    absl::MutexLock lock(&mem_mu_);
    charged_ = std::max(held, floor_);
    if (ledger_ != nullptr) ledger_->Admit(charged_);  // what was acknowledged is never refused
    counted_ = true;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_reload_seconds_.store(seconds);
  if (!eviction_forgotten_) metrics_->OnReloaded(seconds);
  return absl::OkStatus();
}

void Model::ForgetEviction() {
  absl::MutexLock evict_lock(&evict_mu_);
  if (!evicted_path_.empty() && !eviction_forgotten_) metrics_->OnEvictedDeleted();
  eviction_forgotten_ = true;
}

}  // namespace cmestream::service
