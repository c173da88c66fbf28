#include "hz/service/hz_device.h"

#include <sys/random.h>

#include <algorithm>
#include <limits>

#include "vdev/vhost_user.h"

namespace hz::service {

namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

uint64_t RandomU64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) v = 0x9e3779b97f4a7c15ull;
  }
  return v;
}

// Overflow-safe a * b into *out.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > kU64Max / a) return false;
  *out = a * b;
  return true;
}

// Collective opcode -> engine operation.
bool CollOp(uint16_t opcode, coll::Op* op) {
  switch (opcode) {
    case HZ_OP_ALLREDUCE:
      *op = coll::Op::kAllReduce;
      return true;
    case HZ_OP_BROADCAST:
      *op = coll::Op::kBroadcast;
      return true;
    case HZ_OP_REDUCE:
      *op = coll::Op::kReduce;
      return true;
    case HZ_OP_ALLGATHER:
      *op = coll::Op::kAllGather;
      return true;
    case HZ_OP_REDUCE_SCATTER:
      *op = coll::Op::kReduceScatter;
      return true;
    case HZ_OP_ALLTOALL:
      *op = coll::Op::kAllToAll;
      return true;
    case HZ_OP_SEND:
      *op = coll::Op::kSend;
      return true;
    case HZ_OP_RECV:
      *op = coll::Op::kRecv;
      return true;
    case HZ_OP_BARRIER:
      *op = coll::Op::kBarrier;
      return true;
    default:
      return false;
  }
}

// Engine status values equal hz_status_code; anything unexpected is EIO.
uint32_t FromEngine(coll::Status s) {
  uint32_t v = static_cast<uint32_t>(s);
  return v < HZ_S_MAX ? v : static_cast<uint32_t>(HZ_S_EIO);
}

}  // namespace

HzDevice::HzDevice(DeviceEnv env, std::shared_ptr<Tenant> tenant, uint64_t tenant_id,
                   std::string socket_path)
    : env_(env),
      tenant_(tenant),
      tenant_id_(tenant_id),
      socket_path_(std::move(socket_path)),
      link_(std::make_shared<Link>()),
      session_id_(RandomU64()),
      regions_(env.limits, tenant) {
  link_->dev = this;
  // The dispatch table by opcode family. Families without a handler answer
  // HZ_S_ENOTSUP. Events, checkpoints and the provider side (topology,
  // negotiation, hints) live in hz_device_events.cc, hz_device_checkpoint.cc
  // and hz_device_provider.cc.
  families_[OpcodeFamily(HZ_OP_HELLO)] = &HzDevice::HandleHello;
  families_[OpcodeFamily(HZ_OP_REGION_REGISTER)] = &HzDevice::HandleRegion;
  families_[OpcodeFamily(HZ_OP_COMM_UID)] = &HzDevice::HandleComm;
  families_[OpcodeFamily(HZ_OP_ALLREDUCE)] = &HzDevice::HandleCollective;
  families_[OpcodeFamily(HZ_OP_EVENT_SUBSCRIBE)] = &HzDevice::HandleEvent;
  families_[OpcodeFamily(HZ_OP_CKPT_POLICY)] = &HzDevice::HandleCheckpoint;
  families_[OpcodeFamily(HZ_OP_TOPOLOGY_GET)] = &HzDevice::HandleTopology;
  families_[OpcodeFamily(HZ_OP_NEG_REQUEST)] = &HzDevice::HandleNegotiation;
  families_[OpcodeFamily(HZ_OP_HINT_DECLARE)] = &HzDevice::HandleHint;
  info_.socket_path = socket_path_;
  info_.tenant = tenant_->name();
  if (env_.registry != nullptr) env_.registry->Add(this);
}

HzDevice::~HzDevice() {
  if (env_.registry != nullptr) env_.registry->Remove(this);
  {
    std::lock_guard<std::recursive_mutex> lock(link_->mu);
    link_->ctx = nullptr;
    link_->dev = nullptr;
  }
  Teardown(/*rings_alive=*/false);
}

uint64_t HzDevice::Features() const {
  return vdev::vu::kFRingEventIdx | vdev::vu::kFRingIndirectDesc;
}

uint16_t HzDevice::NumQueues() const {
  return static_cast<uint16_t>(HZ_VQ_REQUEST_BASE + env_.limits.num_request_queues);
}

std::vector<uint8_t> HzDevice::ConfigSpace() const {
  hz_config c{};
  c.magic = HZ_CONFIG_MAGIC;
  c.version_major = HZ_VERSION_MAJOR;
  c.version_minor = HZ_VERSION_MINOR;
  c.num_request_queues = env_.limits.num_request_queues;
  c.max_segments = env_.limits.max_segments;
  c.status = draining() ? HZ_CFG_S_DRAINING : HZ_CFG_S_READY;
  c.max_regions = env_.limits.max_regions;
  c.max_extents = env_.limits.max_extents;
  c.max_region_bytes = env_.limits.max_region_bytes;
  c.max_args_bytes = env_.limits.max_args_bytes;
  c.event_record_size = sizeof(hz_event);
  c.max_comm_ranks = env_.limits.max_comm_ranks;
  std::vector<uint8_t> out(sizeof(c));
  std::memcpy(out.data(), &c, sizeof(c));
  return out;
}

void HzDevice::OnConnect(vdev::DeviceContext& ctx) {
  ctx_ = &ctx;
  {
    std::lock_guard<std::recursive_mutex> lock(link_->mu);
    link_->ctx = &ctx;
  }
  UpdateInfo();
}

void HzDevice::OnQueueStarted(vdev::Queue& queue) {
  if (queue.index() >= NumQueues()) return;
  queues_[queue.index()] = {&queue, next_gen_++};
  UpdateInfo();
}

void HzDevice::OnQueueStopping(vdev::Queue& queue) {
  // The front-end is taking the event ring back (GET_VRING_BASE): the held
  // buffers go back unused (SPEC §2.8) at once, so the ring stops without
  // waiting for events that may never come. Request queues are left alone:
  // vdev waits (bounded) for their in-flight requests to complete.
  if (queue.index() != HZ_VQ_EVENT) return;
  ReturnEventBuffers();
  UpdateInfo();
}

void HzDevice::ReturnEventBuffers() {
  vdev::Queue* eq = queues_[HZ_VQ_EVENT].queue;
  for (auto& [chain, gen] : events_) {
    if (eq == nullptr || gen != queues_[HZ_VQ_EVENT].gen) continue;
    eq->Complete(chain, 0);  // SPEC §2.8: returned unused
  }
  events_.clear();
  if (eq != nullptr) eq->Flush();
}

void HzDevice::OnQueueStopped(uint16_t index) {
  if (index >= queues_.size()) return;
  queues_[index] = {nullptr, next_gen_++};
  if (index == HZ_VQ_EVENT) events_.clear();  // their ring is gone
  UpdateInfo();
}

bool HzDevice::draining() const {
  return drained_ || (env_.draining != nullptr && env_.draining->load());
}

uint64_t HzDevice::offered_features() const {
  uint64_t f = 0;
  if (env_.coll != nullptr) f |= (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_INLINE_DATA);
  if (env_.ckpt != nullptr) f |= 1ull << HZ_F_CHECKPOINT;
  if (env_.events != nullptr) f |= 1ull << HZ_F_EVENTS;
  if (env_.provider != nullptr) {
    f |= (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_HINTS);
  }
  return f;
}

void HzDevice::OnKick(vdev::Queue& queue) {
  vdev::Chain chain;
  if (queue.index() == HZ_VQ_EVENT) {
    // Event delivery is not offered yet: hold the buffers so they can be
    // filled later, and hand them back with ESHUTDOWN when stopping.
    uint64_t gen = queues_[HZ_VQ_EVENT].gen;
    while (queue.Pop(&chain)) {
      // SPEC §3.4.2: a buffer with a readable part or too small for a record
      // goes back unused (used length 0), as does every buffer when draining.
      if (draining() || !chain.readable().empty() || chain.writable_bytes() < sizeof(hz_event)) {
        queue.Complete(chain, 0);
      } else {
        events_.push_back({chain, gen});
      }
    }
    queue.Flush();
    FillEvents();
    UpdateInfo();
    return;
  }
  while (queue.Pop(&chain)) HandleChain(queue, chain);
  queue.Flush();
}

void HzDevice::Finish(vdev::Queue& queue, const vdev::Chain& chain, uint16_t opcode,
                      uint64_t request_id, const Reply& r) {
  uint32_t used = WriteStatus(chain, r.status, r.result_len, request_id, r.detail);
  queue.Complete(chain, used);
  requests_++;
  if (r.status != HZ_S_OK) errors_++;
  if (env_.metrics != nullptr) env_.metrics->CountRequest(opcode, r.status);
}

void HzDevice::HandleChain(vdev::Queue& queue, const vdev::Chain& chain) {
  Request req;
  FramingError err;
  switch (ParseRequest(chain, env_.limits.max_args_bytes, &req, &err)) {
    case Framing::kNoStatus:
      queue.Complete(chain, 0);
      requests_++;
      errors_++;
      if (env_.metrics != nullptr) env_.metrics->CountDropped();
      return;
    case Framing::kError:
      Finish(queue, chain, 0, err.request_id, {err.status, 0, err.detail, false});
      return;
    case Framing::kOk:
      break;
  }
  const uint16_t opcode = req.hdr.opcode;
  auto fail = [&](uint32_t status, uint32_t detail = 0) {
    Finish(queue, chain, opcode, req.hdr.request_id, {status, 0, detail, false});
  };
  if (draining()) return fail(HZ_S_ESHUTDOWN);
  OpClass cls = ClassifyOpcode(opcode);
  if (cls == OpClass::kUnknown) return fail(HZ_S_ENOTSUP);
  bool on_control = queue.index() == HZ_VQ_CONTROL;
  if ((cls == OpClass::kControl) != on_control || queue.index() == HZ_VQ_EVENT) {
    return fail(HZ_S_EQUEUE);
  }
  if (!hello_ && opcode != HZ_OP_HELLO) return fail(HZ_S_ESTATE);
  if (chain.readable().size() + chain.writable().size() > env_.limits.max_segments) {
    return fail(HZ_S_EINVAL);
  }
  // Only REGION_REGISTER and the data-queue opcodes define a data segment
  // (SPEC §6.8); collectives check theirs against the inline send slice.
  if (req.data_len != 0 && opcode != HZ_OP_REGION_REGISTER && opcode != HZ_OP_CKPT_QUIESCE &&
      cls != OpClass::kData) {
    return fail(HZ_S_EINVAL);
  }
  Handler h = families_[OpcodeFamily(opcode)];
  if (h == nullptr) return fail(HZ_S_ENOTSUP);
  Reply r = (this->*h)(queue, req);
  if (r.pending) return;
  Finish(queue, chain, opcode, req.hdr.request_id, r);
}

HzDevice::Reply HzDevice::HandleHello(vdev::Queue&, const Request& req) {
  hz_hello_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  if (a.reserved != 0) return {HZ_S_ENOTSUP, 0, 0, false};
  if (a.version_major != HZ_VERSION_MAJOR) {
    // A failed HELLO leaves the session as it was (SPEC §7.1).
    return {HZ_S_EVERSION, 0, (HZ_VERSION_MAJOR << 16) | HZ_VERSION_MINOR, false};
  }
  if (req.result_capacity < sizeof(hz_hello_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_hello_result), false};
  }
  // A later HELLO ends the current session: its regions and handles go, and
  // the other ranks of its communicators see this rank leave.
  if (hello_) Teardown(/*rings_alive=*/true);
  hz_hello_result res{};
  res.version_major = HZ_VERSION_MAJOR;
  res.version_minor = std::min<uint16_t>(a.version_minor, HZ_VERSION_MINOR);
  res.num_request_queues = env_.limits.num_request_queues;
  res.session_id = session_id_;
  res.max_regions = env_.limits.max_regions;
  res.max_extents = env_.limits.max_extents;
  res.max_region_bytes = env_.limits.max_region_bytes;
  res.max_comm_ranks = env_.limits.max_comm_ranks;
  res.event_record_size = sizeof(hz_event);
  res.device_features = a.driver_features & offered_features();
  WriteResult(req, &res, sizeof(res));
  hello_ = true;
  features_ = res.device_features;
  UpdateInfo();
  return {HZ_S_OK, sizeof(res), 0, false};
}

HzDevice::Reply HzDevice::HandleRegion(vdev::Queue&, const Request& req) {
  if (req.hdr.opcode == HZ_OP_REGION_UNREGISTER) {
    hz_region_unregister_args a;
    if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
    if (a.reserved != 0) return {HZ_S_ENOTSUP, 0, 0, false};
    uint32_t st = regions_.Unregister(a.region_id);
    UpdateInfo();
    return {st, 0, 0, false};
  }
  hz_region_register_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  if (req.result_capacity < sizeof(hz_region_register_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_region_register_result), false};
  }
  if ((a.flags & ~(HZ_REGION_F_READ | HZ_REGION_F_WRITE)) != 0) return {HZ_S_ENOTSUP, 0, 0, false};
  if (a.flags == 0 || a.num_extents == 0) return {HZ_S_EINVAL, 0, 0, false};
  if (a.num_extents > env_.limits.max_extents) return {HZ_S_ELIMIT, 0, 0, false};
  // The data segment is exactly the extent array.
  if (req.data_len != static_cast<uint64_t>(a.num_extents) * sizeof(hz_extent)) {
    return {HZ_S_EINVAL, 0, 0, false};
  }
  std::vector<hz_extent> extents(a.num_extents);
  req.chain->Read(req.data_offset, extents.data(), req.data_len);
  uint32_t id = 0, detail = 0;
  vdev::MemoryMapPtr memory = ctx_ != nullptr ? ctx_->Memory() : req.chain->memory();
  uint32_t st = regions_.Register(memory, a.flags, a.total_len, extents, &id, &detail);
  UpdateInfo();
  if (st != HZ_S_OK) return {st, 0, detail, false};
  hz_region_register_result res{};
  res.region_id = id;
  WriteResult(req, &res, sizeof(res));
  return {HZ_S_OK, sizeof(res), 0, false};
}

HzDevice::Reply HzDevice::HandleComm(vdev::Queue& q, const Request& req) {
  if (env_.coll == nullptr || (features_ & (1ull << HZ_F_COLLECTIVES)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  switch (req.hdr.opcode) {
    case HZ_OP_COMM_UID:
      return CommUid(req);
    case HZ_OP_COMM_INIT:
      return CommInit(q, req);
    default:
      return CommDestroyOrAbort(req);
  }
}

HzDevice::Reply HzDevice::CommUid(const Request& req) {
  if (req.args_len != 0) {
    // COMM_UID has no arguments; any present must be zero.
    uint8_t none;
    if (uint32_t st = ReadArgsBytes(req, &none, 0); st != HZ_S_OK) return {st, 0, 0, false};
  }
  if (req.result_capacity < sizeof(hz_comm_uid_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_comm_uid_result), false};
  }
  coll::Uid uid;
  coll::Status st = env_.coll->NewUid(tenant_id_, &uid);
  if (st != coll::Status::kOk) return {FromEngine(st), 0, 0, false};
  hz_comm_uid_result res{};
  std::memcpy(res.uid.bytes, uid.bytes.data(), HZ_UID_BYTES);
  WriteResult(req, &res, sizeof(res));
  return {HZ_S_OK, sizeof(res), 0, false};
}

HzDevice::Reply HzDevice::CommInit(vdev::Queue& q, const Request& req) {
  hz_comm_init_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  const hz_comm_constraints& c = a.constraints;
  if (req.result_capacity < sizeof(hz_comm_init_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_comm_init_result), false};
  }
  // SPEC §7.3.2, in its order.
  if ((c.flags & ~(HZ_COMM_F_DETERMINISTIC | HZ_COMM_F_ALLOW_LOSSY)) != 0 || c.reserved != 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  if (a.nranks == 0 || a.rank >= a.nranks || c.priority_class >= HZ_PRIO_MAX) {
    return {HZ_S_EINVAL, 0, 0, false};
  }
  if (a.nranks > env_.limits.max_comm_ranks) return {HZ_S_ELIMIT, 0, 0, false};
  // The operator gives each tenant its highest allowed priority class.
  if (c.priority_class > tenant_->spec().priority) return {HZ_S_EPERM, 0, 0, false};
  size_t inits = 0;
  for (const auto& [id, p] : pending_) inits += p->opcode == HZ_OP_COMM_INIT;
  if (comms_.size() + inits >= env_.limits.max_comms) return {HZ_S_ELIMIT, 0, 0, false};

  coll::Uid uid;
  std::memcpy(uid.bytes.data(), a.uid.bytes, HZ_UID_BYTES);
  coll::Constraints cons;
  cons.deterministic = (c.flags & HZ_COMM_F_DETERMINISTIC) != 0;
  cons.allow_lossy = (c.flags & HZ_COMM_F_ALLOW_LOSSY) != 0;
  cons.priority_class = c.priority_class;
  cons.max_threads = c.max_threads;
  cons.timeout_ms = c.timeout_ms;

  auto p = std::make_shared<Pending>();
  p->chain = *req.chain;
  p->queue = q.index();
  p->queue_gen = queues_[q.index()].gen;
  p->request_id = req.hdr.request_id;
  p->opcode = HZ_OP_COMM_INIT;
  uint64_t op_id = next_op_++;
  pending_[op_id] = p;
  in_flight_++;
  std::weak_ptr<Link> weak = link_;
  CollBackend* coll = env_.coll;
  env_.coll->Init(tenant_id_, uid, a.nranks, a.rank, cons,
                  [weak, op_id, coll](coll::Status st, MemberPtr m) {
                    std::shared_ptr<Link> link = weak.lock();
                    bool posted = false;
                    if (link) {
                      std::lock_guard<std::recursive_mutex> lock(link->mu);
                      if (link->ctx != nullptr) {
                        posted = true;
                        link->ctx->Post([link, op_id, st, m, coll] {
                          HzDevice* dev;
                          {
                            std::lock_guard<std::recursive_mutex> l(link->mu);
                            dev = link->dev;
                          }
                          if (dev != nullptr) {
                            dev->OnInitDone(op_id, st, m);
                          } else if (m != nullptr) {
                            coll->DestroyAsync(m);
                          }
                        });
                      }
                    }
                    // The VM left while its rank was joining: leave again so
                    // the other ranks see an abort instead of waiting.
                    if (!posted && m != nullptr) coll->DestroyAsync(m);
                  });
  return {HZ_S_OK, 0, 0, true};
}

void HzDevice::OnInitDone(uint64_t op_id, coll::Status st, MemberPtr m) {
  auto it = pending_.find(op_id);
  if (it == pending_.end()) {
    // Drained or torn down meanwhile: nobody will use this membership.
    if (m != nullptr) env_.coll->DestroyAsync(m);
    return;
  }
  std::shared_ptr<Pending> p = it->second;
  pending_.erase(it);
  in_flight_--;
  uint32_t status = FromEngine(st);
  uint32_t result_len = 0;
  if (st == coll::Status::kOk && m != nullptr) {
    uint64_t handle = next_handle_++;
    comms_[handle].member = m;
    hz_comm_init_result res{};
    res.comm = handle;
    p->chain.Write(0, &res, sizeof(res));
    result_len = sizeof(res);
  } else if (st == coll::Status::kOk) {
    status = HZ_S_EIO;
  }
  if (draining() && status != HZ_S_OK) status = HZ_S_ESHUTDOWN;
  FinishPending(*p, status, result_len);
  UpdateInfo();
}

HzDevice::Reply HzDevice::CommDestroyOrAbort(const Request& req) {
  hz_comm_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  auto it = comms_.find(a.comm);
  if (it == comms_.end()) return {HZ_S_ENOENT, 0, 0, false};
  CommEntry& entry = it->second;
  MemberPtr m = entry.member;
  if (req.hdr.opcode == HZ_OP_COMM_ABORT) {
    env_.coll->Abort(m);
    if (entry.in_flight == 0) return {HZ_S_OK, 0, 0, false};
    // Completes once the handle's own operations have (SPEC §7.3.4).
    auto p = std::make_shared<Pending>();
    p->chain = *req.chain;
    p->queue = HZ_VQ_CONTROL;
    p->queue_gen = queues_[HZ_VQ_CONTROL].gen;
    p->request_id = req.hdr.request_id;
    p->opcode = HZ_OP_COMM_ABORT;
    entry.aborts.push_back(std::move(p));
    in_flight_++;
    return {HZ_S_OK, 0, 0, true};
  }
  if (entry.in_flight != 0) return {HZ_S_EBUSY, 0, 0, false};
  comms_.erase(it);
  env_.coll->Leave(m);
  UpdateInfo();
  return {HZ_S_OK, 0, 0, false};
}

uint32_t HzDevice::ResolveSlice(const Request& req, const hz_slice& s, uint64_t need, bool write,
                                coll::IoVec* out, Pending* p) {
  if (s.region_id == HZ_REGION_NONE) {
    if (s.reserved != 0) return HZ_S_ENOTSUP;
    if (s.offset != 0 || s.length != 0) return HZ_S_EINVAL;
    // NONE stands for "no buffer": fine where nothing is needed (B = 0).
    return need == 0 ? HZ_S_OK : HZ_S_EINVAL;
  }
  if (s.region_id == HZ_REGION_INLINE) {
    if (s.reserved != 0) return HZ_S_ENOTSUP;
    if ((features_ & (1ull << HZ_F_INLINE_DATA)) == 0) return HZ_S_ENOTSUP;
    // SPEC §7.2.4: inline send data is the whole data segment; inline receive
    // space is the start of the result space.
    if (s.offset != 0 || s.length != need) return HZ_S_EINVAL;
    if (!write && s.length != req.data_len) return HZ_S_EINVAL;
    if (write && s.length > req.result_capacity) return HZ_S_ETOOSMALL;
    uint64_t base = write ? 0 : req.data_offset;
    const auto& segs = write ? req.chain->writable() : req.chain->readable();
    uint64_t left = need;
    for (const vdev::Segment& seg : segs) {
      if (left == 0) break;
      if (base >= seg.len) {
        base -= seg.len;
        continue;
      }
      uint64_t n = std::min<uint64_t>(left, seg.len - base);
      out->push_back({seg.data + base, static_cast<size_t>(n)});
      left -= n;
      base = 0;
    }
    if (write) p->result_len = static_cast<uint32_t>(need);
    return HZ_S_OK;
  }
  RegionPin pin;
  uint32_t st = regions_.Resolve(s, need, write ? HZ_REGION_F_WRITE : HZ_REGION_F_READ, out, &pin);
  if (st == HZ_S_OK) p->pins.push_back(std::move(pin));
  return st;
}

HzDevice::Reply HzDevice::HandleCollective(vdev::Queue& q, const Request& req) {
  if (env_.coll == nullptr || (features_ & (1ull << HZ_F_COLLECTIVES)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  hz_coll_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  const uint16_t opcode = req.hdr.opcode;
  coll::OpDesc d;
  if (!CollOp(opcode, &d.op)) return {HZ_S_ENOTSUP, 0, 0, false};
  // SPEC §7.4.8, in its order.
  if (a.flags != 0) return {HZ_S_ENOTSUP, 0, 0, false};
  auto cit = comms_.find(a.comm);
  if (cit == comms_.end()) return {HZ_S_ENOENT, 0, 0, false};
  const MemberPtr& m = cit->second.member;
  const uint64_t nranks = m->nranks();
  const bool reduces =
      opcode == HZ_OP_ALLREDUCE || opcode == HZ_OP_REDUCE || opcode == HZ_OP_REDUCE_SCATTER;
  const bool rooted = opcode == HZ_OP_BROADCAST || opcode == HZ_OP_REDUCE || opcode == HZ_OP_SEND ||
                      opcode == HZ_OP_RECV;
  // Fields an opcode does not use must be zero.
  if (opcode == HZ_OP_BARRIER && (a.count != 0 || a.dtype != 0)) return {HZ_S_EINVAL, 0, 0, false};
  if (!reduces && a.redop != 0) return {HZ_S_EINVAL, 0, 0, false};
  if (!rooted && a.peer != 0) return {HZ_S_EINVAL, 0, 0, false};
  if (rooted && a.peer >= nranks) return {HZ_S_EINVAL, 0, 0, false};
  const size_t esize = hz_dtype_size(a.dtype);
  if (opcode != HZ_OP_BARRIER && esize == 0) return {HZ_S_EINVAL, 0, 0, false};
  if (reduces && a.redop >= HZ_REDOP_MAX) return {HZ_S_EINVAL, 0, 0, false};

  uint64_t b = 0, nb = 0;
  if (!MulOk(a.count, esize, &b) || !MulOk(b, nranks, &nb)) return {HZ_S_EINVAL, 0, 0, false};
  const bool root = a.peer == m->rank();
  // Required lengths per SPEC §7.4.2; 0 means the slice must be NONE.
  uint64_t send_need = 0, recv_need = 0;
  switch (opcode) {
    case HZ_OP_ALLREDUCE:
      send_need = b;
      recv_need = b;
      break;
    case HZ_OP_BROADCAST:
      send_need = root ? b : 0;
      recv_need = b;
      break;
    case HZ_OP_REDUCE:
      send_need = b;
      recv_need = root ? b : 0;
      break;
    case HZ_OP_ALLGATHER:
      send_need = b;
      recv_need = nb;
      break;
    case HZ_OP_REDUCE_SCATTER:
      send_need = nb;
      recv_need = b;
      break;
    case HZ_OP_ALLTOALL:
      send_need = nb;
      recv_need = nb;
      break;
    case HZ_OP_SEND:
      send_need = b;
      break;
    case HZ_OP_RECV:
      recv_need = b;
      break;
    default:
      break;  // barrier
  }
  // A slice that is not needed must be all zero (NONE).
  if (send_need == 0 && a.send.region_id != HZ_REGION_NONE && b != 0) {
    return {HZ_S_EINVAL, 0, 0, false};
  }
  if (recv_need == 0 && a.recv.region_id != HZ_REGION_NONE && b != 0) {
    return {HZ_S_EINVAL, 0, 1, false};
  }
  // The data segment carries inline send data and nothing else.
  if (a.send.region_id != HZ_REGION_INLINE && req.data_len != 0) return {HZ_S_EINVAL, 0, 0, false};

  auto p = std::make_shared<Pending>();
  if (uint32_t st = ResolveSlice(req, a.send, send_need, false, &d.send, p.get()); st != HZ_S_OK) {
    return {st, 0, 0, false};
  }
  if (uint32_t st = ResolveSlice(req, a.recv, recv_need, true, &d.recv, p.get()); st != HZ_S_OK) {
    return {st, 0, st == HZ_S_ETOOSMALL ? static_cast<uint32_t>(recv_need) : 1u, false};
  }
  // In-place forms of SPEC §7.4.7; any other overlap of send and recv is refused.
  const hz_slice& s = a.send;
  const hz_slice& r = a.recv;
  if (s.region_id == r.region_id && s.region_id != HZ_REGION_NONE &&
      s.region_id != HZ_REGION_INLINE && s.length != 0 && r.length != 0 &&
      s.offset < r.offset + r.length && r.offset < s.offset + s.length) {
    const uint64_t rank_off = b * m->rank();  // <= nb, no overflow
    bool allowed = false;
    switch (opcode) {
      case HZ_OP_ALLREDUCE:
      case HZ_OP_BROADCAST:
      case HZ_OP_REDUCE:
        allowed = s.offset == r.offset && s.length == r.length;
        break;
      case HZ_OP_ALLGATHER:
        allowed = r.offset <= UINT64_MAX - rank_off && s.offset == r.offset + rank_off;
        break;
      case HZ_OP_REDUCE_SCATTER:
        allowed = s.offset <= UINT64_MAX - rank_off && r.offset == s.offset + rank_off;
        break;
      default:
        break;
    }
    if (!allowed) return {HZ_S_EINVAL, 0, 1, false};
  }
  d.seq = a.seq;
  d.count = a.count;
  d.dtype = a.dtype;
  d.redop = a.redop;
  d.peer = a.peer;

  p->chain = *req.chain;
  p->queue = q.index();
  p->queue_gen = queues_[q.index()].gen;
  p->request_id = req.hdr.request_id;
  p->opcode = opcode;
  p->bytes = std::max(send_need, recv_need);
  p->comm = a.comm;
  uint64_t op_id = next_op_++;
  pending_[op_id] = p;
  cit->second.in_flight++;
  in_flight_++;
  std::weak_ptr<Link> weak = link_;
  // The callback keeps p (and with it the pinned regions and the chain's
  // memory map) alive until the engine is done with the buffers, even if the
  // device goes away first.
  env_.coll->Post(m, std::move(d), [weak, op_id, p](coll::Status st) {
    std::shared_ptr<Link> link = weak.lock();
    if (!link) return;
    std::lock_guard<std::recursive_mutex> lock(link->mu);
    if (link->ctx == nullptr) return;
    link->ctx->Post([link, op_id, st, p] {
      HzDevice* dev;
      {
        std::lock_guard<std::recursive_mutex> l(link->mu);
        dev = link->dev;
      }
      if (dev != nullptr) dev->OnOpDone(op_id, st);
    });
  });
  return {HZ_S_OK, 0, 0, true};
}

void HzDevice::OnOpDone(uint64_t op_id, coll::Status st) {
  auto it = pending_.find(op_id);
  if (it == pending_.end()) return;  // answered by Drain already
  std::shared_ptr<Pending> p = it->second;
  pending_.erase(it);
  in_flight_--;
  uint32_t status = FromEngine(st);
  if (draining() && status != HZ_S_OK) status = HZ_S_ESHUTDOWN;
  if (status == HZ_S_OK && env_.metrics != nullptr) env_.metrics->AddBytes(p->opcode, p->bytes);
  auto cit = comms_.find(p->comm);
  // EABORTED says why (SPEC §7.3.5), the same on every rank.
  // A handle that is gone went with this session (Teardown): detail 2.
  uint32_t detail = 0;
  if (status == HZ_S_EABORTED) {
    detail = cit != comms_.end() ? env_.coll->AbortDetail(cit->second.member)
                                 : static_cast<uint32_t>(coll::AbortCause::kSessionEnded);
  }
  FinishPending(*p, status, status == HZ_S_OK ? p->result_len : 0, detail);
  p->pins.clear();
  // The last operation of a handle releases the COMM_ABORTs waiting for it.
  if (cit != comms_.end() && --cit->second.in_flight == 0) {
    for (const auto& abort : cit->second.aborts) {
      in_flight_--;
      FinishPending(*abort, HZ_S_OK, 0);
    }
    cit->second.aborts.clear();
  }
}

void HzDevice::FinishPending(const Pending& p, uint32_t status, uint32_t result_len,
                             uint32_t detail) {
  requests_++;
  if (status != HZ_S_OK) errors_++;
  if (env_.metrics != nullptr) env_.metrics->CountRequest(p.opcode, status);
  const QueueSlot& slot = queues_[p.queue];
  // A queue stopped (or restarted) since the request was popped has lost the
  // ring the chain belonged to; there is nobody left to answer.
  if (slot.queue == nullptr || slot.gen != p.queue_gen) return;
  uint32_t used = WriteStatus(p.chain, status, result_len, p.request_id, detail);
  slot.queue->Complete(p.chain, used);
  slot.queue->Flush();
}

bool HzDevice::PostToDevice(std::function<void(HzDevice&)> fn) {
  std::shared_ptr<Link> link = link_;
  std::lock_guard<std::recursive_mutex> lock(link->mu);
  if (link->ctx == nullptr) return false;
  link->ctx->Post([link, fn = std::move(fn)] {
    HzDevice* dev;
    {
      std::lock_guard<std::recursive_mutex> l(link->mu);
      dev = link->dev;
    }
    if (dev != nullptr) fn(*dev);
  });
  return true;
}

void HzDevice::Drain() {
  drained_ = true;
  std::map<uint64_t, std::shared_ptr<Pending>> pending;
  pending.swap(pending_);
  for (auto& [id, p] : pending) {
    in_flight_--;
    FinishPending(*p, HZ_S_ESHUTDOWN, 0);
  }
  for (auto& [handle, entry] : comms_) {
    for (const auto& abort : entry.aborts) {
      in_flight_--;
      FinishPending(*abort, HZ_S_ESHUTDOWN, 0);
    }
    entry.aborts.clear();
    entry.in_flight = 0;
  }
  ReturnEventBuffers();
  if (ctx_ != nullptr) ctx_->NotifyConfigChanged();
  UpdateInfo();
}

void HzDevice::Teardown(bool rings_alive) {
  // The subscription ends with the session (never from inside its callback:
  // this runs on the executor).
  delivery_.reset();
  // Quiescence registrations are session-scoped and hold regions.
  DropAllQuiesce();
  std::map<uint64_t, CommEntry> comms;
  comms.swap(comms_);
  if (rings_alive) {
    // A joining rank of the old session fails now; the engine's late answer
    // finds no request and leaves the communicator again (OnInitDone).
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second->opcode == HZ_OP_COMM_INIT) {
        in_flight_--;
        FinishPending(*it->second, HZ_S_EABORTED, 0,
                      static_cast<uint32_t>(coll::AbortCause::kSessionEnded));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [handle, entry] : comms) {
      for (const auto& abort : entry.aborts) {
        in_flight_--;
        FinishPending(*abort, HZ_S_OK, 0);
      }
    }
  } else {
    for (auto& [handle, entry] : comms) in_flight_ -= entry.aborts.size();
    in_flight_ -= pending_.size();
    pending_.clear();
    events_.clear();
  }
  // Leaving every communicator aborts it for the other ranks, so none of
  // them waits for this VM until a timeout. Destroy returns once the engine
  // no longer touches this VM's memory; the collectives it aborts come back
  // through the executor and, with the rings alive, are answered EABORTED.
  if (env_.coll != nullptr) {
    for (auto& [handle, entry] : comms) env_.coll->Destroy(entry.member);
  }
  regions_.Clear();
  hello_ = false;
  features_ = 0;
  session_id_ = RandomU64();
  UpdateInfo();
}

void HzDevice::OnReset() {
  Teardown(/*rings_alive=*/false);
  for (QueueSlot& s : queues_) s = {nullptr, next_gen_++};
}

void HzDevice::OnDisconnect() {
  {
    std::lock_guard<std::recursive_mutex> lock(link_->mu);
    link_->ctx = nullptr;
  }
  ctx_ = nullptr;
  Teardown(/*rings_alive=*/false);
  for (QueueSlot& s : queues_) s = {nullptr, next_gen_++};
  UpdateInfo();
}

void HzDevice::UpdateInfo() {
  std::lock_guard<std::mutex> lock(info_mu_);
  info_.connected = ctx_ != nullptr;
  info_.hello = hello_;
  info_.draining = draining();
  info_.features = features_;
  info_.session_id = session_id_;
  info_.queues_started.clear();
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].queue != nullptr) info_.queues_started.push_back(static_cast<uint16_t>(i));
  }
  info_.regions = regions_.count();
  info_.region_bytes = regions_.bytes();
  info_.comms.clear();
  for (const auto& [handle, e] : comms_) {
    info_.comms.push_back({handle, e.member->comm_id(), e.member->rank(), e.member->nranks()});
  }
  info_.events_held = events_.size();
}

DeviceInfo HzDevice::Info() const {
  std::lock_guard<std::mutex> lock(info_mu_);
  DeviceInfo out = info_;
  out.requests = requests_.load();
  out.errors = errors_.load();
  out.in_flight = in_flight_.load();
  return out;
}

}  // namespace hz::service
