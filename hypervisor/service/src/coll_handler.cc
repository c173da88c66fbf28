#include "hz/service/coll_handler.h"

#include <cstring>
#include <utility>

#include "coll_request.h"
#include "hz/service/connection_loop.h"
#include "hz/service/device_link.h"
#include "hz/service/device_state.h"
#include "hz/service/hz_device.h"
#include "hz/service/pending_table.h"
#include "hz/service/wire_status.h"

namespace hz::service {

// A collective in flight. The engine's callback holds it, and with it the
// pinned regions and the chain's memory map, until the engine is done with
// the buffers, even if the device goes away first.
struct CollectiveHandler::Collective : PendingRequest {
  uint64_t comm = 0;        // the handle it runs on
  uint32_t result_len = 0;  // inline receive bytes
  std::vector<RegionPin> pins;
};

CollectiveHandler::CollectiveHandler(CollBackend* backend, const HandlerContext& ctx,
                                     const RegionTable& regions, const DeviceLimits& limits,
                                     const Tenant& tenant, std::function<void()> rejoined)
    : backend_(backend),
      ctx_(ctx),
      regions_(regions),
      limits_(limits),
      tenant_(tenant),
      rejoined_(std::move(rejoined)) {}

uint64_t CollectiveHandler::Features() const {
  return backend_ != nullptr ? (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_INLINE_DATA) : 0;
}

Reply CollectiveHandler::HandleComm(const vdev::Queue& queue, const Request& req) {
  if (!ctx_.session.Granted(HZ_F_COLLECTIVES)) return Reply::Error(HZ_S_ENOTSUP);
  switch (req.hdr.opcode) {
    case HZ_OP_COMM_UID:
      return CommUid(req);
    case HZ_OP_COMM_INIT:
      return CommInit(queue, req);
    default:
      return CommDestroyOrAbort(queue, req);
  }
}

Reply CollectiveHandler::CommUid(const Request& req) {
  if (req.args_len != 0) {
    // COMM_UID has no arguments; any present must be zero.
    uint8_t none;
    if (uint32_t st = ReadArgsBytes(req, &none, 0); st != HZ_S_OK) return Reply::Error(st);
  }
  if (req.result_capacity < sizeof(hz_comm_uid_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_comm_uid_result));
  }
  coll::Uid uid;
  Status st = backend_->NewUid(tenant_.id(), &uid);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  hz_comm_uid_result res{};
  std::memcpy(res.uid.bytes, uid.bytes.data(), HZ_UID_BYTES);
  WriteResult(req, &res, sizeof(res));
  return Reply::Ok(sizeof(res));
}

Reply CollectiveHandler::CommInit(const vdev::Queue& queue, const Request& req) {
  hz_comm_init_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  const hz_comm_constraints& c = a.constraints;
  if (req.result_capacity < sizeof(hz_comm_init_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_comm_init_result));
  }
  // SPEC §7.3.2, in its order.
  constexpr uint32_t kKnownFlags =
      HZ_COMM_F_DETERMINISTIC | HZ_COMM_F_ALLOW_LOSSY | HZ_COMM_F_LOW_LATENCY;
  if ((c.flags & ~kKnownFlags) != 0 || c.reserved != 0) {
    return Reply::Error(HZ_S_ENOTSUP);
  }
  if (a.nranks == 0 || a.rank >= a.nranks || c.priority_class >= HZ_PRIO_MAX) {
    return Reply::Error(HZ_S_EINVAL);
  }
  if (a.nranks > limits_.max_comm_ranks) return Reply::Error(HZ_S_ELIMIT);
  // The operator gives each tenant its highest allowed priority class.
  if (c.priority_class > tenant_.spec().priority) return Reply::Error(HZ_S_EPERM);
  const size_t joining = ctx_.pending.Count(this, HZ_OP_COMM_INIT);
  if (comms_.size() + joining >= limits_.max_comms) return Reply::Error(HZ_S_ELIMIT);

  coll::Uid uid;
  std::memcpy(uid.bytes.data(), a.uid.bytes, HZ_UID_BYTES);
  coll::Constraints cons;
  cons.deterministic = (c.flags & HZ_COMM_F_DETERMINISTIC) != 0;
  cons.allow_lossy = (c.flags & HZ_COMM_F_ALLOW_LOSSY) != 0;
  cons.priority_class = c.priority_class;
  cons.max_threads = c.max_threads;
  cons.timeout_ms = c.timeout_ms;

  auto p = std::make_shared<PendingRequest>();
  ctx_.pending.Add(this, queue, req, p);
  const bool low_latency = (c.flags & HZ_COMM_F_LOW_LATENCY) != 0;
  backend_->Init(tenant_.id(), uid, a.nranks, a.rank, cons,
                 OnExecutor([this, id = p->id, low_latency](Status st, MemberPtr m) {
                   OnInitDone(id, low_latency, std::move(st), std::move(m));
                 }));
  return Reply::Pending();
}

CollectiveHandler::MemberDone CollectiveHandler::OnExecutor(MemberDone done) {
  return [link = ctx_.link, backend = backend_, done = std::move(done)](Status st, MemberPtr m) {
    // A VM that left while its rank was joining leaves again, so the other
    // ranks see an abort instead of waiting.
    DeviceLink::Post(
        link, [done, st, m] { done(st, m); },
        [backend, m] {
          if (m != nullptr) backend->DestroyAsync(m);
        });
  };
}

void CollectiveHandler::OnInitDone(uint64_t id, bool low_latency, Status st, MemberPtr m) {
  std::shared_ptr<PendingRequest> p = ctx_.pending.Take(id);
  if (!p || !ctx_.pending.RingLive(*p)) {
    // Drained or torn down meanwhile, or the ring it came from stopped: the
    // guest never learns of this membership, so nobody will use it, and
    // leaving aborts it for the other ranks instead of leaving them waiting.
    if (m != nullptr) backend_->DestroyAsync(m);
    return;
  }
  uint32_t status = ToWireStatus(st);
  if (st.ok() && m == nullptr) status = HZ_S_EIO;
  if (ctx_.session.draining() && status != HZ_S_OK) status = HZ_S_ESHUTDOWN;
  if (status != HZ_S_OK) {
    ctx_.pending.Finish(*p, Reply::Error(status));
    return;
  }
  const uint64_t handle = next_handle_++;
  comms_[handle].member = std::move(m);
  comms_[handle].low_latency = low_latency;
  // Recorded (the crash journal among others) before the guest learns the
  // handle, so a process started after a crash knows it too.
  ctx_.info_changed();
  hz_comm_init_result res{};
  res.comm = handle;
  ctx_.pending.Finish(*p, Reply::Ok(), {reinterpret_cast<const uint8_t*>(&res), sizeof(res)});
}

Reply CollectiveHandler::CommDestroyOrAbort(const vdev::Queue& queue, const Request& req) {
  hz_comm_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  auto it = comms_.find(a.comm);
  if (it == comms_.end()) return Reply::Error(HZ_S_ENOENT);
  CommEntry& entry = it->second;
  MemberPtr m = entry.member;
  if (entry.lost) {
    // Its communicator is gone already: aborting is done, destroying
    // forgets the handle.
    if (req.hdr.opcode == HZ_OP_COMM_DESTROY) comms_.erase(it);
    ctx_.info_changed();
    return Reply::Ok();
  }
  if (req.hdr.opcode == HZ_OP_COMM_ABORT) {
    backend_->Abort(m);
    if (entry.in_flight == 0) return Reply::Ok();
    // Completes once the handle's own operations have (SPEC §7.3.4).
    auto p = std::make_shared<PendingRequest>();
    ctx_.pending.Add(this, queue, req, p);
    entry.aborts.push_back(p->id);
    return Reply::Pending();
  }
  if (entry.in_flight != 0) return Reply::Error(HZ_S_EBUSY);
  comms_.erase(it);
  backend_->Leave(m);
  ctx_.info_changed();
  return Reply::Ok();
}

Reply CollectiveHandler::HandleCollective(const vdev::Queue& queue, const Request& req) {
  if (!ctx_.session.Granted(HZ_F_COLLECTIVES)) return Reply::Error(HZ_S_ENOTSUP);
  hz_coll_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  CollPlan plan;
  if (!coll::OpFromOpcode(req.hdr.opcode, &plan.desc.op)) return Reply::Error(HZ_S_ENOTSUP);
  // SPEC §7.4.8, in its order.
  if (a.flags != 0) return Reply::Error(HZ_S_ENOTSUP);
  auto cit = comms_.find(a.comm);
  if (cit == comms_.end()) return Reply::Error(HZ_S_ENOENT);
  if (cit->second.lost) {
    return Reply::Error(HZ_S_EABORTED, static_cast<uint32_t>(coll::AbortCause::kSessionEnded));
  }
  const MemberPtr& m = cit->second.member;
  Reply r = PlanCollective(req, a, *m, ctx_.session.Granted(HZ_F_INLINE_DATA), regions_, &plan);
  if (!r.ok()) return r;

  auto op = std::make_shared<Collective>();
  op->comm = a.comm;
  op->result_len = plan.result_len;
  op->bytes = plan.bytes;
  op->pins = std::move(plan.pins);
  ctx_.pending.Add(this, queue, req, op);
  cit->second.in_flight++;
  PollFor(cit->second, queue.index());
  backend_->Post(m, std::move(plan.desc), [this, link = ctx_.link, op](Status st) {
    DeviceLink::Post(link, [this, op, st] { OnOpDone(*op, st); });
  });
  return Reply::Pending();
}

void CollectiveHandler::OnOpDone(Collective& op, Status st) {
  // Only Withdraw completes a posted operation with kTryAgain (engine.h).
  if (st.code() == StatusCode::kTryAgain) {
    ReturnWithdrawn(op);
    return;
  }
  if (!ctx_.pending.Take(op.id)) return;  // answered by Drain already
  uint32_t status = ToWireStatus(st);
  if (ctx_.session.draining() && status != HZ_S_OK) status = HZ_S_ESHUTDOWN;
  auto cit = comms_.find(op.comm);
  if (status == HZ_S_OK) {
    ctx_.pending.Finish(op, Reply::Ok(op.result_len));
  } else {
    // EABORTED says why (SPEC §7.3.5), the same on every rank. A handle
    // that is gone went with this session (Teardown): detail 2.
    uint32_t detail = 0;
    if (status == HZ_S_EABORTED) {
      detail = cit != comms_.end() ? backend_->AbortDetail(cit->second.member)
                                   : static_cast<uint32_t>(coll::AbortCause::kSessionEnded);
    }
    ctx_.pending.Finish(op, Reply::Error(status, detail));
  }
  op.pins.clear();
  if (cit == comms_.end()) return;
  PollFor(cit->second, op.queue);
  // The last operation of a handle releases the COMM_ABORTs waiting for it.
  if (--cit->second.in_flight == 0) ReleaseAborts(cit->second, Reply::Ok());
}

void CollectiveHandler::PollFor(const CommEntry& entry, uint16_t queue) const {
  if (!entry.low_latency) return;
  const std::chrono::microseconds window(
      LatencyPollUs(tenant_.spec(), limits_.low_latency_poll_us));
  // The rank's next request is polled for rather than kicked (a kick costs
  // the rank a system call and this thread three), and this thread polls
  // for the completions that other threads post back.
  ctx_.poll_ring(queue, window);
  KeepPolling(window);
}

void CollectiveHandler::ReturnWithdrawn(Collective& op) {
  std::shared_ptr<PendingRequest> p = ctx_.pending.Take(op.id);
  if (p == nullptr) return;  // answered or forgotten meanwhile
  ctx_.pending.Return(*p);
  op.pins.clear();
  auto cit = comms_.find(op.comm);
  if (cit != comms_.end() && --cit->second.in_flight == 0) {
    ReleaseAborts(cit->second, Reply::Ok());
  }
}

void CollectiveHandler::ReleaseAborts(CommEntry& entry, const Reply& reply) {
  for (uint64_t id : entry.aborts) {
    if (std::shared_ptr<PendingRequest> p = ctx_.pending.Take(id)) ctx_.pending.Finish(*p, reply);
  }
  entry.aborts.clear();
}

void CollectiveHandler::Drain() {
  ctx_.pending.FinishAll(this, Reply::Error(HZ_S_ESHUTDOWN));
  for (auto& [handle, entry] : comms_) {
    entry.aborts.clear();
    entry.in_flight = 0;
  }
}

void CollectiveHandler::EndSession(SessionEnd end) {
  std::map<uint64_t, CommEntry> comms;
  comms.swap(comms_);
  rejoining_ = 0;  // a re-formed member that comes back later leaves again
  if (end == SessionEnd::kNewSession) {
    // A joining rank of the old session fails now; the engine's late answer
    // finds no request and leaves the communicator again (OnInitDone).
    ctx_.pending.FinishAll(
        this, Reply::Error(HZ_S_EABORTED, static_cast<uint32_t>(coll::AbortCause::kSessionEnded)),
        [](const PendingRequest& p) { return p.opcode() == HZ_OP_COMM_INIT; });
    for (auto& [handle, entry] : comms) ReleaseAborts(entry, Reply::Ok());
  } else {
    ctx_.pending.ForgetAll(this);
  }
  // Leaving every communicator aborts it for the other ranks, so none of
  // them waits for this VM until a timeout. Destroy returns once the engine
  // no longer touches this VM's memory; the collectives it aborts come back
  // through the executor and, with the rings alive, are answered EABORTED.
  for (auto& [handle, entry] : comms) {
    if (entry.member != nullptr) backend_->Destroy(entry.member);
  }
}

void CollectiveHandler::AddInfo(DeviceInfo* info) const {
  info->comms.clear();
  for (const auto& [handle, e] : comms_) {
    if (e.member == nullptr) continue;  // re-forming or lost
    info->comms.push_back({handle, e.member->comm_id(), e.member->rank(), e.member->nranks()});
  }
}

}  // namespace hz::service
