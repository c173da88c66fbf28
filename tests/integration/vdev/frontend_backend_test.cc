// The virtio-user front-end against the real back-end (vdev::Server and the
// echo device), in this process and in a child process.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend_harness.h"
#include "echo_client.h"
#include "echo_factory.h"
#include "vdev/frontend/virtio_user.h"

namespace vdev::frontend {
namespace {

using namespace std::chrono_literals;
using vdev::testing::ChildBackend;
using vdev::testing::InProcessBackend;
using vdev::testing::TempSocketPath;

// Waits for the completions of a batch whose cookies are 0..n-1; each must
// come once. Returns them in arrival order.
::testing::AssertionResult CollectBatch(VirtioUser& dev, uint16_t q, size_t n,
                                        std::vector<Completion>* done) {
  std::vector<bool> seen(n);
  done->clear();
  while (done->size() < n) {
    Completion c[64];
    size_t got = 0;
    Status s = dev.WaitUsed(q, kWait, c, 64, &got);
    if (!s.ok()) return ::testing::AssertionFailure() << s.ToString();
    for (size_t k = 0; k < got; ++k) {
      if (c[k].cookie >= n || seen[c[k].cookie]) {
        return ::testing::AssertionFailure() << "unexpected cookie " << c[k].cookie;
      }
      seen[c[k].cookie] = true;
      done->push_back(c[k]);
    }
  }
  return ::testing::AssertionSuccess();
}

class VdevFrontendBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempSocketPath("it");
    backend_ = std::make_unique<InProcessBackend>(std::vector<std::string>{path_});
    ASSERT_TRUE(backend_->ok()) << backend_->error();
  }
  void TearDown() override {
    dev_.Disconnect();
    backend_.reset();
  }

  std::string path_;
  std::unique_ptr<InProcessBackend> backend_;
  VirtioUser dev_;
};

TEST_F(VdevFrontendBackend, HandshakeNegotiatesFeaturesQueuesAndProtocol) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  EXPECT_TRUE(dev_.features() & vu::kFVersion1);
  EXPECT_TRUE(dev_.features() & vu::kFProtocolFeatures);
  EXPECT_TRUE(dev_.features() & vu::kFRingEventIdx);
  EXPECT_TRUE(dev_.features() & vu::kFRingIndirectDesc);
  EXPECT_TRUE(dev_.has_protocol_feature(vu::kPfReplyAck));
  EXPECT_TRUE(dev_.has_protocol_feature(vu::kPfMq));
  EXPECT_TRUE(dev_.has_protocol_feature(vu::kPfConfig));
  EXPECT_TRUE(dev_.has_protocol_feature(vu::kPfConfigureMemSlots));
  const auto device = vdev::testing::MakeEchoFactory()("x");
  EXPECT_EQ(dev_.num_queues(), device->NumQueues());
  EXPECT_EQ(dev_.max_queues(), device->NumQueues());
  EXPECT_GE(dev_.max_mem_slots(), 8u);
}

TEST_F(VdevFrontendBackend, ConfigSpaceMatchesTheDevice) {
  const auto device = vdev::testing::MakeEchoFactory()("x");
  const std::vector<uint8_t> expected = device->ConfigSpace();
  ASSERT_FALSE(expected.empty());
  VirtioUser::Options o = DefaultOptions();
  o.config_size = static_cast<uint32_t>(expected.size());
  ASSERT_TRUE(dev_.Connect(path_, o).ok());
  EXPECT_EQ(dev_.config(), expected);
  if (expected.size() >= 8) {
    uint8_t part[4];
    ASSERT_TRUE(dev_.ReadConfig(4, 4, part).ok());
    EXPECT_EQ(std::memcmp(part, expected.data() + 4, 4), 0);
  }
  // A range past the device's config space is refused, and the connection lives on.
  std::vector<uint8_t> big(256);
  if (expected.size() < 256) {
    EXPECT_FALSE(dev_.ReadConfig(0, 256, big.data()).ok());
  }
  EXPECT_EQ(EchoOnce(dev_, 0, 1), "");
}

TEST_F(VdevFrontendBackend, EchoRoundTripsOnEveryQueue) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  ASSERT_GE(dev_.num_queues(), 2);
  for (uint16_t q = 0; q < dev_.num_queues(); ++q) {
    for (uint32_t i = 0; i < 100; ++i) {
      ASSERT_EQ(EchoOnce(dev_, q, q * 1000 + i, 1 + (i * 37) % 600), "") << "queue " << q;
    }
  }
  EXPECT_EQ(dev_.ring(0).in_flight(), 0);
  EXPECT_EQ(dev_.ring(0).free_descriptors(), 64);
}

TEST_F(VdevFrontendBackend, HostPointerBuffersWork) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  auto* in = static_cast<char*>(dev_.Allocate(32));
  auto* out = static_cast<char*>(dev_.Allocate(32));
  std::memcpy(in, "pointer-addressed request bytes", 32);
  HostBuffer r{in, 32}, w{out, 32};
  ASSERT_TRUE(dev_.AddChain(0, {&r, 1}, {&w, 1}, 5).ok());
  ASSERT_TRUE(dev_.Kick(0).ok());
  Completion c;
  size_t n;
  ASSERT_TRUE(dev_.WaitUsed(0, kWait, &c, 1, &n).ok());
  EXPECT_EQ(std::memcmp(in, out, 32), 0);
  // A pointer outside guest memory is refused before it reaches the ring.
  char local[8];
  HostBuffer bad{local, 8};
  EXPECT_EQ(dev_.AddChain(0, {&bad, 1}, {&w, 1}).code(), Status::Code::kInvalidArgument);
}

TEST_F(VdevFrontendBackend, BatchOf32WithOneKick) {
  VirtioUser::Options o = DefaultOptions();
  ASSERT_TRUE(dev_.Connect(path_, o).ok());
  constexpr int kBatch = 32;
  for (int round = 0; round < 20; ++round) {
    std::vector<uint8_t*> ins(kBatch), outs(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      uint64_t ig, og;
      ins[i] = static_cast<uint8_t*>(dev_.Allocate(48, &ig));
      outs[i] = static_cast<uint8_t*>(dev_.Allocate(48, &og));
      auto p = Pattern(round * kBatch + i, 48);
      std::memcpy(ins[i], p.data(), 48);
      Buffer r{ig, 48}, w{og, 48};
      ASSERT_TRUE(dev_.AddChain(1, {&r, 1}, {&w, 1}, i).ok());
    }
    ASSERT_TRUE(dev_.Kick(1).ok());
    std::vector<Completion> done;
    ASSERT_TRUE(CollectBatch(dev_, 1, kBatch, &done));
    for (const Completion& c : done) EXPECT_EQ(c.len, 48u);
    for (int i = 0; i < kBatch; ++i) {
      EXPECT_EQ(std::memcmp(ins[i], outs[i], 48), 0) << i;
      dev_.Free(ins[i]);
      dev_.Free(outs[i]);
    }
  }
}

// The same through AddChains: one call posts the batch, with buffers of
// different sizes so that every completion's length is checked.
TEST_F(VdevFrontendBackend, BatchOf32ThroughAddChains) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  constexpr size_t kBatch = 32;
  std::vector<uint8_t*> ins(kBatch), outs(kBatch);
  std::vector<Buffer> r(kBatch), w(kBatch);
  std::vector<ChainBuffers> chains(kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    const uint32_t len = static_cast<uint32_t>(16 + i);
    ins[i] = static_cast<uint8_t*>(dev_.Allocate(len, &r[i].gpa));
    outs[i] = static_cast<uint8_t*>(dev_.Allocate(len, &w[i].gpa));
    r[i].len = w[i].len = len;
    chains[i] = {{&r[i], 1}, {&w[i], 1}, i};
  }
  for (int round = 0; round < 20; ++round) {
    for (size_t i = 0; i < kBatch; ++i) {
      auto p = Pattern(static_cast<uint32_t>(round * kBatch + i), r[i].len);
      std::memcpy(ins[i], p.data(), r[i].len);
    }
    size_t added = 0;
    ASSERT_TRUE(dev_.AddChains(1, chains, &added).ok());
    ASSERT_EQ(added, kBatch);
    ASSERT_TRUE(dev_.Kick(1).ok());
    std::vector<Completion> done;
    ASSERT_TRUE(CollectBatch(dev_, 1, kBatch, &done));
    for (const Completion& c : done) EXPECT_EQ(c.len, r[c.cookie].len);
    for (size_t i = 0; i < kBatch; ++i) {
      EXPECT_EQ(std::memcmp(ins[i], outs[i], r[i].len), 0) << round << " " << i;
    }
  }
  size_t added = 1;
  EXPECT_EQ(dev_.AddChains(99, chains, &added).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(added, 0u);
}

TEST_F(VdevFrontendBackend, IndirectScatterGatherChains) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  ASSERT_TRUE(dev_.features() & vu::kFRingIndirectDesc);
  // 5 readable pieces of different sizes, 3 writable pieces; the echo must
  // gather and scatter across all of them.
  const uint32_t rlen[] = {7, 64, 1, 200, 28};
  const uint32_t wlen[] = {100, 3, 197};
  const size_t total = 300;
  auto pattern = Pattern(77, total);
  std::vector<Buffer> rd, wr;
  std::vector<uint8_t*> wp;
  size_t off = 0;
  for (uint32_t l : rlen) {
    uint64_t g;
    auto* p = static_cast<uint8_t*>(dev_.Allocate(l, &g));
    std::memcpy(p, pattern.data() + off, l);
    off += l;
    rd.push_back({g, l});
  }
  for (uint32_t l : wlen) {
    uint64_t g;
    wp.push_back(static_cast<uint8_t*>(dev_.Allocate(l, &g)));
    wr.push_back({g, l});
  }
  const uint16_t free_before = dev_.ring(2).free_descriptors();
  uint16_t head;
  ASSERT_TRUE(dev_.AddChain(2, rd, wr, 9, &head, /*indirect=*/true).ok());
  EXPECT_EQ(dev_.ring(2).free_descriptors(), free_before - 1);
  ASSERT_TRUE(dev_.Kick(2).ok());
  Completion c;
  size_t n;
  ASSERT_TRUE(dev_.WaitUsed(2, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.len, total);
  std::vector<uint8_t> got;
  for (size_t i = 0; i < wp.size(); ++i) got.insert(got.end(), wp[i], wp[i] + wlen[i]);
  EXPECT_EQ(got, pattern);
  // Mixed with direct chains on the same ring.
  for (uint32_t i = 0; i < 50; ++i) ASSERT_EQ(EchoOnce(dev_, 2, i, 32, i % 2 == 0), "");
}

// Notification suppression must never lose a wake-up: many blocking round
// trips with and without EVENT_IDX.
TEST_F(VdevFrontendBackend, BlockingRoundTripsWithAndWithoutEventIdx) {
  for (bool event_idx : {true, false}) {
    VirtioUser dev;
    VirtioUser::Options o = DefaultOptions();
    o.event_idx = event_idx;
    ASSERT_TRUE(ConnectRetry(dev, path_, o).ok());
    EXPECT_EQ((dev.features() & vu::kFRingEventIdx) != 0, event_idx);
    for (uint32_t i = 0; i < 500; ++i) ASSERT_EQ(EchoOnce(dev, 0, i, 16), "") << i;
    dev.Disconnect();
  }
}

// A wait that spins first turns the device's notifications off and back on
// before it sleeps: whether the completion comes during the spin or after
// it, none is lost, with and without EVENT_IDX, and waits that do not spin
// in between still wake.
TEST_F(VdevFrontendBackend, SpinningWaitsLoseNoWakeUp) {
  const std::chrono::nanoseconds spins[] = {0ns, 1us, 20us, 2ms};
  for (bool event_idx : {true, false}) {
    VirtioUser dev;
    VirtioUser::Options o = DefaultOptions();
    o.event_idx = event_idx;
    ASSERT_TRUE(ConnectRetry(dev, path_, o).ok());
    for (uint32_t i = 0; i < 400; ++i) {
      ASSERT_EQ(EchoOnce(dev, i % 2, i, 16, false, spins[(i / 3) % 4]), "") << i;
    }
    dev.Disconnect();
  }
}

TEST_F(VdevFrontendBackend, BusyPollModeNeedsNoEventfds) {
  // A back-end polls rings without kick eventfds only where allowed.
  backend_.reset();
  ServerOptions options;
  options.session.allow_nofd_kick = true;
  backend_ = std::make_unique<InProcessBackend>(std::vector<std::string>{path_}, options);
  ASSERT_TRUE(backend_->ok()) << backend_->error();
  VirtioUser::Options o = DefaultOptions();
  o.busy_poll = true;
  ASSERT_TRUE(dev_.Connect(path_, o).ok());
  EXPECT_LT(dev_.kick_fd(0), 0);
  EXPECT_LT(dev_.call_fd(0), 0);
  for (uint32_t i = 0; i < 300; ++i) ASSERT_EQ(EchoOnce(dev_, i % 2, i, 64), "");
}

TEST_F(VdevFrontendBackend, StopAndRestartRingResumesAtTheReportedBase) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  for (uint32_t i = 0; i < 10; ++i) ASSERT_EQ(EchoOnce(dev_, 0, i), "");
  uint16_t base = 0;
  ASSERT_TRUE(dev_.StopQueue(0, &base).ok());
  EXPECT_EQ(base, 10);
  // GET_VRING_BASE twice: the ring is already stopped; the base is unchanged.
  uint16_t again = 0;
  ASSERT_TRUE(dev_.StopQueue(0, &again).ok());
  EXPECT_EQ(again, 10);

  // A chain made available while stopped is not processed...
  uint64_t ig, og;
  auto* in = static_cast<uint8_t*>(dev_.Allocate(16, &ig));
  auto* out = static_cast<uint8_t*>(dev_.Allocate(16, &og));
  std::memcpy(in, "while-stopped-16", 16);
  Buffer r{ig, 16}, w{og, 16};
  ASSERT_TRUE(dev_.AddChain(0, {&r, 1}, {&w, 1}, 99).ok());
  ASSERT_TRUE(dev_.Kick(0).ok());
  std::this_thread::sleep_for(100ms);
  Completion c;
  EXPECT_EQ(dev_.PollUsed(0, &c, 1), 0u);
  // ...other queues keep working...
  EXPECT_EQ(EchoOnce(dev_, 1, 5), "");
  // ...and after restarting at the base it is.
  ASSERT_TRUE(dev_.StartQueue(0, base).ok());
  ASSERT_TRUE(dev_.Kick(0).ok());  // nothing new published: Kick may not notify
  size_t n = 0;
  Status s = dev_.WaitUsed(0, 300ms, &c, 1, &n);
  if (!s.ok()) {
    // The restarted ring waits for a kick; give it one explicitly.
    const uint64_t one = 1;
    ASSERT_EQ(write(dev_.kick_fd(0), &one, 8), 8);
    ASSERT_TRUE(dev_.WaitUsed(0, kWait, &c, 1, &n).ok());
  }
  EXPECT_EQ(c.cookie, 99u);
  EXPECT_EQ(std::memcmp(out, "while-stopped-16", 16), 0);
  for (uint32_t i = 0; i < 10; ++i) ASSERT_EQ(EchoOnce(dev_, 0, 100 + i), "");
  dev_.Free(in);
  dev_.Free(out);
}

TEST_F(VdevFrontendBackend, MemoryHotAddAndRemoveWhileAQueueRuns) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  ASSERT_TRUE(dev_.has_protocol_feature(vu::kPfConfigureMemSlots));
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::string runner_error;
  std::thread runner([&] {
    for (uint32_t i = 0; !stop.load(); ++i) {
      std::string e = EchoOnce(dev_, 0, i, 128);
      if (!e.empty()) {
        runner_error = e;
        return;
      }
      done.fetch_add(1);
    }
  });

  // A new region from the front-end's own memfd; buffers placed in it by hand.
  RegionInfo extra;
  ASSERT_TRUE(dev_.AddMemory(1 << 20, /*allocatable=*/false, &extra).ok());
  std::memcpy(extra.host, "in-the-new-region", 17);
  Buffer r{extra.guest_phys_addr, 17}, w{extra.guest_phys_addr + 4096, 17};
  ASSERT_TRUE(dev_.AddChain(1, {&r, 1}, {&w, 1}, 1).ok());
  ASSERT_TRUE(dev_.Kick(1).ok());
  Completion c;
  size_t n;
  ASSERT_TRUE(dev_.WaitUsed(1, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.len, 17u);
  EXPECT_EQ(std::memcmp(extra.host + 4096, "in-the-new-region", 17), 0);

  // A caller-owned memfd arena.
  int arena = memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(arena, 0);
  ASSERT_EQ(ftruncate(arena, 2 << 20), 0);
  RegionInfo adopted;
  ASSERT_TRUE(dev_.AddMemoryFd(arena, 1 << 20, 1 << 20, &adopted).ok());
  std::memcpy(adopted.host, "arena-bytes", 11);
  Buffer ar{adopted.guest_phys_addr, 11}, aw{adopted.guest_phys_addr + 64, 11};
  ASSERT_TRUE(dev_.AddChain(1, {&ar, 1}, {&aw, 1}, 2).ok());
  ASSERT_TRUE(dev_.Kick(1).ok());
  ASSERT_TRUE(dev_.WaitUsed(1, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.len, 11u);
  EXPECT_EQ(std::memcmp(adopted.host + 64, "arena-bytes", 11), 0);
  close(arena);

  // Remove the first extra region; a chain pointing into it is now outside
  // guest memory and is completed with length 0 instead of being served.
  const uint64_t gone = extra.guest_phys_addr;
  ASSERT_TRUE(dev_.RemoveMemory(gone).ok());
  uint64_t og;
  void* out = dev_.Allocate(17, &og);
  Buffer stale{gone, 17}, ok_out{og, 17};
  ASSERT_TRUE(dev_.AddChain(1, {&stale, 1}, {&ok_out, 1}, 3).ok());
  ASSERT_TRUE(dev_.Kick(1).ok());
  ASSERT_TRUE(dev_.WaitUsed(1, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.cookie, 3u);
  EXPECT_EQ(c.len, 0u);
  dev_.Free(out);
  // The adopted region still works after its neighbour went.
  ASSERT_TRUE(dev_.AddChain(1, {&ar, 1}, {&aw, 1}, 4).ok());
  ASSERT_TRUE(dev_.Kick(1).ok());
  ASSERT_TRUE(dev_.WaitUsed(1, kWait, &c, 1, &n).ok());
  EXPECT_EQ(c.len, 11u);
  ASSERT_TRUE(dev_.RemoveMemory(adopted.guest_phys_addr).ok());
  // The region holding the rings cannot go, and asking changes nothing.
  const uint64_t ring_region = dev_.memory().Regions().front().guest_phys_addr;
  EXPECT_EQ(dev_.RemoveMemory(ring_region).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(dev_.RemoveMemory(ring_region + 4096).code(), Status::Code::kInvalidArgument);

  while (done.load() < 50 && runner_error.empty()) std::this_thread::sleep_for(1ms);
  stop = true;
  runner.join();
  EXPECT_EQ(runner_error, "");
  EXPECT_GE(done.load(), 50);
}

TEST_F(VdevFrontendBackend, ReconnectAfterTheFrontEndDisconnects) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  ASSERT_EQ(EchoOnce(dev_, 0, 1), "");
  dev_.Disconnect();
  // The same object, same guest memory, a new connection.
  ASSERT_TRUE(ConnectRetry(dev_, path_, DefaultOptions()).ok());
  ASSERT_EQ(EchoOnce(dev_, 0, 2), "");
  ASSERT_TRUE(dev_.Stop().ok());
  // A brand-new front-end.
  VirtioUser other;
  ASSERT_TRUE(ConnectRetry(other, path_, DefaultOptions()).ok());
  for (uint32_t i = 0; i < 20; ++i) ASSERT_EQ(EchoOnce(other, i % 4, i), "");
  EXPECT_GE(backend_->server().connections(), 3u);
}

TEST_F(VdevFrontendBackend, SecondFrontEndOnABusySocketGetsACleanError) {
  ASSERT_TRUE(dev_.Connect(path_, DefaultOptions()).ok());
  VirtioUser intruder;
  VirtioUser::Options o = DefaultOptions();
  o.reply_timeout = 1s;
  Status s = intruder.Connect(path_, o);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(intruder.connected());
  EXPECT_EQ(EchoOnce(dev_, 0, 3), "");  // the first one is unaffected
}

// A front-end that connects while the back-end is still tearing down the
// previous connection (a tool run twice in a row, a VM reconnecting) waits for
// the hand-over instead of being refused: no retry loop is needed.
TEST_F(VdevFrontendBackend, ReconnectingRightAfterADisconnectIsHandedTheSocket) {
  for (int i = 0; i < 20; ++i) {
    VirtioUser dev;
    ASSERT_TRUE(dev.Connect(path_, DefaultOptions()).ok()) << "round " << i;
    ASSERT_EQ(EchoOnce(dev, 0, static_cast<uint32_t>(i)), "") << "round " << i;
    dev.Disconnect();
  }
}

TEST(VdevFrontendTwoSockets, TwoConnectionsAtOnce) {
  const std::string a = TempSocketPath("two-a"), b = TempSocketPath("two-b");
  InProcessBackend backend({a, b});
  ASSERT_TRUE(backend.ok()) << backend.error();
  std::string err_a, err_b;
  auto run = [](const std::string& path, std::string* err) {
    VirtioUser dev;
    Status s = dev.Connect(path, DefaultOptions());
    if (!s.ok()) {
      *err = s.ToString();
      return;
    }
    for (uint32_t i = 0; i < 300 && err->empty(); ++i) *err = EchoOnce(dev, i % 4, i, 100);
  };
  std::thread ta(run, a, &err_a), tb(run, b, &err_b);
  ta.join();
  tb.join();
  EXPECT_EQ(err_a, "");
  EXPECT_EQ(err_b, "");
}

TEST(VdevFrontendChildProcess, EchoAgainstABackEndInAnotherProcess) {
  const std::string path = TempSocketPath("child");
  ChildBackend backend(path);
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  VirtioUser::Options o = DefaultOptions();
  o.config_size = 16;
  ASSERT_TRUE(dev.Connect(path, o).ok());
  for (uint16_t q = 0; q < dev.num_queues(); ++q) {
    for (uint32_t i = 0; i < 50; ++i) ASSERT_EQ(EchoOnce(dev, q, i, 256, i % 3 == 0), "");
  }
  // The back-end dies: a waiter learns it at once, later calls fail cleanly.
  backend.Kill();
  uint64_t ig, og;
  dev.Allocate(8, &ig);
  dev.Allocate(8, &og);
  Buffer r{ig, 8}, w{og, 8};
  ASSERT_TRUE(dev.AddChain(0, {&r, 1}, {&w, 1}).ok());
  (void)dev.Kick(0);
  Completion c;
  size_t n;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(dev.WaitUsed(0, 20s, &c, 1, &n).code(), Status::Code::kDisconnected);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  uint8_t cfg[4];
  EXPECT_FALSE(dev.ReadConfig(0, 4, cfg).ok());
  EXPECT_FALSE(dev.connected());
}

TEST(VdevFrontendChildProcess, BusyPollBothSides) {
  const std::string path = TempSocketPath("child-poll");
  ChildBackend backend(path, {"--busy-poll"});
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  VirtioUser::Options o = DefaultOptions();
  o.busy_poll = true;
  ASSERT_TRUE(dev.Connect(path, o).ok());
  for (uint32_t i = 0; i < 200; ++i) ASSERT_EQ(EchoOnce(dev, 0, i, 64), "");
  ASSERT_TRUE(dev.Stop().ok());
  // A clean exit (and, in the sanitizer build, no leak in the back-end).
  EXPECT_EQ(backend.Stop(), 0);
}

}  // namespace
}  // namespace vdev::frontend
