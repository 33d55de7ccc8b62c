// The daemon's data directory: MANIFEST, wal/, snapshots/ (service/README.md). Opening it
// takes an exclusive advisory lock (flock) on the directory itself, held through a descriptor
// the daemon keeps open for its lifetime, so two daemons never share one directory. Why the
// directory and not a lock file: the lock of a file is on its inode, so deleting DIR/LOCK
// let a second daemon create a new LOCK and lock that; a directory cannot be replaced while
// it holds the daemon's files. DIR/LOCK is still created (and locked) for tools that look for
// it. DIR/daemon.json describes the running daemon (removed on clean shutdown).
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
  DataDir(std::string path, int lock_fd, int dir_fd) : path_(std::move(path)), lock_fd_(lock_fd), dir_fd_(dir_fd) {}
  std::string path_;
  int lock_fd_;
  int dir_fd_;
  bool wrote_info_ = false;
};

}  // namespace cmestream::service
