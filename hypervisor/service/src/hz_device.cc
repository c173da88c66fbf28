#include "hz/service/hz_device.h"

#include <algorithm>
#include <cstring>

#include "vdev/vhost_user.h"

namespace hz::service {

HzDevice::HzDevice(DeviceEnv env, std::shared_ptr<Tenant> tenant, std::string socket_path)
    : env_(env),
      tenant_(std::move(tenant)),
      socket_path_(std::move(socket_path)),
      link_(std::make_shared<DeviceLink>()),
      session_(env.draining),
      counters_(env.metrics, tenant_->name()),
      pending_(queues_, counters_),
      regions_(env_.limits, tenant_),
      region_(Context(), regions_, env_.limits, env_.background,
              [this] { return ctx_ != nullptr ? ctx_->Memory() : nullptr; }),
      coll_(env.coll, Context(), regions_, env_.limits, *tenant_, [this] { ServeWaiting(); }),
      ckpt_(env.ckpt, Context(), regions_, env_.limits, *tenant_),
      events_(env.events, Context(), queues_, *tenant_, socket_path_),
      provider_(env.provider, Context(), *tenant_),
      energy_(env.energy, Context(), *tenant_),
      // Regions first: a restored family may resolve slices in them.
      families_{{{"regions", &region_},
                 {"events", &events_},
                 {"checkpoints", &ckpt_},
                 {"collectives", &coll_},
                 {"provider", &provider_},
                 {"energy", &energy_}}} {
  info_.socket_path = socket_path_;
  info_.tenant = tenant_->name();
  if (env_.registry != nullptr) env_.registry->Add(this);
}

HzDevice::~HzDevice() {
  if (env_.registry != nullptr) env_.registry->Remove(this);
  link_->Close();
  Teardown(SessionEnd::kDisconnect);
  MarkClosed();
}

void HzDevice::MarkClosed() {
  if (closed_ || env_.registry == nullptr) return;
  closed_ = true;
  env_.registry->Closed();
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
  c.status = (session_.draining() ? HZ_CFG_S_DRAINING : HZ_CFG_S_READY) | HZ_CFG_S_LATENCY_WINDOW;
  c.max_regions = env_.limits.max_regions;
  c.max_extents = env_.limits.max_extents;
  c.max_region_bytes = env_.limits.max_region_bytes;
  c.max_args_bytes = env_.limits.max_args_bytes;
  c.event_record_size = sizeof(hz_event);
  c.max_comm_ranks = env_.limits.max_comm_ranks;
  // What a front-end that polls for its completions should poll within
  // (SPEC §5.1): the tenant's window for low-latency communicators, 0 where
  // it grants the class no effect (HZ_CFG_S_LATENCY_WINDOW says so).
  c.latency_poll_us = LatencyPollUs(tenant_->spec(), env_.limits.low_latency_poll_us);
  std::vector<uint8_t> out(sizeof(c));
  std::memcpy(out.data(), &c, sizeof(c));
  return out;
}

void HzDevice::OnConnect(vdev::DeviceContext& ctx) {
  ctx_ = &ctx;
  link_->Attach(&ctx);
  UpdateInfo();
}

void HzDevice::OnQueueStarted(vdev::Queue& queue) {
  if (queue.index() >= NumQueues()) return;
  queues_.Start(queue);
  UpdateInfo();
}

void HzDevice::OnQueueStopping(vdev::Queue& queue) {
  // The front-end is taking the event ring back (GET_VRING_BASE): the held
  // buffers go back unused (SPEC §2.8) at once, so the ring stops without
  // waiting for events that may never come. Request queues are left alone:
  // vdev waits (bounded) for their in-flight requests to complete.
  if (queue.index() != HZ_VQ_EVENT) return;
  events_.OnQueueStopping();
  UpdateInfo();
}

void HzDevice::OnQueueStopped(uint16_t index) {
  if (index >= QueueSlots::kMaxQueues) return;
  queues_.Stop(index);
  if (index == HZ_VQ_EVENT) events_.OnQueueStopped();
  UpdateInfo();
}

void HzDevice::ServeWaiting() {
  for (uint16_t index : queues_.Started()) {
    if (index != HZ_VQ_EVENT) OnKick(*queues_.queue(index));
  }
}

uint64_t HzDevice::OfferedFeatures() const {
  uint64_t f = 0;
  for (const Family& family : families_) f |= family.handler->Features();
  return f;
}

void HzDevice::OnKick(vdev::Queue& queue) {
  if (queue.index() == HZ_VQ_EVENT) {
    events_.OnKick(queue);
    UpdateInfo();
    return;
  }
  // After a live upgrade, requests wait in their rings until the handed
  // over communicators have re-formed (ServeWaiting).
  if (coll_.rejoining()) return;
  vdev::Chain chain;
  while (queue.Pop(&chain)) HandleChain(queue, chain);
  queue.Flush();
}

void HzDevice::Finish(vdev::Queue& queue, const vdev::Chain& chain, const Request& req,
                      const Reply& r) {
  uint32_t used = WriteStatus(chain, r.status(), r.result_len(), req.hdr.request_id, r.detail());
  queue.Complete(chain, used);
  counters_.Count(req.hdr.opcode, r.status(), req.taken);
}

void HzDevice::HandleChain(vdev::Queue& queue, const vdev::Chain& chain) {
  // The one place every request starts: requests answered at once complete
  // in Finish below, the others in PendingTable::Finish, both timed from here.
  Request req;
  req.taken = std::chrono::steady_clock::now();
  FramingError err;
  switch (ParseRequest(chain, env_.limits.max_args_bytes, &req, &err)) {
    case Framing::kNoStatus:
      queue.Complete(chain, 0);
      counters_.CountDropped();
      return;
    case Framing::kError:
      req.hdr.opcode = 0;
      req.hdr.request_id = err.request_id;
      Finish(queue, chain, req, Reply::Error(err.status, err.detail));
      return;
    case Framing::kOk:
      break;
  }
  const uint32_t st = Admit(queue, req);
  Reply r = st == HZ_S_OK ? Dispatch(queue, req) : Reply::Error(st);
  if (r.pending()) return;
  Finish(queue, chain, req, r);
}

uint32_t HzDevice::Admit(const vdev::Queue& queue, const Request& req) const {
  const uint16_t opcode = req.hdr.opcode;
  if (session_.draining()) return HZ_S_ESHUTDOWN;
  OpClass cls = ClassifyOpcode(opcode);
  if (cls == OpClass::kUnknown) return HZ_S_ENOTSUP;
  bool on_control = queue.index() == HZ_VQ_CONTROL;
  if ((cls == OpClass::kControl) != on_control || queue.index() == HZ_VQ_EVENT) {
    return HZ_S_EQUEUE;
  }
  if (!session_.hello() && opcode != HZ_OP_HELLO) return HZ_S_ESTATE;
  if (req.chain->readable().size() + req.chain->writable().size() > env_.limits.max_segments) {
    return HZ_S_EINVAL;
  }
  // Only REGION_REGISTER and the data-queue opcodes define a data segment
  // (SPEC §6.8); collectives check theirs against the inline send slice.
  if (req.data_len != 0 && opcode != HZ_OP_REGION_REGISTER && opcode != HZ_OP_CKPT_QUIESCE &&
      cls != OpClass::kData) {
    return HZ_S_EINVAL;
  }
  return HZ_S_OK;
}

Reply HzDevice::Dispatch(const vdev::Queue& queue, const Request& req) {
  switch (OpcodeFamily(req.hdr.opcode)) {
    case OpcodeFamily(HZ_OP_HELLO):
      return HandleHello(req);
    case OpcodeFamily(HZ_OP_REGION_REGISTER):
      return region_.Handle(queue, req);
    case OpcodeFamily(HZ_OP_COMM_UID):
      return coll_.HandleComm(queue, req);
    case OpcodeFamily(HZ_OP_ALLREDUCE):
      return coll_.HandleCollective(queue, req);
    case OpcodeFamily(HZ_OP_CKPT_POLICY):
      return ckpt_.Handle(queue, req);
    case OpcodeFamily(HZ_OP_EVENT_SUBSCRIBE):
      return events_.Handle(queue, req);
    case OpcodeFamily(HZ_OP_TOPOLOGY_GET):
      return provider_.HandleTopology(req);
    case OpcodeFamily(HZ_OP_NEG_REQUEST):
      return provider_.HandleNegotiation(queue, req);
    case OpcodeFamily(HZ_OP_HINT_DECLARE):
      return provider_.HandleHint(req);
    case OpcodeFamily(HZ_OP_ENERGY_SLACK):
      return energy_.Handle(req);
    default:
      return Reply::Error(HZ_S_ENOTSUP);
  }
}

Reply HzDevice::HandleHello(const Request& req) {
  hz_hello_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.reserved != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.version_major != HZ_VERSION_MAJOR) {
    // A failed HELLO leaves the session as it was (SPEC §7.1).
    return Reply::Error(HZ_S_EVERSION, (HZ_VERSION_MAJOR << 16) | HZ_VERSION_MINOR);
  }
  if (req.result_capacity < sizeof(hz_hello_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_hello_result));
  }
  // A later HELLO ends the current session: its regions and handles go, and
  // the other ranks of its communicators see this rank leave.
  if (session_.hello()) Teardown(SessionEnd::kNewSession);
  hz_hello_result res{};
  res.version_major = HZ_VERSION_MAJOR;
  res.version_minor = std::min<uint16_t>(a.version_minor, HZ_VERSION_MINOR);
  res.num_request_queues = env_.limits.num_request_queues;
  res.session_id = session_.id();
  res.max_regions = env_.limits.max_regions;
  res.max_extents = env_.limits.max_extents;
  res.max_region_bytes = env_.limits.max_region_bytes;
  res.max_comm_ranks = env_.limits.max_comm_ranks;
  res.event_record_size = sizeof(hz_event);
  // What the driver asks for, the device offers and the operator allows the
  // tenant (SPEC §4.2). A later change of the allowance applies from the
  // session's next HELLO.
  res.device_features = a.driver_features & OfferedFeatures() & tenant_->features();
  // Version 1.1 features only in sessions of 1.1 (SPEC §11.1).
  if (res.version_minor < 1) res.device_features &= ~(1ull << HZ_F_ENERGY);
  WriteResult(req, &res, sizeof(res));
  session_.Begin(res.device_features);
  UpdateInfo();
  return Reply::Ok(sizeof(res));
}

HandlerContext HzDevice::Context() {
  return HandlerContext{session_,
                        pending_,
                        link_,
                        [this] { UpdateInfo(); },
                        socket_path_,
                        [this](uint16_t queue, std::chrono::microseconds window) {
                          if (ctx_ != nullptr) ctx_->PollAwhile(queue, window);
                        }};
}

bool HzDevice::PostToDevice(std::function<void(HzDevice&)> fn) {
  return link_->Post([this, fn = std::move(fn)] { fn(*this); });
}

void HzDevice::Drain() {
  session_.MarkDrained();
  for (const Family& family : families_) family.handler->Drain();
  if (ctx_ != nullptr) ctx_->NotifyConfigChanged();
  UpdateInfo();
}

void HzDevice::Teardown(SessionEnd end) {
  for (const Family& family : families_) family.handler->EndSession(end);
  regions_.Clear();
  session_.End();
  UpdateInfo();
}

void HzDevice::OnReset() {
  Teardown(SessionEnd::kReset);
  queues_.StopAll();
}

void HzDevice::OnDisconnect() {
  link_->Detach();
  ctx_ = nullptr;
  Teardown(SessionEnd::kDisconnect);
  queues_.StopAll();
  UpdateInfo();
  MarkClosed();
}

void HzDevice::UpdateInfo() {
  JournalIfChanged();
  std::lock_guard<std::mutex> lock(info_mu_);
  info_.connected = ctx_ != nullptr;
  info_.hello = session_.hello();
  info_.draining = session_.draining();
  info_.features = session_.features();
  info_.session_id = session_.id();
  info_.queues_started = queues_.Started();
  info_.regions = regions_.count();
  info_.region_bytes = regions_.bytes();
  coll_.AddInfo(&info_);
  info_.events_held = events_.held();
}

DeviceInfo HzDevice::Info() const {
  std::lock_guard<std::mutex> lock(info_mu_);
  DeviceInfo out = info_;
  out.requests = counters_.requests();
  out.errors = counters_.errors();
  out.in_flight = pending_.in_flight();
  return out;
}

}  // namespace hz::service
