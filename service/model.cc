#include "service/model.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/cme/bandwidth.h"
#include "service/model_config.h"

namespace cmestream::service {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Model::Model(v1::ModelConfig config, std::shared_ptr<ModelMetrics> metrics, BatchLog* log)
    : config_(std::move(config)), metrics_(std::move(metrics)), log_(log), created_unix_seconds_(UnixNow()) {
  if (IsAutoSigma(config_)) {
    warmup_x_.resize(config_.auto_sigma_warmup(), config_.dim());
    warmup_y_.resize(config_.auto_sigma_warmup(), config_.dim());
    sigma_selection_.set_automatic(true);
  } else {
    cme_ = std::make_unique<CompressedCme>(CmeOptionsFor(config_, config_.sigma()));
    sigma_selection_.set_automatic(false);
    sigma_selection_.set_chosen(config_.sigma());
    stats_.learner_ready = true;
  }
  published_sigma_ = sigma_selection_;
}

void Model::FeedLearner(const double* x, const double* y) {
  if (cme_) {
    cme_->Observe(x, y);
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
  cme_->ObserveBatch(warmup_x_, warmup_y_);
  warmup_x_.resize(0, 0);  // the buffer is never needed again
  warmup_y_.resize(0, 0);
  warmup_n_ = 0;
}

absl::StatusOr<Model::IngestResult> Model::Ingest(const PairBatch& batch, const std::string& producer_id,
                                                  uint64_t offset, uint64_t batch_index) {
  std::lock_guard<std::mutex> learner_lock(learner_mu_);
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
    const uint64_t duplicates = applied - offset;
    first = duplicates >= r.received ? batch.n : static_cast<int64_t>(duplicates);
    offset_after = std::max(applied, offset + r.received);
  }

  // The one place an accepted batch would be made durable before it is applied and acked.
  if (first < batch.n) {
    absl::Status logged = log_->Append(name(), producer_id, offset_after, batch, first);
    if (!logged.ok()) return logged;
  }

  const CompressedCme::Counters before = cme_ ? cme_->counters() : CompressedCme::Counters{};
  const bool had_learner = cme_ != nullptr;
  for (int64_t i = first; i < batch.n; ++i) FeedLearner(batch.x_at(i), batch.y_at(i));
  r.applied = static_cast<uint64_t>(batch.n - first);

  Stats s;
  s.learner_ready = cme_ != nullptr;
  s.pending_warmup = static_cast<uint64_t>(warmup_n_);
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
  metrics_->OnBatchApplied(r.applied, forced_delta, forced_error_delta, {s.pending_warmup, s.dict_x, s.dict_y});
  r.producer_offset = offset_after;
  r.model_samples = s.samples + s.pending_warmup;
  return r;
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
  if (auto v = view()) *info.mutable_view() = v->Info();
  info.set_created_unix_seconds(created_unix_seconds_);
  return info;
}

std::optional<Model::LearnerSnapshot> Model::Snapshot() {
  std::lock_guard<std::mutex> learner_lock(learner_mu_);
  if (!cme_) return std::nullopt;
  LearnerSnapshot snap;
  snap.inverse_drift = cme_->CheckDriftAndRefactorize();
  snap.cme = CmeSnapshot::From(*cme_);
  snap.samples = static_cast<uint64_t>(cme_->samples());
  std::lock_guard<std::mutex> stats_lock(stats_mu_);
  stats_.inverse_drift = snap.inverse_drift;
  return snap;
}

std::shared_ptr<const ModelView> Model::view() const {
  std::lock_guard<std::mutex> lock(view_mu_);
  return view_;
}

void Model::Publish(std::shared_ptr<const ModelView> view) {
  std::lock_guard<std::mutex> lock(view_mu_);
  view_ = std::move(view);
}

}  // namespace cmestream::service
