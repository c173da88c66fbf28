// The service manager's side of the sd_notify protocol, as systemd speaks it
// (sd_notify(3), sd_listen_fds(3)), for tests of a service without systemd:
//   - a datagram socket the service finds in NOTIFY_SOCKET; each datagram is
//     newline-separated VAR=VALUE lines, with descriptors attached
//     (SCM_RIGHTS) when it says FDSTORE=1;
//   - the file descriptor store: FDSTORE=1 keeps the attached descriptors
//     under FDNAME= ("stored" when absent), FDSTOREREMOVE=1 closes every one
//     stored under FDNAME=;
//   - a restart hands the store to the next process: the descriptors at 3,
//     4, ... in the order they were stored, LISTEN_FDS=n, LISTEN_PID=its pid
//     and LISTEN_FDNAMES=the names joined by colons.
#ifndef HZ_TEST_SERVICE_MANAGER_H_
#define HZ_TEST_SERVICE_MANAGER_H_

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hz::testing {

class FakeServiceManager {
 public:
  explicit FakeServiceManager(std::string path) : path_(std::move(path)) {
    unlink(path_.c_str());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~FakeServiceManager() {
    Pause();
    for (auto& [name, fd] : store_) close(fd);
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  FakeServiceManager(const FakeServiceManager&) = delete;
  FakeServiceManager& operator=(const FakeServiceManager&) = delete;

  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  // Reads and acts on datagrams on a thread of its own, as systemd does at
  // once (a service's sd_notify blocks while the socket's queue is full),
  // until Pause. Only store()/Stored()/received() after Pause.
  void Serve() {
    if (reader_.joinable()) return;
    if (pipe2(wake_, O_CLOEXEC) != 0) return;
    reader_ = std::thread([this] {
      for (;;) {
        pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) continue;
        if (p[1].revents) return;
        if (p[0].revents & POLLIN) ReadOne();
      }
    });
  }
  // Stops the thread Serve started; what arrived is then read by Drain.
  void Pause() {
    if (!reader_.joinable()) return;
    (void)!write(wake_[1], "x", 1);
    reader_.join();
    close(wake_[0]);
    close(wake_[1]);
  }

  // Reads datagrams until one holds the line `line` (with prefix: a line
  // starting with it); every one is acted on and kept in received(). False
  // when none comes within timeout_ms.
  bool WaitForLine(const std::string& line, int timeout_ms = 20000, bool prefix = false) {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) != 1) return false;
      if (!ReadOne()) return false;
      if (HasLine(received_.back(), line, prefix)) return true;
    }
  }
  // Acts on every datagram that has arrived, without waiting.
  void Drain() {
    pollfd p{fd_, POLLIN, 0};
    while (poll(&p, 1, 0) == 1 && ReadOne()) {
    }
  }
  static bool HasLine(const std::string& message, const std::string& line, bool prefix = false) {
    std::istringstream in(message);
    for (std::string l; std::getline(in, l);) {
      if (prefix ? l.rfind(line, 0) == 0 : l == line) return true;
    }
    return false;
  }
  const std::vector<std::string>& received() const { return received_; }

  // The store, in the order the descriptors were stored.
  const std::vector<std::pair<std::string, int>>& store() const { return store_; }
  size_t Stored(const std::string& name) const {
    return static_cast<size_t>(std::count_if(store_.begin(), store_.end(),
                                             [&](const auto& e) { return e.first == name; }));
  }

  // In a forked child, before it execs the service: the store at 3, 4, ...,
  // LISTEN_* for this pid, and NOTIFY_SOCKET.
  void PrepareChild() const {
    std::vector<int> high;
    for (const auto& e : store_) high.push_back(fcntl(e.second, F_DUPFD, 1000));
    std::string names;
    for (size_t i = 0; i < high.size(); ++i) {
      dup2(high[i], 3 + static_cast<int>(i));  // dup2 leaves close-on-exec off
      close(high[i]);
      names += (i ? ":" : "") + store_[i].first;
    }
    setenv("NOTIFY_SOCKET", path_.c_str(), 1);
    if (high.empty()) return;
    setenv("LISTEN_FDS", std::to_string(high.size()).c_str(), 1);
    setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
    setenv("LISTEN_FDNAMES", names.c_str(), 1);
  }

 private:
  bool ReadOne() {
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) return false;
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
    received_.emplace_back(buf, static_cast<size_t>(n));
    Apply(received_.back(), std::move(fds));
    return true;
  }
  void Apply(const std::string& message, std::vector<int> fds) {
    std::string name = "stored";
    std::istringstream in(message);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("FDNAME=", 0) == 0) name = l.substr(7);
    }
    if (HasLine(message, "FDSTOREREMOVE=1")) {
      for (auto it = store_.begin(); it != store_.end();) {
        if (it->first != name) {
          ++it;
          continue;
        }
        close(it->second);
        it = store_.erase(it);
      }
    }
    const bool keep = HasLine(message, "FDSTORE=1");
    for (int fd : fds) {
      if (keep) {
        store_.emplace_back(name, fd);
      } else {
        close(fd);  // systemd closes descriptors it was not asked to keep
      }
    }
  }

  std::string path_;
  int fd_ = -1;
  std::thread reader_;
  int wake_[2] = {-1, -1};
  bool bound_ = false;
  std::vector<std::string> received_;
  std::vector<std::pair<std::string, int>> store_;
};

}  // namespace hz::testing

#endif  // HZ_TEST_SERVICE_MANAGER_H_
