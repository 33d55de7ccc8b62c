// Resource limits of cmestreamd and the per-model ingest queue ("bad input
// or too much of it never exhausts the daemon").
//
// What is bounded, and where:
//   --max-message-mb       one gRPC message (gRPC itself answers RESOURCE_EXHAUSTED)
//   --max-batch-pairs      pairs in one IngestBatch (INVALID_ARGUMENT: retrying cannot help,
//                          the client must split the batch)
//   --max-models           models in the registry (RESOURCE_EXHAUSTED at CreateModel)
//   --max-dim              ModelConfig.dim (INVALID_ARGUMENT at CreateModel)
//   --max-abs-value        |coordinate| of ingested values (INVALID_ARGUMENT naming row/column)
//   --max-memory           estimated footprint of all models (RESOURCE_EXHAUSTED at CreateModel)
//   --max-query-mb         estimated working set of one query (RESOURCE_EXHAUSTED)
//   --max-queued-batches   batches of one model waiting for its learner lock (RESOURCE_EXHAUSTED
//                          with trailing metadata "retry-after-ms" and the hint in the message)
// Every message names the limit's value and its flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/engine/wire_limits.h"

namespace cmestream::service {

struct LimitOptions {
  int64_t max_batch_pairs = 1000000;           // --max-batch-pairs, >= 1
  int max_models = 100000;                     // --max-models, >= 1 (the memory budget admits models first)
  int max_dim = 4096;                          // --max-dim, 1..kMaxDim (model_config.h)
  int max_queued_batches = 64;                 // --max-queued-batches, >= 0 (0: no batch ever waits)
  int retry_after_ms = 100;                    // hint sent with a full-queue refusal, >= 1
  double max_abs_value = kDefaultMaxAbsValue;  // --max-abs-value: |coordinate| bound, > 0
  double max_memory_bytes = 0;                 // --max-memory: model budget; 0 = from cgroup / RAM (memory_budget.h)
  double max_query_mb = 256;                   // --max-query-mb: largest estimated working set of one query

  // OK or InvalidArgument naming the flag and the expected range.
  absl::Status Validate() const;
};

// Trailing-metadata key of the retry hint (milliseconds, decimal) sent with RESOURCE_EXHAUSTED
// when a model's ingest queue is full. Clients wait at least that long before retrying.
inline constexpr char kRetryAfterMetadataKey[] = "retry-after-ms";
// Status payload type URL carrying that hint from the engine to the RPC layer.
inline constexpr char kRetryPayloadUrl[] = "type.cmestream/retry-after-ms";

// Number of pairs `batch` claims from its field sizes alone (before validation, so it is
// cheap and safe on any message): max of x/dim, y/dim, states/dim - 1, x_ids, y_ids,
// state_ids - 1, never negative. dim <= 0 counts vector fields as d = 1.
int64_t ClaimedPairs(const v1::IngestBatch& batch, int dim);

// OK, or InvalidArgument "batch 3: 2000000 pairs, more than this daemon accepts in one batch
// (--max-batch-pairs 1000000); split it into smaller batches".
absl::Status CheckBatchPairs(const v1::IngestBatch& batch, int dim, uint64_t batch_index, const LimitOptions& limits);

// OK, or InvalidArgument naming dim, its value and --max-dim. (The model count is checked by
// the registry under its lock: ModelRegistry::SetLimits.)
absl::Status CheckModelConfigLimits(const v1::ModelConfig& config, const LimitOptions& limits);

// ResourceExhausted for a full queue; carries the hint (milliseconds, decimal) as the status
// payload kRetryPayloadUrl, which the RPC layer turns into trailing metadata
// kRetryAfterMetadataKey (service/rpc/status.h AddRetryTrailer).
absl::Status QueueFullError(const std::string& model, int waiting, const LimitOptions& limits);

// Admission to a model's learner lock. Represents, per model name, the number of batches that
// are between admission and the end of their application (at most one applies, the others
// wait for Model's learner lock on a gRPC thread). Admit refuses when max_queued_batches are
// already waiting, so the memory and threads held by waiting batches are bounded.
// Thread-safe; O(log #models) per call under one short mutex.
class IngestQueue {
 public:
  explicit IngestQueue(const LimitOptions& limits) : limits_(limits) {}

  // RAII admission: releases its place when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : queue_(other.queue_), model_(std::move(other.model_)) { other.queue_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket();

   private:
    friend class IngestQueue;
    Ticket(IngestQueue* queue, std::string model) : queue_(queue), model_(std::move(model)) {}
    IngestQueue* queue_ = nullptr;
    std::string model_;
  };

  // ensures: ok => the caller holds a place until the ticket is destroyed;
  //          else ResourceExhausted (QueueFullError), nothing held.
  absl::StatusOr<Ticket> Admit(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);

  // Batches of `model` admitted and not yet released (for tests).
  int InFlight(const std::string& model) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Release(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);

  const LimitOptions limits_;
  mutable absl::Mutex mu_;                                     // a leaf lock
  std::map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);  // entries removed at 0: the map holds busy models only
};

}  // namespace cmestream::service
