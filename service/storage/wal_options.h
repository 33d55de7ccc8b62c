// Options of the write-ahead log (service/storage/wal.h), apart so that daemon.h needs no gRPC or
// Prometheus headers for them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cmestream::service {

struct RecoveryProgress;  // recovery_progress.h
struct WalRecord;         // wal.h

enum class WalSync { kAlways, kInterval, kNever };

struct WalOptions {
  std::string dir;                       // DATA_DIR/wal, created if missing
  WalSync sync = WalSync::kAlways;       // see DURABILITY in wal.h
  double sync_interval_ms = 100;         // kInterval only, in (0, 60000]
  uint64_t segment_bytes = 64ull << 20;  // rotate at this size, >= 4096
  // Recovery (see RECOVERY in wal.h). Damage that loses acknowledged records (a gap, a
  // damaged complete last record, a missing listed segment, records missing before
  // require_from_sequence or after require_through_sequence) refuses Open with
  // FailedPrecondition unless accept_data_loss, which keeps the valid prefix as before.
  bool accept_data_loss = false;
  uint64_t expected_first_segment = 0;    // from the manifest: segments FIRST..LAST must
  uint64_t expected_last_segment = 0;     // exist (0 0: no expectation)
  uint64_t require_from_sequence = 0;     // the first record needed (snapshot covered + 1); 0: none
  uint64_t require_through_sequence = 0;  // the log must reach at least this sequence; 0: none
  // With accept_data_loss: nothing says which segments must exist (the manifest is missing or
  // damaged), so the log may have ended later than what is on disk: the records after the last
  // one read are reported lost, their number unknown (WalRecoveryReport::lost_unreadable).
  bool log_end_unknown = false;
  // Called (under the WAL's lock) whenever the set of segment files changes, with the first
  // and last segment numbers that now exist (the manifest records them). An error fails the
  // append that created the segment.
  std::function<absl::Status(uint64_t first, uint64_t last)> on_segments_changed;
  // With accept_data_loss: called for each record that recovery drops after damage (it stops
  // there: point in time), in sequence order, for the per-model loss report. `damaged`: the
  // record failed its checksum but has the expected sequence and a known type, and is passed as
  // written (best effort). Sequences that cannot be read at all go to
  // WalRecoveryReport::lost_unreadable instead.
  std::function<void(const WalRecord& record, bool damaged)> on_dropped_record;
  // Open counts the records it will replay into progress->total before replaying and counts each
  // replayed one in progress->replayed, for the RPCs answered meanwhile. Null: not reported.
  RecoveryProgress* progress = nullptr;
  // Tests only: called by the group-commit leader (wal.h GROUP COMMIT) without the WAL's lock,
  // just before its fdatasync; a nonzero return is taken as the fdatasync's errno (fault
  // injection), 0 lets the real fdatasync run. Unset in the daemon.
  std::function<int()> before_group_sync;
  // OK or InvalidArgument naming the field.
  absl::Status Validate() const;
};

// "always" | "interval" | "never" -> WalSync; InvalidArgument otherwise.
absl::StatusOr<WalSync> ParseWalSync(const std::string& text);
const char* WalSyncName(WalSync sync);

}  // namespace cmestream::service
