// The virtio-user transport: a container or host-process tenant drives
// harmonaized's vhost-user socket itself. Guest memory is a memfd arena the
// service maps; requests are copied into it, registered memory is allocated
// from it (and grows by adding memfd regions).
#include <sys/stat.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "harmonaize/hz.h"
#include "transport.h"
#include "vdev/frontend/virtio_user.h"

namespace hz::lib {
namespace {

using vdev::frontend::Completion;
using vdev::frontend::HostBuffer;
using vdev::frontend::VirtioUser;

constexpr uint64_t kArenaBytes = 64ull << 20;  // first memfd region
constexpr uint64_t kGrowBytes = 64ull << 20;   // smallest extra region
constexpr uint32_t kEventBuffers = 64;         // event-queue buffers kept posted

int FromVdev(const vdev::frontend::Status& s) {
  using Code = vdev::frontend::Status::Code;
  switch (s.code()) {
    case Code::kOk:
      return HZ_OK;
    case Code::kTimeout:
      return HZ_ETIMEDOUT;
    case Code::kNoSpace:
      return HZ_ENOMEM;
    case Code::kDisconnected:
      return HZ_ENODEV;
    default:
      return HZ_ETRANSPORT;
  }
}

// The next wait's length until `deadline`: the first look at the used ring
// happens even when the deadline has passed (a timeout of 0 polls), and
// waits are sliced to at most a second so that a dead peer or a lost
// interrupt is noticed. False when the time is up.
bool NextSlice(std::chrono::steady_clock::time_point deadline, bool first,
               std::chrono::nanoseconds* slice) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) {
    *slice = std::chrono::nanoseconds(0);
    return first;
  }
  *slice = std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::seconds(1));
  return true;
}

class VirtioUserTransport : public Transport {
 public:
  explicit VirtioUserTransport(std::string socket) : path_(std::move(socket)) {}
  ~VirtioUserTransport() override { dev_.Disconnect(); }

  int Connect() {
    VirtioUser::Options o;
    o.config_size = sizeof(hz_config);
    o.memory_size = kArenaBytes;
    o.queue_size = 256;
    o.connect_timeout = std::chrono::milliseconds(5000);
    o.reply_timeout = std::chrono::milliseconds(5000);
    vdev::frontend::Status s = dev_.Connect(path_, o);
    if (!s.ok()) {
      // Nobody serving the socket is "no device"; anything else is a broken peer.
      return s.code() == vdev::frontend::Status::Code::kIoError ? HZ_ENODEV : FromVdev(s);
    }
    if (dev_.config().size() < sizeof(config_) ||
        (std::memcpy(&config_, dev_.config().data(), sizeof(config_)), config_.magic) !=
            HZ_CONFIG_MAGIC) {
      return HZ_ENODEV;  // not a HarmonAIze device
    }
    for (uint16_t i = 0; i < dev_.num_queues(); ++i)
      queues_.push_back(std::make_unique<QueueState>());
    return HZ_OK;
  }

  const char* kind() const override { return "vhost-user"; }
  const std::string& path() const override { return path_; }
  const hz_config& config() const override { return config_; }

  int Submit(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
             std::span<const DataSeg> data, void* result, uint32_t result_len,
             uint64_t* ticket) override {
    uint16_t q = QueueIndex(queue);
    if (q >= queues_.size()) return HZ_EINVAL;
    size_t data_len = 0;
    for (const DataSeg& d : data) data_len += d.len;
    const size_t readable = sizeof(hz_req_hdr) + args_len + data_len;
    const size_t writable = size_t{result_len} + sizeof(hz_status);
    if (readable > UINT32_MAX || writable > UINT32_MAX) return HZ_EINVAL;

    std::lock_guard<std::mutex> lock(queues_[q]->mu);
    auto* req = static_cast<uint8_t*>(dev_.Allocate(readable));
    auto* resp = static_cast<uint8_t*>(dev_.Allocate(writable));
    if (req == nullptr || resp == nullptr) {
      if (req) dev_.Free(req);
      if (resp) dev_.Free(resp);
      return HZ_ENOMEM;
    }
    const uint64_t id = next_ticket_.fetch_add(1);
    hz_req_hdr h{};
    h.opcode = opcode;
    h.args_len = args_len;
    h.request_id = id;
    std::memcpy(req, &h, sizeof(h));
    if (args_len) std::memcpy(req + sizeof(h), args, args_len);
    uint8_t* p = req + sizeof(h) + args_len;
    for (const DataSeg& d : data) {
      if (d.len) std::memcpy(p, d.ptr, d.len);
      p += d.len;
    }
    std::memset(resp, 0, writable);
    HostBuffer r{req, static_cast<uint32_t>(readable)};
    HostBuffer w{resp, static_cast<uint32_t>(writable)};
    vdev::frontend::Status s = dev_.AddChain(q, {&r, 1}, {&w, 1}, id);
    if (s.ok()) s = dev_.Kick(q);
    if (!s.ok()) {
      dev_.Free(req);
      dev_.Free(resp);
      return FromVdev(s);
    }
    queues_[q]->pending[id] =
        Pending{req, resp, static_cast<uint32_t>(writable), result, result_len};
    *ticket = (uint64_t{q} << 56) | id;
    return HZ_OK;
  }

  int Wait(uint64_t ticket, int timeout_ms, hz::lib::Completion* out,
           std::chrono::nanoseconds spin) override {
    const uint16_t q = static_cast<uint16_t>(ticket >> 56);
    const uint64_t id = ticket & ((1ull << 56) - 1);
    if (q >= queues_.size()) return HZ_EINVAL;
    QueueState& qs = *queues_[q];
    const auto deadline =
        timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::lock_guard<std::mutex> lock(qs.mu);
    auto it = qs.pending.find(id);
    if (it == qs.pending.end()) return HZ_EINVAL;
    for (bool first = true; qs.done.count(id) == 0; first = false) {
      std::chrono::nanoseconds slice;
      if (!NextSlice(deadline, first, &slice)) return HZ_ETIMEDOUT;
      Completion c[32];
      size_t n = 0;
      vdev::frontend::Status s = dev_.WaitUsed(q, slice, c, 32, &n, first ? spin : kNoSpin);
      for (size_t i = 0; i < n; ++i) qs.done[c[i].cookie] = c[i].len;
      if (!s.ok() && n == 0 && s.code() != vdev::frontend::Status::Code::kTimeout) {
        Finish(qs, it);
        out->err = FromVdev(s) == HZ_ENODEV ? HZ_ENODEV : HZ_ETRANSPORT;
        return HZ_OK;
      }
    }
    const uint32_t used = qs.done[id];
    qs.done.erase(id);
    const Pending& pd = it->second;
    *out = {};
    // Never trust the device's lengths: the status must fit where it was put.
    if (used < sizeof(hz_status) || used > pd.resp_len) {
      out->err = HZ_ETRANSPORT;
    } else {
      hz_status st;
      std::memcpy(&st, pd.resp + pd.resp_len - sizeof(hz_status), sizeof(st));
      out->status = st.status;
      out->detail = st.detail;
      out->result_len = std::min(st.result_len, pd.result_len);
      if (st.request_id != id) out->err = HZ_ETRANSPORT;
      if (pd.result && out->result_len) std::memcpy(pd.result, pd.resp, out->result_len);
    }
    Finish(qs, it);
    return HZ_OK;
  }

  int Alloc(size_t bytes, void** ptr) override {
    std::lock_guard<std::mutex> lock(mem_mu_);
    void* p = dev_.Allocate(bytes, nullptr, 4096);
    if (p == nullptr) {
      vdev::frontend::RegionInfo info;
      uint64_t grow = std::max<uint64_t>(kGrowBytes, (bytes + 2 * 4096 + 0xfffff) & ~0xfffffull);
      int rc = FromVdev(dev_.AddMemory(grow, true, &info));
      if (rc != HZ_OK) return rc == HZ_ETRANSPORT ? HZ_ENOMEM : rc;
      p = dev_.Allocate(bytes, nullptr, 4096);
      if (p == nullptr) return HZ_ENOMEM;
    }
    *ptr = p;
    return HZ_OK;
  }

  void Free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mem_mu_);
    dev_.Free(ptr);
  }

  int Register(void* ptr, size_t len, uint32_t flags, uint32_t* region) override {
    uint64_t gpa = 0;
    if (len == 0 || !dev_.memory().GpaOf(ptr, len, &gpa)) return HZ_EFAULT;
    hz_region_register_args a{};
    a.num_extents = 1;
    a.flags = flags;
    a.total_len = len;
    hz_extent e{gpa, len};
    DataSeg seg{&e, sizeof(e)};
    hz_region_register_result r{};
    return Call(HZ_OP_REGION_REGISTER, &a, sizeof(a), {&seg, 1}, &r, sizeof(r),
                [&] { *region = r.region_id; });
  }

  int Unregister(uint32_t region) override {
    hz_region_unregister_args a{};
    a.region_id = region;
    return Call(HZ_OP_REGION_UNREGISTER, &a, sizeof(a), {}, nullptr, 0, [] {});
  }

  int EnableEvents() override {
    if (queues_.size() <= HZ_VQ_EVENT) return HZ_ENOTSUP;
    std::lock_guard<std::mutex> lock(queues_[HZ_VQ_EVENT]->mu);
    if (!event_buffers_.empty()) return HZ_OK;
    const uint32_t size = config_.event_record_size;
    if (size < sizeof(hz_event)) return HZ_ETRANSPORT;
    for (uint32_t i = 0; i < kEventBuffers; ++i) {
      void* b = dev_.Allocate(size);
      if (b == nullptr) return HZ_ENOMEM;
      event_buffers_.push_back(b);
      int rc = PostEventBuffer(i);
      if (rc != HZ_OK) return rc;
    }
    return FromVdev(dev_.Kick(HZ_VQ_EVENT));
  }

  int EventFd() override { return dev_.call_fd(HZ_VQ_EVENT); }

  int NextEvent(hz_event* ev, int timeout_ms) override {
    if (queues_.size() <= HZ_VQ_EVENT) return HZ_ENOTSUP;
    QueueState& qs = *queues_[HZ_VQ_EVENT];
    std::lock_guard<std::mutex> lock(qs.mu);
    if (event_buffers_.empty()) return HZ_ESTATE;
    const auto deadline =
        timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (bool first = true; event_ready_.empty(); first = false) {
      std::chrono::nanoseconds slice;
      if (!NextSlice(deadline, first, &slice)) return HZ_ETIMEDOUT;
      Completion c[32];
      size_t n = 0;
      vdev::frontend::Status s = dev_.WaitUsed(HZ_VQ_EVENT, slice, c, 32, &n);
      for (size_t i = 0; i < n; ++i) event_ready_.push_back(c[i]);
      if (!s.ok() && n == 0 && s.code() != vdev::frontend::Status::Code::kTimeout)
        return FromVdev(s) == HZ_ENODEV ? HZ_ENODEV : HZ_ETRANSPORT;
    }
    Completion c = event_ready_.front();
    event_ready_.pop_front();
    if (c.cookie >= event_buffers_.size()) return HZ_ETRANSPORT;
    int rc = HZ_OK;
    if (c.len < sizeof(hz_event)) {
      rc = HZ_ETRANSPORT;  // a short record is a device error, not an event
    } else {
      std::memcpy(ev, event_buffers_[c.cookie], sizeof(*ev));
    }
    int post = PostEventBuffer(static_cast<uint32_t>(c.cookie));
    if (post == HZ_OK) post = FromVdev(dev_.Kick(HZ_VQ_EVENT));
    return rc != HZ_OK ? rc : post;
  }

 private:
  struct Pending {
    uint8_t* req;
    uint8_t* resp;
    uint32_t resp_len;
    void* result;
    uint32_t result_len;
  };
  struct QueueState {
    std::mutex mu;
    std::map<uint64_t, Pending> pending;
    std::map<uint64_t, uint32_t> done;  // id -> used length
  };

  uint16_t QueueIndex(uint16_t queue) const {
    if (queue == kControlQueue) return HZ_VQ_CONTROL;
    return static_cast<uint16_t>(HZ_VQ_REQUEST_BASE + queue);
  }

  void Finish(QueueState& qs, std::map<uint64_t, Pending>::iterator it) {
    dev_.Free(it->second.req);
    dev_.Free(it->second.resp);
    qs.pending.erase(it);
  }

  template <typename OnOk>
  int Call(uint16_t opcode, const void* args, uint32_t args_len, std::span<const DataSeg> data,
           void* result, uint32_t result_len, OnOk on_ok) {
    uint64_t t = 0;
    int rc = Submit(kControlQueue, opcode, args, args_len, data, result, result_len, &t);
    if (rc != HZ_OK) return rc;
    hz::lib::Completion c;
    rc = Wait(t, -1, &c, kNoSpin);
    if (rc != HZ_OK) return rc;
    if (c.err != 0) return c.err;
    if (c.status != HZ_S_OK) return -static_cast<int>(c.status);
    on_ok();
    return HZ_OK;
  }

  int PostEventBuffer(uint32_t i) {
    HostBuffer w{event_buffers_[i], config_.event_record_size};
    return FromVdev(dev_.AddChain(HZ_VQ_EVENT, {}, {&w, 1}, i));
  }

  std::string path_;
  VirtioUser dev_;
  hz_config config_{};
  std::vector<std::unique_ptr<QueueState>> queues_;
  std::atomic<uint64_t> next_ticket_{1};
  std::mutex mem_mu_;
  std::vector<void*> event_buffers_;
  std::deque<Completion> event_ready_;
};

}  // namespace

int OpenVirtioUser(const std::string& socket, std::unique_ptr<Transport>* out) {
  struct stat st;
  if (stat(socket.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return HZ_ENODEV;
  auto t = std::make_unique<VirtioUserTransport>(socket);
  int rc = t->Connect();
  if (rc != HZ_OK) return rc;
  *out = std::move(t);
  return HZ_OK;
}

}  // namespace hz::lib
