#include "service/model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/cme/bandwidth.h"
#include "core/io/binary_io.h"
#include "service/fit_summary.h"
#include "service/lags.h"
#include "service/model_config.h"

namespace cmestream::service {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Model::Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log)
    : config_(std::move(config)), metrics_(std::move(metrics)), log_(log), created_unix_seconds_(UnixNow()) {
  TransitionCounts::Options counts;
  counts.max_states = discrete() ? static_cast<int>(config_.num_states()) : static_cast<int>(config_.max_dict());
  metrics_->SetDictionaryBudget(discrete() ? 0 : static_cast<double>(config_.max_dict()));
  counts.forgetting = config_.forgetting();
  counts_ = std::make_unique<TransitionCounts>(counts);
  if (config_.window() > 0) {
    PredictiveStateAccumulator::Options o;
    o.history_length = static_cast<int>(config_.window());
    if (discrete()) {
      o.kind = PredictiveStateAccumulator::Kind::kDiscrete;
      o.num_symbols = static_cast<int>(config_.num_states());
      o.max_history_states = 1 << 23;  // NormalizeModelConfig bounds the statistics' size
    } else {
      o.kind = PredictiveStateAccumulator::Kind::kLinearGaussian;
      o.dim = dim();
      o.future_length = static_cast<int>(config_.window());
    }
    predictive_ = std::make_unique<PredictiveStateAccumulator>(o);
  }
  episode_last_.assign(discrete() ? 1 : config_.dim(), 0.0);
  id_scratch_.assign(1, 0.0);
  if (discrete()) {
    if (config_.latent_states() > 0) {
      MultiViewAccumulator::Options o;
      o.features.kind = LatentFeatureOptions::Kind::kOneHot;
      o.features.dim = 1;
      o.features.num_symbols = static_cast<int>(config_.num_states());
      o.features.seed = config_.seed();
      o.reservoir_size = static_cast<int>(config_.reservoir());
      o.reservoir_seed = config_.seed() + 7;
      o.batch = std::max(1, std::min(32, 16384 / o.features.size()));
      latent_ = std::make_unique<MultiViewAccumulator>(o);
    }
    stats_.learner_ready = true;
    sigma_selection_.set_automatic(false);
    if (HasLagStatistics(config_)) lags_ = std::make_unique<LagStatistics>(LagOptionsFor(config_, 0));
  } else if (IsAutoSigma(config_)) {
    warmup_x_.resize(config_.auto_sigma_warmup(), config_.dim());
    warmup_y_.resize(config_.auto_sigma_warmup(), config_.dim());
    sigma_selection_.set_automatic(true);
  } else {
    cme_ = std::make_unique<CompressedCme>(CmeOptionsFor(config_, config_.sigma()));
    CreateSigmaDependent(config_.sigma());
    sigma_selection_.set_automatic(false);
    sigma_selection_.set_chosen(config_.sigma());
    stats_.learner_ready = true;
  }
  published_sigma_ = sigma_selection_;
}

void Model::CreateSigmaDependent(double sigma) {
  absl::StatusOr<FeatureMap> features =
      FeatureMap::Rff(dim(), static_cast<int>(config_.rff_features()), sigma, config_.seed());
  // NormalizeModelConfig guarantees valid arguments; a failure here is a programming error.
  if (!features.ok()) std::abort();
  EmbeddingMoments::Options mo;
  mo.forgetting = config_.forgetting();
  moments_ = std::make_unique<EmbeddingMoments>(std::make_shared<const FeatureMap>(*std::move(features)), mo);
  spectral_ = std::make_unique<SpectralMoments>(SpectralOptionsFor(config_, sigma));
  lags_ = std::make_unique<LagStatistics>(LagOptionsFor(config_, sigma));
  if (config_.latent_states() > 0) {
    MultiViewAccumulator::Options o;
    o.features.kind = LatentFeatureOptions::Kind::kRandomFourier;
    o.features.dim = dim();
    o.features.num_features = static_cast<int>(config_.rff_features());
    o.features.sigma = sigma;
    o.features.seed = config_.seed();
    o.reservoir_size = static_cast<int>(config_.reservoir());
    o.reservoir_seed = config_.seed() + 7;
    o.batch = std::max(1, std::min(32, 16384 / o.features.size()));
    latent_ = std::make_unique<MultiViewAccumulator>(o);
  }
}

void Model::FeedPair(const double* x, const double* y) {
  // Test, then train: the published view's model scores the pair before anything learns it.
  if (prequential_) prequential_->Observe(x, y);
  cme_->Observe(x, y);
  // The CME has just computed k_X(x) and k_X(y); reuse its nearest atoms (docs/algorithms.md §2).
  const int i = cme_->last_nearest_x(), j = cme_->last_nearest_y_in_x();
  if (i >= 0 && j >= 0) counts_->Add(i, j);
  moments_->Observe(x, y);
  // The spectral basis follows the X dictionary by epochs (O(1) check; a new epoch copies the
  // atoms, rarely). Checked per sample so the state depends only on the pairs, not on batching.
  if (spectral_->ShouldStartEpoch(cme_->dict_x_size())) spectral_->StartEpoch(cme_->x_atoms());
  spectral_->Observe(x, y);
}

void Model::FeedLearner(const double* x, const double* y) {
  if (cme_) {
    FeedPair(x, y);
    return;
  }
  const int d = dim();
  for (int j = 0; j < d; ++j) {
    warmup_x_(warmup_n_, j) = x[j];
    warmup_y_(warmup_n_, j) = y[j];
  }
  if (++warmup_n_ == warmup_x_.rows()) FinishWarmup();
}

void Model::FinishWarmup() {
  BandwidthSelectionOptions options;
  options.seed = config_.seed();
  const BandwidthSelection sel = SelectBandwidth(warmup_x_, warmup_y_, options);
  sigma_selection_.set_chosen(sel.chosen);
  sigma_selection_.set_median_distance(sel.median_distance);
  for (double c : sel.candidates) sigma_selection_.add_candidates(c);
  for (double s : sel.scores) sigma_selection_.add_scores(s);
  sigma_selection_.set_warmup_pairs(static_cast<uint32_t>(warmup_n_));
  cme_ = std::make_unique<CompressedCme>(CmeOptionsFor(config_, sel.chosen));
  CreateSigmaDependent(sel.chosen);
  // The buffered pairs feed the counts and moments too (the latent model, which needs the
  // pairs' order, starts with the next trajectory batch).
  for (int64_t t = 0; t < warmup_n_; ++t) FeedPair(warmup_x_.row(t).data(), warmup_y_.row(t).data());
  warmup_x_.resize(0, 0);  // the buffer is never needed again
  warmup_y_.resize(0, 0);
  warmup_n_ = 0;
}

void Model::ObserveSequence(const double* state) {
  // Inputs were validated with the batch, so these cannot fail.
  if (latent_) (void)latent_->Observe(state);
  if (predictive_) (void)predictive_->Observe(state);
  if (lags_) {
    SyncLagBasis();
    lags_->ObserveState(state);
  }
}

void Model::SyncLagBasis() {
  // Continuous: the lag basis is re-picked when the spectral moments start an epoch (the X
  // dictionary outgrew the basis). Checked before every state or pair it feeds, right after the
  // CME and spectral moments saw that pair, so the basis depends on the stream, not on batching.
  if (spectral_ && cme_ && lags_->NeedsRebase(spectral_->epoch())) lags_->Rebase(cme_->x_atoms(), spectral_->epoch());
}

const double* Model::TrajectoryState(const PairBatch& batch, int64_t k) {
  // State k of a trajectory batch (k = 0..n) as w doubles; discrete ids go through id_scratch_
  // (valid until the next call).
  if (batch.discrete()) {
    id_scratch_[0] = static_cast<double>(k < batch.n ? batch.x_ids[k] : batch.y_ids[batch.n - 1]);
    return id_scratch_.data();
  }
  return k < batch.n ? batch.x_at(k) : batch.y_at(batch.n - 1);
}

void Model::BeginEpisodeBatch(const double* start, const std::string& producer_id, const std::string& episode_id) {
  const int w = static_cast<int>(episode_last_.size());
  bool continues = episode_open_ && producer_id == episode_producer_ && episode_id == episode_id_;
  for (int j = 0; continues && j < w; ++j) continues = start[j] == episode_last_[j];
  if (!continues) {
    if (latent_) latent_->StartEpisode();
    if (predictive_) predictive_->StartEpisode();
    if (lags_) lags_->StartEpisode();
    ObserveSequence(start);
  }
}

void Model::EndEpisodeBatch(const double* last, const std::string& producer_id, const std::string& episode_id) {
  const int w = static_cast<int>(episode_last_.size());
  for (int j = 0; j < w; ++j) episode_last_[j] = last[j];
  if (!episode_open_ || episode_producer_ != producer_id) episode_producer_ = producer_id;
  if (episode_id_ != episode_id) episode_id_ = episode_id;
  episode_open_ = true;
}

uint64_t Model::SamplesLocked() const {
  if (discrete()) return static_cast<uint64_t>(counts_->samples());
  return cme_ ? static_cast<uint64_t>(cme_->samples()) : 0;
}

absl::StatusOr<Model::IngestResult> Model::Ingest(const PairBatch& batch, const std::string& producer_id,
                                                  uint64_t offset, uint64_t batch_index,
                                                  const std::string& episode_id,
                                                  std::optional<uint64_t> replay_sequence) {
  // (a) de-duplicate and write the record, (b) wait until it is durable, (c) apply it. The
  // sequencer lock keeps one batch of this model in flight, so batches are de-duplicated
  // against the offsets of every batch before them and applied in WAL order; the learner lock
  // is only taken for (c), never across I/O.
  std::lock_guard<std::mutex> sequencer(ingest_mu_);
  std::unique_lock<std::mutex> log_lock(log_mu_);
  if (deleted_) return absl::NotFoundError(absl::StrCat("model '", name(), "' does not exist (deleted)"));
  IngestResult r;
  r.received = static_cast<uint64_t>(batch.n);

  // De-duplication against the producer's applied offset.
  int64_t first = 0;
  uint64_t offset_after = 0;
  if (!producer_id.empty()) {
    const uint64_t applied = ProducerOffset(producer_id);
    if (offset > applied) {
      return absl::FailedPreconditionError(absl::StrCat(
          "batch ", batch_index, ": producer '", producer_id, "' sent offset ", offset, " but model '", name(),
          "' has applied its pairs up to offset ", applied, " (a gap of ", offset - applied,
          " pairs); expected offset <= ", applied, ": resume from GetProducer's applied_offset"));
    }
    if (applied == 0 && offset == 0 && !producer_offsets_known(producer_id) &&
        static_cast<int64_t>(producer_count()) >= kMaxProducersPerModel) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "batch ", batch_index, ": model '", name(), "' already tracks the offsets of ", kMaxProducersPerModel,
          " producers, its limit; reuse a producer_id, or send without one (no de-duplication)"));
    }
    const uint64_t duplicates = applied - offset;
    first = duplicates >= r.received ? batch.n : static_cast<int64_t>(duplicates);
    offset_after = std::max(applied, offset + r.received);
  }

  // The one place an accepted batch is made durable before it is applied and acked (not
  // again when it is being replayed from the log).
  uint64_t sequence = 0;
  if (first < batch.n) {
    if (replay_sequence) {
      sequence = *replay_sequence;
    } else {
      // Pending before the record exists (1 <= any cut): a snapshot that reads the log's last
      // sequence right after the write must wait for this batch (WaitAppliedThrough).
      SetPending(1);
      absl::StatusOr<uint64_t> logged = log_->WriteBatch(name(), producer_id, offset_after, batch, first, episode_id);
      if (!logged.ok() || *logged == 0) SetPending(0);
      if (!logged.ok()) return logged.status();
      sequence = *logged;
      if (sequence != 0) SetPending(sequence);
      log_lock.unlock();  // a deletion may be logged meanwhile: this record precedes it
      // (b) without any lock another thread needs: one fdatasync covers many models' records.
      if (absl::Status durable = log_->WaitDurable(sequence); !durable.ok()) {
        SetPending(0);
        return durable;
      }
    }
  }
  if (log_lock.owns_lock()) log_lock.unlock();

  // (c) apply under the learner lock.
  std::lock_guard<std::mutex> learner_lock(learner_mu_);
  if (sequence != 0) applied_sequence_.store(sequence);
  const CompressedCme::Counters before = cme_ ? cme_->counters() : CompressedCme::Counters{};
  const bool had_learner = cme_ != nullptr;
  // One pass over the pairs, every estimator fed per pair in stream order: the CME, counts and
  // moments (FeedLearner), then the trajectory's next state (latent, predictive, lags) or, for
  // unordered pairs, the lag-1 statistics. Interleaving keeps every estimator's state a function
  // of the pairs alone, not of where batches end: the lag basis follows the spectral epoch as it
  // was at that pair, and states after the sigma warm-up ends mid-batch are observed exactly as
  // when the warm-up ends on a batch boundary (a producer that resumes with other batch sizes
  // after a crash gets the same state digest, tests/integration/test_fault_kill.py).
  const bool states = batch.trajectory && first < batch.n &&
                        (latent_ || predictive_ || lags_ || config_.latent_states() > 0 || HasLagStatistics(config_));
  if (states) BeginEpisodeBatch(TrajectoryState(batch, first), producer_id, episode_id);
  for (int64_t i = first; i < batch.n; ++i) {
    if (batch.discrete()) {
      counts_->Add(static_cast<int>(batch.x_ids[i]), static_cast<int>(batch.y_ids[i]));
    } else {
      FeedLearner(batch.x_at(i), batch.y_at(i));
    }
    if (states) {
      ObserveSequence(TrajectoryState(batch, i + 1));
    } else if (!batch.trajectory && lags_) {
      // Unordered pairs have no history: lag 1 only (service/lags.h).
      if (batch.discrete()) {
        const double ids[2] = {static_cast<double>(batch.x_ids[i]), static_cast<double>(batch.y_ids[i])};
        lags_->ObservePair(&ids[0], &ids[1]);
      } else {
        SyncLagBasis();
        lags_->ObservePair(batch.x_at(i), batch.y_at(i));
      }
    }
  }
  if (states) EndEpisodeBatch(TrajectoryState(batch, batch.n), producer_id, episode_id);
  r.applied = static_cast<uint64_t>(batch.n - first);

  Stats s;
  s.learner_ready = cme_ != nullptr || discrete();
  s.pending_warmup = static_cast<uint64_t>(warmup_n_);
  if (discrete()) s.samples = SamplesLocked();
  uint64_t forced_delta = 0;
  double forced_error_delta = 0;
  if (cme_) {
    const CompressedCme::Counters& c = cme_->counters();
    s.samples = static_cast<uint64_t>(c.samples);
    s.dict_x = cme_->dict_x_size();
    s.dict_y = cme_->dict_y_size();
    s.forced = static_cast<uint64_t>(c.forced);
    s.forced_error_sum = c.forced_error_sum;
    s.inverse_drift = cme_->last_drift();
    forced_delta = static_cast<uint64_t>(c.forced - before.forced);
    forced_error_delta = c.forced_error_sum - before.forced_error_sum;
  }
  {
    std::lock_guard<std::mutex> stats_lock(stats_mu_);
    s.batches_applied = stats_.batches_applied + (r.applied > 0 ? 1 : 0);
    stats_ = s;
    if (!producer_id.empty()) producer_offsets_[producer_id] = offset_after;
    if (!had_learner && cme_) published_sigma_ = sigma_selection_;
  }
  if (sequence != 0 && !replay_sequence) SetPending(0);
  metrics_->OnBatchApplied(r.applied, forced_delta, forced_error_delta, {s.pending_warmup, s.dict_x, s.dict_y});
  r.producer_offset = offset_after;
  r.model_samples = s.samples + s.pending_warmup;
  return r;
}

bool Model::producer_offsets_known(const std::string& producer_id) const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return producer_offsets_.count(producer_id) > 0;
}

size_t Model::producer_count() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return producer_offsets_.size();
}

uint64_t Model::ProducerOffset(const std::string& producer_id) const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  auto it = producer_offsets_.find(producer_id);
  return it == producer_offsets_.end() ? 0 : it->second;
}

Model::Stats Model::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

v1::ModelInfo Model::Describe() const {
  v1::ModelInfo info;
  *info.mutable_config() = config_;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    info.set_samples(stats_.samples);
    info.set_pending_warmup(stats_.pending_warmup);
    info.set_dictionary_size(static_cast<uint32_t>(stats_.dict_x));
    info.set_dictionary_size_y(static_cast<uint32_t>(stats_.dict_y));
    info.set_forced_compressions(stats_.forced);
    info.set_forced_error_sum(stats_.forced_error_sum);
    info.set_inverse_drift(stats_.inverse_drift);
    info.set_batches_applied(stats_.batches_applied);
    *info.mutable_sigma_selection() = published_sigma_;
  }
  if (auto v = view()) {
    *info.mutable_view() = v->Info();
    if (v->cme) *info.mutable_spectrum() = v->cme->spectrum;
    AddSubViewStatuses(*v, info.mutable_sub_views());
  }
  info.set_created_unix_seconds(created_unix_seconds_);
  return info;
}

std::optional<Model::LearnerSnapshot> Model::Snapshot() {
  std::lock_guard<std::mutex> learner_lock(learner_mu_);
  if (!cme_ && !discrete()) return std::nullopt;
  LearnerSnapshot snap;
  if (cme_) {
    snap.inverse_drift = cme_->last_drift();  // measured by the learner's periodic check
    snap.cme = CmeSnapshot::From(*cme_);
  }
  snap.samples = SamplesLocked();
  snap.applied_sequence = applied_sequence_.load();
  snap.counts = counts_->Snapshot();
  if (moments_) snap.moments = moments_->Snapshot();
  if (latent_) snap.latent = latent_->TakeSnapshot();
  if (predictive_) snap.predictive = predictive_->TakeSnapshot();
  if (spectral_) snap.spectral = spectral_->Snapshot();
  if (prequential_) snap.prequential = LearnerSnapshot::Prequential{prequential_view_, prequential_->pairs(), prequential_->Score()};
  if (lags_) snap.lags = lags_->Snapshot();
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  stats_.inverse_drift = snap.inverse_drift;
  return snap;
}

void Model::SetPending(uint64_t sequence) {
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pending_sequence_ = sequence;
  }
  pending_cv_.notify_all();
}

void Model::WaitAppliedThrough(uint64_t sequence) {
  std::unique_lock<std::mutex> lock(pending_mu_);
  pending_cv_.wait(lock, [&] { return pending_sequence_ == 0 || pending_sequence_ > sequence; });
}

absl::Status Model::MarkDeleted(const std::function<absl::Status()>& log_deletion) {
  // The log lock only (held while a batch is de-duplicated and written, not while it waits
  // for durability or applies), so a deletion never waits for an fdatasync of a batch.
  std::lock_guard<std::mutex> log_lock(log_mu_);
  if (absl::Status s = log_deletion(); !s.ok()) return s;
  deleted_ = true;
  return absl::OkStatus();
}

std::shared_ptr<const ModelView> Model::view() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_;
}

void Model::InstallPrequential(std::unique_ptr<PrequentialVampE> score, uint64_t view_version) {
  {
    std::lock_guard<std::mutex> learner_lock(learner_mu_);
    prequential_.swap(score);
    prequential_view_ = view_version;
  }
  // `score` now holds the previous window: freed here, outside the lock.
}

void Model::Publish(std::shared_ptr<const ModelView> view) {
  std::lock_guard<std::mutex> lock(view_mu_);
  view_ = std::move(view);
}

}  // namespace cmestream::service
