// DATA_DIR/MANIFEST: the list of files that must exist for the daemon's state to be complete,
// as PostgreSQL's control file and RocksDB's MANIFEST keep one.
//
// Why: without it, recovery can only trust what it happens to find. A deleted wal/ directory,
// a missing newest segment, or every snapshot unusable with an empty WAL all looked like a
// smaller, valid state, and the daemon started serving it with acknowledged data gone. With
// it, anything listed but missing or unusable makes the daemon refuse to start, naming the
// file and the way out (--recover-from FILE, --accept-data-loss).
//
// FORMAT (text, one fact per line, written atomically: temp file, fsync, rename, fsync dir):
//   cmestream-manifest 1
//   snapshot NAME covered=S            one line per kept snapshot, oldest first
//   wal-segments FIRST LAST            segment numbers FIRST..LAST must exist (0 0: none yet)
//   wal-first-sequence F               the oldest WAL record that must be on disk (records
//                                      before it are in the oldest listed snapshot)
//   crc XXXXXXXX                       CRC32C (masked, hex) of every line above
// A future version number is refused; a bad checksum is damage like any other.
//
// Who writes it: the WAL when it creates or deletes segments, the snapshot manager after each
// snapshot and its retention, recovery once it has settled what exists. Writes are serialized
// by the manifest's own mutex; each write persists the whole current state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace cmestream::service {

struct ManifestState {
  struct Snapshot {
    std::string name;  // file name inside DATA_DIR/snapshots
    uint64_t covered = 0;
    bool operator==(const Snapshot&) const = default;
  };
  std::vector<Snapshot> snapshots;  // oldest first
  uint64_t wal_first_segment = 0;   // 0: no segment must exist
  uint64_t wal_last_segment = 0;
  uint64_t wal_first_sequence = 0;  // 0: no constraint
  bool operator==(const ManifestState&) const = default;
};

inline constexpr uint32_t kManifestVersion = 1;

std::string EncodeManifest(const ManifestState& state);
// DataLoss (checksum, syntax: naming the line) or FailedPrecondition (newer version).
absl::StatusOr<ManifestState> ParseManifest(const std::string& text, const std::string& path);

class Manifest {
 public:
  // `path` is DATA_DIR/MANIFEST. Reads nothing: see Load.
  explicit Manifest(std::string path) : path_(std::move(path)) {}

  // NotFound if the file does not exist (a new or pre-manifest data dir), else the parsed
  // state or the parse error. Also becomes the state later updates start from.
  absl::StatusOr<ManifestState> Load() ABSL_LOCKS_EXCLUDED(mu_);

  // Replace the whole state / one part of it, and persist it before returning.
  absl::Status Write(const ManifestState& state) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetSnapshots(std::vector<ManifestState::Snapshot> snapshots) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetWalSegments(uint64_t first, uint64_t last) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetWalFirstSequence(uint64_t first_sequence) ABSL_LOCKS_EXCLUDED(mu_);
  ManifestState state() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& path() const { return path_; }

 private:
  absl::Status PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::string path_;
  // Last in the lock order (service/README.md "Locks"): held across the write + fsync of the
  // manifest file, and callers may hold the WAL's lock; nothing is taken under it.
  mutable absl::Mutex mu_;
  ManifestState state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cmestream::service
