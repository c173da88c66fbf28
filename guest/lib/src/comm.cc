// Communicators and collectives: argument checks, buffer placement
// (registered slice, inline in the request, or staged through registered
// memory), sequence numbers, and asynchronous requests.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device.h"
#include "latency_spin.h"

struct hz_comm {
  hz_device* dev = nullptr;
  uint64_t handle = 0;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  uint64_t seq = 0;    // next collective sequence number
  uint16_t queue = 0;  // request queue this communicator posts on
  // HZ_COMM_F_LOW_LATENCY: how long a wait for its operations looks for the
  // completion before it sleeps (HZ_LATENCY_POLL_US).
  std::chrono::nanoseconds spin{0};
};

struct hz_request {
  hz_device* dev = nullptr;
  uint64_t ticket = 0;
  bool done = false;
  int result = HZ_OK;
  // Staged buffers: the registered copy, and where the output goes after.
  void* stage = nullptr;
  uint8_t* copy_out_dst = nullptr;
  const uint8_t* copy_out_src = nullptr;
  size_t copy_out_len = 0;
  // Inline result space (a device-written copy of the output).
  std::vector<uint8_t> inline_result;
  uint8_t* inline_dst = nullptr;
  hz_coll_args args{};
  std::chrono::nanoseconds spin{0};  // its communicator's
};

namespace hz::lib {
namespace {

// Buffers up to this size travel inside the request when not registered.
constexpr size_t kInlineMax = 64 * 1024;

struct Plan {
  uint16_t opcode;
  const void* send;
  void* recv;
  size_t send_bytes;
  size_t recv_bytes;
};

// Computes each side's byte count (SPEC §7.4.2) and checks that a side that
// needs bytes has a buffer.
int Sizes(const hz_comm* c, uint16_t opcode, size_t count, int dt, uint32_t root, Plan* p) {
  uint64_t send_bytes = 0, recv_bytes = 0;
  if (hz_coll_bytes(opcode, count, static_cast<unsigned>(dt), c->nranks, c->rank == root,
                    &send_bytes, &recv_bytes) != HZ_S_OK) {
    return HZ_EINVAL;
  }
  p->send_bytes = send_bytes;
  p->recv_bytes = recv_bytes;
  if ((p->send_bytes && p->send == nullptr) || (p->recv_bytes && p->recv == nullptr))
    return HZ_EINVAL;
  return HZ_OK;
}

int Post(hz_comm* c, uint16_t opcode, const void* send, void* recv, size_t count, int dt, int op,
         uint32_t peer, hz_request** out) {
  if (c == nullptr || out == nullptr) return HZ_EINVAL;
  hz_device* dev = c->dev;
  if (!Granted(dev, HZ_F_COLLECTIVES)) return HZ_ENOTSUP;
  const bool rooted = hz_op_rooted(opcode);
  const bool p2p = hz_op_point_to_point(opcode);
  if ((rooted || p2p) && peer >= c->nranks) return HZ_EINVAL;
  if (p2p && peer == c->rank) return HZ_EINVAL;
  const bool reduces = hz_op_reduces(opcode);
  if (reduces && (op < 0 || op >= HZ_REDOP_MAX)) return HZ_EINVAL;
  Plan plan{opcode, send, recv, 0, 0};
  int rc = Sizes(c, opcode, count, dt, peer, &plan);
  if (rc != HZ_OK) return rc;

  auto req = std::make_unique<hz_request>();
  req->dev = dev;
  req->spin = c->spin;
  hz_coll_args& a = req->args;
  a.comm = c->handle;
  a.seq = p2p ? 0 : c->seq;
  a.count = opcode == HZ_OP_BARRIER ? 0 : count;
  a.dtype = opcode == HZ_OP_BARRIER ? 0 : static_cast<uint8_t>(dt);
  a.redop = reduces ? static_cast<uint8_t>(op) : 0;
  a.peer = (rooted || p2p) ? peer : 0;

  const bool inline_ok = Granted(dev, HZ_F_INLINE_DATA);
  DataSeg data{};
  uint32_t result_len = 0;
  void* result = nullptr;

  // Send side.
  if (plan.send_bytes) {
    if (FindRegistered(dev, send, plan.send_bytes, &a.send)) {
    } else if (inline_ok && plan.send_bytes <= kInlineMax) {
      a.send.region_id = HZ_REGION_INLINE;
      a.send.length = plan.send_bytes;
      data = {send, plan.send_bytes};
    } else {
      const size_t total = plan.send_bytes + plan.recv_bytes;
      rc = hz_mem_alloc(dev, total, &req->stage);
      if (rc != HZ_OK) return rc;
      std::memcpy(req->stage, send, plan.send_bytes);
      FindRegistered(dev, req->stage, plan.send_bytes, &a.send);
    }
  }
  // Receive side.
  if (plan.recv_bytes) {
    const bool in_place = send == recv;
    if (FindRegistered(dev, recv, plan.recv_bytes, &a.recv)) {
    } else if (in_place && req->stage != nullptr && plan.send_bytes == plan.recv_bytes) {
      a.recv = a.send;  // the staged copy is reduced in place
      req->copy_out_dst = static_cast<uint8_t*>(recv);
      req->copy_out_src = static_cast<uint8_t*>(req->stage);
      req->copy_out_len = plan.recv_bytes;
    } else if (inline_ok && plan.recv_bytes <= kInlineMax) {
      a.recv.region_id = HZ_REGION_INLINE;
      a.recv.length = plan.recv_bytes;
      req->inline_result.resize(plan.recv_bytes);
      result = req->inline_result.data();
      result_len = static_cast<uint32_t>(plan.recv_bytes);
      req->inline_dst = static_cast<uint8_t*>(recv);
    } else {
      if (req->stage == nullptr) {
        rc = hz_mem_alloc(dev, plan.recv_bytes, &req->stage);
        if (rc != HZ_OK) return rc;
        FindRegistered(dev, req->stage, plan.recv_bytes, &a.recv);
        req->copy_out_src = static_cast<uint8_t*>(req->stage);
      } else {
        auto* r = static_cast<uint8_t*>(req->stage) + plan.send_bytes;
        FindRegistered(dev, r, plan.recv_bytes, &a.recv);
        req->copy_out_src = r;
      }
      req->copy_out_dst = static_cast<uint8_t*>(recv);
      req->copy_out_len = plan.recv_bytes;
    }
  }

  rc = dev->transport->Submit(c->queue, opcode, &a, sizeof(a), {&data, data.len ? 1u : 0u}, result,
                              result_len, &req->ticket);
  if (rc != HZ_OK) {
    if (req->stage) hz_mem_free(dev, req->stage);
    return rc;
  }
  if (!p2p) c->seq++;  // the device consumes the seq whatever the outcome
  *out = req.release();
  return HZ_OK;
}

int Finish(hz_request* r, const Completion& c) {
  int rc = c.err != 0 ? c.err : FromStatus(c.status);
  if (rc == HZ_OK) {
    if (r->inline_dst) std::memcpy(r->inline_dst, r->inline_result.data(), r->inline_result.size());
    if (r->copy_out_dst) std::memcpy(r->copy_out_dst, r->copy_out_src, r->copy_out_len);
  }
  if (r->stage) {
    hz_mem_free(r->dev, r->stage);
    r->stage = nullptr;
  }
  r->done = true;
  r->result = rc;
  return rc;
}

int Blocking(hz_comm* c, uint16_t opcode, const void* send, void* recv, size_t count, int dt,
             int op, uint32_t peer) {
  hz_request* r = nullptr;
  int rc = Post(c, opcode, send, recv, count, dt, op, peer, &r);
  if (rc != HZ_OK) return rc;
  return hz_wait(r, -1);
}

}  // namespace
}  // namespace hz::lib

using namespace hz::lib;

extern "C" int hz_comm_get_uid(hz_device_t* dev, hz_uid_t* uid) {
  if (dev == nullptr || uid == nullptr) return HZ_EINVAL;
  if (!Granted(dev, HZ_F_COLLECTIVES)) return HZ_ENOTSUP;
  Completion c;
  int rc = ControlCall(dev, HZ_OP_COMM_UID, nullptr, 0, {}, uid, sizeof(*uid), &c);
  if (rc == HZ_OK && c.result_len < sizeof(*uid)) return HZ_ETRANSPORT;
  return rc;
}

extern "C" int hz_comm_init(hz_device_t* dev, const hz_uid_t* uid, uint32_t nranks, uint32_t rank,
                            const struct hz_comm_config* cfg, hz_comm_t** out) {
  if (dev == nullptr || uid == nullptr || out == nullptr || nranks == 0 || rank >= nranks)
    return HZ_EINVAL;
  if (!Granted(dev, HZ_F_COLLECTIVES)) return HZ_ENOTSUP;
  if (dev->hello.max_comm_ranks != 0 && nranks > dev->hello.max_comm_ranks) return HZ_ELIMIT;
  const hz_comm_config def = HZ_COMM_CONFIG_INIT;
  if (cfg == nullptr) cfg = &def;
  if (cfg->priority_class >= HZ_PRIO_MAX) return HZ_EINVAL;
  hz_comm_init_args a{};
  a.uid = *uid;
  a.nranks = nranks;
  a.rank = rank;
  a.constraints.flags = cfg->flags;
  a.constraints.priority_class = cfg->priority_class;
  a.constraints.max_threads = cfg->max_threads;
  a.constraints.timeout_ms = cfg->timeout_ms;
  hz_comm_init_result r{};
  Completion c;
  int rc = ControlCall(dev, HZ_OP_COMM_INIT, &a, sizeof(a), {}, &r, sizeof(r), &c);
  if (rc != HZ_OK) return rc;
  if (c.result_len < sizeof(r)) return HZ_ETRANSPORT;
  auto* comm = new hz_comm;
  comm->dev = dev;
  comm->handle = r.comm;
  comm->rank = rank;
  comm->nranks = nranks;
  const uint32_t queues = std::max<uint32_t>(1, dev->hello.num_request_queues);
  comm->queue = static_cast<uint16_t>(dev->next_queue.fetch_add(1) % queues);
  // Off unless asked for: a spinning rank burns its CPU time. Each pass
  // yields the CPU (VirtioUser::WaitUsed), and with the rank's interrupts off
  // the service polls its request ring, so it posts without a kick
  // (README.md, "Latency class", has the figures).
  if (cfg->flags & HZ_COMM_F_LOW_LATENCY) {
    comm->spin =
        LatencySpin(std::getenv("HZ_LATENCY_POLL_US"), DeviceWindow(dev->transport->config()));
  }
  *out = comm;
  return HZ_OK;
}

static int CommCall(hz_comm_t* comm, uint16_t opcode) {
  if (comm == nullptr) return HZ_EINVAL;
  hz_comm_args a{};
  a.comm = comm->handle;
  int rc = ControlCall(comm->dev, opcode, &a, sizeof(a), {}, nullptr, 0);
  delete comm;
  return rc;
}

extern "C" int hz_comm_destroy(hz_comm_t* comm) {
  return CommCall(comm, HZ_OP_COMM_DESTROY);
}
extern "C" int hz_comm_abort(hz_comm_t* comm) {
  return CommCall(comm, HZ_OP_COMM_ABORT);
}
extern "C" int hz_comm_rank(const hz_comm_t* comm) {
  return comm ? int(comm->rank) : HZ_EINVAL;
}
extern "C" int hz_comm_size(const hz_comm_t* comm) {
  return comm ? int(comm->nranks) : HZ_EINVAL;
}

extern "C" int hz_allreduce(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                            enum hz_redop op) {
  return Blocking(c, HZ_OP_ALLREDUCE, s, r, n, dt, op, 0);
}
extern "C" int hz_broadcast(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                            uint32_t root) {
  return Blocking(c, HZ_OP_BROADCAST, s, r, n, dt, 0, root);
}
extern "C" int hz_reduce(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                         enum hz_redop op, uint32_t root) {
  return Blocking(c, HZ_OP_REDUCE, s, r, n, dt, op, root);
}
extern "C" int hz_allgather(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt) {
  return Blocking(c, HZ_OP_ALLGATHER, s, r, n, dt, 0, 0);
}
extern "C" int hz_reduce_scatter(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                                 enum hz_redop op) {
  return Blocking(c, HZ_OP_REDUCE_SCATTER, s, r, n, dt, op, 0);
}
extern "C" int hz_alltoall(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt) {
  return Blocking(c, HZ_OP_ALLTOALL, s, r, n, dt, 0, 0);
}
extern "C" int hz_send(hz_comm_t* c, const void* b, size_t n, enum hz_dtype dt, uint32_t peer) {
  return Blocking(c, HZ_OP_SEND, b, nullptr, n, dt, 0, peer);
}
extern "C" int hz_recv(hz_comm_t* c, void* b, size_t n, enum hz_dtype dt, uint32_t peer) {
  return Blocking(c, HZ_OP_RECV, nullptr, b, n, dt, 0, peer);
}
extern "C" int hz_barrier(hz_comm_t* c) {
  return Blocking(c, HZ_OP_BARRIER, nullptr, nullptr, 0, HZ_UINT8, 0, 0);
}

extern "C" int hz_allreduce_async(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                                  enum hz_redop op, hz_request_t** q) {
  return Post(c, HZ_OP_ALLREDUCE, s, r, n, dt, op, 0, q);
}
extern "C" int hz_broadcast_async(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                                  uint32_t root, hz_request_t** q) {
  return Post(c, HZ_OP_BROADCAST, s, r, n, dt, 0, root, q);
}
extern "C" int hz_reduce_async(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                               enum hz_redop op, uint32_t root, hz_request_t** q) {
  return Post(c, HZ_OP_REDUCE, s, r, n, dt, op, root, q);
}
extern "C" int hz_allgather_async(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                                  hz_request_t** q) {
  return Post(c, HZ_OP_ALLGATHER, s, r, n, dt, 0, 0, q);
}
extern "C" int hz_reduce_scatter_async(hz_comm_t* c, const void* s, void* r, size_t n,
                                       enum hz_dtype dt, enum hz_redop op, hz_request_t** q) {
  return Post(c, HZ_OP_REDUCE_SCATTER, s, r, n, dt, op, 0, q);
}
extern "C" int hz_alltoall_async(hz_comm_t* c, const void* s, void* r, size_t n, enum hz_dtype dt,
                                 hz_request_t** q) {
  return Post(c, HZ_OP_ALLTOALL, s, r, n, dt, 0, 0, q);
}
extern "C" int hz_send_async(hz_comm_t* c, const void* b, size_t n, enum hz_dtype dt, uint32_t peer,
                             hz_request_t** q) {
  return Post(c, HZ_OP_SEND, b, nullptr, n, dt, 0, peer, q);
}
extern "C" int hz_recv_async(hz_comm_t* c, void* b, size_t n, enum hz_dtype dt, uint32_t peer,
                             hz_request_t** q) {
  return Post(c, HZ_OP_RECV, nullptr, b, n, dt, 0, peer, q);
}
extern "C" int hz_barrier_async(hz_comm_t* c, hz_request_t** q) {
  return Post(c, HZ_OP_BARRIER, nullptr, nullptr, 0, HZ_UINT8, 0, 0, q);
}

extern "C" int hz_test(hz_request_t* r) {
  if (r == nullptr) return HZ_EINVAL;
  if (r->done) return r->result;
  Completion c;
  int rc = r->dev->transport->Wait(r->ticket, 0, &c, kNoSpin);
  if (rc == HZ_ETIMEDOUT) return HZ_EPENDING;
  if (rc != HZ_OK) return rc;
  return Finish(r, c);
}

extern "C" int hz_test_wait(hz_request_t* r, int timeout_ms) {
  if (r == nullptr) return HZ_EINVAL;
  if (r->done) return r->result;
  Completion c;
  int rc = r->dev->transport->Wait(r->ticket, timeout_ms, &c, r->spin);
  if (rc == HZ_ETIMEDOUT) return HZ_EPENDING;  // the wait expired, not the operation
  if (rc != HZ_OK) {
    c = {};
    c.err = rc;
  }
  return Finish(r, c);
}

extern "C" int hz_wait(hz_request_t* r, int timeout_ms) {
  if (r == nullptr) return HZ_EINVAL;
  if (!r->done) {
    Completion c;
    int rc = r->dev->transport->Wait(r->ticket, timeout_ms, &c, r->spin);
    if (rc == HZ_ETIMEDOUT) return rc;  // still pending; the caller may wait again
    if (rc != HZ_OK) {
      c = {};
      c.err = rc;
    }
    Finish(r, c);
  }
  int result = r->result;
  delete r;
  return result;
}

extern "C" void hz_request_free(hz_request_t* r) {
  if (r == nullptr) return;
  hz_wait(r, -1);
}
