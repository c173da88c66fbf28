// Chaos soak of harmonaized: tenants run collectives, checkpoints and events
// while a seeded fault injector kills ranks, SIGKILLs and restarts the daemon
// on its state directory, fills the checkpoint filesystem and exhausts the
// daemon's descriptors. After every fault each tenant reconnects and checks
// that everything acknowledged survived and that nothing of another tenant
// is visible. Prints one JSON line of totals; exits 1 if a guarantee broke.
//
//   soak [--duration S] [--tenants N] [--ranks N] [--seed N] [--faults K,K...]
//        [--require-every-fault]
// Fault kinds: kill_rank, kill_daemon, fill_disk, exhaust_fds (default: all).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz_client.h"
#include "soak_tenant.h"

namespace hz::soak {
namespace {

using hz::testing::ServiceProcess;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

enum class Fault { kKillRank, kKillDaemon, kFillDisk, kExhaustFds };
constexpr std::array<Fault, 4> kFaults = {Fault::kKillRank, Fault::kKillDaemon, Fault::kFillDisk,
                                          Fault::kExhaustFds};

constexpr rlim_t kDaemonFds = 1024;     // small enough for the soak to exhaust
constexpr int kIdleConnections = 1200;  // per endpoint, above kDaemonFds
constexpr const char* kCheckpointFs = "size=64m,mode=0700";
constexpr uint64_t kFillCapBytes = 64ull << 20;  // without a private mount
constexpr int kHoldMs = 3000;                    // how long a fault's pressure lasts
constexpr int kVerifyTimeoutMs = 90000;          // only detects a tenant that never recovers

struct Options {
  int duration_s = 1800;
  int tenants = 3;
  int ranks = 2;
  uint64_t seed = 0;
  bool require_every_fault = false;  // fail unless every kind was injected
  std::vector<Fault> faults{kFaults.begin(), kFaults.end()};
};

const char* Name(Fault f) {
  switch (f) {
    case Fault::kKillRank:
      return "kill_rank";
    case Fault::kKillDaemon:
      return "kill_daemon";
    case Fault::kFillDisk:
      return "fill_disk";
    case Fault::kExhaustFds:
      return "exhaust_fds";
  }
  return "?";
}

// "kill_rank,fill_disk": the kinds to inject.
bool ParseFaults(const std::string& list, std::vector<Fault>* out) {
  out->clear();
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    auto it =
        std::find_if(kFaults.begin(), kFaults.end(), [&](Fault f) { return name == Name(f); });
    if (it == kFaults.end()) return false;
    out->push_back(*it);
    start = end + 1;
  }
  return !out->empty();
}

bool ParseOptions(int argc, char** argv, Options* o) {
  o->seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](auto* v) {
      if (i + 1 >= argc) return false;
      *v = static_cast<std::remove_pointer_t<decltype(v)>>(std::stoull(argv[++i]));
      return true;
    };
    bool ok = true;
    if (a == "--duration") {
      ok = next(&o->duration_s);
    } else if (a == "--tenants") {
      ok = next(&o->tenants);
    } else if (a == "--ranks") {
      ok = next(&o->ranks);
    } else if (a == "--seed") {
      ok = next(&o->seed);
    } else if (a == "--faults") {
      ok = i + 1 < argc && ParseFaults(argv[++i], &o->faults);
    } else if (a == "--require-every-fault") {
      o->require_every_fault = true;
    } else {
      ok = false;
    }
    if (!ok) return false;
  }
  return o->duration_s > 0 && o->tenants >= 1 && o->ranks >= 2 && o->ranks <= 16;
}

// The checkpoint directory on a small tmpfs in a private mount namespace, so
// filling it touches nothing outside this run. Needs CAP_SYS_ADMIN; without
// it the fill fault writes a capped file on the state directory's
// filesystem instead (pressure, but no ENOSPC).
bool MountCheckpointFs(const std::string& dir) {
  const std::string ck = dir + "/checkpoints";
  mkdir(ck.c_str(), 0700);
  if (unshare(CLONE_NEWNS) != 0) return false;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  return mount("hz-soak", ck.c_str(), "tmpfs", 0, kCheckpointFs) == 0;
}

class Injector {
 public:
  Injector(const Options& o, ServiceProcess* svc, std::vector<std::unique_ptr<Tenant>>* tenants,
           Totals* totals, bool private_fs)
      : o_(o),
        svc_(svc),
        tenants_(tenants),
        totals_(totals),
        private_fs_(private_fs),
        rng_(o.seed ^ 0xfa17u) {}

  bool StartDaemon() {
    if (!svc_->Start({"--metrics-port", std::to_string(port_)})) return false;
    rlimit fds{kDaemonFds, kDaemonFds};
    prlimit(svc_->pid(), RLIMIT_NOFILE, &fds, nullptr);
    return true;
  }

  void Run(Clock::time_point end) {
    std::vector<Fault> order = o_.faults;
    std::shuffle(order.begin(), order.end(), rng_);  // every kind early on
    // Every kind at least once, however short the run.
    for (size_t n = 0; Clock::now() < end || n < order.size(); ++n) {
      std::this_thread::sleep_for(milliseconds(2000 + rng_() % 3000));
      Fault f = n < order.size() ? order[n] : order[rng_() % order.size()];
      Inject(f);
      CheckRecovery(f);
    }
  }

  int port() const { return port_; }

 private:
  void Inject(Fault f) {
    std::fprintf(stderr, "soak: fault %s\n", Name(f));
    switch (f) {
      case Fault::kKillRank: {
        Tenant& t = *(*tenants_)[rng_() % tenants_->size()];
        t.KillRank(static_cast<int>(rng_() % static_cast<uint64_t>(o_.ranks)));
        ++totals_->kill_rank;
        break;
      }
      case Fault::kKillDaemon:
        kill(svc_->pid(), SIGKILL);
        svc_->Wait();
        if (!StartDaemon()) totals_->Violation(totals_->unrecovered, "harmonaized did not restart");
        ++totals_->kill_daemon;
        break;
      case Fault::kFillDisk:
        FillCheckpointFs();
        ++totals_->fill_disk;
        break;
      case Fault::kExhaustFds:
        ExhaustDescriptors();
        ++totals_->exhaust_fds;
        break;
    }
  }

  void FillCheckpointFs() {
    const std::string path = svc_->dir() + "/checkpoints/soak-filler";
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    std::vector<char> chunk(1 << 20, 'f');
    for (uint64_t written = 0; private_fs_ || written < kFillCapBytes; written += chunk.size()) {
      if (write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) break;
    }
    close(fd);
    std::this_thread::sleep_for(milliseconds(kHoldMs));  // tenants keep saving meanwhile
    unlink(path.c_str());
  }

  static int Connecting(int domain, const sockaddr* a, socklen_t len) {
    int fd = socket(domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, a, len) != 0 && errno != EINPROGRESS) {
      close(fd);
      return -1;
    }
    return fd;
  }

  void ExhaustDescriptors() {
    sockaddr_in tcp{};
    tcp.sin_family = AF_INET;
    tcp.sin_port = htons(static_cast<uint16_t>(port_));
    tcp.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sockaddr_un ctl{};
    ctl.sun_family = AF_UNIX;
    std::snprintf(ctl.sun_path, sizeof(ctl.sun_path), "%s/ctl.sock", svc_->dir().c_str());
    std::vector<int> fds;
    for (int i = 0; i < kIdleConnections; ++i) {
      for (int fd : {Connecting(AF_INET, reinterpret_cast<sockaddr*>(&tcp), sizeof(tcp)),
                     Connecting(AF_UNIX, reinterpret_cast<sockaddr*>(&ctl), sizeof(ctl))}) {
        if (fd >= 0) fds.push_back(fd);
      }
    }
    std::this_thread::sleep_for(milliseconds(kHoldMs));
    for (int fd : fds) close(fd);
  }

  // The operator's view: `hzctl status` answers (bounded, so that a daemon
  // that stopped serving its control socket is a failure, not a hang).
  bool Ping() {
    const std::string cmd = std::string("timeout 5 ") + HZ_HZCTL_PATH + " --socket " + svc_->dir() +
                            "/ctl.sock status >/dev/null 2>&1";
    for (int i = 0; i < 20; ++i) {
      if (std::system(cmd.c_str()) == 0) return true;
      std::this_thread::sleep_for(milliseconds(500));
    }
    return false;
  }

  // The daemon answers, every tenant verified what it had acknowledged, and
  // the tenants' collectives make progress again.
  void CheckRecovery(Fault f) {
    const std::string after = std::string(" after ") + Name(f);
    if (!Ping()) totals_->Violation(totals_->ping_failures, "hzctl status failed" + after);
    const auto deadline = Clock::now() + milliseconds(kVerifyTimeoutMs);
    std::vector<uint64_t> tickets;
    for (auto& t : *tenants_) tickets.push_back(t->RequestVerify());
    std::vector<uint64_t> before;
    for (size_t i = 0; i < tenants_->size(); ++i) {
      Tenant& t = *(*tenants_)[i];
      if (!t.WaitVerified(tickets[i], deadline)) {
        totals_->Violation(totals_->unrecovered, t.spec().name + " did not verify" + after);
      }
      before.push_back(t.Collectives());
    }
    for (size_t i = 0; i < tenants_->size(); ++i) {
      Tenant& t = *(*tenants_)[i];
      while (t.Collectives() == before[i] && Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(20));
      }
      if (t.Collectives() == before[i]) {
        totals_->Violation(totals_->unrecovered,
                           t.spec().name + " collectives made no progress" + after);
      }
    }
    std::fprintf(stderr, "soak: recovered%s\n", after.c_str());
  }

  const Options& o_;
  ServiceProcess* svc_;
  std::vector<std::unique_ptr<Tenant>>* tenants_;
  Totals* totals_;
  bool private_fs_;
  std::mt19937_64 rng_;
  int port_ = hz::testing::FreeTcpPort();
};

json TotalsJson(const Options& o, Totals& t, double secs, bool private_fs) {
  return json{{"seed", o.seed},
              {"duration_s", secs},
              {"tenants", o.tenants},
              {"ranks", o.ranks},
              {"fill_mode", private_fs ? "tmpfs" : "capped-file"},
              {"ops",
               {{"allreduce", t.allreduce.load()},
                {"ckpt_save", t.ckpt_save.load()},
                {"ckpt_durable", t.ckpt_durable.load()},
                {"ckpt_restore", t.ckpt_restore.load()},
                {"ckpt_list", t.ckpt_list.load()},
                {"event_inject", t.event_inject.load()},
                {"event_ack", t.event_ack.load()},
                {"verify", t.verify.load()},
                {"reconnect", t.reconnect.load()},
                {"restore_errors", t.restore_errors.load()}}},
              {"faults",
               {{"kill_rank", t.kill_rank.load()},
                {"kill_daemon", t.kill_daemon.load()},
                {"fill_disk", t.fill_disk.load()},
                {"exhaust_fds", t.exhaust_fds.load()}}},
              {"acked_lost", t.acked_lost.load()},
              {"isolation_violations", t.isolation.load()},
              {"wrong_results", t.wrong_results.load()},
              {"unrecovered", t.unrecovered.load()},
              {"ping_failures", t.ping_failures.load()},
              {"false_corrupt", t.false_corrupt.load()},
              {"violations", t.Messages()}};
}

bool Passed(const Options& o, Totals& t) {
  bool ok = t.acked_lost == 0 && t.isolation == 0 && t.wrong_results == 0 && t.unrecovered == 0 &&
            t.ping_failures == 0 && t.false_corrupt == 0;
  // A run that did nothing proves nothing.
  ok = ok && t.allreduce > 0 && t.ckpt_durable > 0 && t.ckpt_restore > 0 && t.event_ack > 0 &&
       t.verify > 0;
  if (o.require_every_fault) {
    ok = ok && t.kill_rank > 0 && t.kill_daemon > 0 && t.fill_disk > 0 && t.exhaust_fds > 0;
  }
  return ok;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s [--duration S] [--tenants N] [--ranks 2..16] [--seed N] "
                 "[--faults kill_rank,kill_daemon,fill_disk,exhaust_fds] [--require-every-fault]\n",
                 argv[0]);
    return 2;
  }
  std::fprintf(stderr, "soak: seed %llu\n", static_cast<unsigned long long>(o.seed));
  signal(SIGPIPE, SIG_IGN);
  rlimit mine{};
  getrlimit(RLIMIT_NOFILE, &mine);
  mine.rlim_cur = mine.rlim_max;  // room for the idle connections
  setrlimit(RLIMIT_NOFILE, &mine);

  auto svc = std::make_unique<ServiceProcess>();
  const bool private_fs = MountCheckpointFs(svc->dir());
  if (!private_fs) std::fprintf(stderr, "soak: no private tmpfs, filling with a capped file\n");
  Totals totals;
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<Tenant>> tenants;
  Injector injector(o, svc.get(), &tenants, &totals, private_fs);
  if (!injector.StartDaemon()) {
    std::fprintf(stderr, "soak: harmonaized did not start\n");
    return 1;
  }
  std::mt19937_64 seeds(o.seed);
  for (int i = 0; i < o.tenants; ++i) {
    TenantSpec spec;
    spec.index = i;
    spec.name = "soak" + std::to_string(i);
    std::vector<std::string> socks = svc->TenantWithVms(spec.name, o.ranks + 1);
    if (socks.size() != static_cast<size_t>(o.ranks + 1)) {
      std::fprintf(stderr, "soak: could not bind the VMs of %s\n", spec.name.c_str());
      return 1;
    }
    spec.ops_sock = socks.back();
    socks.pop_back();
    spec.rank_socks = socks;
    tenants.push_back(std::make_unique<Tenant>(svc.get(), spec, &totals, &stop, seeds()));
  }
  const auto t0 = Clock::now();
  for (auto& t : tenants) t->Start();
  std::this_thread::sleep_for(seconds(2));
  injector.Run(t0 + seconds(o.duration_s));
  stop = true;
  for (auto& t : tenants) t->Join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%s\n", TotalsJson(o, totals, secs, private_fs).dump().c_str());
  std::fflush(stdout);
  tenants.clear();
  svc->Terminate();
  if (private_fs) umount2((svc->dir() + "/checkpoints").c_str(), MNT_DETACH);
  svc.reset();
  return Passed(o, totals) ? 0 : 1;
}

}  // namespace
}  // namespace hz::soak

int main(int argc, char** argv) {
  return hz::soak::Main(argc, argv);
}
