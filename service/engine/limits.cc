#include "service/engine/limits.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/engine/model_config.h"

namespace cmestream::service {

absl::Status LimitOptions::Validate() const {
  if (max_batch_pairs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("flag --max-batch-pairs is ", max_batch_pairs, ", expected >= 1"));
  }
  if (max_models < 1)
    return absl::InvalidArgumentError(absl::StrCat("flag --max-models is ", max_models, ", expected >= 1"));
  if (max_dim < 1 || max_dim > static_cast<int>(kMaxDim)) {
    return absl::InvalidArgumentError(absl::StrCat("flag --max-dim is ", max_dim, ", expected 1..", kMaxDim));
  }
  if (max_queued_batches < 0 || max_queued_batches > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --max-queued-batches is ", max_queued_batches, ", expected 0..1000000"));
  }
  if (retry_after_ms < 1) return absl::InvalidArgumentError("retry_after_ms must be >= 1");
  if (!(max_abs_value > 0) || !std::isfinite(max_abs_value) || max_abs_value > 1e150) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --max-abs-value is ", max_abs_value, ", expected a number in (0, 1e150]"));
  }
  if (!(max_memory_bytes >= 0) || !std::isfinite(max_memory_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("flag --max-memory is ", max_memory_bytes,
                                                   " bytes, expected >= 0 (0: from the cgroup limit or RAM)"));
  }
  if (!(max_query_mb >= 1) || !std::isfinite(max_query_mb) || max_query_mb > 1e6) {
    return absl::InvalidArgumentError(absl::StrCat("flag --max-query-mb is ", max_query_mb, ", expected 1..1e6"));
  }
  return absl::OkStatus();
}

int64_t ClaimedPairs(const v1::IngestBatch& b, int dim) {
  const int64_t d = std::max(dim, 1);
  const int64_t states = b.states_size() / d;
  const int64_t ids = b.state_ids_size();
  return std::max({int64_t{b.x_size()} / d, int64_t{b.y_size()} / d, states - 1, int64_t{b.x_ids_size()},
                   int64_t{b.y_ids_size()}, ids - 1, int64_t{0}});
}

absl::Status CheckBatchPairs(const v1::IngestBatch& batch, int dim, uint64_t batch_index, const LimitOptions& limits) {
  const int64_t pairs = ClaimedPairs(batch, dim);
  if (pairs <= limits.max_batch_pairs) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "batch ", batch_index, ": ", pairs, " pairs, more than this daemon accepts in one batch (--max-batch-pairs ",
      limits.max_batch_pairs, "); split it into smaller batches"));
}

absl::Status CheckModelConfigLimits(const v1::ModelConfig& config, const LimitOptions& limits) {
  if (config.dim() > static_cast<uint32_t>(limits.max_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name().substr(0, 80), "': field dim is ",
                                                   config.dim(), ", more than this daemon allows (--max-dim ",
                                                   limits.max_dim, ")"));
  }
  // A model with delays learns on windows of dim x delays values: that is what costs memory.
  const uint64_t state_dim = static_cast<uint64_t>(config.dim()) * std::max<uint32_t>(config.delays(), 1);
  if (state_dim > static_cast<uint64_t>(limits.max_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name().substr(0, 80), "': dim x delays is ",
                                                   config.dim(), " x ", config.delays(), " = ", state_dim,
                                                   ", more than this daemon allows (--max-dim ", limits.max_dim, ")"));
  }
  return absl::OkStatus();
}

absl::Status QueueFullError(const std::string& model, int waiting, const LimitOptions& limits) {
  absl::Status s = absl::ResourceExhaustedError(
      absl::StrCat("model '", model.substr(0, 80), "' is busy: ", waiting,
                   " batches already wait for its learner (--max-queued-batches ", limits.max_queued_batches,
                   "); retry after ", limits.retry_after_ms, " ms (trailing metadata ", kRetryAfterMetadataKey, ")"));
  s.SetPayload(kRetryPayloadUrl, absl::Cord(absl::StrCat(limits.retry_after_ms)));
  return s;
}

IngestQueue::Ticket::~Ticket() {
  if (queue_ != nullptr) queue_->Release(model_);
}

absl::StatusOr<IngestQueue::Ticket> IngestQueue::Admit(const std::string& model) {
  absl::MutexLock lock(&mu_);
  int& n = in_flight_[model];
  // n batches in flight: one applies, n - 1 wait. Admitting makes n wait.
  if (n > limits_.max_queued_batches) {
    return QueueFullError(model, n - 1, limits_);
  }
  ++n;
  return Ticket(this, model);
}

int IngestQueue::InFlight(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(model);
  return it == in_flight_.end() ? 0 : it->second;
}

void IngestQueue::Release(const std::string& model) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(model);
  if (it == in_flight_.end()) return;
  if (--it->second <= 0) in_flight_.erase(it);
}

}  // namespace cmestream::service
