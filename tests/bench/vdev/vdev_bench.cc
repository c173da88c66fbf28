// vdev_bench: what a request/response costs through the virtio-user
// front-end, the real vhost-user back-end (another process) and the echo
// device, next to the floors measured in the same run:
//   - eventfd ping-pong between two processes (the notification floor),
//   - a 64-byte unix-socket request/response between two processes,
//   - a plain shared-memory SPSC ring with no validation (the data-path floor).
// The front-end runs on CPU 0 and every peer process on CPU 1 (unless
// --no-pin). Output: one JSON object per line, raw numbers then ratios.
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <nlohmann/json.hpp>

#include "vdev/echo_device.h"
#include "vdev/frontend/virtio_user.h"
#include "vdev/server.h"

namespace {

using Clock = std::chrono::steady_clock;
using vdev::frontend::Buffer;
using vdev::frontend::Completion;
using vdev::frontend::Status;
using vdev::frontend::VirtioUser;

constexpr size_t kMsg = 64;  // request and response bytes
constexpr int kFrontendCpu = 0;
constexpr int kPeerCpu = 1;
constexpr int kPairedRounds = 7;

bool g_pin = true;

bool Pin(int cpu) {
  if (!g_pin) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Reads a response the way a caller would, and keeps the compiler from
// dropping the copy (nothing else reads `sink`).
inline void Consume(const uint8_t* response) {
  uint8_t sink[kMsg];
  std::memcpy(sink, response, kMsg);
  asm volatile("" : : "r"(sink) : "memory");
}

double Ns(Clock::duration d) {
  return std::chrono::duration<double, std::nano>(d).count();
}

struct Result {
  explicit Result(std::string n, int b = 1) : name(std::move(n)), batch(b) {}

  std::string name;
  int batch = 1;
  std::vector<double> samples_ns;  // one per round trip (per batch when batch > 1)
  uint64_t requests = 0;
  double seconds = 0;
  std::string error;

  double Percentile(double p) {
    if (samples_ns.empty()) return 0;
    auto k = static_cast<size_t>(p * static_cast<double>(samples_ns.size() - 1));
    std::nth_element(samples_ns.begin(), samples_ns.begin() + static_cast<long>(k),
                     samples_ns.end());
    return samples_ns[k];
  }
  double rps() const { return seconds > 0 ? static_cast<double>(requests) / seconds : 0; }
  double RpsAtP50() {
    const double p50 = Percentile(0.5);
    return p50 > 0 ? static_cast<double>(batch) * 1e9 / p50 : 0;
  }
};

void Print(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void Report(Result& r) {
  nlohmann::json j;
  j["bench"] = "vdev";
  j["case"] = r.name;
  j["batch"] = r.batch;
  if (!r.error.empty()) {
    j["error"] = r.error;
    Print(j);
    return;
  }
  j["p50_us"] = r.Percentile(0.50) / 1000.0;
  j["p99_us"] = r.Percentile(0.99) / 1000.0;
  j["requests_per_s"] = r.rps();
  // Throughput implied by the median round trip: unlike requests_per_s it is
  // not diluted by time the scheduler gave neither process (shared machines).
  j["requests_per_s_at_p50"] = r.RpsAtP50();
  j["requests"] = r.requests;
  j["seconds"] = r.seconds;
  j["latency_unit"] = r.batch > 1 ? "batch round trip" : "round trip";
  Print(j);
}

// Runs fn in a child process pinned to the peer CPU; returns its pid. The
// child goes with this process. Without a child the bench cannot measure
// (a ping-pong would wait for it for good), and a pid of -1 must never
// reach kill(): it exits.
pid_t Spawn(const std::function<void()>& fn) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("vdev_bench: fork");
    std::exit(1);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    Pin(kPeerCpu);
    fn();
    _exit(0);
  }
  return pid;
}

// Shared between the bench and a reference child.
struct Control {
  std::atomic<int> stop{0};
};

template <typename T>
T* SharedAlloc() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : new (p) T();
}
template <typename T>
void SharedFree(T* p) {
  p->~T();
  munmap(p, sizeof(T));
}

// Loops body() until `seconds` pass, after `warmup` untimed iterations.
template <typename F>
void TimedLoop(Result& r, double seconds, int per_iteration, F body) {
  for (int i = 0; i < 1000; ++i) body();
  r.samples_ns.reserve(1 << 21);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  auto t = start;
  while (t < end) {
    body();
    const auto now = Clock::now();
    if (r.samples_ns.size() < (1u << 22)) r.samples_ns.push_back(Ns(now - t));
    r.requests += static_cast<uint64_t>(per_iteration);
    t = now;
  }
  r.seconds = std::chrono::duration<double>(t - start).count();
}

// ---- references -------------------------------------------------------------

Result EventfdPingPong(double seconds) {
  Result r{"eventfd_pingpong"};
  int ping = eventfd(0, EFD_CLOEXEC), pong = eventfd(0, EFD_CLOEXEC);
  auto* ctl = SharedAlloc<Control>();
  pid_t child = Spawn([&] {
    uint64_t v;
    while (read(ping, &v, 8) == 8 && ctl->stop.load() == 0) {
      const uint64_t one = 1;
      if (write(pong, &one, 8) != 8) break;
    }
  });
  const uint64_t one = 1;
  uint64_t v;
  TimedLoop(r, seconds, 1, [&] {
    (void)!write(ping, &one, 8);
    (void)!read(pong, &v, 8);
  });
  ctl->stop = 1;
  (void)!write(ping, &one, 8);
  waitpid(child, nullptr, 0);
  close(ping);
  close(pong);
  SharedFree(ctl);
  return r;
}

Result UnixPingPong(double seconds) {
  Result r{"unix_socket_64b"};
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
  pid_t child = Spawn([&] {
    close(sv[0]);
    char buf[kMsg];
    for (;;) {
      size_t got = 0;
      while (got < kMsg) {
        ssize_t n = read(sv[1], buf + got, kMsg - got);
        if (n <= 0) return;
        got += static_cast<size_t>(n);
      }
      if (send(sv[1], buf, kMsg, MSG_NOSIGNAL) != static_cast<ssize_t>(kMsg)) return;
    }
  });
  close(sv[1]);
  char req[kMsg] = {1}, resp[kMsg];
  TimedLoop(r, seconds, 1, [&] {
    (void)!send(sv[0], req, kMsg, MSG_NOSIGNAL);
    size_t got = 0;
    while (got < kMsg) {
      ssize_t n = read(sv[0], resp + got, kMsg - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
  });
  close(sv[0]);
  waitpid(child, nullptr, 0);
  return r;
}

// A plain single-producer/single-consumer ring pair in shared memory: 64-byte
// slots, no validation, both sides spinning. The data-path floor.
struct SpscShared {
  static constexpr uint32_t kSlots = 256;
  struct alignas(64) Slot {
    uint8_t bytes[kMsg];
  };
  alignas(64) std::atomic<uint64_t> req_tail{0};
  alignas(64) std::atomic<uint64_t> resp_tail{0};
  alignas(64) std::atomic<int> stop{0};
  Slot req[kSlots];
  Slot resp[kSlots];
};

Result SpscRing(double seconds, int batch) {
  Result r{"shm_spsc_ring", batch};
  auto* s = SharedAlloc<SpscShared>();
  pid_t child = Spawn([&] {
    uint64_t head = 0;
    for (uint32_t spins = 0;; ++spins) {
      const uint64_t tail = s->req_tail.load(std::memory_order_acquire);
      if (tail == head) {
        if ((spins & 0xffff) == 0 && s->stop.load(std::memory_order_relaxed)) return;
        CpuRelax();
        continue;
      }
      for (; head < tail; ++head) {
        std::memcpy(s->resp[head % SpscShared::kSlots].bytes,
                    s->req[head % SpscShared::kSlots].bytes, kMsg);
      }
      s->resp_tail.store(head, std::memory_order_release);
    }
  });
  uint64_t sent = 0;
  uint8_t msg[kMsg] = {7};
  TimedLoop(r, seconds, batch, [&] {
    for (int i = 0; i < batch; ++i) {
      std::memcpy(s->req[(sent + static_cast<uint64_t>(i)) % SpscShared::kSlots].bytes, msg, kMsg);
    }
    sent += static_cast<uint64_t>(batch);
    s->req_tail.store(sent, std::memory_order_release);
    while (s->resp_tail.load(std::memory_order_acquire) != sent) CpuRelax();
    for (uint64_t i = sent - static_cast<uint64_t>(batch); i < sent; ++i) {
      Consume(s->resp[i % SpscShared::kSlots].bytes);
    }
  });
  s->stop = 1;
  waitpid(child, nullptr, 0);
  SharedFree(s);
  return r;
}

// ---- vdev ---------------------------------------------------------------------

// The front-end's own share of a batch: AddChain x batch, Publish, and
// PollUsed, with this thread playing the device by writing the used entries
// itself (no back-end, no second CPU). Subtract it from a vdev case to see
// what the back-end and the cross-CPU traffic cost.
Result FrontendOnly(int batch, double seconds) {
  Result r("vdev_frontend_only", batch);
  vdev::frontend::GuestMemory memory;
  std::unique_ptr<vdev::frontend::SplitRing> ring;
  vdev::frontend::SplitRing::Options ro;
  ro.size = 256;
  ro.event_idx = true;
  if (!memory.CreateRegion(1 << 20, true, nullptr).ok() ||
      !vdev::frontend::SplitRing::Create(&memory, ro, &ring).ok()) {
    r.error = "set-up failed";
    return r;
  }
  Buffer req{0, kMsg}, resp{0, kMsg};
  memory.Allocate(kMsg, 64, &req.gpa);
  memory.Allocate(kMsg, 64, &resp.gpa);
  // vring_used: flags, idx, then {id, len} entries.
  auto* used = reinterpret_cast<uint16_t*>(ring->used_user_addr());
  auto* entries = reinterpret_cast<uint32_t*>(used + 2);
  uint16_t used_idx = 0;
  std::vector<uint16_t> heads(static_cast<size_t>(batch));
  Completion done[64];
  TimedLoop(r, seconds, batch, [&] {
    for (int i = 0; i < batch; ++i) {
      if (!ring->AddChain({&req, 1}, {&resp, 1}, static_cast<uint64_t>(i), false,
                          &heads[static_cast<size_t>(i)])
               .ok()) {
        r.error = "AddChain failed";
      }
    }
    ring->Publish();
    for (int i = 0; i < batch; ++i) {
      const size_t slot = (used_idx % 256) * 2;
      entries[slot] = heads[static_cast<size_t>(i)];
      entries[slot + 1] = kMsg;
      ++used_idx;
    }
    std::atomic_ref<uint16_t>(used[1]).store(used_idx, std::memory_order_release);
    Status err;
    int got = 0;
    while (got < batch) got += static_cast<int>(ring->PollUsed(done, 64, &err));
  });
  return r;
}

// The back-end process: vdev::Server with the echo device, until SIGTERM.
void RunBackend(const std::string& path) {
  // stdout carries only JSON lines.
  spdlog::set_default_logger(spdlog::stderr_color_mt("vdev-bench-backend"));
  spdlog::set_level(spdlog::level::warn);
  boost::asio::io_context io;
  vdev::EchoDevice::Options device_options;
  device_options.queues = 1;
  vdev::ServerOptions options;
  options.session.allow_nofd_kick = true;  // the busy-poll front-end sends no kick eventfds
  vdev::Server server(
      io, path,
      [device_options](const std::string&) {
        return std::make_unique<vdev::EchoDevice>(device_options);
      },
      options);
  std::string error;
  if (!server.Start(&error)) {
    std::fprintf(stderr, "vdev_bench back-end: %s\n", error.c_str());
    _exit(1);
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) {
    server.Stop();
    io.stop();
  });
  io.run();
}

Result VdevRoundTrips(const std::string& path, bool busy_poll, int batch, double seconds) {
  Result r{busy_poll ? "vdev_busy_poll" : "vdev_interrupt", batch};
  VirtioUser dev;
  VirtioUser::Options o;
  o.num_queues = 1;
  o.queue_size = 256;
  o.busy_poll = busy_poll;
  Status s;
  for (int i = 0; i < 200; ++i) {  // the previous connection may still be closing
    s = dev.Connect(path, o);
    if (s.ok()) break;
    usleep(10000);
  }
  if (!s.ok()) {
    r.error = s.ToString();
    return r;
  }
  // Like the SPSC reference, every round trip writes its request and reads
  // its response, so both pay for the same data crossing between the CPUs.
  std::vector<Buffer> req(static_cast<size_t>(batch)), resp(static_cast<size_t>(batch));
  std::vector<uint8_t*> req_data(static_cast<size_t>(batch)), resp_data(static_cast<size_t>(batch));
  for (size_t i = 0; i < static_cast<size_t>(batch); ++i) {
    req_data[i] = static_cast<uint8_t*>(dev.Allocate(kMsg, &req[i].gpa));
    resp_data[i] = static_cast<uint8_t*>(dev.Allocate(kMsg, &resp[i].gpa));
    req[i].len = resp[i].len = kMsg;
  }
  // The same chains every batch, so they are described once; posting them
  // is one AddChains call, as a driver with a fixed buffer pool would do.
  std::vector<vdev::frontend::ChainBuffers> chains(static_cast<size_t>(batch));
  for (size_t i = 0; i < chains.size(); ++i) chains[i] = {{&req[i], 1}, {&resp[i], 1}, i};
  uint8_t msg[kMsg] = {7};
  Completion done[64];
  TimedLoop(r, seconds, batch, [&] {
    if (!r.error.empty()) return;
    for (size_t i = 0; i < static_cast<size_t>(batch); ++i) std::memcpy(req_data[i], msg, kMsg);
    size_t added = 0;
    Status a = dev.AddChains(0, chains, &added);
    if (!a.ok()) r.error = a.ToString();
    Status k = dev.Kick(0);
    if (!k.ok()) r.error = k.ToString();
    int got = 0;
    while (got < batch && r.error.empty()) {
      size_t n = 0;
      Status w = dev.WaitUsed(0, std::chrono::seconds(2), done, 64, &n);
      if (!w.ok()) r.error = w.ToString();
      for (size_t i = 0; i < n; ++i) Consume(resp_data[done[i].cookie]);
      got += static_cast<int>(n);
    }
  });
  // The device echoed what was sent (every response of the last batch).
  for (size_t i = 0; i < static_cast<size_t>(batch) && r.error.empty(); ++i) {
    if (std::memcmp(resp_data[i], msg, kMsg) != 0) r.error = "a response differs from its request";
  }
  dev.Disconnect();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vdev front-end/back-end round-trip benchmark"};
  double seconds = 2.0;
  bool long_run = false;
  bool no_pin = false;
  std::string only;
  app.add_option("--only", only, "run only the cases whose name contains this (profiling)");
  app.add_option("--seconds", seconds, "measurement time per case (default 2)");
  app.add_flag("--long", long_run, "10 s per case instead of the default");
  app.add_flag("--no-pin", no_pin, "do not pin processes to CPUs 0 and 1");
  CLI11_PARSE(app, argc, argv);
  if (long_run) seconds = 10.0;
  g_pin = !no_pin;

  // The back-end process is forked first, while this process has one thread.
  const std::string path = "/tmp/vdev-bench-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  pid_t backend = Spawn([&] { RunBackend(path); });
  const bool pinned = Pin(kFrontendCpu);
  for (int i = 0; i < 400; ++i) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) break;
    usleep(5000);
  }
  Print({{"bench", "vdev"},
         {"setup", "processes"},
         {"pinned", pinned},
         {"frontend_cpu", pinned ? kFrontendCpu : -1},
         {"peer_cpu", pinned ? kPeerCpu : -1},
         {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
         {"message_bytes", kMsg},
         {"seconds_per_case", seconds}});

  auto want = [&](const char* name) { return only.empty() || std::strstr(name, only.c_str()); };
  Result eventfd("eventfd_pingpong"), unix64("unix_socket_64b"), spsc1("shm_spsc_ring"),
      spsc32("shm_spsc_ring", 32), irq1("vdev_interrupt"), irq32("vdev_interrupt", 32),
      poll1("vdev_busy_poll"), poll32("vdev_busy_poll", 32);
  if (want("eventfd_pingpong")) Report(eventfd = EventfdPingPong(seconds));
  if (want("unix_socket_64b")) Report(unix64 = UnixPingPong(seconds));
  if (want("shm_spsc_ring")) {
    Report(spsc1 = SpscRing(seconds, 1));
    Report(spsc32 = SpscRing(seconds, 32));
  }
  Result fe32("vdev_frontend_only", 32);
  if (want("vdev_frontend_only")) Report(fe32 = FrontendOnly(32, std::min(seconds, 1.0)));
  if (want("vdev_interrupt")) {
    Report(irq1 = VdevRoundTrips(path, false, 1, seconds));
    Report(irq32 = VdevRoundTrips(path, false, 32, seconds));
  }
  if (want("vdev_busy_poll")) {
    Report(poll1 = VdevRoundTrips(path, true, 1, seconds));
    Report(poll32 = VdevRoundTrips(path, true, 32, seconds));
  }
  // Both goals once more, as short rounds that alternate the reference and
  // vdev: a neighbour that slows this machine for a while then slows both
  // sides of a round, not just one case. The median round is the result.
  const double slice = std::max(seconds / kPairedRounds, 0.1);
  std::vector<double> paired, paired_ring_rps, paired_vdev_rps;
  if (want("paired_busy_poll")) {
    for (int round = 0; round < kPairedRounds; ++round) {
      Result ring = SpscRing(slice, 32);
      Result ours = VdevRoundTrips(path, true, 32, slice);
      if (!ours.error.empty()) {
        Report(ours);
        break;
      }
      paired.push_back(ours.rps() / std::max(ring.rps(), 1.0));
      paired_ring_rps.push_back(ring.rps());
      paired_vdev_rps.push_back(ours.rps());
    }
    if (!paired.empty()) {
      Print({{"bench", "vdev"},
             {"case", "paired_rounds"},
             {"batch", 32},
             {"ratios", paired},
             {"shm_spsc_ring_requests_per_s", paired_ring_rps},
             {"vdev_busy_poll_requests_per_s", paired_vdev_rps}});
    }
  }
  std::vector<double> paired_irq, paired_eventfd_p50, paired_irq_p50;
  if (want("paired_interrupt")) {
    for (int round = 0; round < kPairedRounds; ++round) {
      Result floor = EventfdPingPong(slice);
      Result ours = VdevRoundTrips(path, false, 1, slice);
      if (!ours.error.empty()) {
        Report(ours);
        break;
      }
      paired_eventfd_p50.push_back(floor.Percentile(0.5) / 1000.0);
      paired_irq_p50.push_back(ours.Percentile(0.5) / 1000.0);
      paired_irq.push_back(ours.Percentile(0.5) / std::max(floor.Percentile(0.5), 1.0));
    }
    if (!paired_irq.empty()) {
      Print({{"bench", "vdev"},
             {"case", "paired_interrupt_rounds"},
             {"batch", 1},
             {"ratios", paired_irq},
             {"eventfd_pingpong_p50_us", paired_eventfd_p50},
             {"vdev_interrupt_p50_us", paired_irq_p50}});
    }
  }

  kill(backend, SIGTERM);
  waitpid(backend, nullptr, 0);
  unlink(path.c_str());

  if (!only.empty()) return 0;
  auto ratio = [](const char* name, double value, const char* goal, bool met) {
    Print({{"bench", "vdev"}, {"ratio", name}, {"value", value}, {"goal", goal}, {"met", met}});
  };
  // Both goals are judged on the paired rounds. The long cases above ran
  // seconds apart, and this host's neighbours can slow one of them by a
  // factor of three and not the other (single-case busy-poll ratios of 0.47
  // and 2.2 came from runs whose paired medians were 0.56 and 0.58).
  const double r1 = irq1.Percentile(0.5) / std::max(eventfd.Percentile(0.5), 1.0);
  ratio("vdev_interrupt_p50_over_eventfd_p50", r1, "informational (unpaired)", true);
  if (!paired_irq.empty()) {
    std::sort(paired_irq.begin(), paired_irq.end());
    const double r1p = paired_irq[paired_irq.size() / 2];
    ratio("vdev_interrupt_p50_over_eventfd_p50_paired_median", r1p, "<= 1.5", r1p <= 1.5);
  }
  const double r2 = poll32.rps() / std::max(spsc32.rps(), 1.0);
  ratio("vdev_busy_poll_batch32_rps_over_spsc_batch32_rps", r2, "informational (unpaired)", true);
  const double r2m = poll32.RpsAtP50() / std::max(spsc32.RpsAtP50(), 1.0);
  ratio("vdev_busy_poll_batch32_rps_at_p50_over_spsc_batch32_rps_at_p50", r2m,
        "informational (unpaired)", true);
  if (!paired.empty()) {
    std::sort(paired.begin(), paired.end());
    const double r2p = paired[paired.size() / 2];
    ratio("vdev_busy_poll_batch32_rps_over_spsc_batch32_rps_paired_median", r2p, ">= 0.5",
          r2p >= 0.5);
  }
  const double r3 = poll1.Percentile(0.5) / std::max(spsc1.Percentile(0.5), 1.0);
  ratio("vdev_busy_poll_p50_over_spsc_p50", r3, "informational", true);
  const double r4 = irq1.Percentile(0.5) / std::max(unix64.Percentile(0.5), 1.0);
  ratio("vdev_interrupt_p50_over_unix_socket_p50", r4, "informational", true);
  return 0;
}
