// TOPOLOGY_GET, NEG_* and HINT_DECLARE (SPEC §7.7-§7.9): the provider side
// of the device. The scheduler, the negotiation engine and the hint engine
// are shared by every VM through Provider; requests name the VM's tenant,
// never anything the guest chose, so a tenant only reaches its own objects.
#include <cstring>
#include <vector>

#include "hz/service/hz_device.h"

namespace hz::service {

namespace {

constexpr uint32_t kNegResultMax =
    sizeof(hz_neg_result) + HZ_NEG_MAX_OFFERS * sizeof(hz_neg_offer);  // 336

uint32_t Wire(const events::Status& s) {
  return static_cast<uint32_t>(s.ToWire());
}

// The wire result of a decision: hz_neg_result, then its offers.
std::vector<uint8_t> DecisionBytes(const events::Decision& d) {
  hz_neg_result r = d.result;
  const size_t n = std::min<size_t>(d.offers.size(), HZ_NEG_MAX_OFFERS);
  r.num_offers = static_cast<uint32_t>(n);
  std::vector<uint8_t> out(sizeof(r) + n * sizeof(hz_neg_offer));
  std::memcpy(out.data(), &r, sizeof(r));
  if (n != 0) std::memcpy(out.data() + sizeof(r), d.offers.data(), n * sizeof(hz_neg_offer));
  return out;
}

}  // namespace

HzDevice::Reply HzDevice::HandleTopology(vdev::Queue&, const Request& req) {
  ProviderBackend* p = env_.provider;
  if (p == nullptr || (features_ & (1ull << HZ_F_TOPOLOGY)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  if (req.hdr.opcode != HZ_OP_TOPOLOGY_GET) return {HZ_S_ENOTSUP, 0, 0, false};
  if (req.args_len != 0) return {HZ_S_EINVAL, 0, 0, false};  // SPEC §7.7: no arguments
  std::vector<uint8_t> bytes;
  events::Status st = p->Summary(tenant_->name(), &bytes);
  if (!st.ok()) return {Wire(st), 0, 0, false};
  if (bytes.size() > req.result_capacity) {
    return {HZ_S_ETOOSMALL, 0, static_cast<uint32_t>(bytes.size()), false};
  }
  WriteResult(req, bytes.data(), bytes.size());
  return {HZ_S_OK, static_cast<uint32_t>(bytes.size()), 0, false};
}

HzDevice::Reply HzDevice::HandleNegotiation(vdev::Queue& q, const Request& req) {
  ProviderBackend* p = env_.provider;
  if (p == nullptr || (features_ & (1ull << HZ_F_NEGOTIATION)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  const std::string& tenant = tenant_->name();
  switch (req.hdr.opcode) {
    case HZ_OP_NEG_REQUEST: {
      hz_neg_request a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
      return NegPending(q, req, 0, a);
    }
    case HZ_OP_NEG_COUNTER: {
      hz_neg_counter_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
      if (a.negotiation_id == 0) return {HZ_S_ENOENT, 0, 0, false};
      return NegPending(q, req, a.negotiation_id, a.request);
    }
    case HZ_OP_NEG_ACCEPT: {
      hz_neg_accept_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
      if (req.result_capacity < sizeof(hz_neg_accept_result)) {
        return {HZ_S_ETOOSMALL, 0, sizeof(hz_neg_accept_result), false};
      }
      hz_neg_accept_result r{};
      events::Status st = p->Accept(tenant, a.offer_id, &r.reservation_id);
      if (!st.ok()) return {Wire(st), 0, 0, false};
      WriteResult(req, &r, sizeof(r));
      return {HZ_S_OK, sizeof(r), 0, false};
    }
    case HZ_OP_NEG_DECLINE: {
      hz_neg_decline_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
      return {Wire(p->Decline(tenant, a.negotiation_id)), 0, 0, false};
    }
    case HZ_OP_NEG_RELEASE: {
      hz_neg_release_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
      if (a.reserved != 0 || a.reserved2 != 0) return {HZ_S_ENOTSUP, 0, 0, false};
      return {Wire(p->Release(tenant, a)), 0, 0, false};
    }
    default:
      return {HZ_S_ENOTSUP, 0, 0, false};
  }
}

// The request is validated and queued now; it completes at the decision
// point with the offers (SPEC §9.3). Until then it is in flight like a
// collective: a reset forgets it, a drain answers ESHUTDOWN.
HzDevice::Reply HzDevice::NegPending(vdev::Queue& q, const Request& req, uint64_t counter_id,
                                     const hz_neg_request& r) {
  if (r.reserved != 0) return {HZ_S_ENOTSUP, 0, 0, false};
  if (req.result_capacity < kNegResultMax) return {HZ_S_ETOOSMALL, 0, kNegResultMax, false};
  auto pend = std::make_shared<Pending>();
  pend->chain = *req.chain;
  pend->queue = q.index();
  pend->queue_gen = queues_[q.index()].gen;
  pend->request_id = req.hdr.request_id;
  pend->opcode = req.hdr.opcode;
  const uint64_t op_id = next_op_++;
  // The decision can only reach this device through its executor, after
  // this handler returned, so the entry exists before it arrives.
  pending_[op_id] = pend;
  in_flight_++;
  std::weak_ptr<Link> weak = link_;
  ProviderBackend::DecisionFn done = [weak, op_id](const events::Decision& d) {
    std::shared_ptr<Link> link = weak.lock();
    if (!link) return;
    std::vector<uint8_t> bytes = DecisionBytes(d);
    std::lock_guard<std::recursive_mutex> lock(link->mu);
    if (link->ctx == nullptr) return;
    link->ctx->Post([link, op_id, bytes = std::move(bytes)] {
      HzDevice* dev;
      {
        std::lock_guard<std::recursive_mutex> l(link->mu);
        dev = link->dev;
      }
      if (dev != nullptr) dev->OnDecision(op_id, bytes);
    });
  };
  events::Status st = counter_id == 0
                          ? env_.provider->Submit(tenant_->name(), tenant_->spec().weight,
                                                  static_cast<uint8_t>(tenant_->spec().priority), r,
                                                  std::move(done))
                          : env_.provider->Counter(tenant_->name(), counter_id, r, std::move(done));
  if (!st.ok()) {
    pending_.erase(op_id);
    in_flight_--;
    return {Wire(st), 0, 0, false};
  }
  return {HZ_S_OK, 0, 0, true};
}

void HzDevice::OnDecision(uint64_t op_id, const std::vector<uint8_t>& result) {
  auto it = pending_.find(op_id);
  if (it == pending_.end()) return;  // the session ended meanwhile
  std::shared_ptr<Pending> p = it->second;
  pending_.erase(it);
  in_flight_--;
  const QueueSlot& slot = queues_[p->queue];
  uint32_t len = 0;
  // Only into a ring that still exists (FinishPending drops the rest).
  if (slot.queue != nullptr && slot.gen == p->queue_gen) {
    p->chain.Write(0, result.data(), result.size());
    len = static_cast<uint32_t>(result.size());
  }
  FinishPending(*p, HZ_S_OK, len);
}

HzDevice::Reply HzDevice::HandleHint(vdev::Queue&, const Request& req) {
  ProviderBackend* p = env_.provider;
  if (p == nullptr || (features_ & (1ull << HZ_F_HINTS)) == 0) {
    return {HZ_S_ENOTSUP, 0, 0, false};
  }
  if (req.hdr.opcode != HZ_OP_HINT_DECLARE) return {HZ_S_ENOTSUP, 0, 0, false};
  hz_hint_declare_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return {st, 0, 0, false};
  if (a.flags != 0) return {HZ_S_ENOTSUP, 0, 0, false};
  if (req.result_capacity < sizeof(hz_hint_declare_result)) {
    return {HZ_S_ETOOSMALL, 0, sizeof(hz_hint_declare_result), false};
  }
  hz_hint_declare_result r{};
  events::Status st = p->DeclareHint(tenant_->name(), a, &r);
  if (!st.ok()) return {Wire(st), 0, 0, false};
  WriteResult(req, &r, sizeof(r));
  return {HZ_S_OK, sizeof(r), 0, false};
}

}  // namespace hz::service
