// The write-ahead log of cmestreamd: every accepted batch, model creation, import and
// deletion is appended here before it takes effect or is acknowledged, so a restart can
// rebuild every model by replaying the log through the live ingestion path.
//
// ON DISK. DATA_DIR/wal/NNNNNNNN.log, segments numbered 00000001, 00000002, ... (8+ decimal
// digits, ordered numerically). A segment (format version 1) starts with a 16-byte header:
//
//   offset  size  field
//   0       8     magic "CMEWALSG"
//   8       4     format version (1; a newer version refuses the start, naming the file)
//   12      4     masked CRC32C of bytes [0, 12)
//
// then records (segments written before the header existed, version 0, start with records):
//
//   offset  size  field
//   0       4     masked CRC32C (crc32c::Mask) of bytes [8, 17 + length)  = type, sequence, payload
//   4       4     length of the payload in bytes
//   8       1     type (WalRecordType)
//   9       8     sequence number (1, 2, 3, ... across segments, never reused)
//   17      len   payload
//
// All integers are fixed-width little-endian. Payloads:
//   kModelCreated   a serialized v1::ModelConfig, already normalized (NormalizeModelConfig)
//   kModelDeleted   the model name (raw bytes)
//   kBatch          a serialized v1::IngestBatch restricted to the pairs actually applied:
//                   `offset` is that of the first applied pair (so on replay nothing is a
//                   duplicate and the producer's applied offset comes out the same), trajectory
//                   batches keep their first applied state, `producer_id` and `episode_id` as
//                   sent. Replaying it through Model::Ingest is therefore the same computation.
//   kModelImported  u32 name length, the name, the whole export file (service/storage/snapshot.h)
// A segment is rotated (closed, a new one opened) once it reaches WalOptions::segment_bytes.
// Each new segment is recorded in the manifest (service/storage/manifest.h) before a record in it can
// be acknowledged, and leaves the manifest before it is deleted.
//
// DURABILITY (WalOptions::sync): kAlways: a record is acknowledged only once an fdatasync
// that started after it was written has succeeded (Append / AppendModel* return then; a batch
// is written with WriteBatch and its caller waits with WaitDurable — see GROUP COMMIT);
// kInterval fdatasync()s from a background thread every
// sync_interval_ms (a crash of the machine — not of the process — can lose the last interval);
// kNever leaves it to the kernel. A process crash (kill -9) loses nothing under any policy:
// the data is in the page cache once write() returned.
// A failed write rolls the segment back to the record start (ftruncate), so the log stays a
// valid prefix; the caller gets RESOURCE_EXHAUSTED (ENOSPC, EFBIG, EDQUOT) or UNAVAILABLE
// and must not apply the batch. If the rollback or an fdatasync fails, the state of the file
// is unknown: the log refuses every later append (UNAVAILABLE) until the daemon restarts and
// recovery re-reads what is actually on disk. Every caller still waiting for durability
// (WaitDurable, AppendModel*) then gets that error too and must not apply its record.
//
// GROUP COMMIT (kAlways). Records of all models are written in sequence order under one
// mutex, but the fdatasync is shared, leader/follower style (as RocksDB's and PostgreSQL's
// group commit): a caller of WaitDurable(s) whose record is not yet durable either waits for
// the fdatasync in progress, or, if none runs, becomes the leader: it notes the last sequence
// written so far (target), fdatasyncs a dup of the active segment's descriptor WITHOUT the
// mutex (others keep writing), and on success marks every record <= target durable and wakes
// the followers; a follower whose record is > target leads the next round. So one fdatasync
// covers every record appended while the previous one ran, and no model lock is held across
// I/O (Model writes its record, then waits here without its learner lock).
// At most one fdatasync of the log runs at a time (rotation waits for the running one): on
// Linux an fdatasync that fails reports a write-back error once, and a concurrent one could
// return success for pages that were lost; serialized, "durable" only ever advances past a
// record after an fdatasync that started after the record was written returned 0.
//
// A RECORD WRITTEN BUT NEVER ACKNOWLEDGED. If that fdatasync fails, the records written since
// the last successful one (possibly of several models) stay in the file — they cannot be
// rolled back, later bytes of other records follow them — and none is applied or acknowledged:
// their callers get UNAVAILABLE and the log fails sticky, so NO record is written after them
// until a restart. On restart, replay applies whichever of them reached the disk whole (and
// cuts a torn tail). That is acceptable because nothing contradicts it: (1) no later record of
// any model exists (the sticky failure), so nothing acknowledged was computed from a state
// without them; (2) replaying a batch moves its producer's applied offset forward, and an
// exactly-once producer resumes from GetProducer's applied_offset, so a retry is de-duplicated
// rather than applied twice (a producer without producer_id has at-least-once semantics, as
// for a crash between write and ack); (3) a creation/deletion/import that was refused this way
// may reappear after the restart, which is what the client's retry would have done. The same
// holds for a process crash between write and ack under any policy. A snapshot never covers
// such a record while a batch is between write and application (Model::WaitAppliedThrough).
//
// RECOVERY (Open): the segments the manifest lists must all exist, except older ones whose
// records the state no longer needs (all missing segments below the first present one, and the
// log's first record <= require_from_sequence: a warning, nothing lost) and ones between two
// present segments whose records are all <= after_sequence (found as a sequence gap while
// reading: a warning); a segment whose header
// checksum fails refuses, unless accept_data_loss (its records are then read as version 1, each
// checked by its own checksum); then segments are read in
// numeric order and every record checked (length within the file, CRC, sequence = previous +
// 1). A record whose CRC matches but whose type is unknown was written by a newer version:
// the start is refused (never cut). At the first bad record:
//   * damaged bytes or missing records that are all <= after_sequence (the snapshot being
//     replayed from covers them; found by the next valid record's sequence): not needed, so
//     a warning naming the file and offset (skipped_damage), and reading goes on — never a
//     refusal and never a reason to drop later records (RocksDB and PostgreSQL start at the
//     checkpoint too);
//   * damaged bytes followed, in the same segment or at the start of the next, by the very
//     next sequence: nothing appended is lost (bytes that are not a record); they are skipped
//     with a warning (WalRecoveryReport::skipped_damage) and reading goes on;
//   * torn tail — the bad record is the last thing in the last segment and was never written
//     whole: its header or payload runs past the end of the file, or the bytes after it are
//     all zero, or its tail is zero from a 512-byte sector boundary to the end of the file (a
//     power loss that persisted the file size but not the last sectors). Such a write never
//     returned from fdatasync, so it was never acknowledged: reported (path, offset, bytes
//     dropped) and cut. Not torn: a record that seems to run past the end but whose checksum
//     matches the bytes up to the end (written whole, its length field damaged). The limit:
//     damage that has exactly a torn write's shape (zeros from a sector boundary) is cut, as
//     PostgreSQL ends its recovery at the first record failing its CRC;
//   * anything else loses acknowledged records — a gap (valid records follow with a later
//     sequence), or a last record that was written whole and then damaged. Open fails with
//     FailedPrecondition naming the file, the offset and the sequences lost, unless
//     accept_data_loss: then recovery stops there (point in time), the damaged segment is
//     copied to *.log.corrupt.TIME, later segments are renamed likewise — except that a segment
//     whose bytes are all valid records (the one after a missing segment, later intact ones) is
//     named *.log.dropped.TIME: it is not replayed, but it is not damaged — and the loss is listed
//     in WalRecoveryReport::data_loss; every dropped record that can still be read is passed to
//     WalOptions::on_dropped_record (the per-model loss report), the unreadable sequences go to
//     WalRecoveryReport::lost_unreadable.
// Also refused unless accept_data_loss: a log that starts after require_from_sequence (the
// records after the snapshot in use are gone) or ends before require_through_sequence (a
// fallback to an older snapshot would drop what the newer one held).
// New appends continue in a fresh segment.
//
// INTERFACE FOR SNAPSHOTS. Every record has a sequence number. Model::applied_sequence() is the
// sequence of the last record applied to a model (read it under the model's learner lock): a
// snapshot of the model taken under that lock covers all of the model's records <= it. A
// restart is then: load the snapshot, Open(options, after_sequence = S, visitor) where S is
// the snapshot's covered sequence (the visitor skips per model the records its snapshot
// already covers), and once a set of snapshots covers every record <= S, call
// DeleteSegmentsCoveredBy(S): it removes the closed segments whose records all have sequence
// <= S (call Rotate() first to close the active segment).
//
// Thread safety: all methods are thread-safe; appends are serialized by one mutex (records of
// different models interleave; records of one model are in the order the model applies them,
// since Model writes them in its per-model ingest order and applies them in that order).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cmestream/v1/cmestream.pb.h"
#include "prometheus/registry.h"
#include "service/engine/batch_log.h"
#include "service/engine/periodic_thread.h"
#include "service/engine/wire_limits.h"
#include "service/storage/wal_options.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace cmestream::service {

enum class WalRecordType : uint8_t { kModelCreated = 1, kModelDeleted = 2, kBatch = 3, kModelImported = 4 };
inline constexpr uint8_t kWalMaxKnownRecordType = 4;

inline constexpr size_t kWalHeaderBytes = 17;         // of a record
inline constexpr size_t kWalSegmentHeaderBytes = 16;  // of a segment (format version >= 1)
inline constexpr uint32_t kWalFormatVersion = 1;
inline constexpr uint32_t kWalMaxPayloadBytes = 1u << 30;  // 1 GiB; above --max-message-mb's limit

// One record as the recovery visitor sees it.
struct WalRecord {
  uint64_t sequence = 0;
  WalRecordType type = WalRecordType::kBatch;
  std::string payload;
  std::string segment;  // path of its segment file
  uint64_t offset = 0;  // byte offset of its header in the segment
};

// What Open found. `problem` is empty when every byte was a valid record.
struct WalRecoveryReport {
  uint64_t segments = 0;
  uint64_t records = 0;          // valid records read (including those <= after_sequence)
  uint64_t records_visited = 0;  // passed to the visitor
  uint64_t bytes = 0;            // valid bytes
  uint64_t last_sequence = 0;
  bool torn_tail = false;                   // a torn last record was cut
  bool corrupt = false;                     // data loss accepted: stopped there (point in time)
  std::string problem;                      // "path offset N: what; B bytes dropped"
  uint64_t first_sequence = 0;              // of the first valid record on disk (0: none)
  uint64_t missing_segments = 0;            // listed in the manifest but absent
  std::vector<std::string> skipped_damage;  // damaged bytes skipped with nothing lost
  std::vector<std::string> data_loss;       // damage accepted with --accept-data-loss
  // With accept_data_loss: sequences lost whose records cannot be read (a missing segment,
  // unparsable bytes), as ranges [first, last]; last 0: up to an unknown end.
  std::vector<std::pair<uint64_t, uint64_t>> lost_unreadable;
  uint64_t bytes_dropped = 0;
  double seconds = 0;
};

// Checks one record at data[0, size): on success sets *record (without segment/offset) and
// *record_bytes. Exposed for the tests and the fuzz target. Errors (all InvalidArgument/
// DataLoss with a reason): "incomplete header", "payload runs past end", "crc mismatch",
// "unknown record type N" (Unimplemented: the CRC matched, so a newer writer wrote it).
absl::Status ParseWalRecord(const char* data, size_t size, WalRecord* record, size_t* record_bytes);
// Payload of a kModelImported record: u32 name length, the name, the export file.
absl::Status DecodeImportRecord(const std::string& payload, std::string* name, std::string* image);
// The path of a segment in `dir` that starts with the segment header (written by a version that
// keeps a MANIFEST), or "" if there is none.
std::string FindVersionedSegment(const std::string& dir);
// The record bytes of (type, sequence, payload) as Append writes them (tests use it too).
std::string EncodeWalRecord(WalRecordType type, uint64_t sequence, const std::string& payload);

class Wal final : public BatchLog {
 public:
  using Visitor = std::function<absl::Status(const WalRecord&)>;

  // Recovers the log in options.dir (see RECOVERY), passing each valid record with sequence >
  // after_sequence to `visitor` in order, then opens a new segment for appends. A visitor error
  // stops Open and is returned with the record's path and offset prepended. `registry` (may be
  // null) receives the cmestream_wal_* series. Errors name the path.
  static absl::StatusOr<std::unique_ptr<Wal>> Open(const WalOptions& options, uint64_t after_sequence,
                                                   const Visitor& visitor, WalRecoveryReport* report,
                                                   const std::shared_ptr<prometheus::Registry>& registry = nullptr);
  ~Wal() override;

  // BatchLog: write one batch record (not yet durable); returns its sequence number. See
  // DURABILITY for errors. Append (BatchLog) = WriteBatch + WaitDurable.
  absl::StatusOr<uint64_t> WriteBatch(const std::string& model, const std::string& producer_id,
                                      uint64_t producer_offset_after, const PairBatch& batch, int64_t first,
                                      const std::string& episode_id) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> AppendModelCreated(const v1::ModelConfig& config) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> AppendModelDeleted(const std::string& name) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> AppendModelImported(const std::string& name, const std::string& image) override
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t last_sequence() const override ABSL_LOCKS_EXCLUDED(mu_);
  // kAlways: returns once `sequence` is covered by a successful fdatasync (GROUP COMMIT), or the
  // sticky failure. Other policies: OK at once.
  absl::Status WaitDurable(uint64_t sequence) override ABSL_LOCKS_EXCLUDED(mu_);
  // fdatasyncs done by group commit so far (tests: fewer than the records they covered).
  uint64_t group_syncs() const ABSL_LOCKS_EXCLUDED(mu_);

  // Closes the active segment (synced) and starts a new one at the next append.
  absl::Status Rotate() ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the longest prefix of closed segments whose records all have sequence <= covered
  // (see INTERFACE FOR SNAPSHOTS), so the segments left are a contiguous range. Returns the
  // number deleted. Never deletes the active segment.
  absl::StatusOr<int> DeleteSegmentsCoveredBy(uint64_t covered) ABSL_LOCKS_EXCLUDED(mu_);
  // Segment paths, oldest first (tests, diagnostics).
  std::vector<std::string> SegmentPaths() const ABSL_LOCKS_EXCLUDED(mu_);
  // Flushes to disk now (used at clean shutdown with sync != always).
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Segment {
    uint64_t number = 0;
    std::string path;
    uint64_t first_sequence = 0;  // 0 while empty
    uint64_t last_sequence = 0;
    uint64_t bytes = 0;
    uint64_t header_bytes = 0;  // 16 (version 1) or 0 (version 0, read only)
  };
  struct MetricSeries;
  explicit Wal(WalOptions options);
  // All require mu_; AppendRecord/CloseActive/SyncThrough may release it while they wait
  // (CloseActive for a running group fdatasync, SyncThrough for its own), so a caller must not
  // rely on state read before the call.
  absl::StatusOr<uint64_t> AppendRecord(WalRecordType type, const std::string& payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> AppendDurable(WalRecordType type, const std::string& payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);                                          // + SyncThrough under kAlways
  absl::Status SyncThrough(uint64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // GROUP COMMIT
  absl::Status OpenNewSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CloseActive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // and no group fdatasync running
  void SyncPending() ABSL_LOCKS_EXCLUDED(mu_);                   // kInterval: one fdatasync of what is not durable yet

  const WalOptions options_;
  // Lock order (service/README.md "Locks"): after the registry's and a model's locks (callers
  // append under them), before the manifest's (OpenNewSegment and DeleteSegmentsCoveredBy
  // update the manifest under it). Held across write(2) of a record and across the fdatasync
  // of a rotation; never across a group-commit fdatasync (SyncThrough releases it).
  mutable absl::Mutex mu_;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);  // closed ones, then the active one (if fd_ >= 0)
  int fd_ ABSL_GUARDED_BY(mu_) = -1;                    // active segment, -1 if none open yet
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_segment_number_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;  // every record <= it is covered by a successful fdatasync
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;  // a group fdatasync runs (without mu_)
  uint64_t group_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar sync_cv_;                               // syncing_ became false, or failed_ was set
  absl::Status failed_ ABSL_GUARDED_BY(mu_);            // sticky failure (see DURABILITY)
  std::string scratch_ ABSL_GUARDED_BY(mu_);            // encoded record, reused
  v1::IngestBatch batch_scratch_ ABSL_GUARDED_BY(mu_);  // restricted batch, reused (repeated fields keep capacity)
  std::unique_ptr<MetricSeries> metrics_;               // set by Open before the log is shared; thread-safe series

  std::unique_ptr<PeriodicThread> interval_sync_;  // kInterval only; started by Open, stopped by ~Wal
};

}  // namespace cmestream::service
