#include "vdev/handoff.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vdev {
namespace {

using namespace std::chrono_literals;

HandoffDeadline In(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

struct Channel {
  Channel() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    sender.reset(fds[0]);
    receiver.reset(fds[1]);
  }
  UniqueFd sender, receiver;
};

// The descriptors this process holds: a refused message must not leave any
// of the ones that came with it open.
size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

ino_t Inode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

std::vector<UniqueFd> Memfds(size_t n) {
  std::vector<UniqueFd> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(memfd_create("handoff-test", MFD_CLOEXEC));
  return out;
}

std::vector<int> Raw(const std::vector<UniqueFd>& fds) {
  std::vector<int> out;
  for (const UniqueFd& fd : fds) out.push_back(fd.get());
  return out;
}

// A frame as handoff.cc writes it, for peers that do not follow the rules.
struct FrameHeader {
  uint32_t magic = 0x4f484456;
  uint32_t kind = static_cast<uint32_t>(HandoffKind::kState);
  uint32_t flags = 1;  // the last frame
  uint32_t length = 0;
  uint32_t fds = 0;
};

void SendRaw(int socket, const void* data, size_t len, const std::vector<int>& fds) {
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  struct iovec iov = {const_cast<void*>(data), len};
  struct msghdr mh = {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (!fds.empty()) {
    ASSERT_LE(fds.size(), 8u);
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ASSERT_EQ(sendmsg(socket, &mh, MSG_NOSIGNAL), static_cast<ssize_t>(len));
}

// More than two frames of payload (1 MiB each) and of descriptors
// (kFdsPerFrame each), as a busy back-end's snapshot would need.
TEST(Handoff, ALargeMessageArrivesWithEveryDescriptor) {
  static_assert(450 > 2 * kFdsPerFrame);
  Channel ch;
  std::string payload(3u << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 2654435761u >> 13);
  const std::vector<UniqueFd> sent_fds = Memfds(450);
  const std::vector<int> raw = Raw(sent_fds);
  ASSERT_EQ(std::count(raw.begin(), raw.end(), -1), 0);
  auto sent = std::async(std::launch::async, [&] {
    return SendHandoff(ch.sender.get(), HandoffKind::kState, payload, raw, In(10s));
  });
  HandoffMessage msg;
  ASSERT_EQ(ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(10s)), "");
  ASSERT_EQ(sent.get(), "");
  EXPECT_TRUE(msg.payload == payload) << "payload differs";
  ASSERT_EQ(msg.fds.size(), sent_fds.size());
  for (size_t i = 0; i < sent_fds.size(); ++i) {
    EXPECT_EQ(Inode(msg.fds[i].get()), Inode(sent_fds[i].get())) << "descriptor " << i;
  }
}

TEST(Handoff, AnEmptyMessageArrives) {
  Channel ch;
  ASSERT_EQ(SendHandoff(ch.sender.get(), HandoffKind::kHello, "", {}, In(1s)), "");
  HandoffMessage msg;
  msg.payload = "stale";
  ASSERT_EQ(ReceiveHandoff(ch.receiver.get(), HandoffKind::kHello, &msg, In(1s)), "");
  EXPECT_EQ(msg.payload, "");
  EXPECT_TRUE(msg.fds.empty());
}

TEST(Handoff, AMessageOfAnotherKindIsRefused) {
  Channel ch;
  ASSERT_EQ(SendHandoff(ch.sender.get(), HandoffKind::kResult, "serving", {}, In(1s)), "");
  HandoffMessage msg;
  const std::string e = ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s));
  EXPECT_NE(e.find("expected a frame of kind 2, got 3"), std::string::npos) << e;
}

TEST(Handoff, BytesThatAreNotAFrameAreRefused) {
  Channel ch;
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(ch.sender.get(), garbage, sizeof(garbage)),
            static_cast<ssize_t>(sizeof(garbage)));
  HandoffMessage msg;
  const std::string e = ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s));
  EXPECT_NE(e.find("not a hand-over frame"), std::string::npos) << e;
}

TEST(Handoff, AFrameAnnouncingMissingDescriptorsIsRefusedWithoutLeaks) {
  Channel ch;
  const std::vector<UniqueFd> sent_fds = Memfds(1);
  const size_t before = OpenFds();
  FrameHeader h;
  h.fds = 3;
  SendRaw(ch.sender.get(), &h, sizeof(h), Raw(sent_fds));
  HandoffMessage msg;
  const std::string e = ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s));
  EXPECT_NE(e.find("frame announced 3 descriptors, 1 arrived"), std::string::npos) << e;
  EXPECT_EQ(OpenFds(), before);
}

TEST(Handoff, APayloadOverTheLimitIsRefusedWithoutLeaks) {
  Channel ch;
  const std::vector<UniqueFd> sent_fds = Memfds(3);
  const size_t before = OpenFds();
  ASSERT_EQ(SendHandoff(ch.sender.get(), HandoffKind::kState, std::string(4096, 'x'), Raw(sent_fds),
                        In(1s)),
            "");
  HandoffLimits limits;
  limits.max_payload = 1000;
  HandoffMessage msg;
  const std::string e =
      ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s), limits);
  EXPECT_NE(e.find("payload over its limit"), std::string::npos) << e;
  EXPECT_EQ(OpenFds(), before);
}

TEST(Handoff, TooManyDescriptorsAreRefusedWithoutLeaks) {
  Channel ch;
  const std::vector<UniqueFd> sent_fds = Memfds(5);
  const size_t before = OpenFds();
  ASSERT_EQ(SendHandoff(ch.sender.get(), HandoffKind::kState, "x", Raw(sent_fds), In(1s)), "");
  HandoffLimits limits;
  limits.max_fds = 4;
  HandoffMessage msg;
  const std::string e =
      ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s), limits);
  EXPECT_NE(e.find("too many descriptors"), std::string::npos) << e;
  EXPECT_EQ(OpenFds(), before);
}

// A successor that hangs must not hang its predecessor: every receive ends
// by its deadline.
TEST(Handoff, ASilentPeerTimesOut) {
  Channel ch;
  HandoffMessage msg;
  EXPECT_EQ(ReceiveHandoff(ch.receiver.get(), HandoffKind::kHello, &msg, In(100ms)), "timed out");
}

TEST(Handoff, AClosedPeerIsReported) {
  Channel ch;
  ch.sender.reset();
  HandoffMessage msg;
  const std::string e = ReceiveHandoff(ch.receiver.get(), HandoffKind::kHello, &msg, In(1s));
  EXPECT_NE(e.find("closed"), std::string::npos) << e;
}

TEST(Handoff, APeerClosingMidMessageIsReported) {
  Channel ch;
  FrameHeader h;
  h.length = 100;
  SendRaw(ch.sender.get(), &h, sizeof(h), {});
  ASSERT_EQ(write(ch.sender.get(), "abc", 3), 3);
  ch.sender.reset();
  HandoffMessage msg;
  const std::string e = ReceiveHandoff(ch.receiver.get(), HandoffKind::kState, &msg, In(1s));
  EXPECT_NE(e.find("closed"), std::string::npos) << e;
}

}  // namespace
}  // namespace vdev
