#include "hz_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <numeric>
#include <random>

namespace hz::testing {

using vdev::frontend::HostBuffer;

bool HzClient::Connect(const std::string& socket, uint64_t memory, std::string* error) {
  vdev::frontend::VirtioUser::Options o;
  o.config_size = sizeof(hz_config);
  o.memory_size = memory;
  o.queue_size = 256;
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.reply_timeout = std::chrono::milliseconds(5000);
  vdev::frontend::Status s = dev_.Connect(socket, o);
  if (!s.ok()) {
    if (error) *error = s.ToString();
    return false;
  }
  if (dev_.config().size() >= sizeof(config_))
    std::memcpy(&config_, dev_.config().data(), sizeof(config_));
  return true;
}

uint64_t HzClient::PostRaw(uint16_t queue, const std::vector<uint8_t>& readable,
                           uint32_t writable) {
  Slot slot;
  std::vector<HostBuffer> r, w;
  if (!readable.empty()) {
    slot.req = dev_.Allocate(readable.size());
    std::memcpy(slot.req, readable.data(), readable.size());
    r.push_back({slot.req, static_cast<uint32_t>(readable.size())});
  }
  if (writable > 0) {
    slot.resp = dev_.Allocate(writable);
    std::memset(slot.resp, 0xee, writable);
    slot.resp_len = writable;
    w.push_back({slot.resp, writable});
  }
  uint64_t cookie = next_cookie_++;
  if (!dev_.AddChain(queue, r, w, cookie).ok() || !dev_.Kick(queue).ok()) {
    if (slot.req) dev_.Free(slot.req);
    if (slot.resp) dev_.Free(slot.resp);
    return 0;
  }
  slots_[cookie] = slot;
  return cookie;
}

uint64_t HzClient::Post(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
                        const void* data, uint32_t data_len, uint32_t result_space,
                        uint64_t request_id) {
  std::vector<uint8_t> req(sizeof(hz_req_hdr) + args_len + data_len);
  hz_req_hdr h{};
  h.opcode = opcode;
  h.args_len = args_len;
  h.request_id = request_id != 0 ? request_id : next_cookie_;
  std::memcpy(req.data(), &h, sizeof(h));
  if (args_len) std::memcpy(req.data() + sizeof(h), args, args_len);
  if (data_len) std::memcpy(req.data() + sizeof(h) + args_len, data, data_len);
  return PostRaw(queue, req, result_space + sizeof(hz_status));
}

Reply HzClient::Wait(uint16_t queue, uint64_t cookie, std::chrono::milliseconds timeout) {
  Reply out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (done_.count(cookie) == 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return out;
    vdev::frontend::Completion c[16];
    size_t n = 0;
    vdev::frontend::Status s = dev_.WaitUsed(queue, deadline - now, c, 16, &n, spin_);
    for (size_t i = 0; i < n; ++i) done_[c[i].cookie] = c[i].len;
    if (!s.ok() && n == 0 && s.code() != vdev::frontend::Status::Code::kTimeout) return out;
  }
  out.used = done_[cookie];
  done_.erase(cookie);
  Slot slot = slots_[cookie];
  slots_.erase(cookie);
  if (slot.resp != nullptr && slot.resp_len >= sizeof(hz_status) && out.used >= sizeof(hz_status)) {
    std::memcpy(&out.st, static_cast<uint8_t*>(slot.resp) + slot.resp_len - sizeof(hz_status),
                sizeof(hz_status));
    out.status = out.st.status;
    out.result.assign(static_cast<uint8_t*>(slot.resp),
                      static_cast<uint8_t*>(slot.resp) +
                          std::min<uint32_t>(out.st.result_len, slot.resp_len - sizeof(hz_status)));
  }
  if (slot.req) dev_.Free(slot.req);
  if (slot.resp) dev_.Free(slot.resp);
  return out;
}

uint32_t HzClient::Hello(uint64_t features) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  a.version_minor = HZ_VERSION_MINOR;
  a.driver_features = features;
  return Call(HZ_VQ_CONTROL, HZ_OP_HELLO, a).status;
}

uint32_t HzClient::Register(uint64_t size, int pieces, uint32_t flags, GuestBuffer* out) {
  std::vector<uint64_t> lengths;
  uint64_t left = size;
  for (int i = 0; i < pieces && left > 0; ++i) {
    uint64_t n = i == pieces - 1 ? left : std::max<uint64_t>(1, size / pieces + (i == 0 ? 5 : 0));
    lengths.push_back(std::min(n, left));
    left -= lengths.back();
  }
  return RegisterPieces(lengths, flags, out);
}

uint32_t HzClient::RegisterInExtents(uint64_t size, uint64_t extent_bytes, uint32_t flags,
                                     GuestBuffer* out) {
  std::vector<uint64_t> lengths;
  for (uint64_t left = size; left > 0; left -= lengths.back()) {
    lengths.push_back(std::min(std::max<uint64_t>(1, extent_bytes), left));
  }
  return RegisterPieces(lengths, flags, out);
}

uint32_t HzClient::RegisterPieces(const std::vector<uint64_t>& lengths, uint32_t flags,
                                  GuestBuffer* out) {
  out->pieces.clear();
  out->size = std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
  std::vector<hz_extent> ext;
  for (uint64_t n : lengths) {
    uint64_t gpa = 0;
    void* p = dev_.Allocate(n, &gpa, 64);
    if (p == nullptr) return 0xfffffffe;
    out->pieces.push_back({static_cast<uint8_t*>(p), gpa, n});
    ext.push_back({gpa, n});
  }
  hz_region_register_args a{};
  a.num_extents = static_cast<uint32_t>(ext.size());
  a.flags = flags;
  a.total_len = out->size;
  Reply r = Call(HZ_VQ_CONTROL, HZ_OP_REGION_REGISTER, &a, sizeof(a), ext.data(),
                 static_cast<uint32_t>(ext.size() * sizeof(hz_extent)));
  if (r.status == HZ_S_OK && r.result.size() >= 4) std::memcpy(&out->region, r.result.data(), 4);
  return r.status;
}

uint32_t HzClient::NewUid(hz_comm_uid* out) {
  Reply r = Call(HZ_VQ_CONTROL, HZ_OP_COMM_UID, nullptr, 0);
  if (r.status == HZ_S_OK && r.result.size() >= sizeof(*out))
    std::memcpy(out, r.result.data(), sizeof(*out));
  return r.status;
}

uint32_t HzClient::InitComm(const hz_comm_uid& uid, uint32_t nranks, uint32_t rank, uint64_t* comm,
                            uint32_t timeout_ms, uint32_t flags) {
  hz_comm_init_args a{};
  a.uid = uid;
  a.nranks = nranks;
  a.rank = rank;
  a.constraints.flags = flags;
  a.constraints.priority_class = HZ_PRIO_NORMAL;
  a.constraints.timeout_ms = timeout_ms;
  Reply r = Call(HZ_VQ_CONTROL, HZ_OP_COMM_INIT, a);
  if (r.status == HZ_S_OK && r.result.size() >= 8) std::memcpy(comm, r.result.data(), 8);
  return r.status;
}

uint32_t HzClient::Coll(uint16_t queue, uint16_t opcode, const hz_coll_args& a) {
  return Call(queue, opcode, a).status;
}

int FreeTcpPort() {
  // Below the kernel's ephemeral range (32768 and up by default), so that no
  // socket another test binds to port 0 (Gloo's listeners, clients) can take
  // the port between this check and the service's bind; only another caller
  // of this function could, and it starts elsewhere in the range.
  constexpr int kFirst = 20000, kCount = 12000;
  std::random_device rd;
  const int start = static_cast<int>(rd() % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int port = kFirst + (start + i) % kCount;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return port;
  }
  return 0;
}

}  // namespace hz::testing
