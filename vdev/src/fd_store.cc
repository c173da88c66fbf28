#include "vdev/fd_store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <systemd/sd-daemon.h>

#include <cstring>

#include "spdlog/fmt/fmt.h"

namespace vdev {
namespace {

class SystemdStore final : public FdStore {
 public:
  Error Store(std::string_view name, int fd) override {
    if (!ValidFdName(name)) return fmt::format("'{}' is not a valid descriptor name", name);
    // FDPOLL=0: systemd would otherwise drop a stored socket whose peer hung
    // up; the owner removes what it no longer needs itself.
    const std::string state = fmt::format("FDSTORE=1\nFDPOLL=0\nFDNAME={}", name);
    const int r = sd_pid_notify_with_fds(0, 0, state.c_str(), &fd, 1);
    if (r < 0) return fmt::format("storing {}: {}", name, std::strerror(-r));
    if (r == 0) return "no service manager to store descriptors with";
    return {};
  }
  void Remove(std::string_view name) override {
    if (!ValidFdName(name)) return;
    const std::string state = fmt::format("FDSTOREREMOVE=1\nFDNAME={}", name);
    sd_pid_notify(0, 0, state.c_str());
  }
};

}  // namespace

bool ValidFdName(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  for (char c : name) {
    if (c < 0x21 || c > 0x7e || c == ':') return false;
  }
  return true;
}

std::shared_ptr<FdStore> SystemdFdStore() {
  const char* socket = getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') return nullptr;
  return std::make_shared<SystemdStore>();
}

std::map<std::string, UniqueFd> TakeStoredFds() {
  std::map<std::string, UniqueFd> out;
  char** names = nullptr;
  const int n = sd_listen_fds_with_names(1, &names);
  for (int i = 0; i < n; ++i) {
    const int fd = SD_LISTEN_FDS_START + i;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    std::string name = names != nullptr && names[i] != nullptr ? names[i] : "unknown";
    out[name] = UniqueFd(fd);
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) free(names[i]);
    free(names);
  }
  return out;
}

}  // namespace vdev
