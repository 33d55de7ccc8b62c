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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "service/engine/registry.h"
#include "service/storage/recovery_progress.h"
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
  // Records at which a model failed (Model::failure): the model stays, failed; replay goes on.
  uint64_t models_failed = 0;
};

// What an accepted data loss (--accept-data-loss) dropped, per model and per producer, from
// what is actually known: the records recovery could still read (Wal's point-in-time cut, the
// batches of models whose creation was lost), the sequences it could not read at all, and the
// recovered state's producer offsets. Producer offsets are contiguous (Model::Ingest refuses a
// gap), so the offsets of a producer's dropped batches, compared with its applied offset after
// recovery, give exactly the pairs it lost in records that cannot be read (a missing middle
// segment). Printed as one JSON line per affected model (service/README.md "Recovery"), then one
// line per range of sequences that could not be read at all.
class LossReport {
 public:
  // A record dropped by the cut (WalOptions::on_dropped_record): a batch counts its pairs; a
  // creation or import only names the model. `registry` (the recovered state) gives the dim of
  // models that still exist; dropped creations give the others'.
  void AddDropped(const WalRecord& record, const ModelRegistry& registry);
  // A batch recovery read but could not apply: its model's creation was lost.
  void AddOrphanBatch(const v1::IngestBatch& batch, uint64_t sequence);
  // Sequences [first, last] that are lost and unreadable (last 0: an unknown number from first on).
  void AddUnreadable(uint64_t first, uint64_t last);
  bool empty() const { return models_.empty() && unreadable_.empty(); }

  struct ProducerLoss {
    std::string producer;
    uint64_t first = 0;  // offsets [first, end) are lost
    uint64_t end = 0;
    bool end_known = true;  // false: the log's end is unknown, so more may be lost after `end`
  };
  struct ModelLoss {
    std::string model;
    uint64_t pairs = 0;  // lost, exactly if `exact`, else at least
    bool exact = true;
    std::vector<ProducerLoss> producers;                   // by producer id
    std::vector<std::pair<uint64_t, uint64_t>> sequences;  // dropped records read, ascending ranges
    bool model_dropped = false;                            // the model does not exist after recovery
  };
  struct Totals {
    uint64_t records = 0;  // WAL records lost: read and dropped, plus unreadable ones
    bool records_exact = true;
    uint64_t pairs = 0;  // the sum of the models' pairs
    bool pairs_exact = true;
    size_t models = 0;
  };
  // The losses against the recovered state. A model's pairs are exact when every record it may
  // have had in an unreadable range is bounded by its producers' offsets: no range of unknown
  // end, and each producer the model knows has a dropped batch after the last unreadable range.
  // When records are unreadable, every model of the recovered state is listed (any may have
  // lost pairs there).
  std::vector<ModelLoss> Models(const ModelRegistry& registry) const;
  Totals Total(const ModelRegistry& registry) const;

  // {"model": NAME, "pairs_dropped": P, "pairs_dropped_at_least": N, "extent": "exact"|"unknown",
  //  "producers": [{"producer": ID, "offsets": [FIRST, END or null]}], "wal_sequences":
  //  [[FIRST, LAST], ...], "model_dropped": B} per model in name order (P null unless exact;
  // offsets half-open), then {"model": null, "pairs_dropped": null, "wal_sequences":
  // [[FIRST, LAST or null]], "model_dropped": null} per unreadable range.
  std::vector<std::string> JsonLines(const ModelRegistry& registry) const;
  // The same for people: one line per model ('model "a": 9600 acknowledged pairs lost; producer
  // "pa" offsets 12000..21599', or "unknown, at least N"), then the total, their sum.
  std::vector<std::string> TextLines(const ModelRegistry& registry) const;

 private:
  struct Batch {
    uint64_t sequence = 0;
    std::string producer;
    uint64_t offset = 0;
    std::optional<uint64_t> pairs;
  };
  struct Dropped {
    uint64_t pairs = 0;
    bool pairs_known = true;
    std::vector<std::pair<uint64_t, uint64_t>> sequences;  // ranges, ascending
    std::vector<Batch> batches;                            // in sequence order
  };
  void Add(const std::string& model, uint64_t sequence, std::optional<uint64_t> pairs,
           const v1::IngestBatch* batch = nullptr);
  std::map<std::string, Dropped> models_;
  std::map<std::string, uint32_t> dims_;  // of models created in dropped records
  std::vector<std::pair<uint64_t, uint64_t>> unreadable_;
};

// Applies one record. Errors: a record that cannot be decoded or is refused by the live path
// (which would mean a different binary wrote the log) — recovery must not silently diverge.
// With `accept_data_loss`, a batch or deletion of a model that does not exist (its creation
// was in data declared lost) is counted in stats->lost and skipped instead.
// `loss` (may be null) receives those skipped batches.
absl::Status ReplayWalRecord(ModelRegistry& registry, const WalRecord& record, ReplayStats* stats,
                             bool accept_data_loss = false, LossReport* loss = nullptr);

// Opens the WAL under `options`, replays every record with sequence > after_sequence into
// `registry`, prints the recovery summary line to stderr ("cmestreamd: recovered N records
// (M models created, ..., L records (P pairs) lost) from ..."; with `loss`, L and P are the
// report's totals, "unknown, at least" when not exact) and any cut or corruption,
// and returns the open log, ready for appends. `*report` and `*stats` (may be null) receive
// the details; `loss` (may be null) what an accepted loss dropped, per model.
absl::StatusOr<std::unique_ptr<Wal>> OpenAndReplayWal(const WalOptions& options, uint64_t after_sequence,
                                                      ModelRegistry& registry,
                                                      const std::shared_ptr<prometheus::Registry>& metrics,
                                                      WalRecoveryReport* report, ReplayStats* stats,
                                                      LossReport* loss = nullptr);

}  // namespace cmestream::service
