// A container tenant's view of the device: a virtio-user front-end driving
// harmonaized's vhost-user socket with HarmonAIze requests, synchronously.
// Used by the rank processes of the integration tests and the benchmark.
#ifndef HZ_TESTS_INTEGRATION_SERVICE_HZ_CLIENT_H_
#define HZ_TESTS_INTEGRATION_SERVICE_HZ_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "protocol/harmonaize.h"
#include "vdev/frontend/virtio_user.h"

namespace hz::testing {

// A buffer in guest memory made of one or more separately allocated pieces;
// registered as one region whose extents are the pieces, in order.
struct GuestBuffer {
  struct Piece {
    uint8_t* host;
    uint64_t gpa;
    uint64_t len;
  };
  std::vector<Piece> pieces;
  uint64_t size = 0;
  uint32_t region = 0;

  void Write(uint64_t off, const void* src, uint64_t len) const {
    Copy(off, len, const_cast<void*>(src), true);
  }
  void Read(uint64_t off, void* dst, uint64_t len) const { Copy(off, len, dst, false); }

 private:
  void Copy(uint64_t off, uint64_t len, void* flat, bool to_guest) const {
    auto* f = static_cast<uint8_t*>(flat);
    for (const Piece& p : pieces) {
      if (len == 0) break;
      if (off >= p.len) {
        off -= p.len;
        continue;
      }
      uint64_t n = std::min(len, p.len - off);
      if (to_guest) {
        std::memcpy(p.host + off, f, n);
      } else {
        std::memcpy(f, p.host + off, n);
      }
      f += n;
      len -= n;
      off = 0;
    }
  }
};

struct Reply {
  uint32_t status = 0xffffffff;  // HZ_S_*, or 0xffffffff when no completion came
  uint32_t used = 0;
  hz_status st{};
  std::vector<uint8_t> result;
};

class HzClient {
 public:
  HzClient() = default;
  ~HzClient() { dev_.Disconnect(); }

  // Connects with `memory` bytes of guest memory.
  bool Connect(const std::string& socket, uint64_t memory = 64ull << 20,
               std::string* error = nullptr);
  vdev::frontend::VirtioUser& dev() { return dev_; }
  // How long Wait looks for a completion before it sleeps (as the tenant
  // library does for a low-latency communicator); 0 by default.
  void set_spin(std::chrono::nanoseconds spin) { spin_ = spin; }
  const hz_config& config() const { return config_; }

  // Submits one request without waiting; returns a cookie for Wait.
  uint64_t Post(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
                const void* data = nullptr, uint32_t data_len = 0, uint32_t result_space = 64,
                uint64_t request_id = 0);
  // Submits raw readable bytes (any framing) with `writable` writable bytes.
  uint64_t PostRaw(uint16_t queue, const std::vector<uint8_t>& readable, uint32_t writable);
  Reply Wait(uint16_t queue, uint64_t cookie,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));

  Reply Call(uint16_t queue, uint16_t opcode, const void* args, uint32_t args_len,
             const void* data = nullptr, uint32_t data_len = 0, uint32_t result_space = 64) {
    return Wait(queue, Post(queue, opcode, args, args_len, data, data_len, result_space));
  }
  template <typename A>
  Reply Call(uint16_t queue, uint16_t opcode, const A& args) {
    return Call(queue, opcode, &args, sizeof(A));
  }

  uint32_t Hello(uint64_t features = (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_INLINE_DATA));
  // Allocates `size` bytes in `pieces` separate allocations and registers them
  // (the first piece 5 bytes longer, so later ones start off any alignment).
  uint32_t Register(uint64_t size, int pieces, uint32_t flags, GuestBuffer* out);
  // The same in pieces of extent_bytes (the last one shorter), each its own
  // allocation: as a guest registers a buffer on pages it does not have
  // contiguous.
  uint32_t RegisterInExtents(uint64_t size, uint64_t extent_bytes, uint32_t flags,
                             GuestBuffer* out);
  uint32_t NewUid(hz_comm_uid* out);
  uint32_t InitComm(const hz_comm_uid& uid, uint32_t nranks, uint32_t rank, uint64_t* comm,
                    uint32_t timeout_ms = 0, uint32_t flags = HZ_COMM_F_DETERMINISTIC);
  uint32_t Coll(uint16_t queue, uint16_t opcode, const hz_coll_args& a);

 private:
  struct Slot {
    void* req = nullptr;
    void* resp = nullptr;
    uint32_t resp_len = 0;
  };
  // Registers pieces of these lengths, each its own allocation.
  uint32_t RegisterPieces(const std::vector<uint64_t>& lengths, uint32_t flags, GuestBuffer* out);

  vdev::frontend::VirtioUser dev_;
  hz_config config_{};
  uint64_t next_cookie_ = 1;
  std::chrono::nanoseconds spin_{0};
  std::map<uint64_t, Slot> slots_;
  std::map<uint64_t, uint32_t> done_;  // cookie -> used length, completed but not waited for
};

inline hz_slice SliceOf(const GuestBuffer& b, uint64_t off, uint64_t len) {
  hz_slice s{};
  s.region_id = b.region;
  s.offset = off;
  s.length = len;
  return s;
}

// A sum of count fp32 from the start of s into the start of r.
inline hz_coll_args AllReduceArgs(uint64_t comm, uint64_t seq, const GuestBuffer& s,
                                  const GuestBuffer& r, uint64_t count) {
  hz_coll_args a{};
  a.comm = comm;
  a.seq = seq;
  a.count = count;
  a.dtype = HZ_FP32;
  a.redop = HZ_SUM;
  a.send = SliceOf(s, 0, count * 4);
  a.recv = SliceOf(r, 0, count * 4);
  return a;
}

// A TCP port on 127.0.0.1 that was free a moment ago (0 if none could be
// found), for a service's metrics endpoint.
int FreeTcpPort();

}  // namespace hz::testing

#endif  // HZ_TESTS_INTEGRATION_SERVICE_HZ_CLIENT_H_
