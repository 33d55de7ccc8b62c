// POSIX file helpers of the storage code (manifest, snapshots, WAL): whole-file reads, atomic
// replacement and directory fsync, with errors that name the path and errno text.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace cmestream::service::files {

// NotFound if the file does not exist; Internal (naming the path) for other errors.
absl::Status ReadFile(const std::string& path, std::string* out);
// Writes `data` to `path` atomically: PATH.tmp, fsync, rename, fsync of the directory. A crash
// leaves either the old or the new file. ResourceExhausted for a full disk.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);
absl::Status FsyncDir(const std::string& dir);
bool Exists(const std::string& path);
std::string DirName(const std::string& path);
std::string BaseName(const std::string& path);

}  // namespace cmestream::service::files
