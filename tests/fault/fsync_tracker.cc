// LD_PRELOAD shim for power-loss tests: records, at every fsync/fdatasync, the inode and size
// of the file (or the listing of the directory) that became durable, so a test can cut the
// data dir back to exactly what a power loss at that moment would have left: file contents
// beyond their last synced size gone (or zeroed), directory entries not yet synced gone.
//
// Each record is one line appended (O_APPEND, one write) to $CMESTREAM_FSYNC_LOG:
//   F <inode> <size>                    a regular file's first <size> bytes are durable
//   D <path>\t<inode>\t<name>\t...      the directory's entries (name -> inode) are durable
// Only files under $CMESTREAM_FSYNC_ROOT are recorded.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

namespace {

void Record(int fd) {
  const char* log = getenv("CMESTREAM_FSYNC_LOG");
  const char* root = getenv("CMESTREAM_FSYNC_ROOT");
  if (log == nullptr || root == nullptr) return;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  if (strncmp(path, root, strlen(root)) != 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0) return;
  std::string line;
  if (S_ISDIR(st.st_mode)) {
    line = std::string("D ") + path;
    DIR* d = opendir(path);
    if (d == nullptr) return;
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      line += "\t" + std::to_string(e->d_ino) + "\t" + e->d_name;
    }
    closedir(d);
  } else {
    line = "F " + std::to_string(st.st_ino) + " " + std::to_string(st.st_size);
  }
  line += "\n";
  const int out = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (out < 0) return;
  (void)!write(out, line.data(), line.size());
  close(out);
}

}  // namespace

extern "C" int fsync(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fsync"));
  const int rc = real(fd);
  if (rc == 0) Record(fd);
  return rc;
}

extern "C" int fdatasync(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fdatasync"));
  const int rc = real(fd);
  if (rc == 0) Record(fd);
  return rc;
}
