// The durability hook of the ingestion path. Every accepted batch passes through exactly one
// BatchLog::Append, after validation and de-duplication and before any pair is applied or
// acknowledged; model creation and deletion pass through AppendModelCreated/Deleted before
// they take effect. The daemon's implementation is the write-ahead log (service/storage/wal.h);
// NullBatchLog (in-process tests) keeps nothing.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cmestream/v1/cmestream.pb.h"
#include "service/engine/batch.h"

namespace cmestream::service {

class BatchLog {
 public:
  virtual ~BatchLog() = default;
  // Writes a batch record, not necessarily durable yet. Called in the model's ingest order
  // (Model: one batch of a model between write and application at a time), so entries of one
  // model are in apply order. `first` is the first pair of `batch` that will be applied (pairs
  // before it are duplicates); `producer_offset_after` is the producer's applied offset once
  // the batch is applied. Returns the record's sequence number (0 if the log keeps no sequence).
  // A non-OK status refuses the batch: nothing is applied and the status reaches the client.
  virtual absl::StatusOr<uint64_t> WriteBatch(const std::string& model, const std::string& producer_id,
                                              uint64_t producer_offset_after, const PairBatch& batch, int64_t first,
                                              const std::string& episode_id) = 0;
  // Blocks until the record `sequence` is durable under the log's policy (the WAL's group
  // commit); the caller holds no model lock. Non-OK: the record must not be applied or acked.
  virtual absl::Status WaitDurable(uint64_t /*sequence*/) { return absl::OkStatus(); }
  // WriteBatch, then WaitDurable.
  absl::StatusOr<uint64_t> Append(const std::string& model, const std::string& producer_id,
                                  uint64_t producer_offset_after, const PairBatch& batch, int64_t first,
                                  const std::string& episode_id) {
    absl::StatusOr<uint64_t> sequence = WriteBatch(model, producer_id, producer_offset_after, batch, first, episode_id);
    if (!sequence.ok()) return sequence;
    if (absl::Status s = WaitDurable(*sequence); !s.ok()) return s;
    return sequence;
  }
  // Called before a model is created (config normalized) / deleted, with its name reserved by
  // the registry but without the registry lock (ModelRegistry; a deletion holds the model's
  // log lock). A non-OK status refuses the operation.
  virtual absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig& config) = 0;
  virtual absl::StatusOr<uint64_t> AppendModelDeleted(const std::string& name) = 0;
  // Called (name reserved, registry lock not held) before an imported model becomes visible: `image` is the
  // whole export file (service/storage/snapshot.h, kind EXPT), `name` the name it is registered under.
  // Logged like a creation, so an acknowledged import survives any restart and the batches
  // that follow it replay onto it.
  virtual absl::StatusOr<uint64_t> AppendModelImported(const std::string& name, const std::string& image) = 0;
  // Sequence number of the last record appended (0: none).
  virtual uint64_t last_sequence() const = 0;
};

class NullBatchLog final : public BatchLog {
 public:
  absl::StatusOr<uint64_t> WriteBatch(const std::string&, const std::string&, uint64_t, const PairBatch&, int64_t,
                                      const std::string&) override {
    return 0;
  }
  absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig&) override { return 0; }
  absl::StatusOr<uint64_t> AppendModelDeleted(const std::string&) override { return 0; }
  absl::StatusOr<uint64_t> AppendModelImported(const std::string&, const std::string&) override { return 0; }
  uint64_t last_sequence() const override { return 0; }
};

}  // namespace cmestream::service

namespace cmestream::service {

// Forwards to a log installed later (the daemon builds the registry, replays the write-ahead
// log into it — replay never logs — and only then installs the log). Before Install, every
// append fails with UNAVAILABLE rather than going unrecorded.
class DeferredBatchLog final : public BatchLog {
 public:
  // requires: called once, before the log is shared between threads; `target` outlives this.
  void Install(BatchLog* target) { target_ = target; }
  absl::StatusOr<uint64_t> WriteBatch(const std::string& model, const std::string& producer_id, uint64_t offset_after,
                                      const PairBatch& batch, int64_t first, const std::string& episode_id) override {
    if (!target_) return NotOpen();
    return target_->WriteBatch(model, producer_id, offset_after, batch, first, episode_id);
  }
  absl::Status WaitDurable(uint64_t sequence) override {
    if (!target_) return NotOpen();
    return target_->WaitDurable(sequence);
  }
  absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig& config) override {
    if (!target_) return NotOpen();
    return target_->AppendModelCreated(config);
  }
  absl::StatusOr<uint64_t> AppendModelDeleted(const std::string& name) override {
    if (!target_) return NotOpen();
    return target_->AppendModelDeleted(name);
  }
  absl::StatusOr<uint64_t> AppendModelImported(const std::string& name, const std::string& image) override {
    if (!target_) return NotOpen();
    return target_->AppendModelImported(name, image);
  }
  uint64_t last_sequence() const override { return target_ ? target_->last_sequence() : 0; }

 private:
  static absl::Status NotOpen() { return absl::UnavailableError("the write-ahead log is not open yet"); }
  BatchLog* target_ = nullptr;
};

}  // namespace cmestream::service
