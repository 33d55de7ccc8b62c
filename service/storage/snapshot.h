// Snapshots of cmestreamd: the full per-sample state of every model, written
// atomically, so that a restart is "newest valid snapshot + replay of the WAL records after
// it" (service/storage/recovery.h) and a model can be moved between daemons (export/import).
//
// FILE FORMAT (all integers little-endian, doubles as IEEE-754 bit patterns):
//   offset  size  field
//   0       8     magic "CMESNAP1"
//   8       4     fourcc "SNAP" (daemon snapshot: every model) or "EXPT" (export: one model)
//   12      4     format version (daemon snapshots 3, exports 1; this build reads 1, 2 and 3
//                 and refuses newer versions by number)
//   16      4     model count (<= 1e6)
//   20      8     snapshot number (the N of snapshot-N.snap; 0 in exports)
//   28      8     creation time, Unix nanoseconds
//   36      8     covered WAL sequence: every WAL record <= it is in this file's state
//                 (the log's last sequence when the snapshot began: each such record was
//                 applied under its model's lock before Encode took it); replay starts after
//                 it, skipping per model the records <= that model's applied sequence
//   44      ...   one "MODL" object per model (core/io/binary_io.h framing: tag, version,
//                 length, body): the normalized ModelConfig (protobuf bytes), the WAL sequence
//                 the model's state covers (Model::applied_sequence), the batch count,
//                 producers' applied offsets, σ selection (SigmaSelection protobuf bytes),
//                 then the learner's state (StreamingLearner::Serialize: the σ warm-up buffer,
//                 the episode state, then the estimators, each its own tagged object: CCME,
//                 CNTS, EMOM, MVAC, PSAC, SPMO, LAGS, then the open CME run, the scaler,
//                 FCRG, the delay ring, the alarms and the reduction, each only where the
//                 model has one: core/stream/streaming_learner.h). The MODL version is the
//                 learner's state version (StreamingLearner::kStateVersion, 9).
//                 Format 2 (daemon snapshots): the MODL object of a model evicted at the cut
//                 is followed by an "EVCT" object (version 1) with what the evicted model keeps
//                 in memory: the state digest taken at its eviction, its counters
//                 (Model::Stats), its input scaling (InputScaling protobuf bytes) and its kept
//                 alarms (AlarmList). A start restores such a model evicted without decoding
//                 its learner (Model's RESTART; ModelSnapshotCodec::DecodeEvicted). Format 1
//                 files have no EVCT objects: every model is decoded, as before.
//                 Format 3 (daemon snapshots): a model evicted at the cut is not copied: its
//                 entry is an "EREF" object (version 1) instead of its MODL object: the model's
//                 name, the name of the file in the snapshot's pins directory (below), the
//                 file's size and CRC32C (its footer, unmasked), the MODL object's version and
//                 its head (the MODL body before the learner's state: config, applied sequence,
//                 batch count, producers' offsets, σ selection, failure), then its EVCT object.
//                 The file is the model's eviction file (the export format), pinned: a hard
//                 link owned by this snapshot (PINS below). A model whose file cannot be pinned
//                 is copied as in format 2 (MODL, EVCT).
//   end-4   4     masked CRC32C (service/storage/crc32c.h) of every byte before it
// The CRC is checked before anything is parsed: a flipped byte anywhere is DataLoss naming
// the file and the byte range; a file that passes it is then parsed with every length bounded
// by the header dimensions before allocating (a corrupt file never makes the loader allocate
// more than it holds, and a hostile one is refused by tag, version or bound).
//
// WHY ONE FILE PER SNAPSHOT (of all models) rather than one per model: a snapshot file is then
// a single atomic rename, a deleted model disappears from the next snapshot without any
// per-model bookkeeping, "keep the newest 2" is a file count, and the WAL segments below the
// file's covered sequence are covered by exactly one file. An export is
// the same format with one model.
//
// CONSISTENCY. Each model is serialized under its learner lock (a copy of bytes, O(model
// size)) and the file is written off every lock, so ingestion of a model pauses only for its
// own copy. The header carries the covered sequence and the model count, so the resident
// models' bytes are taken before the file is written and held until their turn (the serialized
// size of the resident models: what they hold live, roughly). An EVICTED model's bytes are
// neither read nor copied: its file is pinned at the cut (a hard link, ModelSpill::Pin, under
// its eviction lock, so a reload meanwhile does not take it away) and the snapshot records a
// reference to the pin (EREF). The applied sequence read under the same lock is the cut: the
// snapshot covers exactly that model's WAL records <= it.
//
// PINS. The pins of snapshot-N.snap are DATA_DIR/snapshots/snapshot-N.pins/NNNNNNNNNNNN.modl
// (PinsDirOf: the snapshot's path without ".snap", plus ".pins"; the same rule for a
// --recover-from file elsewhere). They are owned by the snapshot: created before its file,
// removed with it by retention (after the manifest stops listing it), moved with it to
// unusable/ when it is set aside, and a pins directory without its snapshot (a crash between
// the two) is removed when the manager is built. DURABILITY: eviction files are not fsynced
// (the previous snapshot and the log hold the model until a snapshot references the file), so
// before the snapshot's own file is written every pinned file not yet durable is fsynced
// (ModelSpill::MakeDurable: once per file, ever; by 8 short-lived threads at once, whose
// fsyncs share the journal's commits), then the pins directory and the snapshots directory; then the file is written,
// fsynced, verified and renamed as below. A crash at any point leaves the previous snapshot with its pins untouched
// (retention runs only after the rename is durable) and the new one either absent or complete.
//
// DIRECTORY. DATA_DIR/snapshots/snapshot-NNNNNNNNNNNNNNNNNNNN.snap (20 digits, increasing);
// written as .snapshot-N.tmp in the same directory, fsync(file), rename, fsync(dir). After a
// successful write all but the newest `keep` (2) are deleted with their pins, then the covered callback
// runs (the daemon deletes WAL segments covered by the OLDEST kept snapshot, so the fallback
// snapshot can still be replayed forward). Load tries the newest file first; a file that fails
// (checksum, truncation, bad tag/version) is reported on stderr with its path and the
// previous one is used, except a file of a newer format version (its checksum matches: a newer
// build wrote it), which refuses the load by name (FailedPrecondition) and is left in place.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/engine/model.h"
#include "service/engine/model_config.h"
#include "service/engine/periodic_thread.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/storage/manifest.h"

namespace cmestream::io {
class Reader;
class Writer;
}  // namespace cmestream::io

namespace cmestream::service {

inline constexpr char kSnapshotMagic[] = "CMESNAP1";

// The serialized state of one model (a "MODL" object) and the WAL sequence it covers.
struct ModelImage {
  std::string name;
  uint64_t applied_sequence = 0;
  std::string bytes;
};

// What a daemon snapshot takes of one model at its cut: the bytes of a resident model, or a pin
// of an evicted model's file (ModelSpill::Pin) and what the model keeps in memory (its EVCT
// object), written as a reference (EREF, EVCT). Move-only; the pin is removed when the part
// goes, unless Keep() handed it to the snapshot that references it.
class SnapshotPart {
 public:
  SnapshotPart() = default;
  SnapshotPart(SnapshotPart&& o) noexcept { *this = std::move(o); }
  SnapshotPart& operator=(SnapshotPart&& o) noexcept;
  SnapshotPart(const SnapshotPart&) = delete;
  SnapshotPart& operator=(const SnapshotPart&) = delete;
  ~SnapshotPart();
  const std::string& name() const { return image_.name; }
  bool pinned() const { return !ref_.pin.empty(); }
  const ModelSpill::FileRef& ref() const { return ref_; }
  // An evicted model's EVCT object (what it keeps in memory), written after its reference.
  const std::string& summary() const { return summary_; }
  // The entry of the snapshot file, once: a resident model's MODL object; an evicted model's
  // EREF object then its EVCT object (its MODL object then EVCT if it could not be pinned).
  std::string TakeBytes();
  // fsync of the pinned file if it is not durable yet (ModelSpill::MakeDurable); true if it
  // was synced now.
  absl::StatusOr<bool> MakeDurable();
  // The snapshot that references the pin was installed: the pin is its, not the part's.
  void Keep() { kept_ = true; }

 private:
  friend class ModelSnapshotCodec;
  ModelImage image_;
  std::string summary_;
  ModelSpill::FileRef ref_;      // pinned: ref_.pin non-empty
  ModelSpill* spill_ = nullptr;  // the pin's owner
  bool kept_ = false;
};

// The pins directory of a snapshot file (storage/snapshot.h PINS): its path without ".snap"
// plus ".pins".
std::string PinsDirOf(const std::string& snapshot_path);

// Friend of Model: reads and restores its full state.
class ModelSnapshotCodec {
 public:
  // The model's part of a daemon snapshot (SnapshotPart): Encode's bytes for a resident model,
  // a pin of its file in `pins_dir` for an evicted one (if the file cannot be pinned, its MODL
  // object read now, as Image does). Errors as Image's.
  static absl::StatusOr<SnapshotPart> Part(Model& model, const std::string& pins_dir);
  // Takes the model's learner lock, serializes everything (no flush, no re-factorization: the
  // live state is not touched) and returns the bytes. O(model size).
  // An evicted model's image is its file's MODL object (checksum verified); if that file
  // cannot be read, Encode prints why and returns no bytes, Image returns the error (DataLoss).
  static ModelImage Encode(Model& model);
  static absl::StatusOr<ModelImage> Image(Model& model);
  // Encode of a resident model (its learner lock; the caller keeps it resident).
  static ModelImage EncodeResident(Model& model);
  // Decodes the learner of a MODL object for `model` (an evicted model loaded back): the
  // object's config must be the model's. Errors as Decode's.
  static absl::StatusOr<std::unique_ptr<StreamingLearner>> DecodeLearner(io::Reader& r, const ConfigDefaults& defaults,
                                                                         const Model& model,
                                                                         std::shared_ptr<ModelMetrics> scratch,
                                                                         BatchLog* log);
  // The model's state as bytes (the MODL body without its name, WAL sequence and batch
  // count), under its learner lock: what Model::StateDigest hashes.
  static std::string StateBytes(Model& model);
  // Decodes one MODL object into a new Model (not registered). `rename` (non-empty) replaces
  // the stored name (import --name). The config is re-validated with NormalizeModelConfig.
  // Errors: DataLoss naming the source and offset; InvalidArgument for a bad (re)name.
  static absl::StatusOr<std::shared_ptr<Model>> Decode(io::Reader& r, const ConfigDefaults& defaults,
                                                       const std::string& rename, std::shared_ptr<ModelMetrics> metrics,
                                                       BatchLog* log);
  // RESTART (Model's EVICTION): a model that was evicted at a daemon snapshot's cut, restored
  // evicted from its MODL object `object` (at file offset `begin` of `source`) and its EVCT
  // object `summary`: the MODL header is parsed (the learner's bytes are not decoded), the
  // object written to a file of `spill` (ModelSpill::WriteImage), and the model registered
  // with its counters, offsets, alarms and digest and no learner. Errors as Decode's.
  static absl::StatusOr<std::shared_ptr<Model>> DecodeEvicted(std::string_view object, std::string_view summary,
                                                              const std::string& source, uint64_t begin,
                                                              const ConfigDefaults& defaults, ModelSpill& spill,
                                                              std::shared_ptr<ModelMetrics> metrics, BatchLog* log);
  // RESTART from a format 3 snapshot: a model evicted at the snapshot's cut, restored evicted
  // from its EREF object `reference` (at file offset `begin` of `source`) and its EVCT object
  // `summary`: the MODL head the reference holds is parsed (ReadModelHeader), the pinned file
  // in `pins_dir` gets a new name in `spill` (ModelSpill::Adopt: its size and footer checked,
  // no byte of it read or copied), and the model is registered with its counters, offsets,
  // alarms and digest and no learner. Its next batch verifies the file whole (CRC, size, the
  // digest). Errors as Decode's; NotFound or DataLoss naming the pin if it is missing or its
  // size or footer differ.
  static absl::StatusOr<std::shared_ptr<Model>> DecodeReferenced(std::string_view reference, std::string_view summary,
                                                                 const std::string& source, uint64_t begin,
                                                                 const std::string& pins_dir,
                                                                 const ConfigDefaults& defaults, ModelSpill& spill,
                                                                 std::shared_ptr<ModelMetrics> metrics, BatchLog* log);
  // Checks that an EVCT object parses (the snapshot's verification).
  static absl::Status CheckSummary(std::string_view summary, const std::string& source, uint64_t begin);

 private:
  // The EVCT body (snapshot.cc): digest, counters, input scaling, kept alarms into `state`.
  static absl::Status ReadSummary(io::Reader& r, Model::EvictedState* state);
  // The MODL body (snapshot.cc): config, applied sequence and batch count (left out of the
  // digest), producer offsets, sigma selection, the learner's state.
  static void WriteBody(io::Writer& w, const Model& m, bool for_digest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.learner_mu_)
      ABSL_LOCKS_EXCLUDED(m.stats_mu_);
};

// A parsed, checksum-verified snapshot or export file.
struct SnapshotFile {
  std::string source;  // path or "import"
  bool is_export = false;
  uint64_t number = 0;
  uint64_t created_unix_nanos = 0;
  uint64_t covered_sequence = 0;
  uint32_t format_version = 0;
  std::vector<std::pair<uint64_t, uint64_t>> model_ranges;  // [begin, end) of each MODL object
  // [begin, end) of the EVCT object after each MODL (or EREF) object ({0, 0}: none; format
  // versions 2 and 3).
  std::vector<std::pair<uint64_t, uint64_t>> summary_ranges;
  // [begin, end) of each model's EREF object ({0, 0}: none, its MODL object is in the file;
  // format version 3). A referenced model's model_ranges entry is {0, 0}.
  std::vector<std::pair<uint64_t, uint64_t>> reference_ranges;
  std::string bytes;  // the whole file
};
// Verifies magic, kind, version and CRC32C, and frames the models (not decoded yet).
absl::StatusOr<SnapshotFile> ParseSnapshotBytes(std::string bytes, const std::string& source);
absl::StatusOr<SnapshotFile> ReadSnapshotFile(const std::string& path);

// A snapshot or export file read model by model, so memory is one model's bytes whatever the
// file's size (recovery's load, a snapshot's verification, retention). Open checks the CRC32C
// over the whole file in one streaming pass first (nothing is parsed before it passes), then
// the header; Next frames one MODL object at a time (tag, version, a length bounded by what is
// left of the file). Errors as ReadSnapshotFile's, with the same texts.
class SnapshotFileReader {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotFileReader>> Open(const std::string& path);
  ~SnapshotFileReader();
  // The header's fields (bytes and model_ranges stay empty).
  const SnapshotFile& header() const { return header_; }
  uint32_t models() const { return models_; }
  // The next model's MODL object into `object` and its file offset into `begin`, and the EVCT
  // object after it into `summary` (if not null; cleared when there is none); false after the
  // last (then the file must end with its footer: DataLoss otherwise). A format 3 entry that
  // references an evicted model's file: `object` empty, its EREF object into `reference`
  // (DataLoss if `reference` is null), `begin` its offset, and its EVCT object into `summary`.
  absl::StatusOr<bool> Next(std::string* object, uint64_t* begin, std::string* summary = nullptr,
                            std::string* reference = nullptr);

 private:
  SnapshotFileReader() = default;
  // The object at pos_ (tag `want`, version <= max_version, its length bounded by the file).
  absl::Status ReadObject(uint32_t want, uint32_t max_version, const char* name, std::string* object);
  absl::Status ReadAt(uint64_t offset, size_t n, std::string* out) const;
  int fd_ = -1;
  SnapshotFile header_;
  uint32_t models_ = 0;
  uint32_t read_ = 0;
  uint64_t pos_ = 0;       // next object's offset
  uint64_t body_end_ = 0;  // where the footer starts
};

// An export file of one model (same format, kind "EXPT"). Serialized under its learner lock.
// An evicted model is exported from its file (ModelSnapshotCodec::Image), without a reload.
absl::StatusOr<std::string> ExportModel(Model& model);
// Decodes an export (kind EXPT; a daemon snapshot is refused "not an export", except in WAL
// replay of what an earlier build accepted) and registers it as `new_name` (or its stored
// name), after checking --max-models and the memory budget. A live import is logged as a WAL
// import record holding the whole file, with the name reserved, before the model is visible
// (like a creation), and its applied sequence is that record's: an acknowledged import
// survives any restart, and the batches that follow it replay onto it. `replay_sequence`: WAL
// replay of such a record (nothing logged). AlreadyExists if the name is taken; DataLoss for a
// corrupt file (with what and where); InvalidArgument if the bytes are not an export;
// ResourceExhausted beyond the limits.
absl::StatusOr<std::shared_ptr<Model>> ImportModel(std::string bytes, const std::string& new_name,
                                                   ModelRegistry& registry, const ConfigDefaults& defaults,
                                                   std::optional<uint64_t> replay_sequence = std::nullopt);

// The files of evicted models (Model's EVICTION; service/README.md "Eviction"): one per eviction,
// DATA_DIR/evicted/NNNNNNNNNNNN.modl, in the export format (header, one MODL object, CRC32C),
// written once under its final name (nobody reads the path before Write returns it) and NOT
// fsynced; removed when the model is loaded back or, once deleted, freed. A daemon snapshot pins
// a file (a hard link in its pins directory, owned by the snapshot) and makes it durable
// (MakeDurable) before it references it. Open removes what an earlier run left here: recovery
// restores every model from the snapshots and the log, and a model restored evicted from a
// format 3 snapshot gets a new name for the snapshot's pin (Adopt), from a format 2 one a new
// file (WriteImage) from the snapshot's bytes. What the store records of each file it wrote or
// adopted (size, CRC32C, durable, the MODL head) is in memory, under its own lock (a leaf).
class EvictionStore final : public ModelSpill {
 public:
  static absl::StatusOr<std::unique_ptr<EvictionStore>> Open(const std::string& dir, ConfigDefaults defaults);
  ~EvictionStore() override;
  absl::StatusOr<std::string> Write(Model& model) override;
  absl::StatusOr<std::unique_ptr<StreamingLearner>> Read(const std::string& path, const Model& model) override;
  absl::StatusOr<std::string> ReadImage(const std::string& path) override;
  absl::StatusOr<FileRef> Pin(const std::string& path, const std::string& dir) override;
  absl::Status MakeDurable(const FileRef& ref) override;
  absl::StatusOr<std::string> Adopt(const FileRef& ref) override;
  void Remove(const std::string& path) override;
  absl::StatusOr<std::string> WriteImage(const std::string& image, uint64_t applied_sequence) override;
  const std::string& dir() const { return dir_; }
  uint64_t bytes_written() const { return bytes_written_.load(); }
  uint64_t files_synced() const { return files_synced_.load(); }

 private:
  struct FileInfo {
    uint64_t size = 0;
    uint32_t crc = 0;
    bool durable = false;
    uint32_t model_version = 0;
    std::string head;
  };
  EvictionStore(std::string dir, ConfigDefaults defaults);
  std::string NextPath();
  // What it records of `path` (a file it wrote or adopted), if anything.
  std::optional<FileInfo> Info(const std::string& path) const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string dir_;
  const ConfigDefaults defaults_;
  std::unique_ptr<Metrics> scratch_metrics_;  // series of the throwaway models a reload decodes
  std::atomic<uint64_t> reloads_{0};          // their labels ("reload-N": one per reload)
  NullBatchLog null_log_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> files_synced_{0};
  // A leaf: held for a lookup or an update of files_, never across I/O.
  mutable absl::Mutex mu_;
  std::map<std::string, FileInfo> files_ ABSL_GUARDED_BY(mu_);  // by path under dir_
};

struct SnapshotOptions {
  std::string dir;               // DATA_DIR/snapshots, created if missing
  double interval_seconds = 60;  // --snapshot-interval; 0 = only on demand and at shutdown
  int keep = 2;                  // snapshots kept, >= 1
  absl::Status Validate() const;
};

struct SnapshotResult {
  std::string path;
  uint64_t bytes = 0;
  uint64_t number = 0;
  int models = 0;
  uint64_t covered_sequence = 0;  // every WAL record <= it is in this snapshot's state
  double seconds = 0;
  int referenced = 0;       // evicted models written as references to their pinned files
  int files_synced = 0;     // of those, files fsynced by this snapshot (not durable before)
  double sync_seconds = 0;  // the fsyncs of those files and of the pins and snapshot directories
};

struct LoadReport {
  std::string path;  // the snapshot used; empty if none
  uint64_t number = 0;
  int models = 0;
  uint64_t covered_sequence = 0;       // replay the WAL after this (0: from the start)
  uint64_t newest_listed_covered = 0;  // the newest covered sequence the manifest lists
  std::vector<std::string> skipped;    // "PATH: reason" for each missing or unusable newer snapshot
  std::vector<std::string> unusable;   // paths of present but unusable snapshots (to set aside)
};

class SnapshotManager {
 public:
  // requires: registry outlives the manager.
  // `log` (may be null: no WAL) gives the last sequence at the start of a snapshot.
  // `manifest` (may be null: tests) is told which snapshots are kept after each snapshot.
  SnapshotManager(SnapshotOptions options, ModelRegistry& registry, ConfigDefaults defaults, const BatchLog* log,
                  Manifest* manifest = nullptr);
  ~SnapshotManager();

  // Loads the newest usable snapshot into the (empty) registry, trying the files present and
  // the ones in `listed` (the manifest's; a listed one that is missing is reported), newest
  // first; or exactly `recover_from` when set (FailedPrecondition if it is not usable). A
  // directory with no snapshot is not an error (report.path empty). Each missing or unusable
  // file is printed to stderr ("cmestreamd: snapshot PATH is unusable: REASON; trying the
  // previous one"). Whether falling back loses data is the caller's decision (it knows the WAL).
  absl::StatusOr<LoadReport> Load(const std::vector<ManifestState::Snapshot>& listed = {},
                                  const std::string& recover_from = "");
  absl::StatusOr<LoadReport> LoadNewest() { return Load(); }
  // Moves unusable snapshot files into DIR/unusable, where retention never touches them.
  absl::Status SetAside(const std::vector<std::string>& paths);
  // The usable snapshot files present, oldest first, with their covered sequences.
  std::vector<ManifestState::Snapshot> Kept() const;

  // Called after each durable snapshot with the smallest applied sequence covered by the
  // OLDEST snapshot kept (WAL segments wholly below it may be deleted: Wal::Rotate() then
  // Wal::DeleteSegmentsCoveredBy(S)). Set before Start().
  void SetCoveredCallback(std::function<void(uint64_t)> callback) { covered_ = std::move(callback); }
  // Called at the end of every TakeNow (periodic or not) with its outcome, under the snapshot
  // lock (the daemon's metrics: duration, bytes, last success). Set before Start().
  void SetObserver(std::function<void(const absl::StatusOr<SnapshotResult>&)> observer) {
    observer_ = std::move(observer);
  }

  // Writes a snapshot of every model now (serialized per model under its lock, written off
  // it). Thread-safe: concurrent calls are serialized.
  absl::StatusOr<SnapshotResult> TakeNow() ABSL_LOCKS_EXCLUDED(take_mu_);

  // Periodic snapshots every interval_seconds (when > 0) on a background thread; Stop() joins
  // it. Stop() does not take a final snapshot: the daemon calls TakeNow() at clean shutdown
  // after the server stopped accepting batches.
  // Start and Stop are called by the daemon's lifecycle (one thread), not concurrently.
  void Start();
  void Stop();

  // Existing snapshot paths, oldest first.
  std::vector<std::string> List() const;
  const SnapshotOptions& options() const { return options_; }

 private:
  // Reads a written file back, decodes every model and checks that encoding it again gives
  // the same bytes; a referenced model's summary must parse and its pin in `pins_dir` have the
  // recorded size and footer. Called before the file replaces anything.
  absl::Status VerifyFile(const std::string& path, const std::string& pins_dir) const;

  const SnapshotOptions options_;
  ModelRegistry& registry_;
  const ConfigDefaults defaults_;
  const BatchLog* const log_;
  Manifest* const manifest_;
  std::unique_ptr<Metrics> verify_metrics_;  // series of the throwaway models VerifyFile decodes
  std::function<void(uint64_t)> covered_;
  std::function<void(const absl::StatusOr<SnapshotResult>&)> observer_;
  // One snapshot at a time: first in the lock order (service/README.md "Locks"), held across
  // the whole snapshot, which takes the registry's and each model's locks under it.
  absl::Mutex take_mu_;
  uint64_t next_number_ ABSL_GUARDED_BY(take_mu_) = 1;
  std::unique_ptr<PeriodicThread> periodic_;  // periodic snapshots (interval_seconds > 0)
};

}  // namespace cmestream::service
