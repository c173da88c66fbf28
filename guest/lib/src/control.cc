// Checkpoints, events, topology, negotiation and hints: each call encodes
// one control request (SPEC.md §7.5-§7.9) and decodes its result.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device.h"

namespace hz::lib {
namespace {

// Resolves tenant buffers to slices; checkpoint data never travels inline.
int Slices(hz_device* dev, const hz_buf* bufs, size_t n, std::vector<hz_slice>* out) {
  if (n > 0 && bufs == nullptr) return HZ_EINVAL;
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (bufs[i].ptr == nullptr || bufs[i].len == 0) return HZ_EINVAL;
    if (!FindRegistered(dev, bufs[i].ptr, bufs[i].len, &(*out)[i])) return HZ_EFAULT;
  }
  return HZ_OK;
}

int Need(hz_device* dev, int feature) {
  return Granted(dev, feature) ? HZ_OK : HZ_ENOTSUP;
}

void CopyNegotiation(const std::vector<uint8_t>& raw, uint32_t len, hz_negotiation* out) {
  hz_neg_result r;
  std::memcpy(&r, raw.data(), sizeof(r));
  *out = {};
  out->id = r.negotiation_id;
  out->round = r.round;
  const uint32_t fits = (len - sizeof(r)) / sizeof(hz_neg_offer);
  out->num_offers = std::min({r.num_offers, fits, uint32_t{HZ_NEG_MAX_OFFERS}});
  std::memcpy(out->offers, raw.data() + sizeof(r), out->num_offers * sizeof(hz_neg_offer));
}

int Negotiate(hz_device* dev, uint16_t opcode, const void* args, uint32_t args_len,
              hz_negotiation* out) {
  if (int rc = Need(dev, HZ_F_NEGOTIATION); rc != HZ_OK) return rc;
  std::vector<uint8_t> raw(sizeof(hz_neg_result) + HZ_NEG_MAX_OFFERS * sizeof(hz_neg_offer));
  Completion c;
  int rc = ControlCall(dev, opcode, args, args_len, {}, raw.data(),
                       static_cast<uint32_t>(raw.size()), &c);
  if (rc != HZ_OK) return rc;
  if (c.result_len < sizeof(hz_neg_result)) return HZ_ETRANSPORT;
  CopyNegotiation(raw, c.result_len, out);
  return HZ_OK;
}

}  // namespace
}  // namespace hz::lib

using namespace hz::lib;

extern "C" int hz_ckpt_set_policy(hz_device_t* dev, uint32_t stream, const hz_ckpt_policy* p) {
  if (dev == nullptr || p == nullptr || stream == 0 || p->retention == 0) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  hz_ckpt_policy_args a{};
  a.stream = stream;
  a.flags = p->flags;
  a.retention = p->retention;
  a.tier = p->tier;
  a.stall_budget_ms = p->stall_budget_ms;
  a.rpo_s = p->rpo_s;
  return ControlCall(dev, HZ_OP_CKPT_POLICY, &a, sizeof(a), {}, nullptr, 0);
}

extern "C" int hz_ckpt_save(hz_device_t* dev, uint32_t stream, uint64_t step, const hz_buf* bufs,
                            size_t n, const void* meta, size_t meta_len, hz_ckpt_info* out) {
  if (dev == nullptr || stream == 0 || n == 0 || n > UINT32_MAX) return HZ_EINVAL;
  if (step == 0 || step == HZ_STEP_LATEST || (meta_len && meta == nullptr)) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  std::vector<hz_slice> slices;
  if (int rc = Slices(dev, bufs, n, &slices); rc != HZ_OK) return rc;
  hz_ckpt_save_args a{};
  a.stream = stream;
  a.num_slices = static_cast<uint32_t>(n);
  a.step = step;
  a.meta_len = static_cast<uint32_t>(meta_len);
  DataSeg data[2] = {{slices.data(), slices.size() * sizeof(hz_slice)}, {meta, meta_len}};
  hz_ckpt_save_result r{};
  // Saves go on a request queue: they stall only the caller, not control traffic.
  uint64_t ticket = 0;
  int rc = dev->transport->Submit(0, HZ_OP_CKPT_SAVE, &a, sizeof(a), {data, meta_len ? 2u : 1u}, &r,
                                  sizeof(r), &ticket);
  if (rc != HZ_OK) return rc;
  Completion c;
  rc = dev->transport->Wait(ticket, -1, &c, kNoSpin);
  if (rc != HZ_OK) return rc;
  if (c.err) return c.err;
  if (c.status != HZ_S_OK) return FromStatus(c.status);
  if (out) {
    *out = {};
    out->step = r.step;
    out->state = r.state;
    out->stall_us = r.stall_us;
    for (size_t i = 0; i < n; ++i) out->bytes += bufs[i].len;
  }
  return HZ_OK;
}

extern "C" int hz_ckpt_restore(hz_device_t* dev, uint32_t stream, uint64_t step, const hz_buf* bufs,
                               size_t n, void* meta, size_t* meta_len, hz_ckpt_info* out) {
  if (dev == nullptr || stream == 0 || n > UINT32_MAX) return HZ_EINVAL;
  if (meta_len != nullptr && *meta_len > 0 && meta == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  std::vector<hz_slice> slices;
  if (int rc = Slices(dev, bufs, n, &slices); rc != HZ_OK) return rc;
  hz_ckpt_restore_args a{};
  a.stream = stream;
  a.num_slices = static_cast<uint32_t>(n);
  a.step = step;
  const size_t cap = meta_len ? *meta_len : 0;
  std::vector<uint8_t> result(sizeof(hz_ckpt_restore_result) + cap);
  DataSeg data{slices.data(), slices.size() * sizeof(hz_slice)};
  uint64_t ticket = 0;
  int rc = dev->transport->Submit(0, HZ_OP_CKPT_RESTORE, &a, sizeof(a), {&data, n ? 1u : 0u},
                                  result.data(), static_cast<uint32_t>(result.size()), &ticket);
  if (rc != HZ_OK) return rc;
  Completion c;
  rc = dev->transport->Wait(ticket, -1, &c, kNoSpin);
  if (rc != HZ_OK) return rc;
  if (c.err) return c.err;
  if (c.status != HZ_S_OK) return FromStatus(c.status);
  if (c.result_len < sizeof(hz_ckpt_restore_result)) return HZ_ETRANSPORT;
  hz_ckpt_restore_result r;
  std::memcpy(&r, result.data(), sizeof(r));
  const size_t got = std::min<size_t>({r.meta_len, cap, c.result_len - sizeof(r)});
  if (got) std::memcpy(meta, result.data() + sizeof(r), got);
  if (meta_len) *meta_len = got;
  if (out) {
    *out = {};
    out->step = r.step;
    out->bytes = r.bytes;
    out->state = HZ_CKPT_DURABLE;
  }
  return r.meta_len > cap ? HZ_ETOOSMALL : HZ_OK;
}

extern "C" int hz_ckpt_list(hz_device_t* dev, uint32_t stream, hz_ckpt_info* entries, size_t max,
                            size_t* n) {
  if (dev == nullptr || stream == 0 || n == nullptr || (max && entries == nullptr))
    return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  *n = 0;
  uint64_t after = 0;
  constexpr uint32_t kPage = 64;
  std::vector<uint8_t> raw(sizeof(hz_ckpt_list_result) + kPage * sizeof(hz_ckpt_entry));
  while (*n < max) {
    hz_ckpt_list_args a{};
    a.stream = stream;
    a.max_entries = static_cast<uint32_t>(std::min<size_t>(kPage, max - *n));
    a.start_after_step = after;
    Completion c;
    int rc = ControlCall(dev, HZ_OP_CKPT_LIST, &a, sizeof(a), {}, raw.data(),
                         static_cast<uint32_t>(raw.size()), &c);
    if (rc != HZ_OK) return rc;
    if (c.result_len < sizeof(hz_ckpt_list_result)) return HZ_ETRANSPORT;
    hz_ckpt_list_result h;
    std::memcpy(&h, raw.data(), sizeof(h));
    const uint32_t fits = (c.result_len - sizeof(h)) / sizeof(hz_ckpt_entry);
    const uint32_t count = std::min({h.count, fits, a.max_entries});
    for (uint32_t i = 0; i < count; ++i) {
      hz_ckpt_entry e;
      std::memcpy(&e, raw.data() + sizeof(h) + i * sizeof(e), sizeof(e));
      entries[(*n)++] = {e.step, e.bytes, e.time_s, e.state, e.tier, 0};
      after = e.step;
    }
    if (!h.more || count == 0) break;
  }
  return HZ_OK;
}

extern "C" int hz_ckpt_delete(hz_device_t* dev, uint32_t stream, uint64_t step) {
  if (dev == nullptr || stream == 0) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  hz_ckpt_delete_args a{};
  a.stream = stream;
  a.step = step;
  return ControlCall(dev, HZ_OP_CKPT_DELETE, &a, sizeof(a), {}, nullptr, 0);
}

extern "C" int hz_ckpt_quiesce(hz_device_t* dev, uint32_t stream, hz_quiesce_word* word,
                               const hz_buf* bufs, size_t n) {
  if (dev == nullptr || stream == 0 || word == nullptr || n == 0 || n > UINT32_MAX)
    return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_CHECKPOINT); rc != HZ_OK) return rc;
  hz_ckpt_quiesce_args a{};
  a.stream = stream;
  if (!FindRegistered(dev, word, sizeof(*word), &a.word)) return HZ_EFAULT;
  std::vector<hz_slice> slices;
  if (int rc = Slices(dev, bufs, n, &slices); rc != HZ_OK) return rc;
  a.num_slices = static_cast<uint32_t>(n);
  DataSeg data{slices.data(), slices.size() * sizeof(hz_slice)};
  return ControlCall(dev, HZ_OP_CKPT_QUIESCE, &a, sizeof(a), {&data, 1}, nullptr, 0);
}

extern "C" int hz_event_subscribe(hz_device_t* dev, uint64_t topics, uint64_t from_seq) {
  if (dev == nullptr || topics == 0) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_EVENTS); rc != HZ_OK) return rc;
  {
    std::lock_guard<std::mutex> lock(dev->mu);
    if (!dev->events_enabled) {
      int rc = dev->transport->EnableEvents();
      if (rc != HZ_OK) return rc;
      dev->events_enabled = true;
    }
  }
  hz_event_subscribe_args a{};
  a.topics = topics;
  a.from_seq = from_seq;
  hz_event_subscribe_result r{};
  return ControlCall(dev, HZ_OP_EVENT_SUBSCRIBE, &a, sizeof(a), {}, &r, sizeof(r));
}

extern "C" int hz_event_fd(hz_device_t* dev) {
  if (dev == nullptr) return HZ_EINVAL;
  if (!dev->events_enabled) return HZ_ESTATE;
  return dev->transport->EventFd();
}

extern "C" int hz_event_next(hz_device_t* dev, hz_event* ev, int timeout_ms) {
  if (dev == nullptr || ev == nullptr) return HZ_EINVAL;
  if (!dev->events_enabled) return HZ_ESTATE;
  return dev->transport->NextEvent(ev, timeout_ms);
}

extern "C" int hz_event_ack(hz_device_t* dev, uint64_t seq, uint32_t flags) {
  if (dev == nullptr || seq == 0 || (flags & ~HZ_ACK_F_APPROVE) != 0) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_EVENTS); rc != HZ_OK) return rc;
  hz_event_ack_args a{};
  a.seq = seq;
  a.flags = flags;
  return ControlCall(dev, HZ_OP_EVENT_ACK, &a, sizeof(a), {}, nullptr, 0);
}

extern "C" int hz_topology_get(hz_device_t* dev, hz_topology** out) {
  if (dev == nullptr || out == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_TOPOLOGY); rc != HZ_OK) return rc;
  std::vector<uint8_t> raw(4096);
  Completion c;
  int rc = ControlCall(dev, HZ_OP_TOPOLOGY_GET, nullptr, 0, {}, raw.data(),
                       static_cast<uint32_t>(raw.size()), &c);
  if (rc == HZ_ETOOSMALL && c.detail > raw.size() && c.detail <= (1u << 20)) {
    raw.resize(c.detail);
    rc = ControlCall(dev, HZ_OP_TOPOLOGY_GET, nullptr, 0, {}, raw.data(),
                     static_cast<uint32_t>(raw.size()), &c);
  }
  if (rc != HZ_OK) return rc;
  hz_topo_header h;
  if (c.result_len < sizeof(h)) return HZ_ETRANSPORT;
  std::memcpy(&h, raw.data(), sizeof(h));
  const size_t need = sizeof(h) + size_t{h.num_groups} * sizeof(hz_topo_group) +
                      size_t{h.num_devices} * sizeof(hz_topo_device);
  if (need > c.result_len) return HZ_ETRANSPORT;
  auto* t = static_cast<hz_topology*>(std::calloc(1, sizeof(hz_topology) + need));
  if (t == nullptr) return HZ_ENOMEM;
  auto* body = reinterpret_cast<uint8_t*>(t + 1);
  std::memcpy(body, raw.data(), need);
  t->header = h;
  t->groups = reinterpret_cast<hz_topo_group*>(body + sizeof(h));
  t->devices = reinterpret_cast<hz_topo_device*>(body + sizeof(h) +
                                                 size_t{h.num_groups} * sizeof(hz_topo_group));
  *out = t;
  return HZ_OK;
}

extern "C" void hz_topology_free(hz_topology* t) {
  std::free(t);
}

extern "C" int hz_neg_start(hz_device_t* dev, const hz_neg_request* req, hz_negotiation* out) {
  if (dev == nullptr || req == nullptr || out == nullptr || req->count == 0) return HZ_EINVAL;
  if (req->latest_start_s < req->earliest_start_s || req->duration_s == 0) return HZ_EINVAL;
  return Negotiate(dev, HZ_OP_NEG_REQUEST, req, sizeof(*req), out);
}

extern "C" int hz_neg_counter(hz_device_t* dev, uint64_t id, const hz_neg_request* req,
                              hz_negotiation* out) {
  if (dev == nullptr || req == nullptr || out == nullptr || req->count == 0) return HZ_EINVAL;
  hz_neg_counter_args a{};
  a.negotiation_id = id;
  a.request = *req;
  return Negotiate(dev, HZ_OP_NEG_COUNTER, &a, sizeof(a), out);
}

extern "C" int hz_neg_accept(hz_device_t* dev, uint64_t offer_id, uint64_t* reservation_id) {
  if (dev == nullptr || reservation_id == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_NEGOTIATION); rc != HZ_OK) return rc;
  hz_neg_accept_args a{offer_id};
  hz_neg_accept_result r{};
  Completion c;
  int rc = ControlCall(dev, HZ_OP_NEG_ACCEPT, &a, sizeof(a), {}, &r, sizeof(r), &c);
  if (rc != HZ_OK) return rc;
  if (c.result_len < sizeof(r)) return HZ_ETRANSPORT;
  *reservation_id = r.reservation_id;
  return HZ_OK;
}

extern "C" int hz_neg_decline(hz_device_t* dev, uint64_t negotiation_id) {
  if (dev == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_NEGOTIATION); rc != HZ_OK) return rc;
  hz_neg_decline_args a{negotiation_id};
  return ControlCall(dev, HZ_OP_NEG_DECLINE, &a, sizeof(a), {}, nullptr, 0);
}

extern "C" int hz_neg_release(hz_device_t* dev, uint64_t reservation_id, uint16_t count) {
  if (dev == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_NEGOTIATION); rc != HZ_OK) return rc;
  hz_neg_release_args a{};
  a.reservation_id = reservation_id;
  a.count = count;
  return ControlCall(dev, HZ_OP_NEG_RELEASE, &a, sizeof(a), {}, nullptr, 0);
}

extern "C" int hz_hint_declare(hz_device_t* dev, uint32_t min_batch, uint32_t max_batch,
                               uint32_t step, uint32_t* suggested) {
  if (dev == nullptr || step == 0 || min_batch == 0 || min_batch > max_batch) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_HINTS); rc != HZ_OK) return rc;
  hz_hint_declare_args a{};
  a.min_batch = min_batch;
  a.max_batch = max_batch;
  a.step = step;
  hz_hint_declare_result r{};
  Completion c;
  int rc = ControlCall(dev, HZ_OP_HINT_DECLARE, &a, sizeof(a), {}, &r, sizeof(r), &c);
  if (rc != HZ_OK) return rc;
  if (suggested) *suggested = c.result_len >= sizeof(r) ? r.suggested : min_batch;
  return HZ_OK;
}

extern "C" int hz_energy_slack(hz_device_t* dev, uint32_t slowdown_pct, uint64_t duration_s,
                               uint64_t* expires_s) {
  if (dev == nullptr) return HZ_EINVAL;
  if (int rc = Need(dev, HZ_F_ENERGY); rc != HZ_OK) return rc;
  hz_energy_slack_args a{};
  a.slowdown_pct = slowdown_pct;
  a.duration_s = duration_s;
  hz_energy_slack_result r{};
  Completion c;
  int rc = ControlCall(dev, HZ_OP_ENERGY_SLACK, &a, sizeof(a), {}, &r, sizeof(r), &c);
  if (rc != HZ_OK) return rc;
  if (expires_s) *expires_s = c.result_len >= sizeof(r) ? r.expires_s : 0;
  return HZ_OK;
}
