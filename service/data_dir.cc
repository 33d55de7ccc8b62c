#include "service/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace cmestream::service {

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path) {
  // Files and directories of the data dir are group-writable (created 0664 / 0775 with the
  // group bits never masked): a container restarted under another UID of the same group
  // (OpenShift runs pods as an arbitrary UID in group 0) can still write the volume.
  const mode_t mask = ::umask(0);
  ::umask(mask & ~static_cast<mode_t>(S_IRWXG));
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create data dir '", path, "': ", ec.message()));
  const auto held_elsewhere = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("data dir '", path, "' is in use by another cmestreamd (lock on ", what, ")"));
  };
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return absl::InternalError(absl::StrCat("cannot open data dir '", path, "': ", std::strerror(errno)));
  if (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(dir_fd);
    if (err == EWOULDBLOCK) return held_elsewhere(path);
    return absl::InternalError(absl::StrCat("cannot lock data dir '", path, "': ", std::strerror(err)));
  }
  const std::string lock_path = path + "/LOCK";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd < 0) {
    const int err = errno;
    ::close(dir_fd);
    return absl::InternalError(absl::StrCat("cannot open '", lock_path, "': ", std::strerror(err)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    ::close(dir_fd);
    if (err == EWOULDBLOCK) return held_elsewhere(lock_path);
    return absl::InternalError(absl::StrCat("cannot lock '", lock_path, "': ", std::strerror(err)));
  }
  return std::unique_ptr<DataDir>(new DataDir(path, fd, dir_fd));
}

DataDir::~DataDir() {
  if (wrote_info_) {
    std::error_code ec;
    std::filesystem::remove(path_ + "/daemon.json", ec);
  }
  ::close(lock_fd_);  // releases the flocks
  ::close(dir_fd_);
}

absl::Status DataDir::WriteDaemonInfo(const std::string& grpc_address, const std::string& metrics_address) {
  const std::string final_path = path_ + "/daemon.json";
  const std::string tmp_path = final_path + ".tmp";
  {
    std::ofstream out(tmp_path, std::ios::trunc);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    out << "{\"pid\": " << ::getpid() << ", \"version\": \"0.1.0\", \"grpc\": \"" << grpc_address
        << "\", \"metrics\": \"" << metrics_address << "\", \"started_unix_seconds\": " << std::fixed << now << "}\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write '", tmp_path, "'"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_path, final_path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename '", tmp_path, "': ", ec.message()));
  wrote_info_ = true;
  return absl::OkStatus();
}

}  // namespace cmestream::service
