// SIGTERM: the daemon drains and exits within its shutdown timeout, whatever
// a tenant holds and even when a connection thread never answers.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

// Only a hang detector: a daemon that has not exited by then never will.
constexpr int kHangGuardMs = 60000;

std::string WriteConfig(const ServiceProcess& svc, const std::string& text) {
  const std::string path = svc.dir() + "/test.toml";
  std::ofstream(path) << text;
  return path;
}

// The socket of a VM bound to `tenant` that is served by connection thread
// `thread` (empty if none).
std::string SocketOnThread(ServiceProcess& svc, const std::string& tenant, size_t thread) {
  nlohmann::json r = svc.Control({{"cmd", "vm.list"}});
  for (const nlohmann::json& vm : r.value("result", nlohmann::json::array())) {
    if (vm.value("tenant", "") == tenant && vm.value("thread", size_t{99}) == thread) {
      return vm.value("socket", "");
    }
  }
  return {};
}

// A handler stuck in a system call keeps its connection thread forever; it
// cannot be joined. SIGTERM must still end the process, naming the thread,
// rather than wait for the supervisor's SIGKILL.
TEST(ServiceShutdownTest, AStuckConnectionThreadDoesNotHoldTheExit) {
  ServiceProcess svc;
  const std::vector<std::string> args = {
      "--worker-threads", "2", "--config",
      WriteConfig(svc, "[shutdown]\ntimeout_ms = 500\n[scheduler]\nenabled = false\n")};
  ASSERT_TRUE(svc.Start(args));
  ASSERT_EQ(svc.TenantWithVms("a", 1).size(), 1u);
  ASSERT_EQ(svc.TenantWithVms("b", 1).size(), 1u);
  ASSERT_EQ(svc.Terminate(), 0);

  // The same state, now with connection thread 0 held from the start.
  svc.set_binary(HZ_HARMONAIZED_STUCK_THREAD_PATH);
  svc.CaptureLog();
  ASSERT_TRUE(svc.Start(args));
  std::string free_socket = SocketOnThread(svc, "a", 1);
  if (free_socket.empty()) free_socket = SocketOnThread(svc, "b", 1);
  ASSERT_FALSE(free_socket.empty());
  // The other thread serves its VM meanwhile, and is drained at the stop.
  HzClient c;
  ASSERT_TRUE(c.Connect(free_socket));
  ASSERT_EQ(c.Hello(), HZ_S_OK);

  int rc = svc.Terminate(kHangGuardMs);
  ASSERT_NE(rc, -1) << "the daemon did not exit after SIGTERM\n" << svc.Log();
  EXPECT_EQ(rc, 3);  // main.cc: a stop that left a thread stuck
  EXPECT_NE(svc.Log().find("event=shutdown_thread_stuck thread=0"), std::string::npos) << svc.Log();
}

}  // namespace
}  // namespace hz::testing
