// The durability hook of the ingestion path. Every accepted batch passes through exactly one
// BatchLog::Append, after validation and de-duplication and before any pair is applied or
// acknowledged; a write-ahead log (later issue) implements it. The daemon uses NullBatchLog
// until then: nothing survives a restart.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "service/batch.h"

namespace cmestream::service {

class BatchLog {
 public:
  virtual ~BatchLog() = default;
  // Called under the model's ingestion lock, so entries of one model are in apply order.
  // `first` is the first pair of `batch` that will be applied (pairs before it are duplicates);
  // `producer_offset_after` is the producer's applied offset once the batch is applied.
  // A non-OK status refuses the batch: nothing is applied and the status reaches the client.
  virtual absl::Status Append(const std::string& model, const std::string& producer_id,
                              uint64_t producer_offset_after, const PairBatch& batch, int64_t first) = 0;
};

class NullBatchLog final : public BatchLog {
 public:
  absl::Status Append(const std::string&, const std::string&, uint64_t, const PairBatch&, int64_t) override {
    return absl::OkStatus();
  }
};

}  // namespace cmestream::service
