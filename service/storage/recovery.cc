#include "service/storage/recovery.h"

#include <algorithm>
#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "service/engine/batch.h"
#include "service/storage/snapshot.h"

namespace cmestream::service {

std::string RecoveryProgress::Describe() const {
  switch (phase.load()) {
    case kSnapshot:
      return "recovering: loading the newest snapshot before replaying the write-ahead log; retry shortly";
    case kReplay: {
      const uint64_t done = replayed.load();
      const uint64_t of = std::max(total.load(), done);
      return absl::StrCat("recovering: ", done, " of ", of, " records replayed; retry shortly");
    }
    default: {
      const uint64_t done = replayed.load();
      return absl::StrCat("recovering: ", done, " of ", std::max(total.load(), done),
                          " records replayed; settling the data dir; retry shortly");
    }
  }
}

namespace {

// Pairs in a logged batch (wal.h: a trajectory keeps its first applied state, so it holds one
// state more than pairs); nullopt for continuous data of a model whose dimension is unknown.
std::optional<uint64_t> PairsOf(const v1::IngestBatch& b, std::optional<uint32_t> dim) {
  if (b.state_ids_size() > 0) return static_cast<uint64_t>(b.state_ids_size() - 1);
  if (b.x_ids_size() > 0) return static_cast<uint64_t>(b.x_ids_size());
  if (b.x_size() == 0 && b.states_size() == 0) return 0;
  if (!dim || *dim == 0) return std::nullopt;
  if (b.states_size() > 0) return static_cast<uint64_t>(b.states_size()) / *dim - 1;
  return static_cast<uint64_t>(b.x_size()) / *dim;
}

// A JSON string literal of arbitrary bytes (model names are not guaranteed UTF-8: bytes >= 0x80
// are escaped as \u00XX, so the line is always valid JSON).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      out += absl::StrFormat("\\u%04x", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonRanges(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::string out = "[";
  for (size_t i = 0; i < ranges.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "[", ranges[i].first, ", ",
                    ranges[i].second == 0 ? std::string("null") : absl::StrCat(ranges[i].second), "]");
  }
  return out + "]";
}

}  // namespace

void LossReport::Add(const std::string& model, uint64_t sequence, std::optional<uint64_t> pairs) {
  ModelLoss& m = models_[model];
  if (pairs) m.pairs += *pairs;
  else m.pairs_known = false;
  if (!m.sequences.empty() && m.sequences.back().second + 1 == sequence) {
    m.sequences.back().second = sequence;
  } else {
    m.sequences.emplace_back(sequence, sequence);
  }
}

void LossReport::AddDropped(const WalRecord& record, const ModelRegistry& registry) {
  switch (record.type) {
    case WalRecordType::kModelCreated: {
      v1::ModelConfig config;
      if (!config.ParseFromString(record.payload)) return AddUnreadable(record.sequence, record.sequence);
      dims_[config.name()] = config.dim();
      return Add(config.name(), record.sequence, 0);
    }
    case WalRecordType::kModelDeleted:
      return Add(record.payload, record.sequence, 0);
    case WalRecordType::kModelImported: {
      std::string name, image;
      if (!DecodeImportRecord(record.payload, &name, &image).ok())
        return AddUnreadable(record.sequence, record.sequence);
      dims_.erase(name);  // not parsed here: its batches' pairs count only if the model exists
      return Add(name, record.sequence, 0);
    }
    case WalRecordType::kBatch: {
      v1::IngestBatch batch;
      if (!batch.ParseFromString(record.payload)) return AddUnreadable(record.sequence, record.sequence);
      std::optional<uint32_t> dim;
      if (auto it = dims_.find(batch.model()); it != dims_.end()) {
        dim = it->second;
      } else if (auto model = registry.Get(batch.model()); model.ok()) {
        dim = static_cast<uint32_t>((*model)->dim());
      }
      return Add(batch.model(), record.sequence, PairsOf(batch, dim));
    }
  }
  AddUnreadable(record.sequence, record.sequence);
}

void LossReport::AddOrphanBatch(const v1::IngestBatch& batch, uint64_t sequence) {
  std::optional<uint32_t> dim;
  if (auto it = dims_.find(batch.model()); it != dims_.end()) dim = it->second;
  Add(batch.model(), sequence, PairsOf(batch, dim));
}

void LossReport::AddUnreadable(uint64_t first, uint64_t last) {
  if (!unreadable_.empty() && unreadable_.back().second != 0 && unreadable_.back().second + 1 == first) {
    unreadable_.back().second = last;
  } else {
    unreadable_.emplace_back(first, last);
  }
}

std::vector<std::string> LossReport::JsonLines(const ModelRegistry& registry) const {
  std::vector<std::string> out;
  for (const auto& [name, m] : models_) {
    out.push_back(absl::StrCat("{\"model\": ", JsonString(name),
                               ", \"pairs_dropped\": ", m.pairs_known ? absl::StrCat(m.pairs) : std::string("null"),
                               ", \"wal_sequences\": ", JsonRanges(m.sequences),
                               ", \"model_dropped\": ", registry.Get(name).ok() ? "false" : "true", "}"));
  }
  for (const auto& range : unreadable_) {
    out.push_back(absl::StrCat("{\"model\": null, \"pairs_dropped\": null, \"wal_sequences\": ", JsonRanges({range}),
                               ", \"model_dropped\": null}"));
  }
  return out;
}

absl::Status ReplayWalRecord(ModelRegistry& registry, const WalRecord& record, ReplayStats* stats,
                             bool accept_data_loss, LossReport* loss) {
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
          if (loss) loss->AddOrphanBatch(batch, record.sequence);
          return absl::OkStatus();
        }
        return absl::DataLossError(absl::StrCat("batch of unknown model '", batch.model(), "'"));
      }
      if (record.sequence <= (*model)->applied_sequence()) {
        ++stats->skipped;
        return absl::OkStatus();
      }
      if ((*model)->failed()) {
        // A model that failed (in a snapshot, or at an earlier record of this replay) learns
        // nothing more; its records are not needed, and nothing else depends on them.
        ++stats->skipped;
        return absl::OkStatus();
      }
      if (batch.end_warmup()) {
        // An explicit refresh ended the warm-up here (Model::EndWarmup): end it at the same pair.
        if (absl::Status s = (*model)->EndWarmup(record.sequence); !s.ok()) {
          if ((*model)->failed()) {  // an estimator failed at this record: the model, not the daemon
            ++stats->models_failed;
            return absl::OkStatus();
          }
          return absl::DataLossError(
              absl::StrCat("end-of-warm-up record of model '", batch.model(), "' does not replay: ", s.message()));
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
      if (!r.ok() && (*model)->failed()) {
        // An estimator could not go on with this record, as when it was first applied: the
        // model is failed (Model::failure names the record), the daemon and the others go on.
        ++stats->models_failed;
        return absl::OkStatus();
      }
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
                                                      WalRecoveryReport* report, ReplayStats* stats, LossReport* loss) {
  WalRecoveryReport local_report;
  ReplayStats local_stats;
  WalRecoveryReport& rep = report ? *report : local_report;
  ReplayStats& st = stats ? *stats : local_stats;
  st = ReplayStats{};
  WalOptions opened = options;
  if (loss) {
    opened.on_dropped_record = [loss, &registry](const WalRecord& r, bool /*damaged*/) {
      loss->AddDropped(r, registry);
    };
  }
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open(
      opened, after_sequence,
      [&](const WalRecord& r) { return ReplayWalRecord(registry, r, &st, options.accept_data_loss, loss); }, &rep,
      metrics);
  if (!wal.ok()) return wal.status();
  if (loss) {
    for (const auto& [first, last] : rep.lost_unreadable) loss->AddUnreadable(first, last);
  }
  std::cerr << absl::StrFormat(
      "cmestreamd: recovered %d records (%d models created, %d imported, %d deleted, %d batches, %d pairs, "
      "%d skipped, %d lost, %d at which a model failed) from %d WAL segments (%d bytes) in %.3f s; next sequence "
      "%d\n",
      st.records, st.models_created, st.imports, st.models_deleted, st.batches, st.pairs, st.skipped, st.lost,
      st.models_failed, rep.segments, rep.bytes, rep.seconds, (*wal)->last_sequence() + 1);
  return wal;
}

}  // namespace cmestream::service
