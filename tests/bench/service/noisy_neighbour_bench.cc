// Noisy neighbour: tenant B's request latency while tenant A attacks at full
// rate, one attack at a time, against B alone measured just before it.
// Both tenants share the daemon's one connection thread (worker_threads = 1),
// so attacks that hold that thread are visible. B measures a 1-element fp32
// all-reduce between its two ranks and TOPOLOGY_GET. The last attack,
// own_cpu_copy, is the reference: A copying memory on its own threads, with
// no request to harmonaized.
//
// What is measured is the interference through harmonaized. Tenant A's own
// threads (its guest's CPU, on a host its own vCPUs) run at nice
// --attacker-nice, 19 by default: on a host with few cores they would
// otherwise take the CPU from B's ranks directly, whatever the daemon does.
// --attacker-nice 0 shows that too.
//
// --bulk-nice sets the service's bulk threads (collective workers, checkpoint
// threads, region preparation) to a nice value or to "idle", the kernel's
// idle class for good; by default they run at the service's defaults. By
// default too they wait in the idle class and take their nice value only
// while they starve; --no-idle-class runs them at their nice values
// (bulk_idle_class = false). "bulk_lifts" is how many times a bulk thread
// was lifted during the attack's rounds (hz_bulk_thread_lifts_total).
//
// One JSON line per attack (ratios: loaded / unloaded, the median of
// --rounds rounds, 3 by default; the goal is a p99 ratio of at most 2; this
// program reports, it does not judge):
//   {"bench":"noisy_neighbour","attack":...,"b_allreduce_p50_ratio":...,
//    "b_allreduce_p99_ratio":...,"b_topology_p50_ratio":...,"b_topology_p99_ratio":...,
//    "unloaded":{p50/p99 in us},"loaded":{...},"b_allreduce_samples":...,
//    "b_topology_samples":...,"a_ops":...,"attacker_nice":...,"bulk_nice":...,
//    "bulk_idle_class":...,"bulk_lifts":...,"rounds":[{each round's ratios and a_ops}]}
//
//   noisy_neighbour_bench [--samples N] [--attacks name,name] [--rounds N] [--attacker-nice N]
//   [--bulk-nice N|idle] [--no-idle-class] [--smoke]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "harmonaize/hz.h"
#include "hz/common/thread_priority.h"
#include "hz_client.h"
#include "service_harness.h"

namespace {

using hz::testing::HzClient;
using hz::testing::ServiceProcess;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kBigBytes = 32u << 20;     // checkpoint attacks' regions and slices
constexpr uint32_t kHugeStallMs = 3600000;  // capped by the daemon's max_stall_budget_ms
constexpr size_t kFloodFloats = 4u << 20;   // A's large all-reduces (16 MiB)
constexpr int kSaveFloodStreams = 4;        // one VM and thread each
constexpr int kPolicyBatch = 256;           // CKPT_POLICY requests per kick
constexpr size_t kNegInFlight = 128;        // NEG_* requests A keeps in flight
constexpr int kIdleConnections = 2000;      // to the metrics port
constexpr int kWarmupMs = 300;              // attack running before B measures

struct Options {
  int samples = 2000;  // B's all-reduces per measurement; half as many TOPOLOGY_GETs
  std::vector<std::string> attacks;
  int attacker_nice = 19;
  std::string bulk_nice;   // empty: the service's defaults
  bool idle_class = true;  // bulk_idle_class
  int rounds = 3;
};

struct Ctx {
  std::vector<std::string> a_socks;
  int metrics_port = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
};

hz_device_t* Open(const std::string& sock) {
  hz_device_t* d = nullptr;
  for (int i = 0; i < 200; ++i) {
    if (hz_open(("vhost-user:" + sock).c_str(), &d) == HZ_OK) return d;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return nullptr;
}

uint64_t UnixNow() {
  return static_cast<uint64_t>(std::time(nullptr));
}

// ---- Tenant A's attacks: each loops until ctx.stop ----------------------

// (a) CKPT_QUIESCE of a large region, then quiesces and saves of it with a
// huge stall budget.
void CkptQuiesce(Ctx& c) {
  hz_device_t* d = Open(c.a_socks[0]);
  if (d == nullptr) return;
  void* region = nullptr;
  void* w = nullptr;
  hz_ckpt_policy p{HZ_CKPT_F_AUTO_SAVE_ON_NOTICE, 1, HZ_TIER_LOCAL_DISK, kHugeStallMs, 0};
  if (hz_mem_alloc(d, kBigBytes, &region) == HZ_OK && hz_mem_alloc(d, 4096, &w) == HZ_OK &&
      hz_ckpt_set_policy(d, 1, &p) == HZ_OK) {
    auto* word = static_cast<hz_quiesce_word*>(w);
    hz_buf slice{region, kBigBytes};
    for (uint64_t step = 1; !c.stop; ++step) {
      word->step = step;
      __atomic_store_n(&word->seq, 2 * step, __ATOMIC_RELEASE);
      if (hz_ckpt_quiesce(d, 1, word, &slice, 1) == HZ_OK) ++c.ops;
      hz_ckpt_info ci{};
      if (hz_ckpt_save(d, 1, step, &slice, 1, nullptr, 0, &ci) == HZ_OK) ++c.ops;
    }
  }
  hz_close(d);
}

// (b) CKPT_SAVE flood: huge slices and stall budgets on many streams.
void CkptSaveFlood(Ctx& c) {
  std::vector<std::thread> threads;
  for (int i = 0; i < kSaveFloodStreams; ++i) {
    threads.emplace_back([&c, i] {
      hz_device_t* d = Open(c.a_socks[static_cast<size_t>(i)]);
      if (d == nullptr) return;
      void* region = nullptr;
      const uint32_t stream = 10 + static_cast<uint32_t>(i);
      hz_ckpt_policy p{0, 1, HZ_TIER_LOCAL_DISK, kHugeStallMs, 0};
      if (hz_mem_alloc(d, kBigBytes, &region) == HZ_OK &&
          hz_ckpt_set_policy(d, stream, &p) == HZ_OK) {
        hz_buf slice{region, kBigBytes};
        for (uint64_t step = 1; !c.stop; ++step) {
          hz_ckpt_info ci{};
          if (hz_ckpt_save(d, stream, step, &slice, 1, nullptr, 0, &ci) == HZ_OK) ++c.ops;
        }
      }
      hz_close(d);
    });
  }
  for (auto& t : threads) t.join();
}

// (c) NEG_REQUEST flood: every GPU there could be, anywhere, any time in
// the next 7 days, for a day; then counters on it. A request waits for the
// next decision point (up to decide_interval_ms), so A keeps kNegInFlight of
// them on its control ring at once, as fast as it can: beyond its open
// negotiations the service refuses at once (ELIMIT), and the refused ones
// go straight back. Every answer, refusals too, counts as an operation.
struct NegSlot {
  void* req = nullptr;
  void* resp = nullptr;
  uint64_t negotiation = 0;  // open negotiation this slot counters, or 0
  int counters = 0;
  uint16_t opcode = 0;  // of the request in flight
};

constexpr uint32_t kNegResp = sizeof(hz_neg_result) + HZ_NEG_MAX_OFFERS * sizeof(hz_neg_offer);
constexpr uint32_t kNegReq = sizeof(hz_req_hdr) + sizeof(hz_neg_counter_args);

// Next request of a slot: a new negotiation, a counter on its open one, or,
// after 8 counters, a decline of it.
uint32_t FillNegRequest(NegSlot& s) {
  hz_neg_request r{};
  r.kind = HZ_DEV_GPU;
  r.count = 0xffff;
  r.locality = HZ_LOC_ANY;
  r.priority_class = HZ_PRIO_NORMAL;
  r.earliest_start_s = UnixNow();
  r.latest_start_s = r.earliest_start_s + 7 * 86400;
  r.duration_s = 86400;
  hz_req_hdr h{};
  uint8_t* args = static_cast<uint8_t*>(s.req) + sizeof(h);
  if (s.negotiation == 0) {
    h.opcode = HZ_OP_NEG_REQUEST;
    h.args_len = sizeof(r);
    std::memcpy(args, &r, sizeof(r));
  } else if (s.counters < 8) {
    h.opcode = HZ_OP_NEG_COUNTER;
    h.args_len = sizeof(hz_neg_counter_args);
    hz_neg_counter_args c{};
    c.negotiation_id = s.negotiation;
    c.request = r;
    std::memcpy(args, &c, sizeof(c));
  } else {
    h.opcode = HZ_OP_NEG_DECLINE;
    h.args_len = sizeof(hz_neg_decline_args);
    hz_neg_decline_args d{s.negotiation};
    std::memcpy(args, &d, sizeof(d));
  }
  s.opcode = h.opcode;
  std::memcpy(s.req, &h, sizeof(h));
  return static_cast<uint32_t>(sizeof(h) + h.args_len);
}

// Learns from a slot's answer what its next request is.
void OnNegAnswer(NegSlot& s) {
  hz_status st{};
  std::memcpy(&st, static_cast<uint8_t*>(s.resp) + kNegResp, sizeof(st));
  hz_neg_result res{};
  if (st.status == HZ_S_OK && s.opcode != HZ_OP_NEG_DECLINE && st.result_len >= sizeof(res)) {
    std::memcpy(&res, s.resp, sizeof(res));
    s.counters = s.opcode == HZ_OP_NEG_COUNTER ? s.counters + 1 : 0;
    s.negotiation = res.negotiation_id;
  } else {
    s.negotiation = 0;  // refused, or declined: a new one
    s.counters = 0;
  }
}

bool PostNeg(vdev::frontend::VirtioUser& dev, std::vector<NegSlot>& slots, size_t i) {
  const uint32_t len = FillNegRequest(slots[i]);
  vdev::frontend::HostBuffer r[] = {{slots[i].req, len}};
  vdev::frontend::HostBuffer w[] = {{slots[i].resp, kNegResp + sizeof(hz_status)}};
  return dev.AddChain(HZ_VQ_CONTROL, r, w, i).ok();
}

void NegFlood(Ctx& c) {
  HzClient a;
  if (!a.Connect(c.a_socks[0]) || a.Hello(1ull << HZ_F_NEGOTIATION) != HZ_S_OK) return;
  auto& dev = a.dev();
  std::vector<NegSlot> slots(kNegInFlight);
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].req = dev.Allocate(kNegReq);
    slots[i].resp = dev.Allocate(kNegResp + sizeof(hz_status));
    if (!PostNeg(dev, slots, i)) return;
  }
  if (!dev.Kick(HZ_VQ_CONTROL).ok()) return;
  while (!c.stop) {
    vdev::frontend::Completion done[64];
    size_t n = 0;
    auto st = dev.WaitUsed(HZ_VQ_CONTROL, std::chrono::milliseconds(100), done, 64, &n);
    if (!st.ok() && n == 0 && st.code() != vdev::frontend::Status::Code::kTimeout) return;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = static_cast<size_t>(done[k].cookie);
      OnNegAnswer(slots[i]);
      ++c.ops;
      if (!PostNeg(dev, slots, i)) return;
    }
    if (n > 0 && !dev.Kick(HZ_VQ_CONTROL).ok()) return;
  }
}

// (d) 256 CKPT_POLICY requests made available with one kick, in a loop.
void PolicyBatch(Ctx& c) {
  HzClient a;
  if (!a.Connect(c.a_socks[0]) || a.Hello() != HZ_S_OK) return;
  auto& dev = a.dev();
  struct Slot {
    void* req;
    void* resp;
  };
  constexpr uint32_t kReq = sizeof(hz_req_hdr) + sizeof(hz_ckpt_policy_args);
  constexpr uint32_t kResp = sizeof(hz_status) + 16;
  std::vector<Slot> slots(kPolicyBatch);
  for (int i = 0; i < kPolicyBatch; ++i) {
    hz_req_hdr h{};
    h.opcode = HZ_OP_CKPT_POLICY;
    h.args_len = sizeof(hz_ckpt_policy_args);
    h.request_id = static_cast<uint64_t>(i) + 1;
    hz_ckpt_policy_args p{};
    p.stream = 100 + static_cast<uint32_t>(i);
    p.retention = 1;
    p.tier = HZ_TIER_HOST_MEMORY;
    p.stall_budget_ms = kHugeStallMs;
    slots[static_cast<size_t>(i)] = {dev.Allocate(kReq), dev.Allocate(kResp)};
    std::memcpy(slots[static_cast<size_t>(i)].req, &h, sizeof(h));
    std::memcpy(static_cast<uint8_t*>(slots[static_cast<size_t>(i)].req) + sizeof(h), &p,
                sizeof(p));
  }
  while (!c.stop) {
    size_t added = 0;
    for (const Slot& s : slots) {
      vdev::frontend::HostBuffer r[] = {{s.req, kReq}};
      vdev::frontend::HostBuffer w[] = {{s.resp, kResp}};
      if (!dev.AddChain(HZ_VQ_CONTROL, r, w, added + 1).ok()) break;  // ring full
      ++added;
    }
    if (added == 0 || !dev.Kick(HZ_VQ_CONTROL).ok()) return;
    for (size_t got = 0; got < added;) {
      vdev::frontend::Completion done[64];
      size_t n = 0;
      if (!dev.WaitUsed(HZ_VQ_CONTROL, std::chrono::seconds(20), done, 64, &n).ok() && n == 0) {
        return;
      }
      got += n;
      c.ops += n;
    }
  }
}

// (e) Many idle connections to the metrics port.
void MetricsIdle(Ctx& c) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(c.metrics_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> fds;
  for (int i = 0; i < kIdleConnections && !c.stop; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fds.push_back(fd);
    ++c.ops;
  }
  while (!c.stop) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int fd : fds) close(fd);
}

// (f) As many regions of as many extents as the device allows, registered
// again and again: a new session (HELLO) each round drops them all.
void RegionMax(Ctx& c) {
  HzClient a;
  if (!a.Connect(c.a_socks[1]) || a.Hello() != HZ_S_OK) return;
  const uint32_t max_regions = a.config().max_regions;
  const uint32_t max_extents = a.config().max_extents;
  // Extents may not overlap, within a region or across regions: one-byte
  // extents two bytes apart keep the guest memory this takes small.
  uint64_t gpa = 0;
  const uint64_t span = 2ull * max_regions * max_extents;
  if (a.dev().Allocate(span, &gpa, 4096) == nullptr) return;
  std::vector<hz_extent> ext(max_extents);
  hz_region_register_args r{};
  r.num_extents = max_extents;
  r.flags = HZ_REGION_F_READ | HZ_REGION_F_WRITE;
  r.total_len = max_extents;
  for (bool first = true; !c.stop; first = false) {
    if (!first && a.Hello() != HZ_S_OK) return;
    for (uint32_t i = 0; i < max_regions && !c.stop; ++i) {
      for (uint32_t e = 0; e < max_extents; ++e) {
        ext[e] = {gpa + 2ull * (static_cast<uint64_t>(i) * max_extents + e), 1};
      }
      hz::testing::Reply rep =
          a.Call(HZ_VQ_CONTROL, HZ_OP_REGION_REGISTER, &r, sizeof(r), ext.data(),
                 static_cast<uint32_t>(ext.size() * sizeof(hz_extent)));
      if (rep.status != HZ_S_OK) {
        if (i == 0) std::fprintf(stderr, "region_max: REGION_REGISTER status %u\n", rep.status);
        if (i == 0) return;  // refused outright: nothing to repeat
        break;               // the device's or the tenant's extents are used up
      }
      ++c.ops;
    }
  }
}

// (f2) A VM that connects, says HELLO and disconnects, again and again.
void ReconnectChurn(Ctx& c) {
  while (!c.stop) {
    HzClient a;
    if (!a.Connect(c.a_socks[1]) || a.Hello() != HZ_S_OK) return;
    ++c.ops;
  }
}

// (g) A front-end without kick and call eventfds: the back-end polls its
// avail ring on the shared connection thread.
void BusyPollFrontend(Ctx& c) {
  vdev::frontend::VirtioUser dev;
  vdev::frontend::VirtioUser::Options o;
  o.config_size = sizeof(hz_config);
  o.memory_size = 16u << 20;
  o.queue_size = 256;
  o.busy_poll = true;
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.reply_timeout = std::chrono::milliseconds(5000);
  if (dev.Connect(c.a_socks[2], o).ok()) ++c.ops;
  while (!c.stop) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  dev.Disconnect();
}

// (h) Large all-reduces on A's own two ranks.
void CollectiveFlood(Ctx& c) {
  hz_uid_t uid{};
  std::atomic<int> have_uid{0};
  auto rank = [&](int r) {
    hz_device_t* d = Open(c.a_socks[4 + static_cast<size_t>(r)]);
    if (d == nullptr) return;
    if (r == 0) {
      if (hz_comm_get_uid(d, &uid) == HZ_OK)
        have_uid = 1;
      else
        have_uid = -1;
    }
    while (have_uid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    hz_comm_t* comm = nullptr;
    void* s = nullptr;
    void* rv = nullptr;
    if (have_uid == 1 &&
        hz_comm_init(d, &uid, 2, static_cast<uint32_t>(r), nullptr, &comm) == HZ_OK &&
        hz_mem_alloc(d, kFloodFloats * 4, &s) == HZ_OK &&
        hz_mem_alloc(d, kFloodFloats * 4, &rv) == HZ_OK) {
      // Both ranks stop at the same count: rank 0 decides, via the data.
      auto* send = static_cast<float*>(s);
      for (bool go = true; go;) {
        send[0] = (r == 0 && c.stop) ? 0.0f : 1.0f;
        if (hz_allreduce(comm, s, rv, kFloodFloats, HZ_FP32, HZ_SUM) != HZ_OK) break;
        go = static_cast<float*>(rv)[0] == 2.0f;
        if (r == 0) ++c.ops;
      }
      hz_comm_destroy(comm);
    }
    hz_close(d);
  };
  std::thread r1(rank, 1);
  rank(0);
  r1.join();
}

// (ref) The reference: A copies memory on its own threads, as much at once
// as ckpt_save_flood's streams, and asks harmonaized nothing. A tenant may
// do so in its own VM at any time, so this is the floor that memory-bound
// work sets for B on this host; the checkpoint attacks are read against it.
void OwnCpuCopy(Ctx& c) {
  std::vector<std::thread> threads;
  for (int i = 0; i < kSaveFloodStreams; ++i) {
    threads.emplace_back([&c] {
      std::vector<char> from(kBigBytes, 1), to(kBigBytes);
      while (!c.stop) {
        std::memcpy(to.data(), from.data(), kBigBytes);
        ++c.ops;
      }
    });
  }
  for (auto& t : threads) t.join();
}

struct AttackSpec {
  const char* name;
  void (*run)(Ctx&);
};
constexpr AttackSpec kAttacks[] = {
    {"ckpt_quiesce", CkptQuiesce},
    {"ckpt_save_flood", CkptSaveFlood},
    {"neg_flood", NegFlood},
    {"ckpt_policy_batch", PolicyBatch},
    {"metrics_idle_connections", MetricsIdle},
    {"region_max", RegionMax},
    {"reconnect_churn", ReconnectChurn},
    {"busy_poll_frontend", BusyPollFrontend},
    {"collective_flood", CollectiveFlood},
    {"own_cpu_copy", OwnCpuCopy},
};

// ---- Tenant B -----------------------------------------------------------

struct Latency {
  std::vector<double> allreduce_us, topology_us;
  static double Pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
  }
  json Json() const {
    return {{"allreduce_p50_us", Pct(allreduce_us, 0.5)},
            {"allreduce_p99_us", Pct(allreduce_us, 0.99)},
            {"topology_p50_us", Pct(topology_us, 0.5)},
            {"topology_p99_us", Pct(topology_us, 0.99)}};
  }
};

class TenantB {
 public:
  bool Start(const std::vector<std::string>& socks) {
    for (int r = 0; r < 2; ++r) dev_[r] = Open(socks[static_cast<size_t>(r)]);
    if (dev_[0] == nullptr || dev_[1] == nullptr) return false;
    hz_uid_t uid{};
    if (hz_comm_get_uid(dev_[0], &uid) != HZ_OK) return false;
    int rc1 = HZ_OK;
    std::thread t([&] { rc1 = hz_comm_init(dev_[1], &uid, 2, 1, nullptr, &comm_[1]); });
    int rc0 = hz_comm_init(dev_[0], &uid, 2, 0, nullptr, &comm_[0]);
    t.join();
    return rc0 == HZ_OK && rc1 == HZ_OK;
  }
  ~TenantB() {
    for (int r = 0; r < 2; ++r) {
      if (comm_[r] != nullptr) hz_comm_destroy(comm_[r]);
      if (dev_[r] != nullptr) hz_close(dev_[r]);
    }
  }

  // n all-reduces timed on rank 0, then n / 2 TOPOLOGY_GETs.
  Latency Measure(int n) {
    Latency out;
    std::thread peer([&] {
      float s = 1, r = 0;
      for (int i = 0; i < n; ++i) {
        if (hz_allreduce(comm_[1], &s, &r, 1, HZ_FP32, HZ_SUM) != HZ_OK) return;
      }
    });
    for (int i = 0; i < n; ++i) {
      float s = 1, r = 0;
      auto t0 = Clock::now();
      if (hz_allreduce(comm_[0], &s, &r, 1, HZ_FP32, HZ_SUM) != HZ_OK || r != 2) break;
      out.allreduce_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    peer.join();
    for (int i = 0; i < n / 2; ++i) {
      hz_topology* t = nullptr;
      auto t0 = Clock::now();
      if (hz_topology_get(dev_[0], &t) != HZ_OK) break;
      out.topology_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      hz_topology_free(t);
    }
    return out;
  }

 private:
  hz_device_t* dev_[2] = {nullptr, nullptr};
  hz_comm_t* comm_[2] = {nullptr, nullptr};
};

json Ratio(double loaded, double unloaded) {
  return unloaded > 0 && loaded > 0 ? json(loaded / unloaded) : json(nullptr);
}

constexpr const char* kRatioKeys[] = {"b_allreduce_p50_ratio", "b_allreduce_p99_ratio",
                                      "b_topology_p50_ratio", "b_topology_p99_ratio"};

// One round: B alone, then B while A attacks.
json RunRound(const AttackSpec& a, Ctx& ctx, TenantB& b, const Options& o) {
  Latency unloaded = b.Measure(o.samples);
  ctx.stop = false;
  ctx.ops = 0;
  std::thread attacker([&] {
    hz::SetThisThreadNice(o.attacker_nice);  // and the threads the attack starts
    a.run(ctx);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(kWarmupMs));
  Latency loaded = b.Measure(o.samples);
  ctx.stop = true;
  attacker.join();
  json u = unloaded.Json(), l = loaded.Json();
  return {{"b_allreduce_p50_ratio", Ratio(l["allreduce_p50_us"], u["allreduce_p50_us"])},
          {"b_allreduce_p99_ratio", Ratio(l["allreduce_p99_us"], u["allreduce_p99_us"])},
          {"b_topology_p50_ratio", Ratio(l["topology_p50_us"], u["topology_p50_us"])},
          {"b_topology_p99_ratio", Ratio(l["topology_p99_us"], u["topology_p99_us"])},
          {"unloaded", u},
          {"loaded", l},
          {"b_allreduce_samples", loaded.allreduce_us.size()},
          {"b_topology_samples", loaded.topology_us.size()},
          {"a_ops", ctx.ops.load()}};
}

// hz_bulk_thread_lifts_total on the daemon's /metrics (0 without a guard).
double BulkLifts(const Ctx& ctx) {
  const std::string text =
      hz::testing::HttpGet(static_cast<uint16_t>(ctx.metrics_port), "/metrics");
  const std::string name = "\nhz_bulk_thread_lifts_total ";
  const size_t at = text.find(name);
  return at == std::string::npos ? 0.0 : std::atof(text.c_str() + at + name.size());
}

double RatioOr(const json& row, const char* key, double none) {
  return row[key].is_number() ? row[key].get<double>() : none;
}

// --rounds rounds; each ratio reported is its median over the rounds (a
// shared host slows one measurement and not the next), and the latencies
// and counts are those of the round with the median all-reduce p99 ratio.
json RunAttack(const AttackSpec& a, Ctx& ctx, TenantB& b, const Options& o) {
  std::vector<json> rounds;
  const double lifts_before = BulkLifts(ctx);
  for (int r = 0; r < o.rounds; ++r) rounds.push_back(RunRound(a, ctx, b, o));
  json out = {{"bench", "noisy_neighbour"},
              {"attack", a.name},
              {"attacker_nice", o.attacker_nice},
              {"bulk_nice", o.bulk_nice.empty() ? "default" : o.bulk_nice},
              {"bulk_idle_class", o.idle_class},
              {"bulk_lifts", BulkLifts(ctx) - lifts_before},
              {"rounds", json::array()}};
  for (const char* key : kRatioKeys) {
    std::vector<double> v;
    for (const json& r : rounds) {
      if (r[key].is_number()) v.push_back(r[key].get<double>());
    }
    std::sort(v.begin(), v.end());
    out[key] = v.empty() ? json(nullptr) : json(v[v.size() / 2]);
  }
  std::vector<json> by_p99 = rounds;
  std::sort(by_p99.begin(), by_p99.end(), [](const json& x, const json& y) {
    return RatioOr(x, "b_allreduce_p99_ratio", 1e300) < RatioOr(y, "b_allreduce_p99_ratio", 1e300);
  });
  const json& mid = by_p99[by_p99.size() / 2];
  for (const char* key :
       {"unloaded", "loaded", "b_allreduce_samples", "b_topology_samples", "a_ops"}) {
    out[key] = mid[key];
  }
  for (const json& r : rounds) {
    json brief = {{"a_ops", r["a_ops"]}};
    for (const char* key : kRatioKeys) brief[key] = r[key];
    out["rounds"].push_back(brief);
  }
  return out;
}

// The scheduler sees a fixture host (GPUs for NEG_REQUEST and
// TOPOLOGY_GET), as the provider integration tests set it up.
std::string WriteConfig(const ServiceProcess& svc, const Options& o) {
  namespace fs = std::filesystem;
  const std::string fixtures = HZ_SCHED_FIXTURES;
  const std::string sysfs = svc.dir() + "/sysfs";
  std::error_code ec;
  fs::copy(fixtures + "/hgx8/sysfs", sysfs,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
  const std::string config = svc.dir() + "/harmonaized.toml";
  std::ofstream out(config);
  const std::string nice = o.bulk_nice == "idle" ? "\"idle\"" : o.bulk_nice;
  out << "worker_threads = 1\n";
  if (!o.idle_class) out << "bulk_idle_class = false\n";
  if (!nice.empty()) out << "region_thread_nice = " << nice << "\n";
  out << "[scheduler]\n"
      << "sysfs_root = \"" << sysfs << "\"\n"
      << "provider_file = \"" << fixtures << "/hgx8/inventory.toml\"\n"
      << "sync = false\n";
  if (!nice.empty()) {
    out << "[collectives]\nworker_nice = " << nice << "\n"
        << "[checkpoint]\nthread_nice = " << nice << "\n";
  }
  return config;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--samples" && i + 1 < argc) {
      o->samples = std::atoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      o->rounds = std::atoi(argv[++i]);
    } else if (a == "--attacker-nice" && i + 1 < argc) {
      o->attacker_nice = std::atoi(argv[++i]);
    } else if (a == "--bulk-nice" && i + 1 < argc) {
      o->bulk_nice = argv[++i];
    } else if (a == "--no-idle-class") {
      o->idle_class = false;
    } else if (a == "--smoke") {
      o->samples = 50;
      o->rounds = 1;
    } else if (a == "--attacks" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t s = 0; s <= list.size();) {
        size_t e = std::min(list.find(',', s), list.size());
        o->attacks.push_back(list.substr(s, e - s));
        s = e + 1;
      }
    } else {
      return false;
    }
  }
  const bool bulk_nice_ok = o->bulk_nice.empty() || o->bulk_nice == "idle" ||
                            (o->bulk_nice.find_first_not_of("0123456789") == std::string::npos &&
                             o->bulk_nice.size() <= 2 && std::atoi(o->bulk_nice.c_str()) <= 19);
  return o->samples > 0 && o->rounds > 0 && bulk_nice_ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s [--samples N] [--attacks a,b] [--rounds N] [--attacker-nice N] "
                 "[--bulk-nice N|idle] [--no-idle-class] [--smoke]\n",
                 argv[0]);
    return 2;
  }
  ServiceProcess svc;
  Ctx ctx;
  ctx.metrics_port = hz::testing::FreeTcpPort();
  if (!svc.Start(
          {"--config", WriteConfig(svc, o), "--metrics-port", std::to_string(ctx.metrics_port)})) {
    std::fprintf(stderr, "cannot start harmonaized\n");
    return 1;
  }
  ctx.a_socks = svc.TenantWithVms("a", 6);
  std::vector<std::string> b_socks = svc.TenantWithVms("b", 2);
  TenantB b;
  if (ctx.a_socks.size() != 6 || b_socks.size() != 2 || !b.Start(b_socks)) {
    std::fprintf(stderr, "cannot set up the tenants\n");
    return 1;
  }
  for (const AttackSpec& a : kAttacks) {
    if (!o.attacks.empty() &&
        std::find(o.attacks.begin(), o.attacks.end(), a.name) == o.attacks.end()) {
      continue;
    }
    std::printf("%s\n", RunAttack(a, ctx, b, o).dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
