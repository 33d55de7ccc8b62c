#include "service/ingestor.h"

#include "absl/strings/str_cat.h"
#include "service/batch.h"

namespace cmestream::service {

absl::StatusOr<v1::IngestAck> Ingestor::Apply(const v1::IngestBatch& batch, uint64_t batch_index) {
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(batch.model());
  if (!model.ok()) {
    metrics_.OnUnknownModelBatch();
    return absl::NotFoundError(absl::StrCat("batch ", batch_index, ": ", model.status().message()));
  }
  if (absl::Status s = CheckBatchPairs(batch, (*model)->dim(), batch_index, limits_); !s.ok()) {
    (*model)->metrics().OnRejected("batch_limit");
    return s;
  }
  const uint32_t num_states = (*model)->config().num_states();
  BatchCheck check = num_states > 0 ? ValidateDiscreteBatch(batch, num_states, batch_index)
                                    : ValidateBatch(batch, (*model)->dim(), batch_index, limits_.max_abs_value);
  if (!check.status.ok()) {
    (*model)->metrics().OnRejected(check.reason);
    return check.status;
  }
  // Bounded wait for the learner lock: beyond --max-queued-batches the caller is told to retry.
  absl::StatusOr<IngestQueue::Ticket> ticket = queue_.Admit((*model)->name());
  if (!ticket.ok()) {
    (*model)->metrics().OnRejected("queue_full");
    return ticket.status();
  }
  absl::StatusOr<Model::IngestResult> result =
      (*model)->Ingest(check.batch, batch.producer_id(), batch.offset(), batch_index, batch.episode_id());
  if (!result.ok()) {
    (*model)->metrics().OnRejected(
        result.status().code() == absl::StatusCode::kFailedPrecondition ? "offset_gap" : "log_error");
    return result.status();
  }
  v1::IngestAck ack;
  ack.set_batch_index(batch_index);
  ack.set_pairs_received(result->received);
  ack.set_pairs_applied(result->applied);
  ack.set_producer_offset(result->producer_offset);
  ack.set_model_samples(result->model_samples);
  return ack;
}

}  // namespace cmestream::service
