// A successor for the live-upgrade tests that misbehaves on purpose. The
// back-end under test starts it as its upgrade binary; what it does is read
// from the file named by VDEV_HANDOFF_SHIM_MODE_FILE:
//   newer-version  says it reads only a snapshot version newer than any
//   refuse         takes the snapshot, then refuses it
//   vanish         takes the snapshot, then exits without an answer
//   exec           becomes the real back-end (same arguments)
// and it creates VDEV_HANDOFF_SHIM_DONE_FILE when it is done.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "vdev/handoff.h"
#include "vdev/session_snapshot.h"
#include "vdev/upgrade.h"

#ifndef VDEV_ECHO_BACKEND_PATH
#error "VDEV_ECHO_BACKEND_PATH must name the vdev-echo-backend program"
#endif

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

void MarkDone() {
  std::ofstream(Env("VDEV_HANDOFF_SHIM_DONE_FILE")) << "done\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  std::ifstream(Env("VDEV_HANDOFF_SHIM_MODE_FILE")) >> mode;
  if (mode == "exec") {
    argv[0] = const_cast<char*>(VDEV_ECHO_BACKEND_PATH);
    execv(argv[0], argv);
    return 127;
  }
  int fd = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], vdev::kHandoffFdOption) == 0) fd = std::atoi(argv[i + 1]);
  }
  if (fd < 0) return 2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  using nlohmann::json;
  const uint32_t newest =
      mode == "newer-version" ? vdev::kSnapshotVersion + 1 : vdev::kSnapshotVersion;
  const std::string hello = json{{"oldest", newest}, {"newest", newest}}.dump();
  // The back-end kills this process once it has its last word, so the mark
  // is made before that word.
  if (mode == "newer-version") MarkDone();
  vdev::SendHandoff(fd, vdev::HandoffKind::kHello, hello, {}, deadline);
  if (mode == "newer-version") return 0;
  vdev::HandoffMessage state;
  vdev::ReceiveHandoff(fd, vdev::HandoffKind::kState, &state, deadline);
  MarkDone();
  if (mode == "refuse") {
    const std::string no = json{{"serving", false}, {"error", "refused by the test"}}.dump();
    vdev::SendHandoff(fd, vdev::HandoffKind::kResult, no, {}, deadline);
  }
  return 0;
}
