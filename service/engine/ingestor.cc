#include "service/engine/ingestor.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "service/engine/batch.h"

namespace cmestream::service {

void Ingestor::Submit(const v1::IngestBatch& batch, uint64_t batch_index, Done done) {
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(batch.model());
  if (!model.ok()) {
    metrics_.OnUnknownModelBatch();
    done(absl::NotFoundError(absl::StrCat("batch ", batch_index, ": ", model.status().message())));
    return;
  }
  if (absl::Status s = CheckBatchPairs(batch, (*model)->dim(), batch_index, limits_); !s.ok()) {
    (*model)->metrics().OnRejected("batch_limit");
    done(s);
    return;
  }
  const uint32_t num_states = (*model)->config().num_states();
  BatchCheck check = num_states > 0 ? ValidateDiscreteBatch(batch, num_states, batch_index)
                                    : ValidateBatch(batch, (*model)->dim(), batch_index, limits_.max_abs_value);
  if (check.status.ok() && (*model)->config().delays() > 1 && !check.batch.trajectory) {
    check.reason = "payload_form";
    check.status = absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch_index, ": field x/y holds pairs, expected states (a trajectory of raw rows): model '",
        (*model)->name(), "' has delays ", (*model)->config().delays(),
        " and learns on windows of consecutive rows, which pairs do not carry"));
  }
  if (check.status.ok() && batch.dictionary_cap() != 0) {
    check.reason = "payload_form";
    check.status = absl::InvalidArgumentError(
        absl::StrCat("batch ", batch_index,
                     ": field dictionary_cap is set, expected it unset: only the daemon's log writes it (model '",
                     (*model)->name(), "')"));
  }
  if (check.status.ok() && batch.received_unix_seconds() != 0) {
    check.reason = "payload_form";
    check.status =
        absl::InvalidArgumentError(absl::StrCat("batch ", batch_index,
                                                ": field received_unix_seconds is set, expected it unset: only the "
                                                "daemon's log writes it (model '",
                                                (*model)->name(), "')"));
  }
  if (!check.status.ok()) {
    (*model)->metrics().OnRejected(check.reason);
    done(check.status);
    return;
  }
  // Bounded queue per model: beyond --max-queued-batches the caller is told to retry.
  absl::StatusOr<IngestQueue::Ticket> ticket = queue_.Admit((*model)->name());
  if (!ticket.ok()) {
    (*model)->metrics().OnRejected("queue_full");
    done(ticket.status());
    return;
  }
  auto held = std::make_shared<IngestQueue::Ticket>(*std::move(ticket));
  std::shared_ptr<Model> m = *std::move(model);
  const Model* key = m.get();
  pool_->Submit(key, m, [m, held, &batch, batch_index, pairs = check.batch, done = std::move(done)]() mutable {
    pairs.time = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());  // arrival as logged: alarms keep this time
    pairs.anomaly_scores = batch.anomaly_scores();
    absl::StatusOr<Model::IngestResult> result =
        m->Ingest(pairs, batch.producer_id(), batch.offset(), batch_index, batch.episode_id());
    // The place in the queue is freed before the ack goes out, so a client that sends its next
    // batch on the ack finds it free.
    held.reset();
    if (!result.ok()) {
      m->metrics().OnRejected(result.status().code() == absl::StatusCode::kFailedPrecondition ? "offset_gap"
                                                                                              : "log_error");
      done(result.status());
      return;
    }
    v1::IngestAck ack;
    ack.set_batch_index(batch_index);
    ack.set_pairs_received(result->received);
    ack.set_pairs_applied(result->applied);
    ack.set_producer_offset(result->producer_offset);
    ack.set_model_samples(result->model_samples);
    const ObserveSummary& l = result->learned;
    v1::BatchEffects* e = ack.mutable_effects();
    e->set_warmup_finished(l.warmup_finished);
    e->set_admitted_x(static_cast<uint64_t>(l.admitted_x));
    e->set_admitted_y(static_cast<uint64_t>(l.admitted_y));
    e->set_forced(static_cast<uint64_t>(l.forced));
    e->set_spectral_epochs(static_cast<uint64_t>(l.spectral_epochs));
    e->set_lag_rebases(static_cast<uint64_t>(l.lag_rebases));
    e->set_forecast_refits(static_cast<uint64_t>(l.forecast_refits));
    e->set_episode_started(l.episode_started);
    e->set_alarms_raised(result->alarms_raised);
    if (batch.anomaly_scores()) {
      ack.mutable_anomaly_scores()->Reserve(static_cast<int>(result->anomaly_scores.size()));
      for (const double s : result->anomaly_scores) ack.add_anomaly_scores(static_cast<float>(s));
      ack.set_anomaly_scores_index(result->anomaly_scores_index);
    }
    done(std::move(ack));
  });
}

absl::StatusOr<v1::IngestAck> Ingestor::Apply(const v1::IngestBatch& batch, uint64_t batch_index) {
  std::promise<absl::StatusOr<v1::IngestAck>> promise;
  std::future<absl::StatusOr<v1::IngestAck>> result = promise.get_future();
  Submit(batch, batch_index, [&promise](absl::StatusOr<v1::IngestAck> ack) { promise.set_value(std::move(ack)); });
  return result.get();
}

}  // namespace cmestream::service
