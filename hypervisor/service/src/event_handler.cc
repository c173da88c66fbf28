#include "hz/service/event_handler.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "command_args.h"
#include "hz/service/device_link.h"
#include "hz/service/pending_table.h"
#include "hz/service/wire_status.h"

namespace hz::service {

namespace {

// The bus keys durable cursors by a short plain name; a VM is its socket
// path, so the name is a stable hash of it (FNV-1a, 64 bits).
std::string SubscriberName(const std::string& socket_path) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : socket_path) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[24];
  std::snprintf(buf, sizeof(buf), "vm-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

EventQueueHandler::EventQueueHandler(EventBackend* backend, const HandlerContext& ctx,
                                     const QueueSlots& queues, const Tenant& tenant,
                                     const std::string& socket_path)
    : backend_(backend), ctx_(ctx), queues_(queues), tenant_(tenant), socket_path_(socket_path) {}

EventQueueHandler::~EventQueueHandler() = default;

uint64_t EventQueueHandler::Features() const {
  return backend_ != nullptr ? 1ull << HZ_F_EVENTS : 0;
}

Reply EventQueueHandler::Handle(const vdev::Queue& queue, const Request& req) {
  if (!ctx_.session.Granted(HZ_F_EVENTS)) return Reply::Error(HZ_S_ENOTSUP);
  if (req.hdr.opcode == HZ_OP_EVENT_ACK) {
    hz_event_ack_args a;
    if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
    if (a.reserved != 0 || (a.flags & ~HZ_ACK_F_APPROVE) != 0) return Reply::Error(HZ_S_ENOTSUP);
    if (!subscription_) return Reply::Error(HZ_S_ESTATE);
    return Ack(queue, req, a);
  }
  if (req.hdr.opcode != HZ_OP_EVENT_SUBSCRIBE) return Reply::Error(HZ_S_ENOTSUP);
  hz_event_subscribe_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (req.result_capacity < sizeof(hz_event_subscribe_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_event_subscribe_result));
  }
  if (!subscription_) {
    if (Status st = Connect(); !st.ok()) return Reply::Error(ToWireStatus(st));
  }
  hz_event_subscribe_result res{};
  Status st = subscription_->Subscribe(a, &res);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  WriteResult(req, &res, sizeof(res));
  Fill();
  return Reply::Ok(sizeof(res));
}

Status EventQueueHandler::Connect() {
  std::unique_ptr<EventSubscription> s;
  Status st = backend_->Connect(tenant_.id(), SubscriberName(socket_path_), &s);
  if (!st.ok()) return st;
  // Runs on the publisher's thread: hop onto this connection's executor.
  s->SetNotify([this, link = ctx_.link] { DeviceLink::Post(link, [this] { Fill(); }); });
  subscription_ = std::move(s);
  return Status::Ok();
}

Reply EventQueueHandler::Ack(const vdev::Queue& queue, const Request& req,
                             const hz_event_ack_args& args) {
  auto p = std::make_shared<PendingRequest>();
  ctx_.pending.Add(this, queue, req, p);
  // done runs on the bus's writer thread (or here, when nothing needed
  // writing): the answer goes out on the executor either way, after any
  // earlier ack's, and only if the device still exists.
  subscription_->Ack(args, [this, id = p->id, link = ctx_.link](Status st) {
    DeviceLink::Post(link, [this, id, st = std::move(st)] { OnAckDone(id, st); });
  });
  return Reply::Pending();
}

void EventQueueHandler::OnAckDone(uint64_t id, const Status& status) {
  std::shared_ptr<PendingRequest> p = ctx_.pending.Take(id);
  if (!p) return;  // answered by the drain, or its connection went
  ctx_.pending.Finish(*p, Reply::WithStatus(ToWireStatus(status)));
}

void EventQueueHandler::Drain() {
  ReturnBuffers();
  ctx_.pending.FinishAll(this, Reply::Error(HZ_S_ESHUTDOWN));
}

void EventQueueHandler::OnKick(vdev::Queue& queue) {
  const uint64_t gen = queues_.gen(HZ_VQ_EVENT);
  vdev::Chain chain;
  while (queue.Pop(&chain)) {
    // SPEC §3.4.2: a buffer with a readable part or too small for a record
    // goes back unused (used length 0), as does every buffer when draining.
    if (ctx_.session.draining() || !chain.readable().empty() ||
        chain.writable_bytes() < sizeof(hz_event)) {
      queue.Complete(chain, 0);
    } else {
      held_.push_back({chain, gen});
    }
  }
  queue.Flush();
  Fill();
}

void EventQueueHandler::Fill() {
  vdev::Queue* eq = queues_.queue(HZ_VQ_EVENT);
  if (!subscription_ || eq == nullptr || ctx_.session.draining()) return;
  const uint64_t gen = queues_.gen(HZ_VQ_EVENT);
  uint64_t filled = 0;
  size_t i = 0;
  // Next() is only asked while a buffer is at hand: a record it returns
  // counts as delivered.
  for (; i < held_.size(); ++i) {
    auto& [chain, g] = held_[i];
    if (g != gen) continue;  // from a ring that is gone
    hz_event ev;
    if (!subscription_->Next(&ev)) break;
    chain.Write(0, &ev, sizeof(ev));
    eq->Complete(chain, sizeof(ev));
    filled++;
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(i));
  if (filled != 0) {
    eq->Flush();
    backend_->CountDelivered(filled);
  }
  ctx_.info_changed();
}

void EventQueueHandler::ReturnBuffers() {
  vdev::Queue* eq = queues_.queue(HZ_VQ_EVENT);
  const uint64_t gen = queues_.gen(HZ_VQ_EVENT);
  for (auto& [chain, g] : held_) {
    if (eq == nullptr || g != gen) continue;
    eq->Complete(chain, 0);  // SPEC §2.8: returned unused
  }
  held_.clear();
  if (eq != nullptr) eq->Flush();
}

void EventQueueHandler::OnQueueFreezing(vdev::Queue& queue) {
  if (queue.index() != HZ_VQ_EVENT) return;
  const uint64_t gen = queues_.gen(HZ_VQ_EVENT);
  for (auto& [chain, g] : held_) {
    if (g == gen) queue.Return(chain);
  }
  held_.clear();
}

events::DeliveryPosition EventQueueHandler::position() const {
  return subscription_ ? subscription_->Position() : events::DeliveryPosition{};
}

Status EventQueueHandler::SaveState(nlohmann::json* out) const {
  if (!subscription_) {
    *out = {{"connected", false}};
    return Status::Ok();
  }
  const events::DeliveryPosition p = subscription_->Position();
  *out = {{"connected", true},
          {"subscribed", p.subscribed},
          {"topics", p.topics},
          {"next", p.next},
          {"delivered", p.delivered}};
  return Status::Ok();
}

Status EventQueueHandler::RestoreState(const nlohmann::json& in) {
  bool connected = false;
  if (Status st = GetBool(in, "connected", false, &connected); !st.ok() || !connected) return st;
  if (backend_ == nullptr) return Status::NotSupported("this service has no event bus");
  events::DeliveryPosition p;
  Status st = GetBool(in, "subscribed", false, &p.subscribed);
  if (st.ok()) st = GetUInt(in, "topics", UINT64_MAX, &p.topics);
  if (st.ok()) st = GetUInt(in, "next", UINT64_MAX, &p.next);
  if (st.ok()) st = GetUInt(in, "delivered", UINT64_MAX, &p.delivered);
  if (st.ok()) st = Connect();
  if (st.ok()) st = subscription_->Resume(p);
  if (!st.ok()) subscription_.reset();
  return st;
}

void EventQueueHandler::OnHandedOver() {
  if (subscription_) subscription_->Abandon();
  subscription_.reset();
  held_.clear();
}

void EventQueueHandler::EndSession(SessionEnd end) {
  // Never from inside the subscription's callback: this runs on the executor.
  subscription_.reset();
  // Acks waiting for their write are answered when it ends, through the
  // executor; without a connection nobody is left to answer.
  if (end == SessionEnd::kDisconnect) ctx_.pending.ForgetAll(this);
  if (end != SessionEnd::kNewSession) held_.clear();  // their ring is gone
}

}  // namespace hz::service
