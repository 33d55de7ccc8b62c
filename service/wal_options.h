// Options of the write-ahead log (service/wal.h), apart so that daemon.h needs no gRPC or
// Prometheus headers for them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cmestream::service {

enum class WalSync { kAlways, kInterval, kNever };

struct WalOptions {
  std::string dir;                          // DATA_DIR/wal, created if missing
  WalSync sync = WalSync::kAlways;          // see DURABILITY in wal.h
  double sync_interval_ms = 100;            // kInterval only, in (0, 60000]
  uint64_t segment_bytes = 64ull << 20;     // rotate at this size, >= 4096
  // OK or InvalidArgument naming the field.
  absl::Status Validate() const;
};

// "always" | "interval" | "never" -> WalSync; InvalidArgument otherwise.
absl::StatusOr<WalSync> ParseWalSync(const std::string& text);
const char* WalSyncName(WalSync sync);

}  // namespace cmestream::service
