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

// Tenants a and b with a VM each, one per connection thread, then the
// daemon again on that state with connection thread 0 held from the start
// (a handler stuck in a system call); its log is captured.
void StartWithThreadZeroStuck(ServiceProcess& svc) {
  const std::vector<std::string> args = {
      "--worker-threads", "2", "--config",
      svc.WriteConfig("[shutdown]\ntimeout_ms = 500\n[scheduler]\nenabled = false\n")};
  ASSERT_TRUE(svc.Start(args));
  ASSERT_EQ(svc.TenantWithVms("a", 1).size(), 1u);
  ASSERT_EQ(svc.TenantWithVms("b", 1).size(), 1u);
  ASSERT_EQ(svc.Terminate(), 0);
  svc.set_binary(HZ_HARMONAIZED_STUCK_THREAD_PATH);
  svc.CaptureLog();
  ASSERT_TRUE(svc.Start(args));
}

// A handler stuck in a system call keeps its connection thread forever; it
// cannot be joined. SIGTERM must still end the process, naming the thread,
// rather than wait for the supervisor's SIGKILL.
TEST(ServiceShutdownTest, AStuckConnectionThreadDoesNotHoldTheExit) {
  ServiceProcess svc;
  ASSERT_NO_FATAL_FAILURE(StartWithThreadZeroStuck(svc));
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

// The operator's vm.bind and vm.unbind run on the VM's connection thread;
// one that never answers makes them fail or finish late within the bound,
// never hang the control socket.
TEST(ServiceShutdownTest, BindAndUnbindOnAStuckConnectionThreadAnswerWithinTheBound) {
  ServiceProcess svc;
  ASSERT_NO_FATAL_FAILURE(StartWithThreadZeroStuck(svc));
  const std::string held_tenant = SocketOnThread(svc, "a", 0).empty() ? "b" : "a";
  const std::string held_socket = SocketOnThread(svc, held_tenant, 0);
  ASSERT_FALSE(held_socket.empty());

  nlohmann::json bind = svc.Control(
      {{"cmd", "vm.bind"}, {"tenant", held_tenant}, {"socket", svc.dir() + "/late.sock"}});
  EXPECT_FALSE(bind.value("ok", true)) << bind.dump();
  EXPECT_NE(bind.value("error", "").find("did not answer"), std::string::npos) << bind.dump();
  nlohmann::json unbind = svc.Control({{"cmd", "vm.unbind"}, {"socket", held_socket}});
  EXPECT_TRUE(unbind.value("ok", false)) << unbind.dump();

  // The control socket still serves, and so does the other thread.
  nlohmann::json list = svc.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(list.value("ok", false)) << list.dump();
  EXPECT_EQ(list["result"].size(), 1u) << list.dump();
  const std::string free_tenant = held_tenant == "a" ? "b" : "a";
  HzClient c;
  ASSERT_TRUE(c.Connect(SocketOnThread(svc, free_tenant, 1)));
  EXPECT_EQ(c.Hello(), HZ_S_OK);

  EXPECT_EQ(svc.Terminate(kHangGuardMs), 3);
  EXPECT_NE(svc.Log().find("event=vm_unbind_late"), std::string::npos) << svc.Log();
}

constexpr uint64_t kFeatures =
    (1ull << HZ_F_CHECKPOINT) | (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_EVENTS);
constexpr uint64_t kShare = 8ull << 20;  // tenant_staging_bytes and quiesce_bytes below

Reply SetPolicy(HzClient& c, uint32_t stream, uint32_t flags, uint32_t stall_budget_ms) {
  hz_ckpt_policy_args p{};
  p.stream = stream;
  p.flags = flags;
  p.retention = 1;
  p.tier = HZ_TIER_HOST_MEMORY;
  p.stall_budget_ms = stall_budget_ms;
  return c.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_POLICY, p);
}

// Registers `len` bytes of b after its quiescence word (at offset 0).
Reply Quiesce(HzClient& c, const GuestBuffer& b, uint32_t stream, uint64_t len) {
  hz_ckpt_quiesce_args a{};
  a.stream = stream;
  a.word = SliceOf(b, 0, sizeof(hz_quiesce_word));
  a.num_slices = 1;
  hz_slice state = SliceOf(b, 4096, len);
  return c.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_QUIESCE, &a, sizeof(a), &state, sizeof(state), 0);
}

// Two tenants served by one connection thread: one holding all the staging
// it may reserve, and asking for more with an unbounded stall budget, is
// answered at once and never delays the other; SIGTERM still drains both.
TEST(ServiceShutdownTest, ATenantHoldingItsStagingShareDelaysNeitherItsNeighbourNorTheStop) {
  ServiceProcess svc;
  svc.CaptureLog();
  ASSERT_TRUE(svc.Start({"--worker-threads", "1", "--log-level", "info", "--config",
                         svc.WriteConfig("[checkpoint]\nstaging_bytes = 16777216\n"
                                         "tenant_staging_bytes = 8388608\n"
                                         "quiesce_bytes = 8388608\n")}));
  std::vector<std::string> a_socks = svc.TenantWithVms("a", 1);
  std::vector<std::string> b_socks = svc.TenantWithVms("b", 1);
  ASSERT_EQ(a_socks.size(), 1u);
  ASSERT_EQ(b_socks.size(), 1u);
  ASSERT_EQ(SocketOnThread(svc, "b", 0), b_socks[0]);  // the thread "a" has too

  HzClient a, b;
  ASSERT_TRUE(a.Connect(a_socks[0]));
  ASSERT_TRUE(b.Connect(b_socks[0]));
  ASSERT_EQ(a.Hello(kFeatures), HZ_S_OK);
  ASSERT_EQ(b.Hello(kFeatures), HZ_S_OK);
  GuestBuffer region;
  ASSERT_EQ(a.Register(kShare + 8192, 1, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region), HZ_S_OK);
  ASSERT_EQ(SetPolicy(a, 1, HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 1000).status, HZ_S_OK);
  // The largest state the share lets stream 1 reserve, to the page.
  uint64_t held = kShare;
  uint32_t st = Quiesce(a, region, 1, held).status;
  while (st == HZ_S_ELIMIT && held > 4096) {
    held -= 4096;
    st = Quiesce(a, region, 1, held).status;
  }
  ASSERT_EQ(st, HZ_S_OK) << held;

  ASSERT_EQ(SetPolicy(a, 2, HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 0xFFFFFFFF).status, HZ_S_OK);
  Reply more = Quiesce(a, region, 2, 4096);
  EXPECT_EQ(more.status, HZ_S_ELIMIT);  // answered, not left waiting for staging

  // While a's reservation is held, b's calls on the same thread complete.
  Reply topo = b.Call(HZ_VQ_CONTROL, HZ_OP_TOPOLOGY_GET, nullptr, 0, nullptr, 0, 4096);
  EXPECT_NE(topo.status, 0xffffffffu);
  hz_ckpt_list_args list{};
  list.stream = 1;
  list.max_entries = 4;
  Reply listed = b.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_LIST, &list, sizeof(list), nullptr, 0, 256);
  EXPECT_NE(listed.status, 0xffffffffu);

  EXPECT_EQ(svc.Terminate(kHangGuardMs), 0) << svc.Log();
  const std::string log = svc.Log();
  EXPECT_NE(log.find("event=drained in_flight=0"), std::string::npos) << log;
  EXPECT_EQ(log.find("event=shutdown_thread_stuck"), std::string::npos) << log;
}

}  // namespace
}  // namespace hz::testing
