#include "ckpt_op.h"

#include <algorithm>
#include <cstring>

#include "hz/service/wire_status.h"

namespace hz::service {

namespace {

// Slices over several extents are gathered into their bounce buffers.
void GatherBounce(CkptOp& o) {
  size_t b = 0;
  for (size_t i = 0; i < o.spans.guest.size(); ++i) {
    if (o.spans.guest[i].size() == 1) continue;
    auto& buf = o.spans.bounce[b++];
    buf.resize(o.spans.spans[i].len);
    size_t off = 0;
    for (const auto& g : o.spans.guest[i]) {
      if (o.Cancelled()) break;
      std::memcpy(buf.data() + off, g.data, g.len);
      off += g.len;
    }
    o.spans.spans[i].data = buf.data();
  }
}

// Slices over several extents are restored into their bounce buffers ...
void PrepareBounce(CkptOp& o) {
  size_t b = 0;
  for (size_t i = 0; i < o.spans.guest.size(); ++i) {
    if (o.spans.guest[i].size() == 1) continue;
    auto& buf = o.spans.bounce[b++];
    buf.resize(o.spans.spans[i].len);
    o.spans.spans[i].data = buf.data();
  }
}

// ... and scattered into their guest extents afterwards.
void ScatterBounce(CkptOp& o) {
  size_t b = 0;
  for (size_t i = 0; i < o.spans.guest.size(); ++i) {
    if (o.spans.guest[i].size() == 1) continue;
    const auto& buf = o.spans.bounce[b++];
    size_t off = 0;
    for (const auto& g : o.spans.guest[i]) {
      std::memcpy(g.data, buf.data() + off, g.len);
      off += g.len;
    }
  }
}

// A probe reports the checkpoint's size without writing it.
void ProbeSize(CkptOp& o, checkpoint::RestoreResult* res) {
  std::vector<checkpoint::ListEntry> entries;
  bool more = false;
  if (o.backend->List(o.tid, o.stream, res->step - 1, 1, &entries, &more).ok() &&
      !entries.empty() && entries[0].step == res->step) {
    res->bytes = entries[0].bytes;
  }
}

// The restore's result: hz_ckpt_restore_result, then the metadata.
void RestoreResultBytes(CkptOp& o, const checkpoint::RestoreResult& res, uint64_t need) {
  o.result.assign(need, 0);
  hz_ckpt_restore_result r{};
  r.step = res.step;
  r.bytes = res.bytes;
  r.meta_len = static_cast<uint32_t>(res.meta.size());
  std::memcpy(o.result.data(), &r, sizeof(r));
  if (!res.meta.empty()) {
    std::memcpy(o.result.data() + sizeof(r), res.meta.data(), res.meta.size());
  }
  o.bytes = res.bytes;
}

}  // namespace

uint32_t CkptOp::Wire(const Status& st) const {
  if (!st.IsAborted() && !st.IsShutdown()) return ToWireStatus(st);
  return draining != nullptr && draining->load() ? HZ_S_ESHUTDOWN : HZ_S_EABORTED;
}

void SaveWork(CkptOp& o) {
  GatherBounce(o);
  checkpoint::SaveRequest sr;
  sr.tenant = o.tid;
  sr.stream = o.stream;
  sr.step = o.step;
  sr.slices = o.spans.spans;
  sr.meta = o.meta;
  sr.cancelled = [&o] { return o.Cancelled(); };
  checkpoint::SaveResult res;
  Status st = o.backend->Save(sr, &res);
  if (!st.ok()) {
    o.status = o.Wire(st);
    return;
  }
  uint64_t us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now() - o.start)
                                          .count());
  hz_ckpt_save_result out{};
  out.step = res.step;
  out.state = static_cast<uint32_t>(res.state);
  out.stall_us = static_cast<uint32_t>(std::min<uint64_t>(us, UINT32_MAX));
  const auto* p = reinterpret_cast<const uint8_t*>(&out);
  o.result.assign(p, p + sizeof(out));
  o.bytes = o.meta.size();
  for (const auto& sp : o.spans.spans) o.bytes += sp.len;
}

void RestoreWork(CkptOp& o) {
  // A probe first: it verifies the checkpoint and says how much result
  // space the metadata needs, before any destination byte is touched.
  checkpoint::RestoreRequest rr;
  rr.tenant = o.tid;
  rr.stream = o.stream;
  rr.step = o.step;
  rr.cancelled = [&o] { return o.Cancelled(); };
  checkpoint::RestoreResult probe;
  Status st = o.backend->Restore(rr, &probe);
  if (!st.ok()) {
    o.status = o.Wire(st);
    return;
  }
  const uint64_t need = sizeof(hz_ckpt_restore_result) + probe.meta.size();
  if (o.req.result_capacity < need) {
    o.status = HZ_S_ETOOSMALL;
    o.detail = static_cast<uint32_t>(need);
    return;
  }
  checkpoint::RestoreResult res;
  if (o.num_slices == 0) {
    res = std::move(probe);
    ProbeSize(o, &res);
  } else {
    PrepareBounce(o);
    rr.step = probe.step;  // the same checkpoint, even if a newer one appeared
    rr.slices = o.spans.spans;
    st = o.backend->Restore(rr, &res);
    if (st.ok() && o.Cancelled()) st = Status::Aborted();
    if (!st.ok()) {
      o.status = o.Wire(st);
      return;
    }
    ScatterBounce(o);
  }
  RestoreResultBytes(o, res, need);
}

void PolicyWork(CkptOp& o) {
  o.status = o.Wire(o.backend->SetPolicy(o.tid, o.stream, o.policy));
}

void DeleteWork(CkptOp& o) {
  o.status = o.Wire(o.backend->Delete(o.tid, o.stream, o.step));
}

}  // namespace hz::service
