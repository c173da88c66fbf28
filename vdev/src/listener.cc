#include "vdev/listener.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spdlog/spdlog.h"

namespace vdev {

namespace asio = boost::asio;
using stream_protocol = asio::local::stream_protocol;

namespace {

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A directory only the process can enter, next to the socket's final place
// (a rename does not cross file systems). Removed with what is left in it.
class PrivateDir {
 public:
  explicit PrivateDir(const std::string& final_path) {
    size_t slash = final_path.rfind('/');
    std::string parent = slash == std::string::npos ? "." : final_path.substr(0, slash + 1);
    path_ = parent + (slash == std::string::npos ? "/" : "") + ".vdev-XXXXXX";
    if (mkdtemp(path_.data()) == nullptr) {
      path_.clear();
      return;
    }
    // mkdtemp asks for 0700 minus the umask; an odd umask must not lock the
    // process out of its own directory.
    fd_ = open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0 || chmod(path_.c_str(), 0700) != 0) Remove();
  }
  ~PrivateDir() { Remove(); }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The socket's name inside, as bind() takes it: sockaddr_un holds 107
  // bytes, and the directory adds a few to the final path, so a long one is
  // reached through the directory's descriptor instead.
  std::string SocketPath() const {
    std::string direct = path_ + "/" + kName;
    if (direct.size() < sizeof(sockaddr_un::sun_path)) return direct;
    return "/proc/self/fd/" + std::to_string(fd_) + "/" + kName;
  }
  static constexpr const char* kName = "s";

 private:
  void Remove() {
    if (fd_ >= 0) {
      unlinkat(fd_, kName, 0);
      close(fd_);
      fd_ = -1;
    }
    if (!path_.empty()) rmdir(path_.c_str());
    path_.clear();
  }
  std::string path_;
  int fd_ = -1;
};

}  // namespace

// The socket is bound inside a private directory, given its mode and group
// there, set listening, and only then renamed into place. The alternatives
// leave a window or depend on the process: a socket bound in place exists
// with the umask's mode until it is chmod'ed, and umask() is process-wide,
// so narrowing it around bind() races every other thread that creates
// files. Linux does take the mode of a socket fchmod'ed before bind(), but
// still minus the umask (a group-accessible socket under UMask=0077 would
// need the chmod after all), and the group can only be set on the path.
bool ListenUnix(stream_protocol::acceptor& acceptor, const std::string& path,
                const SocketAccess& access, std::string* error) {
  PrivateDir dir(path);
  if (!dir.ok()) {
    *error = Errno("cannot create a private directory next to " + path);
    return false;
  }
  boost::system::error_code ec;
  acceptor.open(stream_protocol(), ec);
  if (!ec) acceptor.bind(stream_protocol::endpoint(dir.SocketPath()), ec);
  if (ec) {
    *error = "cannot bind " + path + ": " + ec.message();
    return false;
  }
  if (fchownat(dir.fd(), PrivateDir::kName, access.owner, access.group, 0) != 0 ||
      fchmodat(dir.fd(), PrivateDir::kName, access.mode, 0) != 0) {
    *error = Errno("cannot set the owner, group or mode of " + path);
    acceptor.close(ec);
    return false;
  }
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *error = "cannot listen on " + path + ": " + ec.message();
    acceptor.close(ec);
    return false;
  }
  if (renameat(dir.fd(), PrivateDir::kName, AT_FDCWD, path.c_str()) != 0) {
    *error = Errno("cannot move the socket to " + path);
    acceptor.close(ec);
    return false;
  }
  return true;
}

AcceptBackoff::AcceptBackoff(const asio::any_io_executor& executor, std::string name)
    : timer_(executor), name_(std::move(name)) {}

bool AcceptBackoff::Accepted(const boost::system::error_code& ec, std::function<void()> rearm) {
  if (ec == asio::error::operation_aborted || cancelled_) return false;
  if (!ec) {
    if (run_ > 0) spdlog::info("{}: accepting again after {} failed accepts", name_, run_);
    run_ = 0;
    return true;
  }
  failures_.fetch_add(1, std::memory_order_relaxed);
  if (run_ == 0) {
    spdlog::warn("{}: accept failed: {}; retrying at most every {} ms until it works", name_,
                 ec.message(), kMaxDelay.count());
  }
  auto delay = kFirstDelay * (1u << std::min(run_, 7u));
  timer_.expires_after(std::min<std::chrono::milliseconds>(delay, kMaxDelay));
  ++run_;
  timer_.async_wait([this, rearm = std::move(rearm)](const boost::system::error_code& tec) {
    if (!tec && !cancelled_) rearm();
  });
  return false;
}

void AcceptBackoff::Cancel() {
  cancelled_ = true;
  timer_.cancel();
}

}  // namespace vdev
