// The front-end against back-ends that misbehave at the socket level: absent,
// silent, closing, or answering garbage. Each must give a clean error within
// the configured timeouts: no hang, no SIGPIPE, no crash.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "raw_vhost.h"
#include "vdev/frontend/virtio_user.h"
#include "vdev/vhost_user.h"

namespace vdev::frontend {
namespace {

using namespace std::chrono_literals;

// A listening socket whose single connection is handled by `script`.
class FakeBackend {
 public:
  explicit FakeBackend(std::function<void(int)> script) {
    path_ = "/tmp/vdev-fake-" + std::to_string(getpid()) + "-" + std::to_string(counter_++);
    unlink(path_.c_str());
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
    thread_ = std::thread([this, script] {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      script(fd);
      close(fd);
    });
  }
  ~FakeBackend() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
    unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
  int listen_fd_ = -1;
  std::thread thread_;
};

// Reads one message header and its payload; false on EOF.
bool ReadMessage(int fd, vu::Header* hdr) {
  if (recv(fd, hdr, sizeof(*hdr), MSG_WAITALL) != sizeof(*hdr)) return false;
  std::vector<char> payload(hdr->size);
  return hdr->size == 0 || recv(fd, payload.data(), hdr->size, MSG_WAITALL) == hdr->size;
}

// ReadMessage that also keeps the fds sent with the message.
bool ReadMessageWithFds(int fd, vu::Header* hdr, std::vector<int>* fds) {
  if (testing::RecvWithFds(fd, hdr, sizeof(*hdr), MSG_WAITALL, fds) != sizeof(*hdr)) return false;
  std::vector<char> payload(hdr->size);
  return hdr->size == 0 || recv(fd, payload.data(), hdr->size, MSG_WAITALL) == hdr->size;
}

void SendReply(int fd, uint32_t request, uint32_t flags, const void* payload, uint32_t size) {
  vu::Header hdr{request, flags, size};
  std::string buf(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
  buf.append(static_cast<const char*>(payload), size);
  (void)!send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
}

VirtioUser::Options Fast() {
  VirtioUser::Options o;
  o.reply_timeout = 300ms;
  o.connect_timeout = 300ms;
  o.num_queues = 1;
  return o;
}

TEST(VdevFrontendDeadBackend, NoSocketFailsAfterTheConnectTimeout) {
  VirtioUser dev;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = dev.Connect("/tmp/vdev-no-such-socket", Fast());
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // hang detector only
  EXPECT_FALSE(dev.connected());
}

TEST(VdevFrontendDeadBackend, SilentBackendTimesOut) {
  FakeBackend be([](int fd) {
    vu::Header hdr;
    ReadMessage(fd, &hdr);
    std::this_thread::sleep_for(1s);  // never answers GET_FEATURES in time
  });
  VirtioUser dev;
  Status s = dev.Connect(be.path(), Fast());
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
  EXPECT_FALSE(dev.connected());
}

TEST(VdevFrontendDeadBackend, ClosingBackendIsADisconnect) {
  FakeBackend be([](int) {});
  VirtioUser dev;
  Status s = dev.Connect(be.path(), Fast());
  EXPECT_TRUE(s.code() == Status::Code::kDisconnected) << s.ToString();
}

TEST(VdevFrontendDeadBackend, ReplyWithWrongFlagsIsAProtocolError) {
  FakeBackend be([](int fd) {
    vu::Header hdr;
    ReadMessage(fd, &hdr);
    const uint64_t features = vu::kFVersion1;
    SendReply(fd, hdr.request, vu::kVersion, &features, sizeof(features));  // REPLY bit missing
    std::this_thread::sleep_for(100ms);
  });
  VirtioUser dev;
  EXPECT_EQ(dev.Connect(be.path(), Fast()).code(), Status::Code::kProtocolError);
}

TEST(VdevFrontendDeadBackend, OversizedOrMismatchedRepliesAreProtocolErrors) {
  for (int variant = 0; variant < 3; ++variant) {
    FakeBackend be([variant](int fd) {
      vu::Header hdr;
      ReadMessage(fd, &hdr);
      char big[64] = {};
      if (variant == 0) SendReply(fd, hdr.request, vu::kReplyFlags, big, sizeof(big));
      if (variant == 1) SendReply(fd, hdr.request + 1, vu::kReplyFlags, big, 8);
      if (variant == 2) {
        vu::Header lie{hdr.request, vu::kReplyFlags, 0xffffffffu};
        send(fd, &lie, sizeof(lie), MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(100ms);
    });
    VirtioUser dev;
    EXPECT_EQ(dev.Connect(be.path(), Fast()).code(), Status::Code::kProtocolError) << variant;
  }
}

TEST(VdevFrontendDeadBackend, BackendWithoutVersion1IsRefused) {
  FakeBackend be([](int fd) {
    vu::Header hdr;
    ReadMessage(fd, &hdr);
    const uint64_t features = 0;
    SendReply(fd, hdr.request, vu::kReplyFlags, &features, sizeof(features));
    std::this_thread::sleep_for(100ms);
  });
  VirtioUser dev;
  EXPECT_EQ(dev.Connect(be.path(), Fast()).code(), Status::Code::kUnsupported);
}

// A back-end that answers the handshake minimally (no protocol features) and
// then dies: data-path waits report the disconnect instead of sleeping out
// the timeout, and later control calls fail fast without SIGPIPE.
TEST(VdevFrontendDeadBackend, DeathAfterHandshakeIsSeenByWaitersAndControlCalls) {
  FakeBackend be([](int fd) {
    vu::Header hdr;
    while (ReadMessage(fd, &hdr)) {
      if (hdr.request == vu::kGetFeatures) {
        const uint64_t features = vu::kFVersion1;
        SendReply(fd, hdr.request, vu::kReplyFlags, &features, sizeof(features));
      }
      if (hdr.request == vu::kSetVringCall) break;  // last set-up message
    }
    std::this_thread::sleep_for(50ms);
  });
  VirtioUser dev;
  ASSERT_TRUE(dev.Connect(be.path(), Fast()).ok());
  Completion c[1];
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = dev.WaitUsed(0, 30s, c, 1, &n);
  EXPECT_EQ(s.code(), Status::Code::kDisconnected) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  // Writes to the dead socket must not raise SIGPIPE (the test would die).
  uint8_t cfg[4];
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(dev.ReadConfig(0, 4, cfg).ok());
  RegionInfo r;
  EXPECT_FALSE(dev.AddMemory(1 << 20, false, &r).ok() && dev.connected());
  uint16_t base;
  EXPECT_FALSE(dev.StopQueue(0, &base).ok());
}

// The kick eventfd's open file is shared with the back-end, which can clear
// O_NONBLOCK on it and fill its counter: a plain write() of the next kick
// would then never return. Kick refuses the fd with a clear error instead.
TEST(VdevFrontendDeadBackend, KickEventfdMadeBlockingAndFullIsRefused) {
  std::atomic<int> stage{0};  // 1: the back-end set its trap; 2: the test is done
  FakeBackend be([&stage](int fd) {
    vu::Header hdr;
    std::vector<int> fds;
    int kick = -1;
    while (ReadMessageWithFds(fd, &hdr, &fds)) {
      if (hdr.request == vu::kGetFeatures) {
        const uint64_t features = vu::kFVersion1;
        SendReply(fd, hdr.request, vu::kReplyFlags, &features, sizeof(features));
      }
      if (hdr.request == vu::kSetVringKick && kick < 0 && !fds.empty()) {
        kick = fds.front();
        fds.erase(fds.begin());
      }
      for (int f : fds) close(f);
      fds.clear();
      if (hdr.request == vu::kSetVringCall) break;  // last set-up message
    }
    if (kick >= 0) {
      fcntl(kick, F_SETFL, fcntl(kick, F_GETFL) & ~O_NONBLOCK);
      const uint64_t full = 0xfffffffffffffffeull;
      EXPECT_EQ(write(kick, &full, sizeof(full)), 8);
    }
    stage = 1;
    for (int i = 0; i < 1000 && stage != 2; ++i) std::this_thread::sleep_for(10ms);
    if (kick >= 0) close(kick);
  });
  VirtioUser dev;
  ASSERT_TRUE(dev.Connect(be.path(), Fast()).ok());
  for (int i = 0; i < 1000 && stage != 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(stage, 1);
  uint64_t gpa;
  ASSERT_NE(dev.Allocate(64, &gpa), nullptr);
  Buffer r{gpa, 32}, w{gpa + 32, 32};
  ASSERT_TRUE(dev.AddChain(0, {&r, 1}, {&w, 1}, 1).ok());
  Status s = dev.Kick(0);
  EXPECT_EQ(s.code(), Status::Code::kProtocolError) << s.ToString();
  EXPECT_NE(s.ToString().find("kick eventfd"), std::string::npos) << s.ToString();
  stage = 2;
}

}  // namespace
}  // namespace vdev::frontend
