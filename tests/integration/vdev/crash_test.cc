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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend_harness.h"
#include "echo_client.h"

namespace vdev::frontend {
namespace {

using vdev::testing::RestartingBackend;
using vdev::testing::TempSocketPath;

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

  EchoLoad load(dev);
  std::vector<pid_t> pids = {backend.pid()};
  for (int round = 0; round < 20 && !load.failed(); ++round) {
    load.WaitFor(20);
    backend.Kill();  // wherever the request loop stands
    ASSERT_TRUE(backend.Restart()) << "restart " << round;
    pids.push_back(backend.pid());
  }
  load.WaitFor(20);
  EXPECT_EQ(load.Stop(), "");
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(std::unique(pids.begin(), pids.end()), pids.end());
  EXPECT_TRUE(dev.connected());
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
