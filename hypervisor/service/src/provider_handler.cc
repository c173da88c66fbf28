#include "hz/service/provider_handler.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "hz/service/device_link.h"
#include "hz/service/device_state.h"
#include "hz/service/pending_table.h"
#include "hz/service/wire_status.h"

namespace hz::service {

namespace {

constexpr uint32_t kNegResultMax =
    sizeof(hz_neg_result) + HZ_NEG_MAX_OFFERS * sizeof(hz_neg_offer);  // 336

// The wire result of a decision: hz_neg_result, then its offers.
std::vector<uint8_t> DecisionBytes(const negotiation::Decision& d) {
  hz_neg_result r = d.result;
  const size_t n = std::min<size_t>(d.offers.size(), HZ_NEG_MAX_OFFERS);
  r.num_offers = static_cast<uint32_t>(n);
  std::vector<uint8_t> out(sizeof(r) + n * sizeof(hz_neg_offer));
  std::memcpy(out.data(), &r, sizeof(r));
  if (n != 0) std::memcpy(out.data() + sizeof(r), d.offers.data(), n * sizeof(hz_neg_offer));
  return out;
}

}  // namespace

ProviderHandler::ProviderHandler(ProviderBackend* backend, const HandlerContext& ctx,
                                 const Tenant& tenant)
    : backend_(backend), ctx_(ctx), tenant_(tenant) {}

uint64_t ProviderHandler::Features() const {
  if (backend_ == nullptr) return 0;
  return (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_HINTS);
}

Reply ProviderHandler::HandleTopology(const Request& req) {
  if (!ctx_.session.Granted(HZ_F_TOPOLOGY)) return Reply::Error(HZ_S_ENOTSUP);
  if (req.hdr.opcode != HZ_OP_TOPOLOGY_GET) return Reply::Error(HZ_S_ENOTSUP);
  if (req.args_len != 0) return Reply::Error(HZ_S_EINVAL);  // SPEC §7.7: no arguments
  std::vector<uint8_t> bytes;
  Status st = backend_->Summary(tenant_.id(), &bytes);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  if (bytes.size() > req.result_capacity) {
    return Reply::Error(HZ_S_ETOOSMALL, static_cast<uint32_t>(bytes.size()));
  }
  WriteResult(req, bytes.data(), bytes.size());
  return Reply::Ok(static_cast<uint32_t>(bytes.size()));
}

Reply ProviderHandler::HandleNegotiation(const vdev::Queue& queue, const Request& req) {
  if (!ctx_.session.Granted(HZ_F_NEGOTIATION)) return Reply::Error(HZ_S_ENOTSUP);
  const TenantId& tenant = tenant_.id();
  switch (req.hdr.opcode) {
    case HZ_OP_NEG_REQUEST: {
      hz_neg_request a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
      return Wait(queue, req, 0, a);
    }
    case HZ_OP_NEG_COUNTER: {
      hz_neg_counter_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
      if (a.negotiation_id == 0) return Reply::Error(HZ_S_ENOENT);
      return Wait(queue, req, a.negotiation_id, a.request);
    }
    case HZ_OP_NEG_ACCEPT:
      return Accept(req);
    case HZ_OP_NEG_DECLINE: {
      hz_neg_decline_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
      return Reply::WithStatus(ToWireStatus(backend_->Decline(tenant, a.negotiation_id)));
    }
    case HZ_OP_NEG_RELEASE: {
      hz_neg_release_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
      if (a.reserved != 0 || a.reserved2 != 0) return Reply::Error(HZ_S_ENOTSUP);
      return Reply::WithStatus(ToWireStatus(backend_->Release(tenant, a)));
    }
    default:
      return Reply::Error(HZ_S_ENOTSUP);
  }
}

Reply ProviderHandler::Accept(const Request& req) {
  hz_neg_accept_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (req.result_capacity < sizeof(hz_neg_accept_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_neg_accept_result));
  }
  hz_neg_accept_result r{};
  Status st = backend_->Accept(tenant_.id(), a.offer_id, &r.reservation_id);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  WriteResult(req, &r, sizeof(r));
  return Reply::Ok(sizeof(r));
}

Reply ProviderHandler::Wait(const vdev::Queue& queue, const Request& req, uint64_t counter_id,
                            const hz_neg_request& r) {
  if (r.reserved != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (req.result_capacity < kNegResultMax) return Reply::Error(HZ_S_ETOOSMALL, kNegResultMax);
  auto p = std::make_shared<PendingRequest>();
  // The decision can only reach this device through its executor, after
  // this handler returned, so the entry exists before it arrives.
  ctx_.pending.Add(this, queue, req, p);
  ProviderBackend::DecisionFn done = [this, link = ctx_.link,
                                      id = p->id](const negotiation::Decision& d) {
    DeviceLink::Post(link, [this, id, bytes = DecisionBytes(d)] { OnDecision(id, bytes); });
  };
  const TenantId& tenant = tenant_.id();
  const TenantSpec& spec = tenant_.spec();
  Status st = counter_id == 0
                  ? backend_->Submit(tenant, spec.weight, static_cast<uint8_t>(spec.priority),
                                     spec.max_open_negotiations, r, std::move(done))
                  : backend_->Counter(tenant, counter_id, r, std::move(done));
  if (!st.ok()) {
    ctx_.pending.Take(p->id);
    return Reply::Error(ToWireStatus(st));
  }
  return Reply::Pending();
}

void ProviderHandler::OnDecision(uint64_t id, const std::vector<uint8_t>& result) {
  std::shared_ptr<PendingRequest> p = ctx_.pending.Take(id);
  if (!p) return;  // the session ended meanwhile
  ctx_.pending.Finish(*p, Reply::Ok(), result);
}

Reply ProviderHandler::HandleHint(const Request& req) {
  if (!ctx_.session.Granted(HZ_F_HINTS)) return Reply::Error(HZ_S_ENOTSUP);
  if (req.hdr.opcode != HZ_OP_HINT_DECLARE) return Reply::Error(HZ_S_ENOTSUP);
  hz_hint_declare_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.flags != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (req.result_capacity < sizeof(hz_hint_declare_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_hint_declare_result));
  }
  hz_hint_declare_result r{};
  Status st = backend_->DeclareHint(tenant_.id(), a, &r);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  WriteResult(req, &r, sizeof(r));
  return Reply::Ok(sizeof(r));
}

void ProviderHandler::Drain() {
  ctx_.pending.FinishAll(this, Reply::Error(HZ_S_ESHUTDOWN));
}

void ProviderHandler::EndSession(SessionEnd end) {
  if (end != SessionEnd::kNewSession) ctx_.pending.ForgetAll(this);
}

}  // namespace hz::service
