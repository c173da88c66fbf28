// The operator's side of a running harmonaized: hzctl and GET /metrics.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

// Runs hzctl against the service; returns its exit code and output.
int Hzctl(const ServiceProcess& svc, const std::string& args, std::string* out) {
  return svc.Hzctl(HZ_HZCTL_PATH, args, out);
}

TEST(ServiceOperatorTest, HzctlManagesTenantsAndVms) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::string out;
  EXPECT_EQ(Hzctl(svc, "tenant create t1 --weight 3 --priority high --max-regions 10", &out), 0)
      << out;
  EXPECT_EQ(Hzctl(svc, "tenant create t1", &out), 1);
  EXPECT_NE(out.find("already exists"), std::string::npos) << out;
  std::string sock = svc.dir() + "/vm0.sock";
  EXPECT_EQ(Hzctl(svc, "vm bind --tenant t1 --socket " + sock, &out), 0) << out;
  EXPECT_EQ(Hzctl(svc, "vm bind --tenant nobody --socket " + svc.dir() + "/vm1.sock", &out), 1);

  // A connected VM with a region shows up in the listing.
  HzClient c;
  ASSERT_TRUE(c.Connect(sock));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  GuestBuffer b;
  ASSERT_EQ(c.Register(8192, 2, HZ_REGION_F_READ, &b), HZ_S_OK);
  EXPECT_EQ(Hzctl(svc, "--json vm list", &out), 0);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_EQ(j["result"].size(), 1u);
  ASSERT_EQ(j["result"][0]["devices"].size(), 1u);
  EXPECT_EQ(j["result"][0]["devices"][0]["regions"], 1);
  EXPECT_EQ(j["result"][0]["devices"][0]["hello"], true);
  EXPECT_EQ(Hzctl(svc, "tenant list", &out), 0);
  EXPECT_NE(out.find("t1"), std::string::npos);
  EXPECT_EQ(Hzctl(svc, "tenant remove t1", &out), 1) << "a tenant with a bound VM stays";
  EXPECT_EQ(Hzctl(svc, "vm list", &out), 0);
  EXPECT_NE(out.find("connected=yes"), std::string::npos) << out;
  c.dev().Disconnect();
  EXPECT_EQ(Hzctl(svc, "vm unbind --socket " + sock, &out), 0) << out;
  EXPECT_EQ(Hzctl(svc, "tenant remove t1", &out), 0) << out;
  EXPECT_EQ(Hzctl(svc, "counters", &out), 0);
  EXPECT_NE(out.find("REGION_REGISTER"), std::string::npos) << out;
  EXPECT_EQ(Hzctl(svc, "bogus", &out), 2);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ServiceOperatorTest, SavedTenantsAndBindingsSurviveARestart) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  auto vms = svc.TenantWithVms("keep", 1);
  ASSERT_EQ(vms.size(), 1u);
  ASSERT_EQ(svc.Terminate(), 0);
  ASSERT_TRUE(svc.Start());
  auto r = svc.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(r.value("ok", false));
  ASSERT_EQ(r["result"].size(), 1u);
  EXPECT_EQ(r["result"][0]["tenant"], "keep");
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  EXPECT_EQ(c.Hello(), HZ_S_OK);
}

// The VMs of one tenant share a connection thread (a collective's completions
// for its ranks then run back to back on it); tenants spread over threads.
TEST(ServiceOperatorTest, VmsOfATenantShareAConnectionThread) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start({"--worker-threads", "2"}));
  ASSERT_EQ(svc.TenantWithVms("a", 3).size(), 3u);
  ASSERT_EQ(svc.TenantWithVms("b", 2).size(), 2u);
  auto r = svc.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  ASSERT_EQ(r["result"].size(), 5u);
  std::map<std::string, std::set<size_t>> threads;
  for (const auto& v : r["result"]) {
    threads[v["tenant"].get<std::string>()].insert(v["thread"].get<size_t>());
  }
  ASSERT_EQ(threads["a"].size(), 1u);
  ASSERT_EQ(threads["b"].size(), 1u);
  EXPECT_NE(*threads["a"].begin(), *threads["b"].begin());
  EXPECT_LT(*threads["a"].begin(), 2u);
  EXPECT_LT(*threads["b"].begin(), 2u);
  // Both tenants' VMs are served: each answers HELLO.
  for (const auto& v : r["result"]) {
    HzClient c;
    ASSERT_TRUE(c.Connect(v["socket"].get<std::string>()));
    EXPECT_EQ(c.Hello(), HZ_S_OK) << v.dump();
  }
  std::string out;
  EXPECT_EQ(Hzctl(svc, "vm list", &out), 0);
  EXPECT_NE(out.find("thread="), std::string::npos) << out;
  EXPECT_EQ(svc.Terminate(), 0);
}

// CPU time (user + system) the process has used so far, from /proc.
double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  // Fields after the command name, which is in parentheses and may hold spaces.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Two VMs of one tenant, connected and briefly busy; they stay connected
// (in *clients) and quiet from then on.
void ConnectTwoVmsAndGoQuiet(ServiceProcess& svc, std::vector<std::unique_ptr<HzClient>>* clients) {
  auto vms = svc.TenantWithVms("quiet", 2);
  ASSERT_EQ(vms.size(), 2u);
  for (const auto& v : vms) {
    clients->push_back(std::make_unique<HzClient>());
    ASSERT_TRUE(clients->back()->Connect(v));
    ASSERT_EQ(clients->back()->Hello(), HZ_S_OK);
  }
  for (int i = 0; i < 50; ++i) ASSERT_EQ((*clients)[i % 2]->Hello(), HZ_S_OK);
}

// Connection threads poll for a while after work (connection_poll_us), then
// sleep: a daemon whose VMs went quiet uses no CPU.
TEST(ServiceOperatorTest, ConnectionThreadsSleepWhenTheVmsGoQuiet) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start({"--connection-poll-us", "1000"}));
  std::vector<std::unique_ptr<HzClient>> clients;
  ASSERT_NO_FATAL_FAILURE(ConnectTwoVmsAndGoQuiet(svc, &clients));
  const double before = CpuSeconds(svc.pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double used = CpuSeconds(svc.pid()) - before;
  // A thread that kept polling would use about 2 s of CPU here.
  EXPECT_LT(used, 0.5) << "CPU seconds used while idle";
  EXPECT_EQ(svc.Terminate(), 0);
}

// Context switches of each of process pid's threads, by name
// (voluntary_ctxt_switches in proc(5)'s status: the times it slept and was
// woken).
std::map<std::string, long> WakeupsByThread(pid_t pid) {
  std::map<std::string, long> out;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(task.path() / "status");
    std::string key, name;
    long value = 0;
    while (f >> key) {
      if (key == "Name:") f >> name;
      if (key == "voluntary_ctxt_switches:" && f >> value) out[name] += value;
    }
  }
  return out;
}

// Wake-ups of each thread of pid over `span`, by name.
std::map<std::string, long> WakeupsOver(pid_t pid, std::chrono::milliseconds span) {
  const std::map<std::string, long> before = WakeupsByThread(pid);
  std::this_thread::sleep_for(span);
  std::map<std::string, long> woke = WakeupsByThread(pid);
  for (auto& [name, n] : woke) n -= before.count(name) ? before.at(name) : 0;
  return woke;
}

std::string Describe(const std::map<std::string, long>& woke) {
  std::string out;
  for (const auto& [name, n] : woke) out += name + "=" + std::to_string(n) + " ";
  return out;
}

// Threads that wait for work sleep until it comes: with VMs connected and
// quiet, neither the checkpoint engine's I/O thread nor the watchdog of the
// connection threads' eventfd calls wakes, and the bulk threads' guard looks
// only every tenth window.
TEST(ServiceOperatorTest, AQuietDaemonsThreadsSleepUntilThereIsWork) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start({"--config", svc.WriteConfig("bulk_idle_window_ms = 50\n")}));
  std::vector<std::unique_ptr<HzClient>> clients;
  ASSERT_NO_FATAL_FAILURE(ConnectTwoVmsAndGoQuiet(svc, &clients));
  // The connections' own work ends first. On a busy host the bulk threads
  // that prepared it wait in the idle class, are lifted by the guard and keep
  // it looking every window for a second after: quiet begins once the guard
  // looks at its sleeping pace (500 ms) for a whole second. A guard that
  // never slows down fails below after this bounded wait.
  std::map<std::string, long> woke;
  for (int second = 0; second < 20; ++second) {
    woke = WakeupsOver(svc.pid(), std::chrono::seconds(1));
    const auto guard = woke.find("hz-idle-guard");
    if (guard != woke.end() && guard->second <= 3) break;
  }
  ASSERT_TRUE(woke.count("hz-ckpt-io") && woke.count("vdev-watchdog") &&
              woke.count("hz-idle-guard"))
      << Describe(woke);
  woke = WakeupsOver(svc.pid(), std::chrono::seconds(2));
  // Before, the first woke every 100 ms and the second every 50 ms.
  EXPECT_EQ(woke["hz-ckpt-io"], 0) << Describe(woke);
  EXPECT_EQ(woke["vdev-watchdog"], 0) << Describe(woke);
  // Every 500 ms: four looks in 2 s, and one more where the edges fall.
  EXPECT_LE(woke["hz-idle-guard"], 5) << Describe(woke);
  EXPECT_EQ(svc.Terminate(), 0);
}

TEST(ServiceOperatorTest, MetricsEndpoint) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start({"--metrics-port", "0"}));
  auto vms = svc.TenantWithVms("t1", 1);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  EXPECT_EQ(c.Call(HZ_VQ_CONTROL, 0x7777, nullptr, 0).status, HZ_S_ENOTSUP);
  auto st = svc.Control({{"cmd", "status"}});
  uint16_t port = st["result"]["metrics_port"].get<uint16_t>();
  ASSERT_NE(port, 0);
  std::string m = HttpGet(port, "/metrics");
  EXPECT_NE(m.find("200 OK"), std::string::npos) << m;
  EXPECT_NE(m.find("hz_requests_total{opcode=\"HELLO\",status=\"OK\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("hz_requests_total{opcode=\"UNKNOWN\",status=\"ENOTSUP\"} 1"),
            std::string::npos);
  EXPECT_NE(m.find("hz_vms_connected 1"), std::string::npos);
  EXPECT_NE(m.find("hz_collective_algorithm_total"), std::string::npos);
  EXPECT_NE(HttpGet(port, "/other").find("404"), std::string::npos);
}

}  // namespace
}  // namespace hz::testing
