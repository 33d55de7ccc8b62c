// SpoolFile: an unnamed temporary file that holds byte strings written now and read back later,
// so that a writer which must collect many large parts before it can write the first byte of
// its output (a daemon snapshot: its header counts the parts, known only once the last is
// taken) holds one part in memory at a time instead of all of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cmestream::service {

class SpoolFile {
 public:
  // Where a part lies in the spool.
  struct Span {
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  // An unnamed file in `dir` (O_TMPFILE; where the file system has none, a named file removed at
  // once): nothing is left on disk when the spool goes, even after a crash. Internal naming the
  // directory if it cannot be created.
  static absl::StatusOr<SpoolFile> Open(const std::string& dir);
  SpoolFile(SpoolFile&& o) noexcept : fd_(o.fd_), end_(o.end_), dir_(std::move(o.dir_)) { o.fd_ = -1; }
  SpoolFile& operator=(SpoolFile&& o) = delete;
  SpoolFile(const SpoolFile&) = delete;
  SpoolFile& operator=(const SpoolFile&) = delete;
  ~SpoolFile();

  // Appends `bytes`; ResourceExhausted for a full disk, Internal for other write errors.
  absl::StatusOr<Span> Append(std::string_view bytes);
  // The bytes of a span Append returned. Internal on a read error or a short file.
  absl::StatusOr<std::string> Read(const Span& span) const;
  // Bytes appended so far.
  uint64_t size() const { return end_; }

 private:
  SpoolFile(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_ = -1;
  uint64_t end_ = 0;
  std::string dir_;  // for error messages
};

}  // namespace cmestream::service
