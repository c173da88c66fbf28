// Crash recovery of the vhost-user back-end (vdev/crash_recovery.h): the
// vdev-echo-backend program runs with --fd-store under a service manager
// that speaks the sd_notify protocol (hz_test/service_manager.h) and is
// killed with SIGKILL and restarted, as systemd restarts a crashed service.
// The virtio-user front-end never reconnects: its connection, memory and
// rings stay, requests it posts while no process runs are served after the
// restart, and every request completes exactly once (a completion served
// twice would reach the next request's wait with the wrong cookie).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend_harness.h"
#include "echo_client.h"
#include "raw_vhost.h"

namespace vdev::frontend {
namespace {

using vdev::testing::RawConn;
using vdev::testing::RawReply;
using vdev::testing::RestartingBackend;
using vdev::testing::TempSocketPath;

// Runs call, a front-end request that makes the back-end kill itself (it
// creates marker first, --crash-once-on-queue-start), on a thread; restarts
// the back-end once it did, or after 10 s, and returns the call's status.
// *crashed: whether the back-end did kill itself.
Status CallAcrossSelfCrash(RestartingBackend& backend, const std::string& marker,
                           const std::function<Status()>& call, bool* crashed) {
  Status status;
  std::thread calling([&] { status = call(); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (access(marker.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  *crashed = access(marker.c_str(), F_OK) == 0;
  backend.Kill();  // reaps the process that killed itself
  const bool restarted = backend.Restart();
  calling.join();
  return restarted ? status : Status::Disconnected("the back-end did not restart");
}

TEST(CrashRecovery, ARequestPostedWhileNoProcessRunsIsServedAfterTheRestart) {
  const std::string path = TempSocketPath("crash-posted");
  RestartingBackend backend(path, path + ".notify");
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());
  ASSERT_EQ(EchoOnce(dev, 0, 1), "");

  backend.Kill();
  std::string during;
  std::thread posted([&] { during = EchoOnce(dev, 0, 2, 256); });
  std::this_thread::sleep_for(200ms);  // posted and kicked with no back-end
  ASSERT_TRUE(backend.Restart());
  posted.join();
  EXPECT_EQ(during, "");
  EXPECT_EQ(EchoOnce(dev, 1, 3), "");
  EXPECT_TRUE(dev.connected());
  // The store holds the journal and what it names, nothing twice.
  backend.manager().Pause();
  backend.manager().Drain();
  EXPECT_GE(backend.manager().store().size(), 3u);
  backend.manager().Serve();
  EXPECT_TRUE(dev.Stop().ok());
}

TEST(CrashRecovery, TheEchoBackendIsKilledTwentyTimesUnderLoadWithoutLosingARequest) {
  const std::string path = TempSocketPath("crash-load");
  RestartingBackend backend(path, path + ".notify");
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());

  EXPECT_EQ(EchoThroughReplacements(dev, backend.pid(), 20,
                                    [&](std::string* error) -> pid_t {
                                      backend.Kill();  // wherever the request loop stands
                                      if (backend.Restart()) return backend.pid();
                                      *error = "the restart failed";
                                      return -1;
                                    }),
            "");
  EXPECT_TRUE(dev.Stop().ok());
}

// A message the front-end had sent only part of when the back-end crashed:
// the bytes the crashed process had read are in its journal, so the next
// one reads the rest from the socket and answers the whole message.
TEST(CrashRecovery, AMessageHalfReadByTheCrashedProcessIsAnsweredByTheNext) {
  const std::string path = TempSocketPath("crash-half");
  RestartingBackend backend(path, path + ".notify");
  ASSERT_TRUE(backend.ok());
  RawConn raw;
  for (int i = 0; i < 200 && !raw.Connect(path); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(raw.fd(), 0);
  uint64_t features = 0;
  ASSERT_TRUE(raw.GetU64(vu::kGetProtocolFeatures, &features));

  vu::Header h{};
  h.request = vu::kGetProtocolFeatures;
  h.flags = vu::kVersion;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&h);
  const size_t half = sizeof(h) / 2;
  ASSERT_TRUE(raw.SendBytes(bytes, half));
  std::this_thread::sleep_for(200ms);  // read and journaled, not yet whole
  backend.Kill();
  ASSERT_TRUE(backend.Restart());
  ASSERT_TRUE(raw.SendBytes(bytes + half, sizeof(h) - half));
  RawReply reply;
  ASSERT_EQ(raw.Recv(&reply), vdev::testing::Got::kReply);
  EXPECT_EQ(reply.hdr.request, vu::kGetProtocolFeatures);
  EXPECT_EQ(reply.u64(), features);
  // And the stream is in step: the next message is answered too.
  uint64_t again = 0;
  EXPECT_TRUE(raw.GetU64(vu::kGetProtocolFeatures, &again));
  EXPECT_EQ(again, features);
}

// A crash in the middle of a vhost-user message: the echo back-end kills
// itself while SET_VRING_KICK starts the ring. The message is in the
// journal, so the next process serves it (the ring starts there) before it
// reads on; the front-end never notices.
TEST(CrashRecovery, AMessageTheCrashedProcessWasServingIsServedByTheNext) {
  const std::string path = TempSocketPath("crash-mid");
  const std::string marker = path + ".crashed";
  unlink(marker.c_str());
  RestartingBackend backend(path, path + ".notify", {"--crash-once-on-queue-start", marker});
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  // One attempt: a front-end that had to connect again would have lost the
  // device (QEMU's would).
  for (int i = 0; i < 200 && access(path.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(10ms);
  bool crashed = false;
  const Status connected = CallAcrossSelfCrash(
      backend, marker, [&] { return dev.Connect(path, DefaultOptions()); }, &crashed);
  unlink(marker.c_str());
  ASSERT_TRUE(crashed) << "the back-end never started a queue";
  ASSERT_TRUE(connected.ok()) << connected.ToString();
  EXPECT_EQ(EchoOnce(dev, 0, 1), "");
  EXPECT_TRUE(dev.connected());
  EXPECT_TRUE(dev.Stop().ok());
}

// A crash after the message that restarted a ring had served from it: the
// echo back-end serves the request posted while the ring was stopped inside
// SET_VRING_KICK, then kills itself. The next process serves that message
// again, and the ring goes on where the crashed one stood (its journal),
// not at the front-end's base: the request completes once.
TEST(CrashRecovery, ARequestServedInsideTheMessageThatStartedItsRingIsNotServedAgain) {
  const std::string path = TempSocketPath("crash-served");
  const std::string marker = path + ".crashed";
  // Armed only once the ring is restarted: the first start must not crash.
  ASSERT_TRUE(std::ofstream(marker).good());
  RestartingBackend backend(path, path + ".notify", {"--crash-once-on-queue-start", marker});
  ASSERT_TRUE(backend.ok());
  VirtioUser dev;
  ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());
  ASSERT_EQ(EchoOnce(dev, 0, 1), "");
  uint16_t base = 0;
  ASSERT_TRUE(dev.StopQueue(0, &base).ok());
  ASSERT_EQ(base, 1);

  constexpr size_t kLen = 64;
  uint64_t in_gpa = 0, out_gpa = 0;
  auto* in = static_cast<uint8_t*>(dev.Allocate(kLen, &in_gpa));
  auto* out = static_cast<uint8_t*>(dev.Allocate(kLen, &out_gpa));
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  const std::vector<uint8_t> pattern = Pattern(2, kLen);
  std::memcpy(in, pattern.data(), kLen);
  Buffer r{in_gpa, kLen}, w{out_gpa, kLen};
  ASSERT_TRUE(dev.AddChain(0, {&r, 1}, {&w, 1}, /*cookie=*/2).ok());
  ASSERT_TRUE(dev.Kick(0).ok());  // made available; the stopped ring is not served
  unlink(marker.c_str());

  bool crashed = false;
  const Status started = CallAcrossSelfCrash(
      backend, marker, [&] { return dev.StartQueue(0, base); }, &crashed);
  unlink(marker.c_str());
  ASSERT_TRUE(crashed) << "the back-end never restarted the ring";
  ASSERT_TRUE(started.ok()) << started.ToString();

  Completion c[4] = {};
  size_t n = 0;
  Status waited = dev.WaitUsed(0, kWait, c, 4, &n);
  ASSERT_TRUE(waited.ok()) << waited.ToString();
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(c[0].cookie, 2u);
  EXPECT_EQ(c[0].len, kLen);
  EXPECT_EQ(std::memcmp(out, pattern.data(), kLen), 0);
  // Served twice, a second completion of the same chain would be here, or
  // would answer the next request.
  std::this_thread::sleep_for(100ms);
  Status polled;
  EXPECT_EQ(dev.PollUsed(0, c, 4, &polled), 0u);
  EXPECT_TRUE(polled.ok()) << polled.ToString();
  EXPECT_EQ(EchoOnce(dev, 0, 3), "");
  dev.Free(in);
  dev.Free(out);
  EXPECT_TRUE(dev.Stop().ok());
}

TEST(CrashRecovery, AServiceStoppedForGoodLeavesNothingInTheStore) {
  const std::string path = TempSocketPath("crash-stopped");
  RestartingBackend backend(path, path + ".notify");
  ASSERT_TRUE(backend.ok());
  {
    VirtioUser dev;
    ASSERT_TRUE(ConnectRetry(dev, path, DefaultOptions()).ok());
    ASSERT_EQ(EchoOnce(dev, 0, 1), "");
    EXPECT_EQ(backend.Stop(), 0);
  }
  backend.manager().Pause();
  backend.manager().Drain();
  EXPECT_TRUE(backend.manager().store().empty())
      << backend.manager().store().size() << " descriptors left, e.g. "
      << backend.manager().store().front().first;
}

}  // namespace
}  // namespace vdev::frontend
