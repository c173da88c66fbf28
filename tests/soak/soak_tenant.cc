#include "soak_tenant.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#if defined(__SANITIZE_ADDRESS__)
#define HZ_SOAK_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HZ_SOAK_LSAN 1
#endif
#endif
#ifdef HZ_SOAK_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace hz::soak {
namespace {

using std::chrono::milliseconds;

constexpr size_t kCount = 64;  // floats per rank in each all-reduce
constexpr uint32_t kCommTimeoutMs = 5000;
constexpr size_t kMaxMessages = 50;
constexpr int kPauseUs = 500;  // between all-reduces: leaves the CPUs to the daemon

// What rank `rank` of tenant `tag` contributes: small integers, so every
// float sum is exact and carries the tenant's tag.
float Contribution(int tag, int rank, uint64_t iter, size_t i) {
  return static_cast<float>((tag + 1) * 100 + rank + static_cast<int>(i % 5) +
                            static_cast<int>(iter % 3));
}

}  // namespace

nlohmann::json Control(const std::string& state_dir, const nlohmann::json& req, int timeout_ms) {
  const nlohmann::json failed = {{"ok", false}, {"error", "no answer"}};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return failed;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/ctl.sock", state_dir.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return {{"ok", false}, {"error", "connect failed"}};
  }
  const std::string line = req.dump() + "\n";
  std::string in;
  bool sent = send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size());
  auto deadline = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
  while (sent && in.find('\n') == std::string::npos) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (in.find('\n') == std::string::npos) return failed;
  nlohmann::json r = nlohmann::json::parse(in.substr(0, in.find('\n')), nullptr, false);
  return r.is_object() ? r : failed;
}

void Totals::Violation(std::atomic<uint64_t>& counter, const std::string& what) {
  ++counter;
  std::fprintf(stderr, "soak: VIOLATION %s\n", what.c_str());
  std::lock_guard<std::mutex> l(mu_);
  if (messages_.size() < kMaxMessages) messages_.push_back(what);
}

std::vector<std::string> Totals::Messages() {
  std::lock_guard<std::mutex> l(mu_);
  return messages_;
}

uint64_t Epochs::Current() {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_;
}

bool Epochs::Broken(uint64_t e) {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_ != e || broken_;
}

void Epochs::Break(uint64_t e) {
  std::lock_guard<std::mutex> l(mu_);
  if (epoch_ == e) broken_ = true;
  cv_.notify_all();
}

void Epochs::PublishUid(uint64_t e, const hz_uid_t& uid) {
  std::lock_guard<std::mutex> l(mu_);
  if (epoch_ != e) return;
  uid_ = uid;
  has_uid_ = true;
  cv_.notify_all();
}

bool Epochs::WaitUid(uint64_t e, hz_uid_t* uid, const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::seconds(20),
               [&] { return epoch_ != e || broken_ || has_uid_ || stop; });
  if (epoch_ != e || broken_ || !has_uid_) return false;
  *uid = uid_;
  return true;
}

void Epochs::Leave(uint64_t e, const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> l(mu_);
  if (epoch_ != e) return;
  broken_ = true;
  if (++left_ == ranks_) {
    ++epoch_;
    left_ = 0;
    broken_ = false;
    has_uid_ = false;
    cv_.notify_all();
    return;
  }
  cv_.notify_all();
  // Wakes up now and then to notice the end of the run.
  while (epoch_ == e && !stop) cv_.wait_for(l, milliseconds(200));
}

void Epochs::WakeAll() {
  std::lock_guard<std::mutex> l(mu_);
  cv_.notify_all();
}

Tenant::Tenant(hz::testing::ServiceProcess* svc, TenantSpec spec, Totals* totals,
               const std::atomic<bool>* stop, uint64_t seed)
    : svc_(svc),
      spec_(std::move(spec)),
      totals_(totals),
      stop_(stop),
      seed_(seed),
      epochs_(static_cast<int>(spec_.rank_socks.size())) {}

Tenant::~Tenant() {
  Join();
}

void Tenant::Start() {
  for (size_t r = 0; r < spec_.rank_socks.size(); ++r) {
    threads_.emplace_back([this, r] { RankLoop(static_cast<int>(r)); });
  }
  threads_.emplace_back([this] { OpsLoop(); });
}

void Tenant::Join() {
  epochs_.WakeAll();
  verify_cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

uint64_t Tenant::RequestVerify() {
  std::lock_guard<std::mutex> l(verify_mu_);
  return ++verify_requested_;
}

bool Tenant::WaitVerified(uint64_t ticket, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(verify_mu_);
  verify_cv_.wait_until(l, deadline, [&] { return verify_done_ >= ticket || *stop_; });
  return verify_done_ >= ticket;
}

// A VM socket serves one front-end at a time and is gone while the daemon
// restarts: retry until it opens or the run ends.
hz_device_t* Tenant::OpenRetry(const std::string& sock) {
  const std::string spec = "vhost-user:" + sock;
  while (!*stop_) {
    hz_device_t* dev = nullptr;
    if (hz_open(spec.c_str(), &dev) == HZ_OK) return dev;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return nullptr;
}

void Tenant::RankLoop(int rank) {
  while (!*stop_) {
    const uint64_t e = epochs_.Current();
    hz_device_t* dev = OpenRetry(spec_.rank_socks[rank]);
    if (dev != nullptr && !RankEpoch(rank, e, &dev)) ++totals_->reconnect;
    if (dev != nullptr) hz_close(dev);
    epochs_.Leave(e, *stop_);
  }
}

// One communicator's life: join, then all-reduce until something fails.
// Returns false when the epoch ended by a failure.
bool Tenant::RankEpoch(int rank, uint64_t e, hz_device_t** dev) {
  hz_uid_t uid{};
  if (rank == 0) {
    if (hz_comm_get_uid(*dev, &uid) != HZ_OK) {
      epochs_.Break(e);
      return false;
    }
    epochs_.PublishUid(e, uid);
  } else if (!epochs_.WaitUid(e, &uid, *stop_)) {
    return false;
  }
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = kCommTimeoutMs;
  hz_comm_t* comm = nullptr;
  const uint32_t nranks = static_cast<uint32_t>(spec_.rank_socks.size());
  if (hz_comm_init(*dev, &uid, nranks, static_cast<uint32_t>(rank), &cfg, &comm) != HZ_OK) {
    epochs_.Break(e);
    return false;
  }
  for (uint64_t iter = 0; !*stop_ && !epochs_.Broken(e); ++iter) {
    int expected = rank;
    if (kill_rank_.compare_exchange_strong(expected, -1)) {
      // Dies: the connection closes with the communicator still joined. Its
      // handle is abandoned on purpose (freeing it would need the device).
#ifdef HZ_SOAK_LSAN
      __lsan_ignore_object(comm);
#endif
      hz_close(*dev);
      *dev = nullptr;
      epochs_.Break(e);
      return false;
    }
    if (!AllReduceOnce(rank, comm, iter)) {
      epochs_.Break(e);
      hz_comm_abort(comm);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(kPauseUs));
  }
  hz_comm_destroy(comm);
  return true;
}

bool Tenant::AllReduceOnce(int rank, hz_comm_t* comm, uint64_t iter) {
  const int tag = spec_.index;
  const int n = static_cast<int>(spec_.rank_socks.size());
  float send[kCount], recv[kCount];
  for (size_t i = 0; i < kCount; ++i) {
    send[i] = Contribution(tag, rank, iter, i);
    recv[i] = -1;
  }
  int rc = hz_allreduce(comm, send, recv, kCount, HZ_FP32, HZ_SUM);
  if (rc != HZ_OK) return false;
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += Contribution(tag, r, iter, i);
    if (recv[i] != want) {
      char msg[160];
      std::snprintf(msg, sizeof(msg), "tenant %s rank %d all-reduce %llu element %zu: %g, want %g",
                    spec_.name.c_str(), rank, static_cast<unsigned long long>(iter), i,
                    static_cast<double>(recv[i]), static_cast<double>(want));
      totals_->Violation(totals_->wrong_results, msg);
      return false;
    }
  }
  if (rank == 0) {
    ++collectives_;
    ++totals_->allreduce;
  }
  return true;
}

}  // namespace hz::soak
