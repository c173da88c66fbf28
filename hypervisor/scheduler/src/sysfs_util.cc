#include "sysfs_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hz::scheduler::sysfs {

namespace fs = std::filesystem;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Status ReadAttr(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::string text;
  // Attributes are short; cap what we read so a huge file cannot hurt.
  char buf[4096];
  in.read(buf, sizeof(buf));
  text.assign(buf, static_cast<size_t>(in.gcount()));
  if (in.bad()) return Status::IoError("read error on " + path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\t' ||
                           text.back() == '\r' || text.back() == '\0')) {
    text.pop_back();
  }
  *out = std::move(text);
  return Status::Ok();
}

Status ParseHex(const std::string& text, const std::string& path, uint64_t max, uint64_t* out) {
  std::string_view s = text;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v > max) {
    return Status::InvalidArgument("malformed hex value '" + text.substr(0, 32) + "' in " + path);
  }
  *out = v;
  return Status::Ok();
}

Status ParseInt(const std::string& text, const std::string& path, int64_t min, int64_t max,
                int64_t* out) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return Status::InvalidArgument("malformed integer '" + text.substr(0, 32) + "' in " + path);
  }
  *out = v;
  return Status::Ok();
}

Status ResolveLink(const std::string& link, std::string* target) {
  std::error_code ec;
  fs::path p = fs::canonical(link, ec);
  if (ec) return Status::NotFound("dangling or unreadable link " + link + ": " + ec.message());
  *target = p.string();
  return Status::Ok();
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Status WriteAttr(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return Status::IoError("cannot open " + path + ": " + std::strerror(errno));
  std::string line = value + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return Status::IoError("write of '" + value + "' to " + path +
                           " failed: " + (n < 0 ? std::strerror(err) : "short write"));
  }
  return Status::Ok();
}

}  // namespace hz::scheduler::sysfs
