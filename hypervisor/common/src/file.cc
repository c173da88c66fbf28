#include "hz/common/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hz {

namespace {

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot write", path);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Writes and (with sync) fsyncs the temporary file; closes it either way.
Status WriteTemp(const std::string& tmp, std::string_view contents, bool sync, mode_t mode) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Errno("cannot create", tmp);
  Status s = WriteAll(fd, contents, tmp);
  if (s.ok() && sync && ::fsync(fd) != 0) s = Errno("cannot fsync", tmp);
  ::close(fd);
  return s;
}

}  // namespace

Status Errno(std::string_view what, std::string_view path) {
  std::string msg(what);
  msg.append(" ").append(path).append(": ").append(std::strerror(errno));
  return Status::IoError(msg);
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync directory", dir);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents, bool sync, mode_t mode) {
  const std::string tmp = path + ".tmp";
  Status s = WriteTemp(tmp, contents, sync, mode);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("cannot rename onto", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return sync ? SyncDir(DirName(path)) : Status::Ok();
}

StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return Errno("cannot open", path);
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Errno("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > max_bytes) {
      ::close(fd);
      return Status::Limit(path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return data;
}

StatusOr<int> LockFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot open", path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      errno = err;
      return Errno("cannot lock", path);
    }
    std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Status::Busy(path + " is locked by another process" +
                        (holder.empty() ? std::string() : " (pid " + holder + ")"));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    Status s = Errno("cannot write", path);
    ::close(fd);
    return s;
  }
  return fd;
}

}  // namespace hz
