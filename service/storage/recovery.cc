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

void LossReport::Add(const std::string& model, uint64_t sequence, std::optional<uint64_t> pairs,
                     const v1::IngestBatch* batch) {
  Dropped& m = models_[model];
  if (pairs) m.pairs += *pairs;
  else m.pairs_known = false;
  if (!m.sequences.empty() && m.sequences.back().second + 1 == sequence) {
    m.sequences.back().second = sequence;
  } else {
    m.sequences.emplace_back(sequence, sequence);
  }
  if (batch) m.batches.push_back(Batch{sequence, batch->producer_id(), batch->offset(), pairs});
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
      return Add(batch.model(), record.sequence, PairsOf(batch, dim), &batch);
    }
  }
  AddUnreadable(record.sequence, record.sequence);
}

void LossReport::AddOrphanBatch(const v1::IngestBatch& batch, uint64_t sequence) {
  std::optional<uint32_t> dim;
  if (auto it = dims_.find(batch.model()); it != dims_.end()) dim = it->second;
  Add(batch.model(), sequence, PairsOf(batch, dim), &batch);
}

void LossReport::AddUnreadable(uint64_t first, uint64_t last) {
  if (!unreadable_.empty() && unreadable_.back().second != 0 && unreadable_.back().second + 1 == first) {
    unreadable_.back().second = last;
  } else {
    unreadable_.emplace_back(first, last);
  }
}

std::vector<LossReport::ModelLoss> LossReport::Models(const ModelRegistry& registry) const {
  bool open_end = false;     // an unreadable range of unknown end: the log's end is unknown
  uint64_t last_closed = 0;  // the end of the last unreadable range of known end
  for (const auto& [first, last] : unreadable_) {
    if (last == 0) open_end = true;
    else last_closed = std::max(last_closed, last);
  }
  const bool unreadable = !unreadable_.empty();
  // Every model that may have lost something: those with dropped records, and, when records
  // could not be read, every model of the recovered state.
  std::map<std::string, const Dropped*> names;
  for (const auto& [name, d] : models_) names[name] = &d;
  if (unreadable) {
    for (const std::shared_ptr<Model>& m : registry.List()) names.emplace(m->name(), nullptr);
  }
  static const Dropped kNone;
  std::vector<ModelLoss> out;
  for (const auto& [name, dropped] : names) {
    const Dropped& d = dropped ? *dropped : kNone;
    absl::StatusOr<std::shared_ptr<Model>> model = registry.Get(name);
    ModelLoss loss;
    loss.model = name;
    loss.model_dropped = !model.ok();
    loss.pairs = d.pairs;
    loss.exact = d.pairs_known;
    loss.sequences = d.sequences;
    // Per producer, in sequence order: the gap between where the recovered model stands (its
    // applied offset; 0 if the model is gone, whose producers then started at 0) and the
    // producer's next dropped batch is pairs that were in unreadable records.
    std::map<std::string, std::vector<const Batch*>> by_producer;
    bool anonymous = false;  // a batch without producer_id: at-least-once, no offsets to bound it
    for (const Batch& b : d.batches) {
      if (b.producer.empty()) anonymous = true;
      else by_producer[b.producer].push_back(&b);
    }
    size_t bounded = 0;  // producers the model knows with a dropped batch after every unreadable range
    for (const auto& [producer, batches] : by_producer) {
      ProducerLoss p;
      p.producer = producer;
      p.first = model.ok() ? (*model)->ProducerOffset(producer) : 0;
      uint64_t expected = p.first;
      for (const Batch* b : batches) {
        if (b->offset > expected) loss.pairs += b->offset - expected;  // in unreadable records
        if (b->pairs) expected = std::max(expected, b->offset + *b->pairs);
      }
      p.end = expected;
      p.end_known = !open_end;
      if (batches.back()->sequence > last_closed && (!model.ok() || (*model)->producer_offsets_known(producer))) {
        ++bounded;
      }
      loss.producers.push_back(std::move(p));
    }
    if (open_end) loss.exact = false;
    if (unreadable && !open_end) {
      // Pairs in unreadable records are known only through producers that appear after them.
      const size_t producers = model.ok() ? (*model)->producer_count() : by_producer.size();
      if (anonymous || producers == 0 || bounded < producers) loss.exact = false;
    }
    out.push_back(std::move(loss));
  }
  return out;
}

LossReport::Totals LossReport::Total(const ModelRegistry& registry) const {
  Totals t;
  for (const ModelLoss& m : Models(registry)) {
    ++t.models;
    t.pairs += m.pairs;
    if (!m.exact) t.pairs_exact = false;
  }
  for (const auto& [name, d] : models_) {
    for (const auto& [first, last] : d.sequences) t.records += last - first + 1;
  }
  for (const auto& [first, last] : unreadable_) {
    if (last == 0) t.records_exact = false;
    else t.records += last - first + 1;
  }
  return t;
}

namespace {

std::string Amount(uint64_t n, bool exact) { return exact ? absl::StrCat(n) : absl::StrCat("unknown, at least ", n); }

}  // namespace

std::vector<std::string> LossReport::JsonLines(const ModelRegistry& registry) const {
  std::vector<std::string> out;
  for (const ModelLoss& m : Models(registry)) {
    std::string producers = "[";
    for (size_t i = 0; i < m.producers.size(); ++i) {
      const ProducerLoss& p = m.producers[i];
      absl::StrAppend(&producers, i ? ", " : "", "{\"producer\": ", JsonString(p.producer), ", \"offsets\": [", p.first,
                      ", ", p.end_known ? absl::StrCat(p.end) : std::string("null"), "]}");
    }
    producers += "]";
    out.push_back(absl::StrCat("{\"model\": ", JsonString(m.model),
                               ", \"pairs_dropped\": ", m.exact ? absl::StrCat(m.pairs) : std::string("null"),
                               ", \"pairs_dropped_at_least\": ", m.pairs, ", \"extent\": \"",
                               m.exact ? "exact" : "unknown", "\", \"producers\": ", producers,
                               ", \"wal_sequences\": ", JsonRanges(m.sequences),
                               ", \"model_dropped\": ", m.model_dropped ? "true" : "false", "}"));
  }
  for (const auto& range : unreadable_) {
    out.push_back(absl::StrCat("{\"model\": null, \"pairs_dropped\": null, \"wal_sequences\": ", JsonRanges({range}),
                               ", \"model_dropped\": null}"));
  }
  return out;
}

std::vector<std::string> LossReport::TextLines(const ModelRegistry& registry) const {
  std::vector<std::string> out;
  for (const ModelLoss& m : Models(registry)) {
    std::string line = absl::StrCat("model ", JsonString(m.model), m.model_dropped ? " (gone)" : "", ": ",
                                    Amount(m.pairs, m.exact), " acknowledged pairs lost");
    for (size_t i = 0; i < m.producers.size(); ++i) {
      const ProducerLoss& p = m.producers[i];
      absl::StrAppend(&line, "; producer ", JsonString(p.producer), " offsets ", p.first, "..",
                      p.end_known ? (p.end > p.first ? absl::StrCat(p.end - 1) : absl::StrCat(p.first, " (none)"))
                                  : "(unknown end)");
    }
    out.push_back(std::move(line));
  }
  const Totals t = Total(registry);
  out.push_back(absl::StrCat("in total ", Amount(t.pairs, t.pairs_exact), " pairs in ", t.models, " model(s), ",
                             Amount(t.records, t.records_exact), " WAL records lost"));
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
  // "lost" counts every record lost (read and dropped, orphaned, unreadable), with the pairs, so
  // the line agrees with the per-model report (LossReport::TextLines); without a report, the
  // orphaned batches only.
  std::string lost = absl::StrCat(st.lost);
  if (loss) {
    for (const auto& [first, last] : rep.lost_unreadable) loss->AddUnreadable(first, last);
    const LossReport::Totals t = loss->Total(registry);
    lost = absl::StrCat(t.records_exact ? "" : "unknown, at least ", t.records, " records (",
                        t.pairs_exact ? "" : "unknown, at least ", t.pairs, " pairs)");
  }
  std::cerr << absl::StrFormat(
      "cmestreamd: recovered %d records (%d models created, %d imported, %d deleted, %d batches, %d pairs, "
      "%d skipped, %s lost, %d at which a model failed) from %d WAL segments (%d bytes) in %.3f s; next "
      "sequence %d\n",
      st.records, st.models_created, st.imports, st.models_deleted, st.batches, st.pairs, st.skipped, lost,
      st.models_failed, rep.segments, rep.bytes, rep.seconds, (*wal)->last_sequence() + 1);
  return wal;
}

}  // namespace cmestream::service
