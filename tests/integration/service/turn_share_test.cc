// Tenants whose VMs keep one connection thread busy share it by their
// weights: harmonaized charges each VM's turns to its tenant's account (by
// the tenant's name, with its --weight), and /metrics shows each tenant's
// charged time (hz_vdev_turn_seconds_total), from zero for a tenant that
// takes the name of a removed one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hz_client.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Requests each front-end keeps on its control ring.
constexpr size_t kInFlight = 128;
// REGION_UNREGISTER of no region with 64 KiB of arguments, all zero: the
// device checks every byte of arguments it does not know (SPEC §6.2) before
// it answers ENOENT, so a request costs the connection thread tens of
// microseconds and the front-end only a descriptor. The thread is the
// bottleneck and both tenants always have requests waiting.
constexpr uint32_t kArgsBytes = 64u << 10;

// One VM that keeps its control ring full of costly requests until stopped.
class Flood {
 public:
  // Connects and says HELLO; false (with *error) when that fails.
  bool Start(const std::string& socket, std::string* error) {
    if (!client_.Connect(socket, 64ull << 20, error)) return false;
    if (client_.Hello() != HZ_S_OK) {
      *error = "HELLO failed";
      return false;
    }
    auto& dev = client_.dev();
    // Every request reads the same bytes; each has its own status to write.
    const uint32_t len = sizeof(hz_req_hdr) + kArgsBytes;
    request_ = dev.Allocate(len);
    if (request_ == nullptr) return Fail("no guest memory", error);
    std::memset(request_, 0, len);
    hz_req_hdr h{};
    h.opcode = HZ_OP_REGION_UNREGISTER;
    h.args_len = kArgsBytes;
    std::memcpy(request_, &h, sizeof(h));
    for (size_t i = 0; i < kInFlight; ++i) {
      statuses_.push_back(dev.Allocate(sizeof(hz_status)));
      if (statuses_.back() == nullptr) return Fail("no guest memory", error);
    }
    // The first answer says the device read the arguments (ENOENT, not EINVAL).
    if (!Add(0) || !dev.Kick(HZ_VQ_CONTROL).ok()) return Fail("cannot post", error);
    vdev::frontend::Completion done[1];
    size_t n = 0;
    dev.WaitUsed(HZ_VQ_CONTROL, std::chrono::seconds(20), done, 1, &n);
    hz_status st{};
    std::memcpy(&st, statuses_[0], sizeof(st));
    if (n != 1 || st.status != HZ_S_ENOENT) {
      return Fail("the probe got status " + std::to_string(st.status), error);
    }
    thread_ = std::thread([this] { Run(); });
    return true;
  }
  ~Flood() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t answered() const { return answered_.load(); }

 private:
  bool Fail(const std::string& why, std::string* error) {
    *error = why;
    return false;
  }
  bool Add(size_t slot) {
    vdev::frontend::HostBuffer r[] = {{request_, sizeof(hz_req_hdr) + kArgsBytes}};
    vdev::frontend::HostBuffer w[] = {{statuses_[slot], sizeof(hz_status)}};
    return client_.dev().AddChain(HZ_VQ_CONTROL, r, w, slot).ok();
  }
  // Puts every answered request back on the ring at once.
  void Run() {
    auto& dev = client_.dev();
    for (size_t i = 0; i < kInFlight; ++i) {
      if (!Add(i)) return;
    }
    if (!dev.Kick(HZ_VQ_CONTROL).ok()) return;
    while (!stop_) {
      vdev::frontend::Completion done[64];
      size_t n = 0;
      auto st = dev.WaitUsed(HZ_VQ_CONTROL, std::chrono::milliseconds(100), done, 64, &n);
      if (!st.ok() && n == 0 && st.code() != vdev::frontend::Status::Code::kTimeout) return;
      for (size_t k = 0; k < n; ++k) {
        if (!Add(static_cast<size_t>(done[k].cookie))) return;
      }
      answered_ += n;
      if (n > 0 && !dev.Kick(HZ_VQ_CONTROL).ok()) return;
    }
  }

  HzClient client_;
  void* request_ = nullptr;
  std::vector<void*> statuses_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> answered_{0};
};

std::string Body(const std::string& response) {
  size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

// The value of `series` (name and labels) in a scrape; -1 when absent.
double Value(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + series.size() + 1));
}

// Charged seconds by tenant, from one scrape.
std::map<std::string, double> TurnSeconds(uint16_t port, const std::vector<std::string>& tenants) {
  const std::string text = Body(HttpGet(port, "/metrics"));
  std::map<std::string, double> out;
  for (const std::string& t : tenants) {
    out[t] = Value(text, "hz_vdev_turn_seconds_total{tenant=\"" + t + "\"}");
  }
  return out;
}

// Waits until fn() or the deadline; fn()'s last answer.
bool WaitFor(const std::function<bool()>& fn, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!fn()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(ServiceTurnShareTest, TenantsShareAConnectionThreadByTheirWeights) {
  ServiceProcess svc;
  const std::string config = svc.WriteConfig("worker_threads = 1\n");  // every VM on one thread
  const int port = FreeTcpPort();
  ASSERT_TRUE(svc.Start({"--config", config, "--metrics-port", std::to_string(port)}));
  // heavy (weight 3) has one VM; light (weight 1) two, charged as one tenant.
  const std::map<std::string, std::pair<int, int>> tenants = {{"heavy", {3, 1}}, {"light", {1, 2}}};
  std::vector<std::unique_ptr<Flood>> floods;
  std::map<std::string, std::vector<Flood*>> by_tenant;
  for (const auto& [name, spec] : tenants) {
    auto r = svc.Control({{"cmd", "tenant.create"}, {"name", name}, {"weight", spec.first}});
    ASSERT_TRUE(r.value("ok", false)) << r.dump();
    for (int i = 0; i < spec.second; ++i) {
      const std::string sock = svc.dir() + "/" + name + std::to_string(i) + ".sock";
      r = svc.Control({{"cmd", "vm.bind"}, {"tenant", name}, {"socket", sock}});
      ASSERT_TRUE(r.value("ok", false)) << r.dump();
      floods.push_back(std::make_unique<Flood>());
      std::string error;
      ASSERT_TRUE(floods.back()->Start(sock, &error)) << name << ": " << error;
      by_tenant[name].push_back(floods.back().get());
    }
  }
  auto answered = [&](const std::string& tenant) {
    uint64_t n = 0;
    for (const Flood* f : by_tenant[tenant]) n += f->answered();
    return n;
  };
  const std::vector<std::string> names = {"heavy", "light"};
  // Measured while every VM has requests waiting: from when each has had
  // some answered until light, the one served least, has had 2000 more.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& f : floods) {
          if (f->answered() < 2 * kInFlight) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));
  const std::map<std::string, double> before = TurnSeconds(static_cast<uint16_t>(port), names);
  const uint64_t heavy_before = answered("heavy"), light_before = answered("light");
  ASSERT_TRUE(
      WaitFor([&] { return answered("light") >= light_before + 2000; }, std::chrono::seconds(60)));
  const std::map<std::string, double> after = TurnSeconds(static_cast<uint16_t>(port), names);
  const double heavy_requests = static_cast<double>(answered("heavy") - heavy_before);
  const double light_requests = static_cast<double>(answered("light") - light_before);
  for (auto& f : floods) f->Stop();

  for (const std::string& t : names) {
    ASSERT_GE(before.at(t), 0) << t << " has no hz_vdev_turn_seconds_total series";
    ASSERT_GT(after.at(t), before.at(t)) << t << " was charged nothing";
  }
  const double heavy = after.at("heavy") - before.at("heavy");
  const double light = after.at("light") - before.at("light");
  // 3 : 1 by weight; 1 : 1 if the weights were lost, 1 : 2 if each VM were
  // an account of its own with weight 1, 3 : 2 with its own tenant's weight.
  EXPECT_GT(heavy / light, 1.8) << "heavy " << heavy << " s, light " << light << " s";
  // So do the requests answered: they all cost the same.
  EXPECT_GT(heavy_requests / light_requests, 1.8)
      << "heavy " << heavy_requests << ", light " << light_requests;

  // A tenant created under the name of a removed one inherits none of its
  // charged time.
  floods.clear();
  for (int i = 0; i < tenants.at("light").second; ++i) {
    const std::string sock = svc.dir() + "/light" + std::to_string(i) + ".sock";
    auto r = svc.Control({{"cmd", "vm.unbind"}, {"socket", sock}});
    ASSERT_TRUE(r.value("ok", false)) << r.dump();
  }
  auto r = svc.Control({{"cmd", "tenant.remove"}, {"name", "light"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  r = svc.Control({{"cmd", "tenant.create"}, {"name", "light"}, {"weight", 1}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const std::map<std::string, double> renewed = TurnSeconds(static_cast<uint16_t>(port), names);
  EXPECT_EQ(renewed.at("light"), 0.0);
  EXPECT_GE(renewed.at("heavy"), after.at("heavy"));
}

}  // namespace
}  // namespace hz::testing
