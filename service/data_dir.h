// The daemon's data directory. This issue keeps no model state on disk; it creates the
// directory, takes an exclusive lock on DIR/LOCK (flock) so two daemons never share one
// directory (the WAL and snapshots of a later issue will live here), and writes
// DIR/daemon.json describing the running daemon (removed on clean shutdown).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cmestream::service {

class DataDir {
 public:
  // Creates `path` (and parents) if needed and locks it. FailedPrecondition if another process
  // holds the lock; InvalidArgument/Internal for filesystem errors, naming the path.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path);
  ~DataDir();

  const std::string& path() const { return path_; }
  // Atomically (temp file + rename) writes daemon.json with pid, version and addresses.
  absl::Status WriteDaemonInfo(const std::string& grpc_address, const std::string& metrics_address);

 private:
  DataDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
  bool wrote_info_ = false;
};

}  // namespace cmestream::service
