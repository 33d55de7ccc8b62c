// POSIX file helpers of the storage code (manifest, snapshots, WAL): whole-file reads, atomic
// replacement and directory fsync, with errors that name the path and errno text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace cmestream::service::files {

// NotFound if the file does not exist; Internal (naming the path) for other errors.
absl::Status ReadFile(const std::string& path, std::string* out);
// Writes `data` to `path` atomically: PATH.tmp, fsync, rename, fsync of the directory. A crash
// leaves either the old or the new file. ResourceExhausted for a full disk.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data);
absl::Status FsyncDir(const std::string& dir);
// Writes all n bytes to fd, retrying short writes and EINTR. Returns 0 or the errno of the
// failed write (callers map it: the WAL turns a full disk into RESOURCE_EXHAUSTED for clients).
int WriteAll(int fd, const char* data, size_t n);
// Truncates `path` to `size` bytes and fsyncs it.
absl::Status TruncateAndSync(const std::string& path, uint64_t size);
// Copies `from` to `to` (created 0664, replaced if present) and fsyncs the copy; the caller
// fsyncs the directory.
absl::Status CopyFileSynced(const std::string& from, const std::string& to);
bool Exists(const std::string& path);
std::string DirName(const std::string& path);
std::string BaseName(const std::string& path);

}  // namespace cmestream::service::files
