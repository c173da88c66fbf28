// EVENT_SUBSCRIBE, EVENT_ACK and the event queue (SPEC §8): the device binds
// its VM's tenant to the event bus under the VM's socket path, so the durable
// cursor survives reconnects, and fills the buffers the guest posts on queue 1
// with the next record as soon as one exists.
#include <cstdio>
#include <string>

#include "hz/service/hz_device.h"

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

HzDevice::Reply HzDevice::HandleEvent(vdev::Queue&, const Request& req) {
  if (env_.events == nullptr || (features_ & (1ull << HZ_F_EVENTS)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  if (req.hdr.opcode == HZ_OP_EVENT_ACK) {
    hz_event_ack_args a;
    if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
    if (a.reserved != 0 || (a.flags & ~HZ_ACK_F_APPROVE) != 0) return {HZ_S_ENOTSUP, 0, 0, false};
    if (!delivery_) return {HZ_S_ESTATE, 0, 0, false};
    events::Status st = delivery_->Ack(a);
    return {static_cast<uint32_t>(st.ToWire()), 0, 0, false};
  }
  if (req.hdr.opcode != HZ_OP_EVENT_SUBSCRIBE) return {HZ_S_ENOTSUP, 0, 0, false};
  hz_event_subscribe_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  if (req.result_capacity < sizeof(hz_event_subscribe_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_event_subscribe_result), false};
  }
  if (!delivery_) {
    std::unique_ptr<EventSubscription> d;
    events::Status st = env_.events->Connect(tenant_->name(), SubscriberName(socket_path_), &d);
    if (!st.ok()) return {static_cast<uint32_t>(st.ToWire()), 0, 0, false};
    // Runs on the publisher's thread: hop onto this connection's executor.
    std::weak_ptr<Link> weak = link_;
    d->SetNotify([weak] {
      std::shared_ptr<Link> link = weak.lock();
      if (!link) return;
      std::lock_guard<std::recursive_mutex> lock(link->mu);
      if (link->ctx == nullptr) return;
      link->ctx->Post([link] {
        HzDevice* dev;
        {
          std::lock_guard<std::recursive_mutex> l(link->mu);
          dev = link->dev;
        }
        if (dev != nullptr) dev->FillEvents();
      });
    });
    delivery_ = std::move(d);
  }
  hz_event_subscribe_result res{};
  events::Status st = delivery_->Subscribe(a, &res);
  if (!st.ok()) return {static_cast<uint32_t>(st.ToWire()), 0, 0, false};
  WriteResult(req, &res, sizeof(res));
  FillEvents();
  return {HZ_S_OK, sizeof(res), 0, false};
}

void HzDevice::FillEvents() {
  vdev::Queue* eq = queues_[HZ_VQ_EVENT].queue;
  if (!delivery_ || eq == nullptr || draining()) return;
  const uint64_t gen = queues_[HZ_VQ_EVENT].gen;
  uint64_t filled = 0;
  size_t i = 0;
  // Next() is only asked while a buffer is at hand: a record it returns
  // counts as delivered.
  for (; i < events_.size(); ++i) {
    auto& [chain, g] = events_[i];
    if (g != gen) continue;  // from a ring that is gone
    hz_event ev;
    if (!delivery_->Next(&ev)) break;
    chain.Write(0, &ev, sizeof(ev));
    eq->Complete(chain, sizeof(ev));
    filled++;
  }
  events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(i));
  if (filled != 0) {
    eq->Flush();
    env_.events->CountDelivered(filled);
  }
  UpdateInfo();
}

}  // namespace hz::service
