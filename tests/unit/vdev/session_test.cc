#include "vdev/session.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "session_util.h"
#include "test_util.h"

namespace vdev {
namespace {

using namespace vdev::testing;  // NOLINT

constexpr uint64_t kRingGpa = kGpaBase;  // desc; avail +0x1000; used +0x2000
constexpr uint64_t kBuf = kGpaBase + 0x10000;
constexpr uint64_t kAllProtocol = (1ull << vu::kPfMq) | (1ull << vu::kPfReplyAck) |
                                  (1ull << vu::kPfConfig) | (1ull << vu::kPfResetDevice) |
                                  (1ull << vu::kPfConfigureMemSlots) | (1ull << vu::kPfStatus) |
                                  (1ull << vu::kPfBackendReq);

class VdevSessionTest : public ::testing::Test {
 protected:
  VdevSessionTest() {
    Reopen(SessionOptions{});
    call_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  // Replaces the session (before any message) with one under `options`.
  void Reopen(const SessionOptions& options) {
    session_.reset();
    auto dev = std::make_unique<RecordingDevice>();
    device_ = dev.get();
    session_ = std::make_unique<Session>(std::move(dev), &host_, options, "test");
    session_->Start();
  }
  ~VdevSessionTest() override {
    session_.reset();
    close(call_);
  }

  Session::Result Send(Message m) { return session_->Handle(std::move(m)); }
  // Sends a message expecting success; with need_reply, checks the ack.
  void Ok(Message m) {
    bool need_reply = m.need_reply();
    uint32_t request = m.request();
    Session::Result r = Send(std::move(m));
    ASSERT_FALSE(r.close) << RequestName(request);
    if (need_reply) {
      ParsedReply p = Parse(r.reply);
      EXPECT_EQ(p.header.flags, vu::kReplyFlags);
      EXPECT_EQ(p.header.request, request);
      EXPECT_EQ(p.u64(), 0u) << RequestName(request);
    } else {
      EXPECT_TRUE(r.reply.empty()) << RequestName(request);
    }
  }
  uint64_t GetU64(uint32_t request) {
    Session::Result r = Send(Msg0(request));
    ParsedReply p = Parse(r.reply);
    EXPECT_EQ(p.header.flags, vu::kReplyFlags);
    EXPECT_EQ(p.header.size, 8u);
    return p.u64();
  }
  // Expects a NEED_REPLY message to be refused with a non-zero ack.
  void Refused(Message m) {
    m.header.flags |= vu::kFlagNeedReply;
    Session::Result r = Send(std::move(m));
    EXPECT_FALSE(r.close);
    ParsedReply p = Parse(r.reply);
    EXPECT_EQ(p.header.flags, vu::kReplyFlags);
    EXPECT_NE(p.u64(), 0u);
  }

  void Negotiate(bool protocol_features = true) {
    uint64_t features = GetU64(vu::kGetFeatures);
    EXPECT_TRUE(features & vu::kFVersion1);
    EXPECT_TRUE(features & vu::kFProtocolFeatures);
    EXPECT_EQ(GetU64(vu::kGetProtocolFeatures), kAllProtocol);
    Ok(Msg(vu::kSetProtocolFeatures, kAllProtocol));
    EXPECT_EQ(GetU64(vu::kGetQueueNum), 2u);
    Ok(Msg0(vu::kSetOwner, true));
    uint64_t acked = features & (protocol_features ? ~0ull : ~vu::kFProtocolFeatures);
    Ok(Msg(vu::kSetFeatures, acked, true));
  }
  void SetMemTable() {
    uint8_t payload[8 + sizeof(vu::MemRegion)] = {};
    uint32_t n = 1;
    vu::MemRegion r{kGpaBase, guest_.ram.size(), kGpaBase + kUvaDelta, 0};
    std::memcpy(payload, &n, 4);
    std::memcpy(payload + 8, &r, sizeof(r));
    Ok(WithFd(Msg(vu::kSetMemTable, payload, true), dup(guest_.ram.fd())));
  }
  void SetupRing(uint16_t q, uint64_t ring_gpa, bool enable = true) {
    Ok(Msg(vu::kSetVringNum, vu::VringState{q, kRingSize}, true));
    Ok(Msg(vu::kSetVringBase, vu::VringState{q, 0}, true));
    vu::VringAddr a{
        q, 0, ring_gpa + kUvaDelta, ring_gpa + 0x2000 + kUvaDelta, ring_gpa + 0x1000 + kUvaDelta,
        0};
    Ok(Msg(vu::kSetVringAddr, a, true));
    Ok(WithFd(Msg(vu::kSetVringKick, uint64_t{q}, true), eventfd(0, EFD_CLOEXEC)));
    Ok(WithFd(Msg(vu::kSetVringCall, uint64_t{q}, true), dup(call_)));
    if (enable) Ok(Msg(vu::kSetVringEnable, vu::VringState{q, 1}, true));
  }
  void Bringup() {
    Negotiate();
    SetMemTable();
    SetupRing(0, kRingGpa);
  }
  RingDriver Ring(uint64_t ring_gpa = kRingGpa) {
    return RingDriver(&guest_, kRingSize, ring_gpa, ring_gpa + 0x1000, ring_gpa + 0x2000);
  }
  // Puts a "ping" request with a 16-byte reply buffer on the ring.
  void PostPing(RingDriver& ring, uint16_t head) {
    std::memcpy(guest_.host(kBuf), "ping", 4);
    ring.SetDesc(head, kBuf, 4, 1, head + 1);
    ring.SetDesc(head + 1, kBuf + 0x100, 16, 2, 0);
    ring.Publish(head);
  }

  SimpleGuest guest_;
  FakeHost host_;
  RecordingDevice* device_ = nullptr;
  std::unique_ptr<Session> session_;
  int call_ = -1;
};

TEST_F(VdevSessionTest, QemuStyleBringupEchoesAChain) {
  Bringup();
  EXPECT_EQ(device_->events, std::vector<std::string>{"start0"});
  EXPECT_TRUE(device_->features & vu::kFRingEventIdx);
  EXPECT_EQ(device_->memory_updates, 1);
  EXPECT_EQ(host_.watched.count(0), 1u);
  EXPECT_FALSE(host_.polling);

  RingDriver ring = Ring();
  PostPing(ring, 0);
  session_->Kick(0);
  EXPECT_EQ(ring.used_idx(), 1);
  EXPECT_EQ(ring.used_elem(0), std::make_pair(0u, 4u));
  EXPECT_EQ(std::memcmp(guest_.host(kBuf + 0x100), "ping", 4), 0);
  EXPECT_EQ(Drain(call_), 1u);

  // Shutdown as QEMU does it: disable, then GET_VRING_BASE.
  Ok(Msg(vu::kSetVringEnable, vu::VringState{0, 0}, true));
  EXPECT_EQ(device_->events.back(), "stop0");
  Session::Result r = Send(Msg(vu::kGetVringBase, vu::VringState{0, 0}, true));
  ParsedReply p = Parse(r.reply);
  ASSERT_EQ(p.header.size, sizeof(vu::VringState));
  EXPECT_EQ(p.header.flags, vu::kReplyFlags);  // NEED_REPLY not echoed
  vu::VringState st;
  std::memcpy(&st, p.payload.data(), sizeof(st));
  EXPECT_EQ(st.index, 0u);
  EXPECT_EQ(st.num, 1u);
  EXPECT_EQ(host_.watched.count(0), 0u);
  EXPECT_FALSE(session_->queue(0).started());
}

TEST_F(VdevSessionTest, RingsWaitForEnableWithProtocolFeatures) {
  Negotiate(true);
  SetMemTable();
  SetupRing(0, kRingGpa, /*enable=*/false);
  EXPECT_TRUE(session_->queue(0).started());
  EXPECT_FALSE(session_->queue_running(0));
  RingDriver ring = Ring();
  PostPing(ring, 0);
  session_->Kick(0);  // started but disabled: nothing processed
  EXPECT_EQ(ring.used_idx(), 0);
  Ok(Msg(vu::kSetVringEnable, vu::VringState{0, 1}, true));
  // Enabling processes what was already made available.
  EXPECT_EQ(ring.used_idx(), 1);
}

TEST_F(VdevSessionTest, RingsStartEnabledWithoutProtocolFeatures) {
  Negotiate(false);
  SetMemTable();
  SetupRing(0, kRingGpa, /*enable=*/false);
  EXPECT_TRUE(session_->queue_running(0));
  // SET_VRING_ENABLE is not part of that protocol.
  Refused(Msg(vu::kSetVringEnable, vu::VringState{0, 1}));
}

TEST_F(VdevSessionTest, NeedReplyErrorsAreAnsweredAndOtherwiseDisconnect) {
  Negotiate();
  Refused(Msg(vu::kSetVringNum, vu::VringState{0, 3}));     // not a power of two
  Refused(Msg(vu::kSetVringNum, vu::VringState{0, 2048}));  // above the device maximum
  Refused(Msg(vu::kSetVringNum, vu::VringState{7, 8}));     // no such queue
  Refused(Msg(vu::kSetVringBase, vu::VringState{0, 0x10000}));
  Refused(Msg(vu::kSetVringEnable, vu::VringState{0, 2}));
  Refused(Msg(vu::kSetFeatures, uint64_t{1} << 60));  // not offered
  Refused(Msg(vu::kSetProtocolFeatures, uint64_t{1} << 12));
  Refused(Msg(vu::kSetStatus, uint64_t{0x100}));
  Refused(Msg0(40000));                          // unknown request
  Refused(Msg(vu::kSetVringKick, uint64_t{0}));  // fd missing
  // The same without NEED_REPLY ends the connection.
  Session::Result r = Send(Msg(vu::kSetVringNum, vu::VringState{0, 3}));
  EXPECT_TRUE(r.close);
  EXPECT_TRUE(r.reply.empty());
  EXPECT_TRUE(Send(Msg0(40000)).close);
  // A message with a reply of its own and a bad payload cannot be answered.
  EXPECT_TRUE(Send(Msg(vu::kGetFeatures, uint64_t{0}, true)).close);
}

TEST_F(VdevSessionTest, FdsOfRefusedMessagesAreClosed) {
  Negotiate();
  int fd = eventfd(0, EFD_CLOEXEC);
  Refused(WithFd(Msg(vu::kSetVringKick, uint64_t{9}), fd));  // queue 9 does not exist
  EXPECT_FALSE(FdIsOpen(fd));
  fd = eventfd(0, EFD_CLOEXEC);
  Refused(WithFd(Msg0(vu::kSetOwner), fd));  // unexpected fd
  EXPECT_FALSE(FdIsOpen(fd));
  fd = eventfd(0, EFD_CLOEXEC);
  uint8_t payload[40] = {};
  Refused(WithFd(Msg(vu::kRemMemReg, payload), fd));  // unknown region, fd dropped anyway
  EXPECT_FALSE(FdIsOpen(fd));
  // A memory table whose fd is not a regular file.
  fd = eventfd(0, EFD_CLOEXEC);
  uint8_t table[8 + sizeof(vu::MemRegion)] = {};
  uint32_t n = 1;
  vu::MemRegion reg{0, 0x1000, 0x1000, 0};
  std::memcpy(table, &n, 4);
  std::memcpy(table + 8, &reg, sizeof(reg));
  Refused(WithFd(Msg(vu::kSetMemTable, table), fd));
  EXPECT_FALSE(FdIsOpen(fd));
  EXPECT_EQ(session_->Memory(), nullptr);
}

TEST_F(VdevSessionTest, NotificationFdsMustBeEventfds) {
  Negotiate();
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  Refused(WithFd(Msg(vu::kSetVringCall, uint64_t{0}), p[1]));  // a pipe could block or SIGPIPE
  EXPECT_FALSE(FdIsOpen(p[1]));
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Refused(WithFd(Msg(vu::kSetVringErr, uint64_t{0}), sv[0]));
  Refused(WithFd(Msg(vu::kSetVringKick, uint64_t{0}), dup(guest_.ram.fd())));
  close(p[0]);
  close(sv[1]);
  // A blocking eventfd is accepted and made non-blocking.
  int efd = eventfd(0, EFD_CLOEXEC);
  Ok(WithFd(Msg(vu::kSetVringCall, uint64_t{0}, true), dup(efd)));
  EXPECT_TRUE(fcntl(efd, F_GETFL) & O_NONBLOCK);
  close(efd);
}

TEST_F(VdevSessionTest, KickWithBadRingAddressesIsRefused) {
  Negotiate();
  SetMemTable();
  Ok(Msg(vu::kSetVringNum, vu::VringState{0, kRingSize}, true));
  vu::VringAddr a{0, 0, kRingGpa, kRingGpa + 0x2000, kRingGpa + 0x1000, 0};  // GPAs, not UVAs
  Ok(Msg(vu::kSetVringAddr, a, true));
  Refused(WithFd(Msg(vu::kSetVringKick, uint64_t{0}), eventfd(0, EFD_CLOEXEC)));
  EXPECT_FALSE(session_->queue_running(0));
  EXPECT_TRUE(host_.watched.empty());
}

TEST_F(VdevSessionTest, ConfigSpaceReadsAndWrites) {
  Negotiate();
  uint8_t payload[12 + 16] = {};
  vu::ConfigHeader h{0, 16, 0};
  std::memcpy(payload, &h, sizeof(h));
  ParsedReply p = Parse(Send(Msg(vu::kGetConfig, payload)).reply);
  ASSERT_EQ(p.header.size, 12u + 16u);
  EXPECT_EQ(std::memcmp(p.payload.data() + 12, "ECHO", 4), 0);
  EXPECT_EQ(p.payload[12 + 4], 2);  // queue count
  EXPECT_EQ(p.payload[12 + 9], 9);

  // Out of range: the error form is an empty payload.
  h = {8, 16, 0};
  std::memcpy(payload, &h, sizeof(h));
  p = Parse(Send(Msg(vu::kGetConfig, payload)).reply);
  EXPECT_EQ(p.header.size, 0u);
  EXPECT_EQ(p.header.flags, vu::kReplyFlags);
  h = {0xffffffffu, 1, 0};
  uint8_t small[13] = {};
  std::memcpy(small, &h, sizeof(h));
  p = Parse(Send(Msg(vu::kGetConfig, small)).reply);
  EXPECT_EQ(p.header.size, 0u);

  // Writes: bytes 0-7 are read-only in the echo device.
  uint8_t write[12 + 2] = {};
  h = {2, 2, 0};
  std::memcpy(write, &h, sizeof(h));
  Refused(Msg(vu::kSetConfig, write));
  h = {10, 2, 0};
  std::memcpy(write, &h, sizeof(h));
  write[12] = 0xaa;
  write[13] = 0xbb;
  Ok(Msg(vu::kSetConfig, write, true));
  h = {10, 2, 0};
  uint8_t read2[12 + 2] = {};
  std::memcpy(read2, &h, sizeof(h));
  p = Parse(Send(Msg(vu::kGetConfig, read2)).reply);
  ASSERT_EQ(p.payload.size(), 14u);
  EXPECT_EQ(p.payload[12], 0xaa);
  EXPECT_EQ(p.payload[13], 0xbb);
  h = {15, 2, 0};
  std::memcpy(write, &h, sizeof(h));
  Refused(Msg(vu::kSetConfig, write));  // runs past the end
}

TEST_F(VdevSessionTest, MemoryHotAddAndRemoveWhileAQueueRuns) {
  Bringup();
  EXPECT_EQ(GetU64(vu::kGetMaxMemSlots), 32u);
  // A second memfd as hot-added memory at gpa 0x4000000.
  GuestRam extra(0x10000);
  vu::SingleMemRegion add{0, {0x4000000, 0x10000, 0x9000000000, 0}};
  Ok(WithFd(Msg(vu::kAddMemReg, add, true), dup(extra.fd())));
  EXPECT_EQ(session_->Memory()->regions().size(), 2u);
  EXPECT_TRUE(session_->queue_running(0));
  // A chain whose reply buffer lives in the new region.
  RingDriver ring = Ring();
  std::memcpy(guest_.host(kBuf), "hot!", 4);
  ring.SetDesc(0, kBuf, 4, 1, 1);
  ring.SetDesc(1, 0x4000100, 4, 2, 0);
  ring.Publish(0);
  session_->Kick(0);
  EXPECT_EQ(ring.used_idx(), 1);
  EXPECT_EQ(std::memcmp(extra.at(0x100), "hot!", 4), 0);
  // Overlapping addition is refused and changes nothing.
  vu::SingleMemRegion overlap{0, {0x4008000, 0x10000, 0xa000000000, 0}};
  Refused(WithFd(Msg(vu::kAddMemReg, overlap), dup(extra.fd())));
  EXPECT_EQ(session_->Memory()->regions().size(), 2u);
  // Removal (QEMU sends mmap_offset 0).
  Ok(Msg(vu::kRemMemReg, add, true));
  EXPECT_EQ(session_->Memory()->regions().size(), 1u);
  Refused(Msg(vu::kRemMemReg, add));
  // The ring still works; a buffer in the removed region is now refused.
  ring.Publish(0);
  session_->Kick(0);
  EXPECT_EQ(ring.used_idx(), 2);
  EXPECT_EQ(ring.used_elem(1).second, 0u);
  EXPECT_EQ(session_->queue(0).stats().malformed, 1u);
}

TEST_F(VdevSessionTest, GetVringBaseWaitsForChainsTheDeviceHolds) {
  Bringup();
  device_->hold = true;
  RingDriver ring = Ring();
  PostPing(ring, 0);
  session_->Kick(0);
  ASSERT_EQ(device_->held.size(), 1u);
  // The reply waits: the base would claim the held chain is done.
  Session::Result r = Send(Msg(vu::kGetVringBase, vu::VringState{0, 0}));
  EXPECT_TRUE(r.reply.empty());
  EXPECT_FALSE(r.close);
  EXPECT_TRUE(r.stop_pending);
  EXPECT_TRUE(session_->StopPending());
  EXPECT_FALSE(session_->StopDrained());
  EXPECT_EQ(device_->events.back(), "stopping0");
  // Meanwhile nothing new is popped, and other messages are refused.
  PostPing(ring, 2);
  session_->Kick(0);
  EXPECT_TRUE(session_->Poll() == false);
  EXPECT_EQ(device_->held.size(), 1u);
  Refused(Msg0(vu::kSetOwner));
  // The completion still lands on the ring; then the reply can go.
  device_->CompleteHeld();
  EXPECT_TRUE(session_->StopDrained());
  EXPECT_EQ(ring.used_idx(), 1);
  EXPECT_EQ(ring.used_elem(0), std::make_pair(0u, 4u));
  ParsedReply p = Parse(session_->FinishStop());
  ASSERT_EQ(p.header.size, sizeof(vu::VringState));
  EXPECT_EQ(p.header.request, static_cast<uint32_t>(vu::kGetVringBase));
  vu::VringState st;
  std::memcpy(&st, p.payload.data(), sizeof(st));
  EXPECT_EQ(st.num, 1u);  // the second chain was never popped: resubmitted after restart
  EXPECT_EQ(device_->events.back(), "stop0");
  EXPECT_FALSE(session_->queue(0).started());
  EXPECT_FALSE(session_->StopPending());
}

TEST_F(VdevSessionTest, GetVringBaseGivesUpOnChainsNeverCompleted) {
  Bringup();
  device_->hold = true;
  RingDriver ring = Ring();
  PostPing(ring, 0);
  session_->Kick(0);
  EXPECT_TRUE(Send(Msg(vu::kGetVringBase, vu::VringState{0, 0})).stop_pending);
  // The host's bound passed: answer anyway; the late completion is ignored.
  ParsedReply p = Parse(session_->FinishStop());
  vu::VringState st;
  ASSERT_EQ(p.payload.size(), sizeof(st));
  std::memcpy(&st, p.payload.data(), sizeof(st));
  EXPECT_EQ(st.num, 1u);
  device_->CompleteHeld();
  EXPECT_EQ(ring.used_idx(), 0);
}

TEST_F(VdevSessionTest, MemorySlotsAreLimited) {
  auto dev = std::make_unique<RecordingDevice>();
  SessionOptions options;
  options.max_mem_slots = 2;
  Session s(std::move(dev), &host_, options, "slots");
  s.Start();
  GuestRam extra(0x3000);
  for (uint64_t i = 0; i < 3; ++i) {
    vu::SingleMemRegion add{0, {0x100000 * (i + 1), 0x1000, 0x1000000 * (i + 1), 0x1000 * i}};
    Message m = WithFd(Msg(vu::kAddMemReg, add, true), dup(extra.fd()));
    ParsedReply p = Parse(s.Handle(std::move(m)).reply);
    EXPECT_EQ(p.u64(), i < 2 ? 0u : 1u) << i;
  }
}

// A ring without a kick eventfd has to be polled: the front-end may ask for
// that only where the back-end's operator allows it, or a tenant could keep
// a connection thread spinning for as long as it likes.
TEST_F(VdevSessionTest, NoFdKickIsRefusedUnlessPollingIsAllowed) {
  Negotiate();
  SetMemTable();
  Ok(Msg(vu::kSetVringNum, vu::VringState{1, kRingSize}, true));
  uint64_t ring = kRingGpa + 0x4000;
  vu::VringAddr a{1, 0, ring + kUvaDelta, ring + 0x2000 + kUvaDelta, ring + 0x1000 + kUvaDelta, 0};
  Ok(Msg(vu::kSetVringAddr, a, true));
  Refused(Msg(vu::kSetVringKick, uint64_t{1} | vu::kVringNoFd, true));
  Ok(Msg(vu::kSetVringEnable, vu::VringState{1, 1}, true));
  EXPECT_FALSE(host_.polling);
  EXPECT_TRUE(device_->events.empty());  // the ring never ran
  // Without NEED_REPLY there is no ack to refuse with: the connection ends.
  EXPECT_TRUE(Send(Msg(vu::kSetVringKick, uint64_t{1} | vu::kVringNoFd)).close);
  EXPECT_FALSE(host_.polling);
}

TEST_F(VdevSessionTest, NoFdKickMeansBusyPollWhereAllowed) {
  SessionOptions options;
  options.allow_nofd_kick = true;
  Reopen(options);
  Negotiate();
  SetMemTable();
  Ok(Msg(vu::kSetVringNum, vu::VringState{1, kRingSize}, true));
  uint64_t ring = kRingGpa + 0x4000;
  vu::VringAddr a{1, 0, ring + kUvaDelta, ring + 0x2000 + kUvaDelta, ring + 0x1000 + kUvaDelta, 0};
  Ok(Msg(vu::kSetVringAddr, a, true));
  Ok(Msg(vu::kSetVringKick, uint64_t{1} | vu::kVringNoFd, true));
  Ok(Msg(vu::kSetVringCall, uint64_t{1} | vu::kVringNoFd, true));
  Ok(Msg(vu::kSetVringEnable, vu::VringState{1, 1}, true));
  EXPECT_TRUE(host_.polling);
  EXPECT_TRUE(host_.watched.empty());
  RingDriver r = Ring(ring);
  EXPECT_FALSE(session_->Poll());
  PostPing(r, 0);
  EXPECT_TRUE(session_->Poll());
  EXPECT_EQ(r.used_idx(), 1);
  Ok(Msg(vu::kSetVringEnable, vu::VringState{1, 0}, true));
  EXPECT_FALSE(host_.polling);
}

// A device that expects the driver's next chain soon has the ring polled
// awhile instead of kicked, if the driver polls for its completions too:
// the driver is asked not to kick, Poll serves the ring, and once the
// window passes with nothing new the driver is asked to kick again and the
// host may stop polling, so an idle ring costs nothing.
TEST_F(VdevSessionTest, PollAwhileServesWithoutKicksUntilTheRingGoesQuiet) {
  Bringup();
  RingDriver r = Ring();
  PostPing(r, 0);
  session_->Kick(0);
  ASSERT_EQ(r.used_idx(), 1);
  EXPECT_FALSE(host_.polling);
  const auto window = std::chrono::milliseconds(20);
  // A driver that sleeps until interrupted is not polled for...
  r.set_used_event(r.used_idx());
  device_->ctx_->PollAwhile(0, window);
  EXPECT_FALSE(host_.polling);
  // ...one that polls its used ring (no interrupt wanted) is.
  r.set_used_event(static_cast<uint16_t>(r.used_idx() + 0x8000));
  device_->ctx_->PollAwhile(0, window);
  EXPECT_TRUE(host_.polling);
  EXPECT_FALSE(session_->PollsForGood());  // the host shares its thread
  uint16_t before = r.avail_idx();
  PostPing(r, 2);
  EXPECT_FALSE(r.Kicks(true, before, r.avail_idx()));
  EXPECT_TRUE(session_->Poll());  // served with no kick
  EXPECT_EQ(r.used_idx(), 2);
  EXPECT_EQ(device_->kicks, 2);
  std::this_thread::sleep_for(window + std::chrono::milliseconds(5));
  EXPECT_FALSE(session_->Poll());  // quiet for the window: polling ends
  EXPECT_FALSE(host_.polling);
  before = r.avail_idx();
  PostPing(r, 4);
  EXPECT_TRUE(r.Kicks(true, before, r.avail_idx()));
}

TEST_F(VdevSessionTest, FreezingEndsPollingAwhileAndAsksForKicksAgain) {
  Bringup();
  RingDriver r = Ring();
  r.set_used_event(0x8000);  // the driver polls for its completions
  device_->ctx_->PollAwhile(0, std::chrono::seconds(10));
  ASSERT_TRUE(host_.polling);
  session_->Freeze();
  EXPECT_FALSE(host_.polling);
  session_->Thaw();
  EXPECT_FALSE(host_.polling);
  const uint16_t before = r.avail_idx();
  PostPing(r, 0);
  EXPECT_TRUE(r.Kicks(true, before, r.avail_idx()));
}

// A ring polled for as long as it runs stays polled when a window ends.
TEST_F(VdevSessionTest, PollAwhileLeavesARingPolledForGoodAlone) {
  SessionOptions options;
  options.busy_poll_queues = {0};
  Reopen(options);
  Bringup();
  ASSERT_TRUE(host_.polling);
  EXPECT_TRUE(session_->PollsForGood());
  device_->ctx_->PollAwhile(0, std::chrono::microseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(session_->Poll());
  EXPECT_TRUE(host_.polling);
  RingDriver r = Ring();
  PostPing(r, 0);
  EXPECT_TRUE(session_->Poll());
  EXPECT_EQ(r.used_idx(), 1);
}

TEST_F(VdevSessionTest, ResetDeviceAndStatus) {
  Bringup();
  Ok(Msg(vu::kSetStatus, uint64_t{0x0f}, true));
  EXPECT_EQ(GetU64(vu::kGetStatus), 0x0fu);
  Ok(Msg0(vu::kResetDevice, true));
  EXPECT_EQ(device_->resets, 1);
  EXPECT_EQ(device_->events.back(), "stop0");
  EXPECT_FALSE(session_->queue(0).started());
  EXPECT_EQ(GetU64(vu::kGetStatus), 0u);
  // The connection is still usable: bring the ring up again.
  SetupRing(0, kRingGpa);
  EXPECT_TRUE(session_->queue_running(0));
  Ok(Msg(vu::kSetStatus, uint64_t{0}, true));  // status 0 is a reset too
  EXPECT_EQ(device_->resets, 2);
  EXPECT_FALSE(session_->queue_running(0));
}

TEST_F(VdevSessionTest, ResetOwnerDisablesRingsButKeepsTheConnection) {
  Bringup();
  Ok(Msg0(vu::kResetOwner, true));
  EXPECT_FALSE(session_->queue_running(0));
  EXPECT_NE(session_->Memory(), nullptr);
  EXPECT_EQ(GetU64(vu::kGetQueueNum), 2u);
}

TEST_F(VdevSessionTest, ConfigChangeGoesOverTheBackendChannel) {
  Negotiate();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Ok(WithFd(Msg0(vu::kSetBackendReqFd, true), sv[0]));
  device_->ctx_->NotifyConfigChanged();
  vu::Header h{};
  ASSERT_EQ(recv(sv[1], &h, sizeof(h), MSG_DONTWAIT), static_cast<ssize_t>(sizeof(h)));
  EXPECT_EQ(h.request, vu::kBackendConfigChange);
  EXPECT_EQ(h.flags, vu::kVersion);
  EXPECT_EQ(h.size, 0u);
  close(sv[1]);
  device_->ctx_->NotifyConfigChanged();  // peer gone: logged, no crash, no SIGPIPE
}

TEST_F(VdevSessionTest, DisconnectStopsEverything) {
  Bringup();
  session_->Disconnect();
  EXPECT_EQ(device_->events.back(), "stop0");
  EXPECT_EQ(device_->disconnects, 1);
  EXPECT_TRUE(host_.watched.empty());
  session_->Disconnect();  // idempotent
  EXPECT_EQ(device_->disconnects, 1);
}

}  // namespace
}  // namespace vdev
