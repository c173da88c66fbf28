// The driver transport: a tenant inside a VM uses /dev/harmonaizeN. The
// driver pins user buffers for each request's lifetime and builds the
// request header and status trailer; completions and events arrive as
// records from read().
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "harmonaize/harmonaize_uapi.h"
#include "harmonaize/hz.h"
#include "transport.h"

namespace hz::lib {
namespace {

int FromErrno(int e) {
  switch (e) {
    case ENODEV:
    case ENOTTY:  // not a HarmonAIze device node
    case ENXIO:
    case ENOENT:
      return HZ_ENODEV;
    case ENOMEM:
      return HZ_ENOMEM;
    case EFAULT:
      return HZ_EFAULT;
    case EINVAL:
      return HZ_EINVAL;
    case EAGAIN:
      return HZ_EAGAIN;
    case EPERM:
    case EACCES:
      return HZ_EPERM;
    case ETIMEDOUT:
      return HZ_ETIMEDOUT;
    default:
      return HZ_ETRANSPORT;
  }
}

class DriverTransport : public Transport {
 public:
  explicit DriverTransport(std::string node) : path_(std::move(node)) {}
  ~DriverTransport() override {
    if (fd_ >= 0) close(fd_);
  }

  int Open() {
    fd_ = open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) return FromErrno(errno);
    hz_ioc_info info{};
    if (ioctl(fd_, HZ_IOC_INFO, &info) != 0) return FromErrno(errno);
    // Version 1 drivers leave HELLO to user space; later ones say it themselves.
    if (info.uapi_version != HZ_UAPI_VERSION && info.uapi_version != 1) return HZ_EVERSION;
    driver_says_hello_ = info.uapi_version >= 2;
    std::memcpy(&config_, info.config, sizeof(config_));
    if (config_.magic != HZ_CONFIG_MAGIC) return HZ_ENODEV;
    num_request_queues_ = info.num_request_queues;
    return HZ_OK;
  }

  bool SessionHello(Completion* done, hz_hello_result* out) override {
    if (!driver_says_hello_) return false;
    hz_ioc_hello h{};
    *done = {};
    if (ioctl(fd_, HZ_IOC_HELLO, &h) != 0) {
      done->err = FromErrno(errno);
      return true;
    }
    done->err = h.error != 0 ? FromErrno(-h.error) : 0;
    done->status = h.status;
    done->result_len = std::min<uint32_t>(h.result_len, sizeof(*out));
    std::memcpy(out, h.result, done->result_len);
    return true;
  }

  const char* kind() const override { return "driver"; }
  const std::string& path() const override { return path_; }
  const hz_config& config() const override { return config_; }

  int Submit(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
             std::span<const DataSeg> data, void* result, uint32_t result_len,
             uint64_t* ticket) override {
    if (queue != kControlQueue && queue >= num_request_queues_) return HZ_EINVAL;
    std::vector<hz_ioc_seg> segs;
    for (const DataSeg& d : data) {
      if (d.len) segs.push_back({reinterpret_cast<uint64_t>(d.ptr), d.len, 0, 0});
    }
    if (result_len)
      segs.push_back({reinterpret_cast<uint64_t>(result), result_len, HZ_SEG_F_WRITE, 0});
    hz_ioc_submit s{};
    s.opcode = opcode;
    s.queue = queue == kControlQueue ? HZ_QUEUE_CONTROL : queue;
    s.flags = HZ_SUBMIT_F_ASYNC;
    s.args_ptr = reinterpret_cast<uint64_t>(args);
    s.args_len = args_len;
    s.num_segs = static_cast<uint32_t>(segs.size());
    s.segs_ptr = reinterpret_cast<uint64_t>(segs.data());
    if (ioctl(fd_, HZ_IOC_SUBMIT, &s) != 0) return FromErrno(errno);
    *ticket = s.token;
    return HZ_OK;
  }

  int Wait(uint64_t ticket, int timeout_ms, Completion* out,
           std::chrono::nanoseconds /*spin: the kernel waits*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto deadline = Deadline(timeout_ms);
    while (done_.count(ticket) == 0) {
      int rc = ReadRecords(deadline);
      if (rc != HZ_OK) return rc;
    }
    *out = done_[ticket];
    done_.erase(ticket);
    return HZ_OK;
  }

  int Alloc(size_t bytes, void** ptr) override {
    const size_t len = (bytes + 4095) & ~size_t{4095};
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return HZ_ENOMEM;
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[p] = len;
    *ptr = p;
    return HZ_OK;
  }

  void Free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return;
    munmap(it->first, it->second);
    allocations_.erase(it);
  }

  int Register(void* ptr, size_t len, uint32_t flags, uint32_t* region) override {
    hz_ioc_region r{};
    r.addr = reinterpret_cast<uint64_t>(ptr);
    r.len = len;
    r.flags = flags;
    if (ioctl(fd_, HZ_IOC_REGION_REGISTER, &r) != 0) return FromErrno(errno);
    *region = r.region_id;
    return HZ_OK;
  }

  int Unregister(uint32_t region) override {
    __u32 id = region;
    return ioctl(fd_, HZ_IOC_REGION_UNREGISTER, &id) == 0 ? HZ_OK : FromErrno(errno);
  }

  int EnableEvents() override {
    __u32 on = 1;
    return ioctl(fd_, HZ_IOC_EVENTS_ENABLE, &on) == 0 ? HZ_OK : FromErrno(errno);
  }

  int EventFd() override { return fd_; }

  int NextEvent(hz_event* ev, int timeout_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto deadline = Deadline(timeout_ms);
    while (events_.empty()) {
      int rc = ReadRecords(deadline);
      if (rc != HZ_OK) return rc;
    }
    *ev = events_.front();
    events_.pop_front();
    return HZ_OK;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static Clock::time_point Deadline(int timeout_ms) {
    return timeout_ms < 0 ? Clock::time_point::max()
                          : Clock::now() + std::chrono::milliseconds(timeout_ms);
  }

  // Reads whatever records are ready (waiting until the deadline), filing
  // completions by token and events in order. Caller holds mu_.
  int ReadRecords(Clock::time_point deadline) {
    auto now = Clock::now();
    if (now >= deadline) return HZ_ETIMEDOUT;
    int wait_ms =
        deadline == Clock::time_point::max()
            ? 1000
            : static_cast<int>(std::min<int64_t>(
                  1000,
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() +
                      1));
    pollfd p{fd_, POLLIN, 0};
    int n = poll(&p, 1, wait_ms);
    if (n < 0) return errno == EINTR ? HZ_OK : FromErrno(errno);
    if (n == 0) return HZ_OK;
    if (p.revents & (POLLERR | POLLHUP)) return HZ_ENODEV;
    hz_record recs[16];
    ssize_t got = read(fd_, recs, sizeof(recs));
    if (got < 0) return errno == EAGAIN || errno == EINTR ? HZ_OK : FromErrno(errno);
    for (ssize_t i = 0; i < got / static_cast<ssize_t>(sizeof(hz_record)); ++i) {
      const hz_record& r = recs[i];
      if (r.type == HZ_REC_COMPLETION) {
        Completion c;
        c.err = r.completion.error != 0 ? FromErrno(-r.completion.error) : 0;
        c.status = r.completion.status;
        c.result_len = r.completion.result_len;
        c.detail = r.completion.detail;
        done_[r.completion.token] = c;
      } else if (r.type == HZ_REC_EVENT) {
        hz_event ev;
        std::memcpy(&ev, r.event, sizeof(ev));
        events_.push_back(ev);
      } else if (r.type == HZ_REC_EVENTS_LOST) {
        // The driver's own queue overflowed: surface it as a LOST record.
        hz_event ev{};
        ev.topic = HZ_TOPIC_LOST;
        uint64_t lost = r.completion.user_data;
        std::memcpy(ev.payload, &lost, sizeof(lost));
        events_.push_back(ev);
      }
    }
    return HZ_OK;
  }

  std::string path_;
  int fd_ = -1;
  hz_config config_{};
  uint32_t num_request_queues_ = 0;
  bool driver_says_hello_ = false;
  std::mutex mu_;
  std::map<uint64_t, Completion> done_;
  std::deque<hz_event> events_;
  std::map<void*, size_t> allocations_;
};

}  // namespace

int OpenDriver(const std::string& node, std::unique_ptr<Transport>* out) {
  auto t = std::make_unique<DriverTransport>(node);
  int rc = t->Open();
  if (rc != HZ_OK) return rc;
  *out = std::move(t);
  return HZ_OK;
}

int OpenTransport(const std::string& spec, std::unique_ptr<Transport>* out) {
  static constexpr char kVhostUser[] = "vhost-user:";
  if (spec.rfind(kVhostUser, 0) == 0)
    return OpenVirtioUser(spec.substr(sizeof(kVhostUser) - 1), out);
  return OpenDriver(spec, out);
}

}  // namespace hz::lib
