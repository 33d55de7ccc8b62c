// The ingestion path shared by the streaming and the unary RPC: look up the model, validate the
// whole batch, apply it exactly once (Model::Ingest, which logs before applying), count
// rejections by reason.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/registry.h"

namespace cmestream::service {

class Ingestor {
 public:
  // `limits`: --max-batch-pairs and the per-model queue bound --max-queued-batches (limits.h).
  Ingestor(ModelRegistry& registry, Metrics& metrics, const LimitOptions& limits = {})
      : registry_(registry), metrics_(metrics), limits_(limits), queue_(limits) {}

  // NotFound (unknown model), InvalidArgument (bad batch; nothing applied), FailedPrecondition
  // (producer offset gap; nothing applied); InvalidArgument also for more pairs than
  // --max-batch-pairs; ResourceExhausted with a retry hint (limits.h) when the model already
  // has --max-queued-batches batches waiting. `batch_index` is the batch's 0-based position in
  // its stream, echoed in the ack and in error messages.
  absl::StatusOr<v1::IngestAck> Apply(const v1::IngestBatch& batch, uint64_t batch_index);

 private:
  ModelRegistry& registry_;
  Metrics& metrics_;
  const LimitOptions limits_;
  IngestQueue queue_;
};

}  // namespace cmestream::service
