#include "service/storage/spool_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cmestream::service {

absl::StatusOr<SpoolFile> SpoolFile::Open(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string name = absl::StrCat(dir, "/.spool-XXXXXX");
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) return absl::InternalError(absl::StrCat("creating a spool file in ", dir, ": ", std::strerror(errno)));
  return SpoolFile(fd, dir);
}

SpoolFile::~SpoolFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<SpoolFile::Span> SpoolFile::Append(std::string_view bytes) {
  // At end_, not at the file's position: a failed append leaves the spans before it readable.
  int err = 0;
  for (uint64_t done = 0; done < bytes.size();) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(end_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  if (err != 0) {
    const std::string why = absl::StrCat("writing a spool file in ", dir_, ": ", std::strerror(err));
    return err == ENOSPC || err == EDQUOT || err == EFBIG ? absl::ResourceExhaustedError(why)
                                                          : absl::InternalError(why);
  }
  const Span span{end_, bytes.size()};
  end_ += bytes.size();
  return span;
}

absl::StatusOr<std::string> SpoolFile::Read(const Span& span) const {
  std::string out(span.size, '\0');
  uint64_t done = 0;
  while (done < span.size) {
    const ssize_t n = ::pread(fd_, out.data() + done, span.size - done, static_cast<off_t>(span.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("reading a spool file in ", dir_, " at ", span.offset + done, ": ",
                                              n < 0 ? std::strerror(errno) : "end of file"));
    }
    done += static_cast<uint64_t>(n);
  }
  return out;
}

}  // namespace cmestream::service
