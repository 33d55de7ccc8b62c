// Recovery by replay: turns WAL records back into models by sending them
// through the live code paths — ModelRegistry::Create/Delete and Model::Ingest with a replay
// sequence — so a recovered model is bit-for-bit the model an uninterrupted run would have
// (the learners are deterministic given the config and the order of the pairs; the
// de-duplication state, i.e. producers' applied offsets, comes back with the batches).
// Nothing is logged again during replay.
//
// Kept separate from the WAL reader so that a restart can be "newest snapshot + WAL tail":
// load the snapshot's models into the registry, then OpenAndReplayWal with after_sequence =
// the smallest applied sequence among them; ReplayWalRecord skips, per model, records its
// snapshot already covers (record.sequence <= Model::applied_sequence()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/engine/registry.h"
#include "service/storage/wal.h"

namespace cmestream::service {

struct ReplayStats {
  uint64_t records = 0;
  uint64_t models_created = 0;
  uint64_t models_deleted = 0;
  uint64_t batches = 0;
  uint64_t pairs = 0;
  uint64_t skipped = 0;  // records a model's state already covered, or of a deleted model
  uint64_t imports = 0;
  uint64_t lost = 0;  // records of models whose creation was lost (--accept-data-loss only)
};

// Applies one record. Errors: a record that cannot be decoded or is refused by the live path
// (which would mean a different binary wrote the log) — recovery must not silently diverge.
// With `accept_data_loss`, a batch or deletion of a model that does not exist (its creation
// was in data declared lost) is counted in stats->lost and skipped instead.
absl::Status ReplayWalRecord(ModelRegistry& registry, const WalRecord& record, ReplayStats* stats,
                             bool accept_data_loss = false);

// Opens the WAL under `options`, replays every record with sequence > after_sequence into
// `registry`, prints the recovery summary line to stderr ("cmestreamd: recovered N records
// (M models, B batches, P pairs) from the write-ahead log in S s") and any cut or corruption,
// and returns the open log, ready for appends. `*report` and `*stats` (may be null) receive
// the details.
absl::StatusOr<std::unique_ptr<Wal>> OpenAndReplayWal(const WalOptions& options, uint64_t after_sequence,
                                                      ModelRegistry& registry,
                                                      const std::shared_ptr<prometheus::Registry>& metrics,
                                                      WalRecoveryReport* report, ReplayStats* stats);

}  // namespace cmestream::service
