// The ingestion path shared by the streaming and the unary RPC: look up the model, validate the
// whole batch and admit it (bounded per-model queue) on the calling gRPC thread, then apply it
// exactly once (Model::Ingest: de-duplicate, write to the WAL, wait for the group commit, learn)
// on a worker of the IngestPool, in the model's order, and report the ack from there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/ingest_pool.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/registry.h"

namespace cmestream::service {

class Ingestor {
 public:
  // `limits`: --max-batch-pairs and the per-model queue bound --max-queued-batches (limits.h).
  // `threads`: workers of the pool (0: IngestPool::DefaultThreads(false)); `nice`: their
  // priority offset (IngestPool).
  Ingestor(ModelRegistry& registry, Metrics& metrics, const LimitOptions& limits = {}, int threads = 0, int nice = 0)
      : registry_(registry),
        metrics_(metrics),
        limits_(limits),
        queue_(limits),
        pool_(std::make_unique<IngestPool>(threads > 0 ? threads : IngestPool::DefaultThreads(false), nice)) {}

  using Done = std::function<void(absl::StatusOr<v1::IngestAck>)>;
  // Errors (each reported through `done`): NotFound (unknown model), InvalidArgument (bad batch;
  // nothing applied), FailedPrecondition (producer offset gap; nothing applied); InvalidArgument
  // also for more pairs than --max-batch-pairs; ResourceExhausted with a retry hint (limits.h)
  // when the model already has --max-queued-batches batches waiting; the WAL's errors.
  // `batch_index` is the batch's 0-based position in its stream, echoed in the ack and in error
  // messages. A refusal before queueing calls `done` on the calling thread before Submit
  // returns; otherwise `done` runs on a pool worker once the batch is durable and applied.
  // `batch` must stay alive and unchanged until `done` ran (the validated batch aliases it).
  void Submit(const v1::IngestBatch& batch, uint64_t batch_index, Done done);

  // Submit and wait for `done` (tests, tools). Never call it from a pool worker.
  absl::StatusOr<v1::IngestAck> Apply(const v1::IngestBatch& batch, uint64_t batch_index);

  IngestPool& pool() { return *pool_; }

 private:
  ModelRegistry& registry_;
  Metrics& metrics_;
  const LimitOptions limits_;
  IngestQueue queue_;
  // Last member: destroyed first, so its workers finish every queued batch while the queue,
  // the registry and the metrics are still alive.
  std::unique_ptr<IngestPool> pool_;
};

}  // namespace cmestream::service
