#include "service/storage/recovery.h"

#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "service/engine/batch.h"
#include "service/storage/snapshot.h"

namespace cmestream::service {

absl::Status ReplayWalRecord(ModelRegistry& registry, const WalRecord& record, ReplayStats* stats,
                             bool accept_data_loss) {
  ++stats->records;
  switch (record.type) {
    case WalRecordType::kModelCreated: {
      v1::ModelConfig config;
      if (!config.ParseFromString(record.payload)) return absl::DataLossError("model record does not decode");
      if (auto existing = registry.Get(config.name()); existing.ok()) {
        // Already loaded (from a snapshot that covers its creation).
        if (record.sequence <= (*existing)->applied_sequence()) {
          ++stats->skipped;
          return absl::OkStatus();
        }
      }
      absl::StatusOr<std::shared_ptr<Model>> created = registry.Create(config, record.sequence);
      if (!created.ok()) return created.status();
      ++stats->models_created;
      return absl::OkStatus();
    }
    case WalRecordType::kModelDeleted: {
      absl::StatusOr<std::shared_ptr<Model>> model = registry.Get(record.payload);
      if (!model.ok() && !accept_data_loss) {
        return absl::DataLossError(absl::StrCat("deletion of unknown model '", record.payload.substr(0, 80), "'"));
      }
      if (!model.ok() || record.sequence <= (*model)->applied_sequence()) {
        ++stats->skipped;
        return absl::OkStatus();
      }
      if (absl::Status s = registry.Delete(record.payload, /*replay=*/true); !s.ok()) return s;
      ++stats->models_deleted;
      return absl::OkStatus();
    }
    case WalRecordType::kBatch: {
      v1::IngestBatch batch;
      if (!batch.ParseFromString(record.payload)) return absl::DataLossError("batch record does not decode");
      absl::StatusOr<std::shared_ptr<Model>> model = registry.Get(batch.model());
      if (!model.ok()) {
        // Only possible if the model's creation is in data that is gone (an unusable snapshot,
        // a missing segment); never while the log and the manifest's files are complete.
        if (accept_data_loss) {
          ++stats->lost;
          return absl::OkStatus();
        }
        return absl::DataLossError(absl::StrCat("batch of unknown model '", batch.model(), "'"));
      }
      if (record.sequence <= (*model)->applied_sequence()) {
        ++stats->skipped;
        return absl::OkStatus();
      }
      if (batch.end_warmup()) {
        // An explicit refresh ended the warm-up here (Model::EndWarmup): end it at the same pair.
        if (absl::Status s = (*model)->EndWarmup(record.sequence); !s.ok()) {
          return absl::DataLossError(absl::StrCat("end-of-warm-up record of model '", batch.model(),
                                                  "' does not replay: ", s.message()));
        }
        ++stats->batches;
        return absl::OkStatus();
      }
      const uint32_t num_states = (*model)->config().num_states();
      // No magnitude bound on replay: what was accepted then is replayed whatever --max-abs-value says now.
      BatchCheck check = num_states > 0
                             ? ValidateDiscreteBatch(batch, num_states, 0)
                             : ValidateBatch(batch, (*model)->dim(), 0, std::numeric_limits<double>::infinity());
      if (!check.status.ok()) return check.status;
      absl::StatusOr<Model::IngestResult> r =
          (*model)->Ingest(check.batch, batch.producer_id(), batch.offset(), 0, batch.episode_id(), record.sequence);
      if (!r.ok()) return r.status();
      if (r->applied != static_cast<uint64_t>(check.batch.n)) {
        return absl::DataLossError(absl::StrCat("batch replay applied ", r->applied, " of ", check.batch.n,
                                                " pairs (producer offsets disagree with the log)"));
      }
      ++stats->batches;
      stats->pairs += r->applied;
      return absl::OkStatus();
    }
    case WalRecordType::kModelImported: {
      std::string name, image;
      if (absl::Status s = DecodeImportRecord(record.payload, &name, &image); !s.ok()) return s;
      if (auto existing = registry.Get(name); existing.ok()) {
        if (record.sequence <= (*existing)->applied_sequence()) {  // a snapshot covers it
          ++stats->skipped;
          return absl::OkStatus();
        }
      }
      absl::StatusOr<std::shared_ptr<Model>> imported =
          ImportModel(std::move(image), name, registry, registry.defaults(), record.sequence);
      if (!imported.ok()) return imported.status();
      ++stats->imports;
      return absl::OkStatus();
    }
  }
  return absl::DataLossError("unknown record type");
}

absl::StatusOr<std::unique_ptr<Wal>> OpenAndReplayWal(const WalOptions& options, uint64_t after_sequence,
                                                      ModelRegistry& registry,
                                                      const std::shared_ptr<prometheus::Registry>& metrics,
                                                      WalRecoveryReport* report, ReplayStats* stats) {
  WalRecoveryReport local_report;
  ReplayStats local_stats;
  WalRecoveryReport& rep = report ? *report : local_report;
  ReplayStats& st = stats ? *stats : local_stats;
  st = ReplayStats{};
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open(
      options, after_sequence,
      [&](const WalRecord& r) { return ReplayWalRecord(registry, r, &st, options.accept_data_loss); }, &rep, metrics);
  if (!wal.ok()) return wal.status();
  std::cerr << absl::StrFormat(
      "cmestreamd: recovered %d records (%d models created, %d imported, %d deleted, %d batches, %d pairs, "
      "%d skipped, %d lost) from %d WAL segments (%d bytes) in %.3f s; next sequence %d\n",
      st.records, st.models_created, st.imports, st.models_deleted, st.batches, st.pairs, st.skipped, st.lost,
      rep.segments, rep.bytes, rep.seconds, (*wal)->last_sequence() + 1);
  return wal;
}

}  // namespace cmestream::service
