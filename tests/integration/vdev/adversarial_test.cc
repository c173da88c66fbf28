// A hostile front-end against the real back-end (vdev::Server + echo device):
// malformed messages, abusive memory tables and hand-crafted rings. Every case
// must end in an error reply or a clean disconnect, with no crash, no hang
// (bounded waits), no fd leak (/proc/self/fd) and no memory leak (LSan in the
// sanitizer build), while a well-behaved front-end on another socket of the
// same back-end keeps working.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#ifndef VIRTIO_RING_NO_LEGACY
#define VIRTIO_RING_NO_LEGACY
#endif
#include <linux/virtio_ring.h>

#include "backend_harness.h"
#include "raw_vhost.h"
#include "vdev/frontend/virtio_user.h"

namespace vdev::testing {
namespace {

using namespace std::chrono_literals;
using frontend::Buffer;
using frontend::Completion;
using frontend::Status;
using frontend::VirtioUser;

constexpr uint16_t kQ = 0;
constexpr uint16_t kN = 64;  // queue size used by the hand-built rings

// The back-end answered `request` with an error, or closed the connection.
::testing::AssertionResult Refused(RawConn& c, uint32_t request) {
  RawReply r;
  switch (c.Recv(&r)) {
    case Got::kClosed:
      return ::testing::AssertionSuccess() << "closed";
    case Got::kTimeout:
      return ::testing::AssertionFailure() << "neither a reply nor a close (hang)";
    case Got::kReply:
      break;
  }
  if (r.hdr.request != request) {
    return ::testing::AssertionFailure() << "reply names request " << r.hdr.request;
  }
  if (r.hdr.flags != vu::kReplyFlags) {
    return ::testing::AssertionFailure() << "reply flags " << r.hdr.flags;
  }
  if (r.payload.empty()) return ::testing::AssertionSuccess() << "empty (error) payload";
  if (r.payload.size() == 8 && r.u64() != 0) return ::testing::AssertionSuccess() << "nack";
  return ::testing::AssertionFailure()
         << "accepted: " << r.payload.size() << "-byte reply, u64 " << r.u64();
}

// The back-end answered anything well-formed, or closed: it did not hang.
::testing::AssertionResult Terminates(RawConn& c) {
  RawReply r;
  switch (c.Recv(&r)) {
    case Got::kClosed:
    case Got::kReply:
      return ::testing::AssertionSuccess();
    case Got::kTimeout:
      break;
  }
  return ::testing::AssertionFailure() << "neither a reply nor a close (hang)";
}

// The connection still answers a plain request, or was closed cleanly.
::testing::AssertionResult AliveOrClosed(RawConn& c) {
  if (!c.Send(vu::kGetFeatures, vu::kVersion, nullptr, 0)) return ::testing::AssertionSuccess();
  RawReply r;
  switch (c.Recv(&r)) {
    case Got::kClosed:
      return ::testing::AssertionSuccess();
    case Got::kTimeout:
      return ::testing::AssertionFailure() << "no answer to GET_FEATURES (hang)";
    case Got::kReply:
      break;
  }
  if (r.hdr.request == vu::kGetFeatures && r.payload.size() == 8) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "bad answer to GET_FEATURES";
}

int NewEventFd() {
  return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

class VdevAdversarial : public ::testing::Test {
 protected:
  void SetUp() override {
    hostile_path_ = TempSocketPath("hostile");
    good_path_ = TempSocketPath("good");
    backend_ =
        std::make_unique<InProcessBackend>(std::vector<std::string>{hostile_path_, good_path_});
    ASSERT_TRUE(backend_->ok()) << backend_->error();
    VirtioUser::Options o;
    o.queue_size = 64;
    o.memory_size = 1 << 20;
    ASSERT_TRUE(good_.Connect(good_path_, o).ok());
    ASSERT_TRUE(GoodEcho());
    baseline_fds_ = CountOpenFds();
  }

  void TearDown() override {
    EXPECT_TRUE(GoodEcho());
    EXPECT_EQ(CountOpenFds(), baseline_fds_) << "fds leaked over the whole test";
    good_.Disconnect();
    backend_.reset();
  }

  Server& hostile_server() { return backend_->server(0); }

  // A fresh hostile connection (waits until the previous one is gone).
  bool Open(RawConn& c) {
    for (int i = 0; i < 300 && hostile_server().connected(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    // Whatever the case holds (its memfds, eventfds) is open by now.
    case_fds_ = CountOpenFds();
    return c.Connect(hostile_path_);
  }
  bool OpenAndHandshake(RawConn& c) {
    std::string why;
    if (!Open(c)) return false;
    if (!RawHandshake(c, &why)) {
      ADD_FAILURE() << "handshake: " << why;
      return false;
    }
    return true;
  }
  bool OpenWithRing(RawConn& c, HandRing& ring, int kick, int call, int err) {
    std::string why;
    if (!OpenAndHandshake(c)) return false;
    if (!RawSetMemTable(c, ring, &why) || !RawSetupQueue(c, ring, kQ, kN, kick, call, err, &why)) {
      ADD_FAILURE() << "set-up: " << why;
      return false;
    }
    return true;
  }

  // Ends a case: closes the hostile connection, then checks that the
  // back-end let go of every fd it got and still serves the good socket.
  void Finish(RawConn& c, const std::string& what) {
    c.Close();
    int fds = CountOpenFds();
    for (int i = 0; i < 300 && (fds != case_fds_ || hostile_server().connected()); ++i) {
      std::this_thread::sleep_for(10ms);
      fds = CountOpenFds();
    }
    EXPECT_EQ(fds, case_fds_) << what << ": fd leak";
    EXPECT_FALSE(hostile_server().connected()) << what << ": connection not released";
    EXPECT_TRUE(GoodEcho()) << what << ": the good connection stopped working";
  }

  bool GoodEcho() {
    uint64_t ig = 0, og = 0;
    auto* in = static_cast<uint8_t*>(good_.Allocate(32, &ig));
    auto* out = static_cast<uint8_t*>(good_.Allocate(32, &og));
    if (in == nullptr || out == nullptr) return false;
    std::memset(in, 0x5a, 32);
    std::memset(out, 0, 32);
    Buffer r{ig, 32}, w{og, 32};
    Completion c;
    size_t n = 0;
    bool ok = good_.AddChain(0, {&r, 1}, {&w, 1}).ok() && good_.Kick(0).ok() &&
              good_.WaitUsed(0, 5s, &c, 1, &n).ok() && c.len == 32 && std::memcmp(in, out, 32) == 0;
    good_.Free(in);
    good_.Free(out);
    return ok;
  }

  std::string hostile_path_, good_path_;
  std::unique_ptr<InProcessBackend> backend_;
  VirtioUser good_;
  int baseline_fds_ = 0;
  int case_fds_ = 0;
};

// ---- framing ---------------------------------------------------------------

TEST_F(VdevAdversarial, MalformedHeaders) {
  struct Case {
    const char* name;
    vu::Header hdr;
  };
  const Case cases[] = {
      {"version 0", {vu::kGetFeatures, 0, 0}},
      {"version 2", {vu::kGetFeatures, 2, 0}},
      {"version 3 with reply bit", {vu::kGetFeatures, 3 | vu::kFlagReply, 0}},
      {"unknown flag bits", {vu::kGetFeatures, vu::kVersion | 0xfff0, 0}},
      {"size one past the limit", {vu::kSetMemTable, vu::kVersion, vu::kMaxPayload + 1}},
      {"size 2^32-1", {vu::kGetConfig, vu::kVersion, 0xffffffffu}},
  };
  for (const Case& k : cases) {
    RawConn c;
    ASSERT_TRUE(Open(c)) << k.name;
    ASSERT_TRUE(c.SendBytes(&k.hdr, sizeof(k.hdr)));
    EXPECT_TRUE(Refused(c, k.hdr.request)) << k.name;
    Finish(c, k.name);
  }
}

TEST_F(VdevAdversarial, UnknownRequests) {
  for (uint32_t request :
       {0u, 19u, 20u, 22u, 23u, 26u, 31u, 33u, 35u, 41u, 44u, 45u, 99u, 0x7fffffffu, 0xffffffffu}) {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c));
    uint64_t payload = 0;
    ASSERT_TRUE(c.Send(request, vu::kVersion | vu::kFlagNeedReply, &payload, sizeof(payload)));
    EXPECT_TRUE(Refused(c, request)) << "request " << request;
    Finish(c, "request " + std::to_string(request));
  }
}

TEST_F(VdevAdversarial, TruncatedMessagesThenClose) {
  // A header cut short, a payload cut short, and a payload cut short with
  // fds already delivered.
  for (int variant = 0; variant < 3; ++variant) {
    RawConn c;
    ASSERT_TRUE(Open(c));
    vu::Header hdr{vu::kSetMemTable, vu::kVersion, 8 + 32};
    if (variant == 0) {
      ASSERT_TRUE(c.SendBytes(&hdr, 5));
    } else {
      std::vector<uint8_t> bytes(sizeof(hdr) + 10);
      std::memcpy(bytes.data(), &hdr, sizeof(hdr));
      int fd = NewEventFd();
      if (variant == 2) {
        ASSERT_TRUE(c.SendBytes(bytes.data(), bytes.size(), {&fd, 1}));
      } else {
        ASSERT_TRUE(c.SendBytes(bytes.data(), bytes.size()));
      }
      close(fd);
    }
    std::this_thread::sleep_for(20ms);
    Finish(c, "truncated variant " + std::to_string(variant));
  }
}

TEST_F(VdevAdversarial, WrongPayloadSizes) {
  struct Case {
    const char* name;
    uint32_t request;
    uint32_t size;
  };
  const Case cases[] = {
      {"SET_FEATURES 4 bytes", vu::kSetFeatures, 4},
      {"SET_FEATURES 16 bytes", vu::kSetFeatures, 16},
      {"SET_PROTOCOL_FEATURES 0 bytes", vu::kSetProtocolFeatures, 0},
      {"SET_VRING_NUM 4 bytes", vu::kSetVringNum, 4},
      {"SET_VRING_BASE 12 bytes", vu::kSetVringBase, 12},
      {"SET_VRING_ADDR 39 bytes", vu::kSetVringAddr, 39},
      {"SET_VRING_KICK 4 bytes", vu::kSetVringKick, 4},
      {"SET_VRING_ENABLE 0 bytes", vu::kSetVringEnable, 0},
      {"GET_VRING_BASE 0 bytes", vu::kGetVringBase, 0},
      {"SET_MEM_TABLE 7 bytes", vu::kSetMemTable, 7},
      {"ADD_MEM_REG 32 bytes", vu::kAddMemReg, 32},
      {"REM_MEM_REG 8 bytes", vu::kRemMemReg, 8},
      {"GET_CONFIG 11 bytes", vu::kGetConfig, 11},
      {"SET_CONFIG 11 bytes", vu::kSetConfig, 11},
      {"SET_STATUS 1 byte", vu::kSetStatus, 1},
  };
  for (const Case& k : cases) {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c)) << k.name;
    std::vector<uint8_t> payload(k.size, 0);
    ASSERT_TRUE(c.Send(k.request, vu::kVersion | vu::kFlagNeedReply, payload.data(), k.size));
    EXPECT_TRUE(Refused(c, k.request)) << k.name;
    Finish(c, k.name);
  }
}

TEST_F(VdevAdversarial, InconsistentConfigRequests) {
  struct Case {
    const char* name;
    vu::ConfigHeader cfg;
    uint32_t data_bytes;  // bytes after the config header
  };
  const Case cases[] = {
      {"size larger than 256", {0, 300, 0}, 256},
      {"size disagrees with payload", {0, 16, 0}, 8},
      {"offset past the end", {250, 16, 0}, 16},
      {"offset overflow", {0xfffffff0u, 32, 0}, 32},
  };
  for (const Case& k : cases) {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c)) << k.name;
    std::vector<uint8_t> payload(sizeof(k.cfg) + k.data_bytes, 0);
    std::memcpy(payload.data(), &k.cfg, sizeof(k.cfg));
    ASSERT_TRUE(c.Send(vu::kGetConfig, vu::kVersion, payload.data(),
                       static_cast<uint32_t>(payload.size())));
    EXPECT_TRUE(Refused(c, vu::kGetConfig)) << k.name;
    Finish(c, k.name);
  }
  // A zero-byte read is pointless but consistent: any answer or a close.
  RawConn c;
  ASSERT_TRUE(OpenAndHandshake(c));
  vu::ConfigHeader empty{0, 0, 0};
  ASSERT_TRUE(c.Send(vu::kGetConfig, vu::kVersion, &empty, sizeof(empty)));
  EXPECT_TRUE(Terminates(c));
  Finish(c, "zero-size config read");
}

// ---- memory tables ---------------------------------------------------------

TEST_F(VdevAdversarial, AbusiveMemoryTables) {
  HandRing a, b;
  const uint64_t uva_a = a.uva(0), uva_b = b.uva(0);
  struct Case {
    const char* name;
    std::vector<vu::MemRegion> regions;
    int fds;  // how many fds to attach (each a valid memfd)
    // false: legal if odd (e.g. a non-page-aligned mmap_offset, which
    // back-ends handle by mapping from offset 0); any answer will do.
    bool must_refuse = true;
  };
  const uint64_t S = HandRing::kSize;
  const std::vector<Case> cases = {
      {"overlapping GPAs", {{0x100000, S, uva_a, 0}, {0x100000 + S / 2, S, uva_b, 0}}, 2},
      {"same user addresses at two GPAs",
       {{0x100000, S, uva_a, 0}, {0x10000000, S, uva_a, 0}},
       2,
       false},
      {"huge size", {{0x100000, 1ull << 62, uva_a, 0}}, 1},
      {"zero size", {{0x100000, 0, uva_a, 0}}, 1},
      {"unaligned mmap offset", {{0x100000, S - 4096, uva_a, 123}}, 1, false},
      {"offset past the end of the memfd", {{0x100000, S, uva_a, S}}, 1},
      {"GPA range wraps 2^64", {{~0ull - 4095, S, uva_a, 0}}, 1},
      {"user range wraps 2^64", {{0x100000, S, ~0ull - 4095, 0}}, 1},
      {"offset + size wraps", {{0x100000, S, uva_a, ~0ull - 4095}}, 1},
      {"fewer fds than regions", {{0x100000, S, uva_a, 0}, {0x10000000, S, uva_b, 0}}, 1},
      {"more fds than regions", {{0x100000, S, uva_a, 0}}, 3},
      {"no fd", {{0x100000, S, uva_a, 0}}, 0},
  };
  for (const Case& k : cases) {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c)) << k.name;
    vu::MemTable t{};
    t.nregions = static_cast<uint32_t>(k.regions.size());
    for (size_t i = 0; i < k.regions.size(); ++i) t.regions[i] = k.regions[i];
    std::vector<int> fds;
    for (int i = 0; i < k.fds; ++i) fds.push_back(i % 2 == 0 ? a.memfd() : b.memfd());
    ASSERT_TRUE(c.Send(vu::kSetMemTable, vu::kVersion | vu::kFlagNeedReply, &t,
                       static_cast<uint32_t>(8 + 32 * k.regions.size()), fds));
    if (k.must_refuse) {
      EXPECT_TRUE(Refused(c, vu::kSetMemTable)) << k.name;
    } else {
      EXPECT_TRUE(Terminates(c)) << k.name;
    }
    EXPECT_TRUE(AliveOrClosed(c)) << k.name;
    Finish(c, k.name);
  }
}

TEST_F(VdevAdversarial, TooManyRegionsAndFds) {
  // nregions 9 (payload sized for 9) with 9 fds; nregions 8 with 8 regions
  // but 12 fds; and 200 fds on a message that takes none.
  std::vector<int> memfds;
  for (int i = 0; i < 12; ++i) {
    int fd = memfd_create("r", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    memfds.push_back(fd);
  }
  {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c));
    std::vector<uint8_t> payload(8 + 32 * 9, 0);
    uint32_t n = 9;
    std::memcpy(payload.data(), &n, 4);
    for (uint32_t i = 0; i < 9; ++i) {
      vu::MemRegion r{0x100000ull * (i + 1) * 16, 4096, 0x7f0000000000ull + i * 0x100000, 0};
      std::memcpy(payload.data() + 8 + 32 * i, &r, 32);
    }
    ASSERT_TRUE(c.Send(vu::kSetMemTable, vu::kVersion | vu::kFlagNeedReply, payload.data(),
                       static_cast<uint32_t>(payload.size()), {memfds.data(), 9}));
    EXPECT_TRUE(Refused(c, vu::kSetMemTable)) << "9 regions";
    Finish(c, "9 regions");
  }
  {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c));
    vu::MemTable t{};
    t.nregions = 8;
    for (uint32_t i = 0; i < 8; ++i) {
      t.regions[i] = {0x100000ull * (i + 1) * 16, 4096, 0x7f0000000000ull + i * 0x100000, 0};
    }
    ASSERT_TRUE(c.Send(vu::kSetMemTable, vu::kVersion | vu::kFlagNeedReply, &t, sizeof(t),
                       {memfds.data(), 12}));
    EXPECT_TRUE(Refused(c, vu::kSetMemTable)) << "12 fds";
    Finish(c, "12 fds");
  }
  {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c));
    std::vector<int> many;
    for (int i = 0; i < 200; ++i) many.push_back(memfds[i % memfds.size()]);
    ASSERT_TRUE(c.Send(vu::kGetFeatures, vu::kVersion, nullptr, 0, many));
    EXPECT_TRUE(Terminates(c)) << "200 fds";
    Finish(c, "200 fds");
  }
  for (int fd : memfds) close(fd);
}

// Every message type with an fd it does not take (and with one more than it
// takes): the back-end must close what it does not keep.
TEST_F(VdevAdversarial, FdsAttachedToEveryMessageType) {
  for (uint32_t request = 1; request <= vu::kMaxRequest; ++request) {
    for (int extra : {1, 2}) {
      RawConn c;
      ASSERT_TRUE(OpenAndHandshake(c));
      std::vector<int> fds;
      for (int i = 0; i < extra; ++i) fds.push_back(NewEventFd());
      uint8_t payload[64] = {};  // index 0 / zero values everywhere
      uint32_t size = 8;
      if (request == vu::kSetVringAddr) size = sizeof(vu::VringAddr);
      if (request == vu::kAddMemReg || request == vu::kRemMemReg)
        size = sizeof(vu::SingleMemRegion);
      if (request == vu::kGetConfig || request == vu::kSetConfig) {
        vu::ConfigHeader h{0, 4, 0};
        std::memcpy(payload, &h, sizeof(h));
        size = sizeof(h) + 4;
      }
      if (request == vu::kGetFeatures || request == vu::kGetProtocolFeatures ||
          request == vu::kGetQueueNum || request == vu::kSetOwner || request == vu::kResetOwner ||
          request == vu::kGetMaxMemSlots || request == vu::kGetStatus ||
          request == vu::kResetDevice) {
        size = 0;
      }
      const bool get = request == vu::kGetFeatures || request == vu::kGetProtocolFeatures ||
                       request == vu::kGetQueueNum || request == vu::kGetVringBase ||
                       request == vu::kGetConfig || request == vu::kGetMaxMemSlots ||
                       request == vu::kGetStatus;
      ASSERT_TRUE(
          c.Send(request, vu::kVersion | (get ? 0 : vu::kFlagNeedReply), payload, size, fds));
      for (int fd : fds) close(fd);
      EXPECT_TRUE(Terminates(c)) << "request " << request << " with " << extra << " fds";
      EXPECT_TRUE(AliveOrClosed(c)) << "request " << request;
      Finish(c, "request " + std::to_string(request) + " + " + std::to_string(extra) + " fds");
    }
  }
}

// ---- ring set-up -----------------------------------------------------------

TEST_F(VdevAdversarial, RingMessagesWithOutOfRangeIndicesOrSizes) {
  HandRing ring;
  struct Case {
    const char* name;
    uint32_t request;
    std::vector<uint8_t> payload;
    bool with_fd;
  };
  auto state = [](uint32_t index, uint32_t num) {
    vu::VringState s{index, num};
    std::vector<uint8_t> v(sizeof(s));
    std::memcpy(v.data(), &s, sizeof(s));
    return v;
  };
  auto u64 = [](uint64_t x) {
    std::vector<uint8_t> v(8);
    std::memcpy(v.data(), &x, 8);
    return v;
  };
  auto addr = [&](uint32_t index, uint64_t desc, uint64_t used, uint64_t avail) {
    vu::VringAddr a{index, 0, desc, used, avail, 0};
    std::vector<uint8_t> v(sizeof(a));
    std::memcpy(v.data(), &a, sizeof(a));
    return v;
  };
  const uint64_t d = ring.uva(HandRing::kDescOff), u = ring.uva(HandRing::kUsedOff),
                 av = ring.uva(HandRing::kAvailOff);
  const std::vector<Case> cases = {
      {"SET_VRING_NUM index 200", vu::kSetVringNum, state(200, 64), false},
      {"SET_VRING_NUM index 2^32-1", vu::kSetVringNum, state(0xffffffffu, 64), false},
      {"SET_VRING_NUM size 0", vu::kSetVringNum, state(0, 0), false},
      {"SET_VRING_NUM size 3", vu::kSetVringNum, state(0, 3), false},
      {"SET_VRING_NUM size 65536", vu::kSetVringNum, state(0, 65536), false},
      {"SET_VRING_NUM size 2^32-1", vu::kSetVringNum, state(0, 0xffffffffu), false},
      {"SET_VRING_BASE index 200", vu::kSetVringBase, state(200, 0), false},
      {"SET_VRING_BASE base 2^32-1", vu::kSetVringBase, state(0, 0xffffffffu), false},
      {"SET_VRING_ENABLE index 200", vu::kSetVringEnable, state(200, 1), false},
      {"SET_VRING_ENABLE value 2", vu::kSetVringEnable, state(0, 2), false},
      {"GET_VRING_BASE index 200", vu::kGetVringBase, state(200, 0), false},
      {"SET_VRING_ADDR index 200", vu::kSetVringAddr, addr(200, d, u, av), false},
      {"SET_VRING_ADDR outside memory", vu::kSetVringAddr, addr(0, 0x1000, 0x2000, 0x3000), false},
      {"SET_VRING_ADDR misaligned", vu::kSetVringAddr, addr(0, d + 1, u + 2, av + 1), false},
      {"SET_VRING_ADDR wraps", vu::kSetVringAddr, addr(0, ~0ull - 15, ~0ull - 7, ~0ull - 3), false},
      {"SET_VRING_KICK index 200", vu::kSetVringKick, u64(200), true},
      {"SET_VRING_KICK high bits", vu::kSetVringKick, u64(0xdead000000000000ull), true},
      {"SET_VRING_CALL index 200", vu::kSetVringCall, u64(200), true},
      {"SET_VRING_CALL no fd, no NOFD", vu::kSetVringCall, u64(0), false},
      {"SET_VRING_KICK no fd, no NOFD", vu::kSetVringKick, u64(0), false},
      {"SET_VRING_ERR index 200", vu::kSetVringErr, u64(200), true},
  };
  for (const Case& k : cases) {
    RawConn c;
    ASSERT_TRUE(OpenAndHandshake(c)) << k.name;
    std::string why;
    ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
    vu::VringState num{0, kN};
    ASSERT_EQ(c.Acked(vu::kSetVringNum, &num, sizeof(num)), 0u);
    int fd = NewEventFd();
    const bool get = k.request == vu::kGetVringBase;
    ASSERT_TRUE(c.Send(k.request, vu::kVersion | (get ? 0 : vu::kFlagNeedReply), k.payload.data(),
                       static_cast<uint32_t>(k.payload.size()),
                       k.with_fd ? std::span<const int>(&fd, 1) : std::span<const int>()));
    close(fd);
    if (k.request == vu::kSetVringAddr && std::string(k.name) != "SET_VRING_ADDR index 200") {
      // Addresses may be refused at SET_VRING_ADDR or when the ring starts.
      RawReply r;
      Got g = c.Recv(&r);
      ASSERT_NE(g, Got::kTimeout) << k.name;
      if (g == Got::kReply && r.u64() == 0) {
        int kick = NewEventFd();
        ASSERT_TRUE(c.SendU64(vu::kSetVringKick, 0, vu::kVersion | vu::kFlagNeedReply, {&kick, 1}));
        close(kick);
        EXPECT_TRUE(Refused(c, vu::kSetVringKick)) << k.name << " (at ring start)";
      }
    } else {
      EXPECT_TRUE(Refused(c, k.request)) << k.name;
    }
    EXPECT_TRUE(AliveOrClosed(c)) << k.name;
    Finish(c, k.name);
  }
}

TEST_F(VdevAdversarial, KicksBeforeSetUp) {
  HandRing ring;
  RawConn c;
  ASSERT_TRUE(OpenAndHandshake(c));
  // A kick fd before any memory or ring address, then kicks.
  int kick = NewEventFd();
  const uint64_t ack = c.AckedU64(vu::kSetVringKick, 0, {&kick, 1});
  const uint64_t one = 1;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(write(kick, &one, 8), 8);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(AliveOrClosed(c)) << "kick ack " << ack;
  // Then the rest of the set-up still works (or the connection was closed).
  std::string why;
  if (RawSetMemTable(c, ring, &why)) {
    ring.SetDesc(0, HandRing::kGpa + HandRing::kDataOff, 8, 0, 0);
    ring.PushAvail(0, kN);
    for (int i = 0; i < 5; ++i) ASSERT_EQ(write(kick, &one, 8), 8);
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(AliveOrClosed(c));
  }
  close(kick);
  Finish(c, "kicks before set-up");
}

TEST_F(VdevAdversarial, GetVringBaseTwiceAndMessagesAfterResetDevice) {
  HandRing ring;
  int kick = NewEventFd(), call = NewEventFd();
  RawConn c;
  ASSERT_TRUE(OpenWithRing(c, ring, kick, call, -1));
  // One good echo first.
  uint8_t* data = ring.host() + HandRing::kDataOff;
  std::memcpy(data, "abcdefgh", 8);
  ring.SetDesc(0, HandRing::kGpa + HandRing::kDataOff, 8, VRING_DESC_F_NEXT, 1);
  ring.SetDesc(1, HandRing::kGpa + HandRing::kDataOff + 64, 8, VRING_DESC_F_WRITE, 0);
  ring.PushAvail(0, kN);
  const uint64_t one = 1;
  ASSERT_EQ(write(kick, &one, 8), 8);
  for (int i = 0; i < 500 && ring.UsedIdx() != 1; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(ring.UsedIdx(), 1);
  EXPECT_EQ(std::memcmp(data + 64, "abcdefgh", 8), 0);

  for (int i = 0; i < 2; ++i) {
    vu::VringState s{kQ, 0};
    ASSERT_TRUE(c.Send(vu::kGetVringBase, vu::kVersion, &s, sizeof(s)));
    RawReply r;
    ASSERT_EQ(c.Recv(&r), Got::kReply) << "GET_VRING_BASE #" << i;
    ASSERT_EQ(r.payload.size(), sizeof(s));
    std::memcpy(&s, r.payload.data(), sizeof(s));
    EXPECT_EQ(s.index, kQ);
    EXPECT_EQ(s.num, 1u) << "GET_VRING_BASE #" << i;
  }

  // RESET_DEVICE, then a stream of messages: each must be answered sanely.
  EXPECT_EQ(c.Acked(vu::kResetDevice, nullptr, 0), 0u);
  ring.PushAvail(0, kN);
  ASSERT_EQ(write(kick, &one, 8), 8);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ring.UsedIdx(), 1) << "a reset device processed a ring";
  EXPECT_TRUE(AliveOrClosed(c));
  vu::VringState s{kQ, 0};
  ASSERT_TRUE(c.Send(vu::kGetVringBase, vu::kVersion, &s, sizeof(s)));
  EXPECT_TRUE(Terminates(c));
  uint64_t v;
  EXPECT_TRUE(c.GetU64(vu::kGetFeatures, &v));
  // Setting everything up again after the reset works.
  std::string why;
  ring.SetAvailIdx(0);
  std::memset(ring.host() + HandRing::kUsedOff, 0, 4096);
  std::memset(data + 64, 0, 8);
  EXPECT_EQ(c.AckedU64(vu::kSetFeatures, vu::kFVersion1 | vu::kFProtocolFeatures), 0u);
  ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
  ASSERT_TRUE(RawSetupQueue(c, ring, kQ, kN, kick, call, -1, &why)) << why;
  ring.PushAvail(0, kN);
  ASSERT_EQ(write(kick, &one, 8), 8);
  for (int i = 0; i < 500 && ring.UsedIdx() != 1; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(ring.UsedIdx(), 1);
  EXPECT_EQ(std::memcmp(data + 64, "abcdefgh", 8), 0);
  Finish(c, "reset device");
  close(kick);
  close(call);
}

TEST_F(VdevAdversarial, MemoryRegionAddRemoveAbuse) {
  HandRing ring, other;
  RawConn c;
  ASSERT_TRUE(OpenAndHandshake(c));
  std::string why;
  ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
  vu::SingleMemRegion m{};
  m.region = other.region();
  m.region.guest_phys_addr = 0x40000000;
  // ADD_MEM_REG without an fd, with two fds, overlapping the existing region.
  EXPECT_NE(c.Acked(vu::kAddMemReg, &m, sizeof(m)), 0u);
  const int two[2] = {other.memfd(), ring.memfd()};
  EXPECT_NE(c.Acked(vu::kAddMemReg, &m, sizeof(m), two), 0u);
  vu::SingleMemRegion overlap = m;
  overlap.region.guest_phys_addr = HandRing::kGpa + 4096;
  const int fd = other.memfd();
  EXPECT_NE(c.Acked(vu::kAddMemReg, &overlap, sizeof(overlap), {&fd, 1}), 0u);
  // REM_MEM_REG of something never added, and with an fd attached.
  vu::SingleMemRegion ghost = m;
  ghost.region.guest_phys_addr = 0x80000000;
  EXPECT_NE(c.Acked(vu::kRemMemReg, &ghost, sizeof(ghost)), 0u);
  int stray = NewEventFd();
  (void)c.Acked(vu::kRemMemReg, &ghost, sizeof(ghost), {&stray, 1});
  close(stray);
  // A proper add and remove still work afterwards.
  EXPECT_EQ(c.Acked(vu::kAddMemReg, &m, sizeof(m), {&fd, 1}), 0u);
  EXPECT_EQ(c.Acked(vu::kRemMemReg, &m, sizeof(m)), 0u);
  EXPECT_TRUE(AliveOrClosed(c));
  Finish(c, "mem reg abuse");
}

// ---- hand-crafted rings ----------------------------------------------------

// What became of one chain submitted on a hostile ring.
enum class Fate { kCompleted, kBroken, kClosed, kNothing };

struct Observed {
  Fate fate = Fate::kNothing;
  uint32_t id = 0;
  uint32_t len = 0;
};

class VdevAdversarialRing : public VdevAdversarial {
 protected:
  void SetUp() override {
    VdevAdversarial::SetUp();
    kick_ = NewEventFd();
    call_ = NewEventFd();
    err_ = NewEventFd();
  }
  void TearDown() override {
    close(kick_);
    close(call_);
    close(err_);
    VdevAdversarial::TearDown();
  }

  // Makes `head` available (or sets the avail index directly), kicks, and
  // waits (bounded) for a used entry, the error eventfd or a close.
  Observed Submit(RawConn& c, uint16_t head, int avail_jump = 0) {
    const uint16_t used_before = ring_->UsedIdx();
    if (avail_jump != 0) {
      ring_->SetAvailIdx(static_cast<uint16_t>(avail_jump));
    } else {
      ring_->PushAvail(head, kN);
    }
    const uint64_t one = 1;
    EXPECT_EQ(write(kick_, &one, 8), 8);
    Observed o;
    for (int i = 0; i < 1000; ++i) {
      if (ring_->UsedIdx() != used_before) {
        o.fate = Fate::kCompleted;
        ring_->UsedEntry(used_before % kN, &o.id, &o.len);
        return o;
      }
      uint64_t v;
      if (read(err_, &v, 8) == 8) return {Fate::kBroken};
      RawReply r;
      if (i % 50 == 49 && !AliveOrClosed(c)) return {Fate::kClosed};
      std::this_thread::sleep_for(2ms);
    }
    return o;
  }

  // A well-formed echo chain at descriptors (d, d+1).
  Observed GoodChain(RawConn& c, uint16_t d) {
    const uint64_t gpa = HandRing::kGpa + HandRing::kDataOff + 0x1000;
    std::memcpy(ring_->host() + HandRing::kDataOff + 0x1000, "good-chain", 10);
    ring_->SetDesc(d, gpa, 10, VRING_DESC_F_NEXT, static_cast<uint16_t>(d + 1));
    ring_->SetDesc(static_cast<uint16_t>(d + 1), gpa + 64, 10, VRING_DESC_F_WRITE, 0);
    return Submit(c, d);
  }

  // Runs one malformed-chain case: set-up, `build` writes descriptors and
  // returns the head, then the chain must be completed with length 0 or the
  // ring marked broken (or the connection closed). If it was skipped, a good
  // chain after it must still be echoed.
  void RunCase(const std::string& name, const std::function<uint16_t(HandRing&)>& build,
               int avail_jump = 0) {
    SCOPED_TRACE(name);
    ring_ = std::make_unique<HandRing>();
    RawConn c;
    ASSERT_TRUE(OpenWithRing(c, *ring_, kick_, call_, err_));
    const uint16_t head = build(*ring_);
    Observed o = Submit(c, head, avail_jump);
    ASSERT_NE(o.fate, Fate::kNothing) << "the back-end neither completed, broke nor closed";
    if (o.fate == Fate::kCompleted) {
      EXPECT_EQ(o.id, head);
      EXPECT_EQ(o.len, 0u) << "a malformed chain was served";
      Observed g = GoodChain(c, 40);
      EXPECT_EQ(g.fate, Fate::kCompleted) << "the ring stalled after a malformed chain";
      EXPECT_EQ(g.len, 10u);
    }
    EXPECT_TRUE(AliveOrClosed(c));
    uint64_t drain;
    (void)!read(err_, &drain, 8);
    (void)!read(call_, &drain, 8);
    Finish(c, name);
    ring_.reset();
  }

  std::unique_ptr<HandRing> ring_;
  int kick_ = -1, call_ = -1, err_ = -1;
};

constexpr uint64_t kData = HandRing::kGpa + HandRing::kDataOff;

TEST_F(VdevAdversarialRing, DescriptorsOutsideMemory) {
  RunCase("below guest memory", [](HandRing& r) {
    r.SetDesc(0, 0x1000, 16, 0, 0);
    return uint16_t{0};
  });
  RunCase("straddling the region end", [](HandRing& r) {
    r.SetDesc(0, HandRing::kGpa + HandRing::kSize - 8, 16, 0, 0);
    return uint16_t{0};
  });
  RunCase("wrapping 2^64", [](HandRing& r) {
    r.SetDesc(0, ~0ull - 7, 16, 0, 0);
    return uint16_t{0};
  });
  RunCase("length 2^32-1", [](HandRing& r) {
    r.SetDesc(0, kData, 0xffffffffu, 0, 0);
    return uint16_t{0};
  });
  RunCase("writable descriptor outside memory", [](HandRing& r) {
    r.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
    r.SetDesc(1, 0xdead0000000ull, 8, VRING_DESC_F_WRITE, 0);
    return uint16_t{0};
  });
}

TEST_F(VdevAdversarialRing, ChainShapeAbuse) {
  RunCase("self loop", [](HandRing& r) {
    r.SetDesc(3, kData, 8, VRING_DESC_F_NEXT, 3);
    return uint16_t{3};
  });
  RunCase("two-descriptor loop", [](HandRing& r) {
    r.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
    r.SetDesc(1, kData, 8, VRING_DESC_F_NEXT, 0);
    return uint16_t{0};
  });
  RunCase("next index out of range", [](HandRing& r) {
    r.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 500);
    return uint16_t{0};
  });
  RunCase("readable after writable", [](HandRing& r) {
    r.SetDesc(0, kData, 8, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
    r.SetDesc(1, kData + 64, 8, 0, 0);
    return uint16_t{0};
  });
  RunCase("zero-length descriptors only", [](HandRing& r) {
    r.SetDesc(0, kData, 0, VRING_DESC_F_NEXT, 1);
    r.SetDesc(1, kData, 0, VRING_DESC_F_WRITE, 0);
    return uint16_t{0};
  });
}

TEST_F(VdevAdversarialRing, IndirectAbuse) {
  auto table_at = [](HandRing& r, uint64_t off, const std::vector<vring_desc>& t) {
    std::memcpy(r.host() + off, t.data(), t.size() * sizeof(vring_desc));
    return HandRing::kGpa + off;
  };
  RunCase("nested indirect", [&](HandRing& r) {
    const uint64_t inner = table_at(r, 0x20000, {{kData, 8, 0, 0}});
    const uint64_t outer = table_at(r, 0x21000, {{inner, 16, VRING_DESC_F_INDIRECT, 0}});
    r.SetDesc(0, outer, 16, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("zero-length table", [](HandRing& r) {
    r.SetDesc(0, kData, 0, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("huge table", [](HandRing& r) {
    r.SetDesc(0, kData, 0xfffffff0u, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("table length not a multiple of 16", [&](HandRing& r) {
    const uint64_t t = table_at(r, 0x20000, {{kData, 8, 0, 0}});
    r.SetDesc(0, t, 17, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("table outside memory", [](HandRing& r) {
    r.SetDesc(0, 0x10, 64, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("indirect together with NEXT", [&](HandRing& r) {
    const uint64_t t = table_at(r, 0x20000, {{kData, 8, 0, 0}});
    r.SetDesc(0, t, 16, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1);
    r.SetDesc(1, kData, 8, VRING_DESC_F_WRITE, 0);
    return uint16_t{0};
  });
  RunCase("loop inside the table", [&](HandRing& r) {
    const uint64_t t =
        table_at(r, 0x20000, {{kData, 8, VRING_DESC_F_NEXT, 1}, {kData, 8, VRING_DESC_F_NEXT, 0}});
    r.SetDesc(0, t, 32, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("table entry next out of range", [&](HandRing& r) {
    const uint64_t t = table_at(r, 0x20000, {{kData, 8, VRING_DESC_F_NEXT, 7}});
    r.SetDesc(0, t, 16, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
  RunCase("table entry outside memory", [&](HandRing& r) {
    const uint64_t t = table_at(r, 0x20000, {{~0ull - 3, 8, 0, 0}});
    r.SetDesc(0, t, 16, VRING_DESC_F_INDIRECT, 0);
    return uint16_t{0};
  });
}

TEST_F(VdevAdversarialRing, AvailRingAbuse) {
  // The avail index jumps more than the ring size ahead of the device.
  RunCase(
      "avail index jump",
      [](HandRing& r) {
        r.SetDesc(0, kData, 8, 0, 0);
        return uint16_t{0};
      },
      kN + 5);
  RunCase("head out of range", [](HandRing&) { return uint16_t{kN + 7}; });
  RunCase("head 0xffff", [](HandRing&) { return uint16_t{0xffff}; });
}

// Memory changes under a running ring: the ring's own region removed or
// replaced, ring parameters changed while it runs, and a chain whose
// writable buffer is the ring itself.
TEST_F(VdevAdversarialRing, MemoryAndRingChangesUnderARunningRing) {
  const uint64_t one = 1;
  auto start = [&](RawConn& c) {
    ring_ = std::make_unique<HandRing>();
    return OpenWithRing(c, *ring_, kick_, call_, err_);
  };
  auto after = [&](RawConn& c, const std::string& name) {
    // Kick a chain: no crash, and the connection answers or was closed.
    ring_->SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
    ring_->SetDesc(1, kData + 64, 8, VRING_DESC_F_WRITE, 0);
    ring_->PushAvail(0, kN);
    EXPECT_EQ(write(kick_, &one, 8), 8);
    std::this_thread::sleep_for(30ms);
    EXPECT_TRUE(AliveOrClosed(c)) << name;
    vu::VringState st{kQ, 0};
    if (c.Send(vu::kGetVringBase, vu::kVersion, &st, sizeof(st))) {
      EXPECT_TRUE(Terminates(c)) << name;
    }
    uint64_t drain;
    (void)!read(err_, &drain, 8);
    (void)!read(call_, &drain, 8);
    Finish(c, name);
    ring_.reset();
  };
  {
    HandRing other;
    RawConn c;
    ASSERT_TRUE(start(c));
    vu::SingleMemRegion add{};
    add.region = other.region();
    add.region.guest_phys_addr = 0x40000000;
    const int fd = other.memfd();
    ASSERT_EQ(c.Acked(vu::kAddMemReg, &add, sizeof(add), {&fd, 1}), 0u);
    vu::SingleMemRegion rem{};
    rem.region = ring_->region();
    (void)c.Acked(vu::kRemMemReg, &rem, sizeof(rem));  // refused or ring broken
    after(c, "ring region removed");
  }
  {
    HandRing other;
    RawConn c;
    ASSERT_TRUE(start(c));
    vu::MemTable t{};
    t.nregions = 1;
    t.regions[0] = other.region();
    const int fd = other.memfd();
    (void)c.Acked(vu::kSetMemTable, &t, 8 + 32, {&fd, 1});
    after(c, "memory table replaced under the ring");
  }
  {
    RawConn c;
    ASSERT_TRUE(start(c));
    vu::VringState num{kQ, 8};
    (void)c.Acked(vu::kSetVringNum, &num, sizeof(num));
    vu::VringAddr a{kQ, 0, ring_->uva(0x8000), ring_->uva(0x9000), ring_->uva(0x8800), 0};
    (void)c.Acked(vu::kSetVringAddr, &a, sizeof(a));
    vu::VringState base{kQ, 1000};
    (void)c.Acked(vu::kSetVringBase, &base, sizeof(base));
    after(c, "ring parameters changed while running");
  }
  {
    RawConn c;
    ASSERT_TRUE(start(c));
    // The echo's output lands on the descriptor table and the used ring.
    std::memset(ring_->host() + HandRing::kDataOff, 0xff, 64);
    ring_->SetDesc(0, kData, 64, VRING_DESC_F_NEXT, 1);
    ring_->SetDesc(1, HandRing::kGpa + HandRing::kDescOff, 32,
                   VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 2);
    ring_->SetDesc(2, HandRing::kGpa + HandRing::kUsedOff, 32, VRING_DESC_F_WRITE, 0);
    ring_->PushAvail(0, kN);
    EXPECT_EQ(write(kick_, &one, 8), 8);
    std::this_thread::sleep_for(30ms);
    EXPECT_TRUE(AliveOrClosed(c));
    after(c, "echo into the ring itself");
  }
  {
    RawConn c;
    ASSERT_TRUE(start(c));
    // Used ring straddling the end of the region: refused at ADDR or start.
    vu::VringState stop{kQ, 0};
    ASSERT_TRUE(c.Send(vu::kGetVringBase, vu::kVersion, &stop, sizeof(stop)));
    RawReply r;
    ASSERT_EQ(c.Recv(&r), Got::kReply);
    vu::VringAddr a{kQ, 0, ring_->uva(0), ring_->uva(HandRing::kSize - 8), ring_->uva(0x1000), 0};
    const uint64_t ack = c.Acked(vu::kSetVringAddr, &a, sizeof(a));
    if (ack == 0) {
      EXPECT_NE(c.AckedU64(vu::kSetVringKick, kQ, {&kick_, 1}), 0u) << "used ring past the end";
    }
    EXPECT_TRUE(AliveOrClosed(c));
    Finish(c, "used ring past the region end");
    ring_.reset();
  }
}

TEST_F(VdevAdversarial, MemorySlotsExhausted) {
  RawConn c;
  ASSERT_TRUE(OpenAndHandshake(c));
  uint64_t slots = 0;
  ASSERT_TRUE(c.GetU64(vu::kGetMaxMemSlots, &slots));
  ASSERT_GT(slots, 0u);
  ASSERT_LT(slots, 1024u);
  std::vector<int> fds;
  bool refused = false;
  for (uint64_t i = 0; i <= slots && !refused; ++i) {
    int fd = memfd_create("slot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    fds.push_back(fd);
    vu::SingleMemRegion m{};
    m.region = {0x100000 * (i + 1), 4096, 0x7e0000000000ull + i * 0x100000, 0};
    refused = c.Acked(vu::kAddMemReg, &m, sizeof(m), {&fd, 1}) != 0;
    if (refused) {
      EXPECT_EQ(i, slots) << "refused before the advertised slot count";
    }
  }
  EXPECT_TRUE(refused) << "accepted more regions than GET_MAX_MEM_SLOTS (" << slots << ")";
  for (int fd : fds) close(fd);  // the back-end holds its own copies until the close
  Finish(c, "memory slots exhausted");
}

// A front-end that sends requests and never reads the replies. The back-end
// may drop it, but the good connection on the other socket must keep being
// served while it happens (the worst round trip seen is recorded).
TEST_F(VdevAdversarial, SlowReaderDoesNotStopOtherConnections) {
  RawConn c;
  ASSERT_TRUE(OpenAndHandshake(c));
  std::atomic<bool> done{false};
  std::thread flood([&] {
    std::vector<uint8_t> burst;
    for (int i = 0; i < 512; ++i) {
      vu::Header h{vu::kGetFeatures, vu::kVersion, 0};
      const auto* b = reinterpret_cast<const uint8_t*>(&h);
      burst.insert(burst.end(), b, b + sizeof(h));
    }
    const auto until = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < until) {
      if (send(c.fd(), burst.data(), burst.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
          errno != EAGAIN) {
        break;  // dropped by the back-end
      }
    }
    done = true;
  });
  double worst_ms = 0;
  int echoes = 0;
  while (!done) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(GoodEcho()) << "good connection failed during the flood";
    worst_ms = std::max(
        worst_ms,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ++echoes;
  }
  flood.join();
  RecordProperty("worst_good_round_trip_ms", std::to_string(worst_ms));
  std::printf("slow reader: %d good round trips, worst %.1f ms\n", echoes, worst_ms);
  Finish(c, "slow reader");
}

// ---- unread replies ----------------------------------------------------------

// Sends n GET_FEATURES requests with NEED_REPLY (blocking writes), reading
// nothing. False once the back-end dropped the connection.
bool FloodWithoutReading(RawConn& c, int n) {
  std::vector<uint8_t> burst;
  for (int i = 0; i < 64; ++i) {
    vu::Header h{vu::kGetFeatures, vu::kVersion | vu::kFlagNeedReply, 0};
    const auto* b = reinterpret_cast<const uint8_t*>(&h);
    burst.insert(burst.end(), b, b + sizeof(h));
  }
  for (int sent = 0; sent < n; sent += 64) {
    if (!c.SendBytes(burst.data(), burst.size())) return false;
  }
  return true;
}

// Waits (bounded, for hang detection only) until the peer has closed, without
// reading anything: reading would let the back-end's replies drain.
bool PeerClosedWithoutReading(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 30000) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// One front-end piles up replies it does not read, well past what the socket
// buffer holds. The back-end must queue them without blocking: a second
// front-end on the same io_context thread completes its whole handshake and
// I/O meanwhile, and afterwards the first one still gets every reply, in order.
TEST(VdevAdversarialReplies, UnreadRepliesNeverHoldUpAnotherConnection) {
  ServerOptions options;
  options.reply_drain_timeout = std::chrono::minutes(10);  // only the byte cap could end it
  const std::string flood_path = TempSocketPath("flood"), prompt_path = TempSocketPath("prompt");
  InProcessBackend backend({flood_path, prompt_path}, options);
  ASSERT_TRUE(backend.ok()) << backend.error();
  RawConn flood;
  ASSERT_TRUE(flood.Connect(flood_path));
  constexpr int kFlood = 64 * 64;  // 4096 replies of 20 bytes: far more than the socket holds
  ASSERT_TRUE(FloodWithoutReading(flood, kFlood)) << "dropped below the reply cap";
  // The back-end has read the whole flood when it answers a plain request
  // after it on the same socket (that answer sits behind the flood's replies).
  ASSERT_TRUE(flood.Send(vu::kGetQueueNum, vu::kVersion, nullptr, 0));

  VirtioUser prompt;
  VirtioUser::Options o;
  o.queue_size = 64;
  o.memory_size = 1 << 20;
  ASSERT_TRUE(prompt.Connect(prompt_path, o).ok()) << "handshake held up";
  uint64_t ig = 0, og = 0;
  auto* in = static_cast<uint8_t*>(prompt.Allocate(64, &ig));
  auto* out = static_cast<uint8_t*>(prompt.Allocate(64, &og));
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  for (int i = 0; i < 100; ++i) {
    std::memset(in, i, 64);
    Buffer r{ig, 64}, w{og, 64};
    Completion comp;
    size_t n = 0;
    ASSERT_TRUE(prompt.AddChain(0, {&r, 1}, {&w, 1}).ok());
    ASSERT_TRUE(prompt.Kick(0).ok());
    ASSERT_TRUE(prompt.WaitUsed(0, 30s, &comp, 1, &n).ok()) << "round trip " << i;
    ASSERT_EQ(comp.len, 64u);
    ASSERT_EQ(out[63], static_cast<uint8_t>(i));
  }
  prompt.Disconnect();

  // The flooding front-end was not dropped and lost nothing.
  EXPECT_TRUE(backend.server(0).connected());
  for (int i = 0; i < kFlood; ++i) {
    RawReply r;
    ASSERT_EQ(flood.Recv(&r), Got::kReply) << "reply " << i << " of " << kFlood;
    ASSERT_EQ(r.hdr.request, vu::kGetFeatures) << "reply " << i;
    ASSERT_EQ(r.payload.size(), 8u);
  }
  RawReply last;
  ASSERT_EQ(flood.Recv(&last), Got::kReply);
  EXPECT_EQ(last.hdr.request, vu::kGetQueueNum);
  EXPECT_GE(last.u64(), 1u);
}

// Past the cap on unread reply bytes, the back-end drops the connection.
TEST(VdevAdversarialReplies, FrontEndOverTheUnreadReplyCapIsDisconnected) {
  ServerOptions options;
  options.max_queued_reply_bytes = 16 * 1024;
  options.reply_drain_timeout = std::chrono::minutes(10);
  const std::string flood_path = TempSocketPath("cap"), prompt_path = TempSocketPath("prompt");
  InProcessBackend backend({flood_path, prompt_path}, options);
  ASSERT_TRUE(backend.ok()) << backend.error();
  RawConn flood;
  ASSERT_TRUE(flood.Connect(flood_path));
  // Far more than socket buffer + cap; the back-end must hang up before the end.
  EXPECT_FALSE(FloodWithoutReading(flood, 64 * 64 * 64)) << "never dropped";
  EXPECT_TRUE(PeerClosedWithoutReading(flood.fd()));
  VirtioUser prompt;
  VirtioUser::Options o;
  o.queue_size = 64;
  o.memory_size = 1 << 20;
  EXPECT_TRUE(prompt.Connect(prompt_path, o).ok());
}

// A front-end that leaves its replies unread for the drain bound is dropped.
TEST(VdevAdversarialReplies, FrontEndThatNeverReadsIsDisconnectedAfterTheBound) {
  ServerOptions options;
  options.reply_drain_timeout = 100ms;
  const std::string flood_path = TempSocketPath("stall");
  InProcessBackend backend({flood_path}, options);
  ASSERT_TRUE(backend.ok()) << backend.error();
  RawConn flood;
  ASSERT_TRUE(flood.Connect(flood_path));
  ASSERT_TRUE(FloodWithoutReading(flood, 64 * 64));
  EXPECT_TRUE(PeerClosedWithoutReading(flood.fd()));
  for (int i = 0; i < 3000 && backend.server().connected(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(backend.server().connected());
}

// A region that claims more bytes than its memfd has: touching the missing
// part would raise SIGBUS in the back-end. Run against a child process so a
// crash is observed instead of killing the test.
TEST(VdevAdversarialChild, RegionLargerThanItsMemfd) {
  const std::string path = TempSocketPath("sigbus");
  ChildBackend backend(path);
  ASSERT_TRUE(backend.ok());
  HandRing ring;
  // Shrink the memfd to one page, leaving our mapping's tail unbacked.
  ASSERT_EQ(ftruncate(ring.memfd(), 4096), 0);
  RawConn c;
  ASSERT_TRUE(c.Connect(path));
  std::string why;
  ASSERT_TRUE(RawHandshake(c, &why)) << why;
  vu::MemTable t{};
  t.nregions = 1;
  t.regions[0] = ring.region();
  const int fd = ring.memfd();
  const uint64_t ack = c.Acked(vu::kSetMemTable, &t, 8 + 32, {&fd, 1});
  if (ack == 0) {
    // Accepted: put the rings past the end of the file and kick.
    int kick = NewEventFd(), call = NewEventFd();
    vu::VringState num{0, kN};
    (void)c.Acked(vu::kSetVringNum, &num, sizeof(num));
    vu::VringAddr a{0, 0, ring.uva(0x40000), ring.uva(0x42000), ring.uva(0x41000), 0};
    (void)c.Acked(vu::kSetVringAddr, &a, sizeof(a));
    (void)c.AckedU64(vu::kSetVringKick, 0, {&kick, 1});
    (void)c.AckedU64(vu::kSetVringCall, 0, {&call, 1});
    vu::VringState en{0, 1};
    (void)c.Acked(vu::kSetVringEnable, &en, sizeof(en));
    const uint64_t one = 1;
    (void)!write(kick, &one, 8);
    std::this_thread::sleep_for(200ms);
    close(kick);
    close(call);
  }
  int status = 0;
  const pid_t r = waitpid(backend.pid(), &status, WNOHANG);
  EXPECT_EQ(r, 0) << "the back-end died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                  << ") after a region larger than its memfd (SET_MEM_TABLE ack " << ack << ")";
}

// Kick, call and error fds of the wrong kind: not eventfds but a socket whose
// peer is gone (a write raises SIGPIPE unless suppressed), a full pipe (a
// blocking write never returns), a memfd (not pollable), /dev/zero (always
// readable, never drained). Each runs against a back-end in a child process,
// so a crash or a stuck thread is observed rather than suffered: the process
// must survive and keep answering on the connection (or close it).
enum class FdRole { kKick, kCall, kErr };

struct WrongFdCase {
  const char* name;
  FdRole role;
  std::function<int()> make;  // the fd to send; the test closes it
};

int DeadSocket() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  close(sv[1]);
  return sv[0];
}

// The write end of a pipe whose buffer is full, in blocking mode; the read
// end stays open in *parked so that the pipe is full rather than broken.
int FullBlockingPipe(std::vector<int>* parked) {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  char buf[4096] = {};
  while (write(p[1], buf, sizeof(buf)) > 0) {
  }
  fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) & ~O_NONBLOCK);
  parked->push_back(p[0]);
  return p[1];
}

void RunWrongFdCase(const WrongFdCase& k) {
  SCOPED_TRACE(k.name);
  const std::string path = TempSocketPath("wrongfd");
  ChildBackend backend(path);
  ASSERT_TRUE(backend.ok());
  HandRing ring;
  RawConn c;
  ASSERT_TRUE(c.Connect(path));
  std::string why;
  ASSERT_TRUE(RawHandshake(c, &why)) << why;
  ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
  const int odd = k.make();
  ASSERT_GE(odd, 0);
  const int kick = k.role == FdRole::kKick ? odd : NewEventFd();
  const int call = k.role == FdRole::kCall ? odd : NewEventFd();
  const int err = k.role == FdRole::kErr ? odd : NewEventFd();
  // Set-up may refuse the odd fd; either way, then drive the ring: a good
  // chain (completion -> call fd), a malformed one, and a broken avail index
  // (-> err fd).
  (void)RawSetupQueue(c, ring, kQ, kN, kick, call, err, &why);
  ring.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
  ring.SetDesc(1, kData + 64, 8, VRING_DESC_F_WRITE, 0);
  ring.SetDesc(2, 0x10, 8, 0, 0);
  ring.PushAvail(0, kN);
  ring.PushAvail(2, kN);
  const uint64_t one = 1;
  if (k.role != FdRole::kKick) (void)!write(kick, &one, 8);
  std::this_thread::sleep_for(200ms);
  ring.SetAvailIdx(static_cast<uint16_t>(kN * 3));
  if (k.role != FdRole::kKick) (void)!write(kick, &one, 8);
  std::this_thread::sleep_for(100ms);
  int status = 0;
  const pid_t r = waitpid(backend.pid(), &status, WNOHANG);
  EXPECT_EQ(r, 0) << "the back-end died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                  << ")";
  if (r == 0) {
    EXPECT_TRUE(AliveOrClosed(c)) << "the back-end stopped answering";
  }
  close(odd);
  if (k.role != FdRole::kKick) close(kick);
  if (k.role != FdRole::kCall) close(call);
  if (k.role != FdRole::kErr) close(err);
}

TEST(VdevAdversarialChild, NotificationFdsOfTheWrongKind) {
  auto memfd = [] { return memfd_create("not-an-eventfd", MFD_CLOEXEC); };
  const WrongFdCase cases[] = {
      {"call fd: memfd", FdRole::kCall, memfd},
      {"kick fd: memfd", FdRole::kKick, memfd},
      {"kick fd: /dev/zero", FdRole::kKick, [] { return open("/dev/zero", O_RDONLY | O_CLOEXEC); }},
      {"kick fd: socket with its peer gone", FdRole::kKick, DeadSocket},
  };
  for (const WrongFdCase& k : cases) RunWrongFdCase(k);
}

// Waits (bounded, only to detect a hang) for the hand ring's used index.
bool WaitUsedIdx(const HandRing& ring, uint16_t want) {
  for (int i = 0; i < 2500 && ring.UsedIdx() != want; ++i) std::this_thread::sleep_for(2ms);
  return ring.UsedIdx() == want;
}

// A front-end that shrinks its memfd after the back-end mapped it would make
// the back-end's next access to the lost pages raise SIGBUS. By default the
// back-end seals guest memory against shrinking (F_SEAL_SHRINK) when it maps
// it, so the truncation itself fails and the ring keeps working.
TEST(VdevAdversarialChild, MemfdCannotShrinkAfterTheMemoryTable) {
  const std::string path = TempSocketPath("shrink");
  ChildBackend backend(path);
  ASSERT_TRUE(backend.ok());
  HandRing ring;  // sealable memfd, no seals yet
  RawConn c;
  ASSERT_TRUE(c.Connect(path));
  std::string why;
  ASSERT_TRUE(RawHandshake(c, &why)) << why;
  int kick = NewEventFd(), call = NewEventFd();
  ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
  EXPECT_TRUE(fcntl(ring.memfd(), F_GET_SEALS) & F_SEAL_SHRINK) << "the back-end did not seal";
  ASSERT_TRUE(RawSetupQueue(c, ring, kQ, kN, kick, call, -1, &why)) << why;
  std::memcpy(ring.host() + HandRing::kDataOff, "sealed!", 8);
  ring.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
  ring.SetDesc(1, kData + 64, 8, VRING_DESC_F_WRITE, 0);
  ring.PushAvail(0, kN);
  EXPECT_NE(ftruncate(ring.memfd(), 0), 0) << "guest memory could shrink under the back-end";
  EXPECT_EQ(errno, EPERM);
  const uint64_t one = 1;
  ASSERT_EQ(write(kick, &one, 8), 8);
  ASSERT_TRUE(WaitUsedIdx(ring, 1));
  EXPECT_EQ(std::memcmp(ring.host() + HandRing::kDataOff + 64, "sealed!", 8), 0);
  int status = 0;
  EXPECT_EQ(waitpid(backend.pid(), &status, WNOHANG), 0) << "the back-end died";
  EXPECT_TRUE(AliveOrClosed(c));
  close(kick);
  close(call);
}

// Memory that cannot be sealed (a memfd created without MFD_ALLOW_SEALING;
// the same holds for tmpfs and hugetlbfs files) is refused by default with a
// clean nack: the connection stays usable and the process unharmed.
TEST(VdevAdversarialChild, UnsealableMemoryIsRefusedByDefault) {
  const std::string path = TempSocketPath("unsealable");
  ChildBackend backend(path);
  ASSERT_TRUE(backend.ok());
  HandRing ring(/*sealable=*/false);
  RawConn c;
  ASSERT_TRUE(c.Connect(path));
  std::string why;
  ASSERT_TRUE(RawHandshake(c, &why)) << why;
  EXPECT_FALSE(RawSetMemTable(c, ring, &why)) << "unsealable memory accepted";
  vu::SingleMemRegion m{};
  m.region = ring.region();
  const int fd = ring.memfd();
  EXPECT_NE(c.Acked(vu::kAddMemReg, &m, sizeof(m), {&fd, 1}), 0u) << "ADD_MEM_REG accepted it";
  // The file can still shrink: nothing of it is mapped by the back-end.
  EXPECT_EQ(ftruncate(ring.memfd(), 4096), 0);
  EXPECT_TRUE(AliveOrClosed(c));
  int status = 0;
  EXPECT_EQ(waitpid(backend.pid(), &status, WNOHANG), 0) << "the back-end died";
  EXPECT_EQ(backend.Stop(), 0);
}

// The operator's opt-out (--allow-unsealed-memory, i.e.
// SessionOptions::require_sealed_memory = false) accepts unsealable memory:
// it trusts the front-end never to truncate it, since a truncation would then
// crash the back-end. Not exercised here for that reason.
TEST(VdevAdversarialChild, UnsealableMemoryIsServedWhenTheOperatorOptsOut) {
  const std::string path = TempSocketPath("optout");
  ChildBackend backend(path, {"--allow-unsealed-memory"});
  ASSERT_TRUE(backend.ok());
  HandRing ring(/*sealable=*/false);
  RawConn c;
  ASSERT_TRUE(c.Connect(path));
  std::string why;
  ASSERT_TRUE(RawHandshake(c, &why)) << why;
  int kick = NewEventFd(), call = NewEventFd();
  ASSERT_TRUE(RawSetMemTable(c, ring, &why)) << why;
  ASSERT_TRUE(RawSetupQueue(c, ring, kQ, kN, kick, call, -1, &why)) << why;
  std::memcpy(ring.host() + HandRing::kDataOff, "trusted", 8);
  ring.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
  ring.SetDesc(1, kData + 64, 8, VRING_DESC_F_WRITE, 0);
  ring.PushAvail(0, kN);
  const uint64_t one = 1;
  ASSERT_EQ(write(kick, &one, 8), 8);
  ASSERT_TRUE(WaitUsedIdx(ring, 1));
  EXPECT_EQ(std::memcmp(ring.host() + HandRing::kDataOff + 64, "trusted", 8), 0);
  close(kick);
  close(call);
}

// Notification fds that would break a back-end writing to them blindly: a
// socket whose peer closed (the first write() raises SIGPIPE and kills the
// process), and a full pipe in blocking mode (the write() blocks the
// connection's io_context thread for good). The back-end accepts only
// eventfds for kick/call/err (checked at SET_VRING_*), makes them
// non-blocking, and writes with EAGAIN ignored, so each of these is refused
// and the process keeps answering.
TEST(VdevAdversarialChild, NotificationFdsThatBreakTheBackEnd) {
  std::vector<int> parked;
  const WrongFdCase cases[] = {
      {"call fd: socket with its peer gone", FdRole::kCall, DeadSocket},
      {"err fd: socket with its peer gone", FdRole::kErr, DeadSocket},
      {"call fd: full blocking pipe", FdRole::kCall,
       [&parked] { return FullBlockingPipe(&parked); }},
  };
  for (const WrongFdCase& k : cases) RunWrongFdCase(k);
  for (int fd : parked) close(fd);
}

// A back-end in a child process with queue kQ of a hand ring set up over
// plain eventfds, for the cases that tamper with those fds afterwards.
struct ChildWithQueue {
  explicit ChildWithQueue(const char* tag) : path(TempSocketPath(tag)), backend(path) {}
  ~ChildWithQueue() {
    close(kick);
    close(call);
    close(err);
  }
  ::testing::AssertionResult Start() {
    std::string why;
    if (!backend.ok() || !c.Connect(path)) return ::testing::AssertionFailure() << "no back-end";
    if (!RawHandshake(c, &why) || !RawSetMemTable(c, ring, &why) ||
        !RawSetupQueue(c, ring, kQ, kN, kick, call, err, &why)) {
      return ::testing::AssertionFailure() << why;
    }
    return ::testing::AssertionSuccess();
  }
  bool Alive() {
    int status = 0;
    return waitpid(backend.pid(), &status, WNOHANG) == 0;
  }
  // Posts one request/response chain, kicks, and checks that it completes
  // and that the back-end then answers a request on the socket.
  ::testing::AssertionResult CompletesAndAnswers() {
    ring.SetDesc(0, kData, 8, VRING_DESC_F_NEXT, 1);
    ring.SetDesc(1, kData + 64, 8, VRING_DESC_F_WRITE, 0);
    ring.PushAvail(0, kN);
    const uint64_t one = 1;
    if (write(kick, &one, 8) != 8) return ::testing::AssertionFailure() << "kick failed";
    if (!WaitUsedIdx(ring, 1)) return ::testing::AssertionFailure() << "no completion";
    uint64_t features = 0;
    if (!c.GetU64(vu::kGetFeatures, &features)) {
      return ::testing::AssertionFailure() << "the back-end stopped answering";
    }
    return ::testing::AssertionSuccess();
  }

  std::string path;
  ChildBackend backend;
  HandRing ring;
  RawConn c;
  int kick = NewEventFd(), call = NewEventFd(), err = NewEventFd();
};

// A front-end shares the call eventfd's open file with the back-end, so it
// can take back the O_NONBLOCK the back-end set at SET_VRING_CALL, and fill
// the counter to its maximum: a plain write() of the next completion's
// notification then never returns, and the connection's thread (serving
// other VMs too) is stuck for good. The back-end must not block: the
// completion is published, the notification is skipped or refused, and the
// back-end keeps answering.
TEST(VdevAdversarialChild, CallFdMadeBlockingAndSaturatedAfterSetUp) {
  ChildWithQueue b("satcall");
  ASSERT_TRUE(b.Start());
  ASSERT_EQ(fcntl(b.call, F_SETFL, fcntl(b.call, F_GETFL) & ~O_NONBLOCK), 0);
  const uint64_t full = 0xfffffffffffffffeull;  // the most an eventfd holds
  ASSERT_EQ(write(b.call, &full, 8), 8);
  // The connection's thread is free: it answers this connection, and once
  // that one is gone, the next front-end on the socket.
  EXPECT_TRUE(b.CompletesAndAnswers());
  b.c.Close();
  RawConn next;
  ASSERT_TRUE(next.Connect(b.path));
  std::string why;
  EXPECT_TRUE(RawHandshake(next, &why)) << why;
  EXPECT_TRUE(b.Alive()) << "the back-end died";
}

// The same attack on the window the check leaves: the front-end toggles
// O_NONBLOCK on its full call eventfd as fast as it can, so the flag can be
// set at the back-end's check and clear at its write. The watchdog of
// BlockingCallGuard interrupts such a write; each round the back-end must
// publish the completion and then answer a request again. (Whether a round
// hits the window is up to the scheduler; NotifyEventFd's unit test hits it
// on purpose. Without the guard a hit here stops the back-end for good.)
TEST(VdevAdversarialChild, CallFdTogglesNonBlockingAroundEachNotification) {
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ChildWithQueue b("togglecall");
    ASSERT_TRUE(b.Start());
    const uint64_t full = 0xfffffffffffffffeull;
    ASSERT_EQ(write(b.call, &full, 8), 8);
    std::atomic<bool> stop{false};
    std::thread toggler([&] {
      const int flags = fcntl(b.call, F_GETFL);
      while (!stop.load(std::memory_order_relaxed)) {
        fcntl(b.call, F_SETFL, flags | O_NONBLOCK);
        fcntl(b.call, F_SETFL, flags & ~O_NONBLOCK);
      }
    });
    EXPECT_TRUE(b.CompletesAndAnswers());
    stop = true;
    toggler.join();
    EXPECT_TRUE(b.Alive()) << "the back-end died";
  }
}

// The kick fd is shared the same way: a front-end that clears O_NONBLOCK and
// takes each kick back right after writing it can empty the counter between
// the back-end seeing it readable and reading it, and a plain read() then
// never returns. The race cannot be forced from outside, so this drives it
// for 300 ms at varying delays (DrainEventFd's unit tests pin the read
// itself); the back-end must keep answering, however it falls.
TEST(VdevAdversarialChild, KickFdMadeBlockingAndDrainedByTheFrontEnd) {
  ChildWithQueue b("drainkick");
  ASSERT_TRUE(b.Start());
  const int flags = fcntl(b.kick, F_GETFL);
  // Kick in blocking mode, wait a varying moment (0-63 us, spinning), take
  // the kick back (non-blocking for this read only, so the test itself never
  // waits), and leave the fd blocking and empty.
  const uint64_t one = 1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (unsigned i = 0; std::chrono::steady_clock::now() < end; ++i) {
    ASSERT_EQ(fcntl(b.kick, F_SETFL, flags & ~O_NONBLOCK), 0);
    ASSERT_EQ(write(b.kick, &one, 8), 8);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(i % 64);
    while (std::chrono::steady_clock::now() < until) {
    }
    ASSERT_EQ(fcntl(b.kick, F_SETFL, flags | O_NONBLOCK), 0);
    uint64_t v;
    (void)!read(b.kick, &v, 8);
    ASSERT_EQ(fcntl(b.kick, F_SETFL, flags & ~O_NONBLOCK), 0);
  }
  uint64_t features = 0;
  EXPECT_TRUE(b.c.GetU64(vu::kGetFeatures, &features)) << "the back-end stopped answering";
  EXPECT_TRUE(b.Alive()) << "the back-end died";
}

}  // namespace
}  // namespace vdev::testing
