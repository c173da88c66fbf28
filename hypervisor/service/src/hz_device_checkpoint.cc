// CKPT_POLICY, CKPT_SAVE, CKPT_RESTORE, CKPT_LIST, CKPT_DELETE and
// CKPT_QUIESCE (SPEC §7.5) on top of the checkpoint engine. Slices resolve
// to host spans through the region table, as for collectives. A slice whose
// region spans several host extents is staged through a bounce buffer, so
// each guest slice is one slice of the checkpoint whatever the VM's layout.
//
// Saves and restores run on the connection's executor: the save's copy is
// the tenant's stall by definition (SPEC §7.5.2), and a restore's reads are
// bounded by the checkpoint's size.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "hz/service/engines.h"
#include "hz/service/hz_device.h"

namespace hz::service {

namespace {

constexpr uint32_t kSliceBytes = sizeof(hz_slice);

uint32_t Wire(checkpoint::Status s) {
  return checkpoint::ToWireStatus(s);
}

}  // namespace

// Reads n slices from the request's data segment at `at`.
static bool ReadSlices(const Request& req, uint64_t at, uint32_t n, std::vector<hz_slice>* out) {
  out->resize(n);
  if (n == 0) return true;
  return req.chain->Read(req.data_offset + at, out->data(), uint64_t{n} * kSliceBytes) ==
         uint64_t{n} * kSliceBytes;
}

uint32_t HzDevice::ResolveCkptSlices(const std::vector<hz_slice>& slices, bool write,
                                     CkptSpans* out, uint32_t* detail) {
  for (uint32_t i = 0; i < slices.size(); ++i) {
    const hz_slice& s = slices[i];
    *detail = i;
    if (s.region_id == HZ_REGION_NONE || s.region_id == HZ_REGION_INLINE) return HZ_S_EINVAL;
    coll::IoVec iov;
    RegionPin pin;
    uint32_t st =
        regions_.Resolve(s, s.length, write ? HZ_REGION_F_WRITE : HZ_REGION_F_READ, &iov, &pin);
    if (st != HZ_S_OK) return st;
    out->pins.push_back(std::move(pin));
    out->guest.push_back({});
    for (const coll::IoSpan& sp : iov) {
      out->guest.back().push_back({static_cast<uint8_t*>(sp.data), sp.len});
    }
    if (iov.size() == 1) {
      out->spans.push_back({static_cast<uint8_t*>(iov[0].data), iov[0].len});
    } else {
      // Several extents (or an empty slice): one contiguous bounce buffer.
      auto& b = out->bounce.emplace_back(s.length);
      if (!write) {
        size_t off = 0;
        for (const coll::IoSpan& sp : iov) {
          std::memcpy(b.data() + off, sp.data, sp.len);
          off += sp.len;
        }
      }
      out->spans.push_back({b.data(), b.size()});
    }
  }
  *detail = 0;
  return HZ_S_OK;
}

HzDevice::Reply HzDevice::HandleCheckpoint(vdev::Queue&, const Request& req) {
  auto Err = [](uint32_t status, uint32_t detail = 0) { return Reply{status, 0, detail, false}; };
  checkpoint::Engine* eng = env_.engines != nullptr ? env_.engines->ckpt() : nullptr;
  if (eng == nullptr || (features_ & (1ull << HZ_F_CHECKPOINT)) == 0) return Err(HZ_S_ENOTSUP);
  const auto start = std::chrono::steady_clock::now();
  const checkpoint::TenantId tid = env_.engines->CkptTenant(tenant_->name());
  switch (req.hdr.opcode) {
    case HZ_OP_CKPT_POLICY: {
      hz_ckpt_policy_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
      if ((a.flags & ~HZ_CKPT_F_AUTO_SAVE_ON_NOTICE) != 0) return Err(HZ_S_ENOTSUP);
      if (a.stream == 0 || a.retention == 0 || a.tier > HZ_TIER_PEER_HOST) return Err(HZ_S_EINVAL);
      if (a.tier == HZ_TIER_PEER_HOST) return Err(HZ_S_ENOTSUP);
      checkpoint::Policy p;
      p.retention = a.retention;
      p.tier = static_cast<checkpoint::TierKind>(a.tier);
      p.stall_budget_ms = a.stall_budget_ms;
      p.rpo_s = a.rpo_s;
      p.auto_save_on_notice = (a.flags & HZ_CKPT_F_AUTO_SAVE_ON_NOTICE) != 0;
      checkpoint::Status st = eng->SetPolicy(tid, a.stream, p);
      // Clearing AUTO_SAVE_ON_NOTICE cancels the registration (the engine's
      // part); the session lets go of its regions.
      if (st == checkpoint::Status::kOk && !p.auto_save_on_notice) DropQuiesce(a.stream);
      return Err(Wire(st));
    }
    case HZ_OP_CKPT_SAVE: {
      hz_ckpt_save_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
      if (a.flags != 0) return Err(HZ_S_ENOTSUP);
      if (a.stream == 0 || a.num_slices == 0 || a.step == 0 || a.step == HZ_STEP_LATEST) {
        return Err(HZ_S_EINVAL);
      }
      // u32 * 24 + u32 cannot overflow u64.
      if (req.data_len != uint64_t{a.num_slices} * kSliceBytes + a.meta_len) {
        return Err(HZ_S_EINVAL);
      }
      if (req.result_capacity < sizeof(hz_ckpt_save_result)) {
        return Err(HZ_S_ETOOSMALL, sizeof(hz_ckpt_save_result));
      }
      std::vector<hz_slice> slices;
      if (!ReadSlices(req, 0, a.num_slices, &slices)) return Err(HZ_S_EINVAL);
      std::vector<uint8_t> meta(a.meta_len);
      if (a.meta_len != 0 && req.chain->Read(req.data_offset + uint64_t{a.num_slices} * kSliceBytes,
                                             meta.data(), a.meta_len) != a.meta_len) {
        return Err(HZ_S_EINVAL);
      }
      CkptSpans spans;
      uint32_t detail = 0;
      if (uint32_t st = ResolveCkptSlices(slices, false, &spans, &detail); st != HZ_S_OK) {
        return Err(st, detail);
      }
      checkpoint::SaveRequest sr;
      sr.tenant = tid;
      sr.stream = a.stream;
      sr.step = a.step;
      sr.slices = spans.spans;
      sr.meta = meta;
      checkpoint::SaveResult res;
      checkpoint::Status st = eng->Save(sr, &res);
      if (st != checkpoint::Status::kOk) return Err(Wire(st));
      uint64_t us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - start)
                                              .count());
      hz_ckpt_save_result out{};
      out.step = res.step;
      out.state = static_cast<uint32_t>(res.state);
      out.stall_us = static_cast<uint32_t>(std::min<uint64_t>(us, UINT32_MAX));
      WriteResult(req, &out, sizeof(out));
      if (env_.metrics != nullptr) {
        uint64_t bytes = meta.size();
        for (const auto& s : slices) bytes += s.length;
        env_.metrics->AddBytes(HZ_OP_CKPT_SAVE, bytes);
      }
      return {HZ_S_OK, sizeof(out), 0, false};
    }
    case HZ_OP_CKPT_RESTORE: {
      hz_ckpt_restore_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
      if (a.stream == 0 || req.data_len != uint64_t{a.num_slices} * kSliceBytes) {
        return Err(HZ_S_EINVAL);
      }
      std::vector<hz_slice> slices;
      if (!ReadSlices(req, 0, a.num_slices, &slices)) return Err(HZ_S_EINVAL);
      CkptSpans spans;
      uint32_t detail = 0;
      if (uint32_t st = ResolveCkptSlices(slices, true, &spans, &detail); st != HZ_S_OK) {
        return Err(st, detail);
      }
      // Two destinations that overlap in guest memory (detail: the later).
      struct Range {
        uintptr_t lo, hi;
        uint32_t slice;
      };
      std::vector<Range> ranges;
      for (uint32_t i = 0; i < spans.guest.size(); ++i) {
        for (const auto& g : spans.guest[i]) {
          if (g.len != 0) {
            uintptr_t lo = reinterpret_cast<uintptr_t>(g.data);
            ranges.push_back({lo, lo + g.len, i});
          }
        }
      }
      std::sort(ranges.begin(), ranges.end(),
                [](const Range& x, const Range& y) { return x.lo < y.lo; });
      for (size_t i = 1; i < ranges.size(); ++i) {
        if (ranges[i].lo < ranges[i - 1].hi && ranges[i].slice != ranges[i - 1].slice) {
          return Err(HZ_S_EINVAL, std::max(ranges[i].slice, ranges[i - 1].slice));
        }
      }
      // A probe first: it verifies the checkpoint and says how much result
      // space the metadata needs, before any destination byte is touched.
      checkpoint::RestoreRequest rr;
      rr.tenant = tid;
      rr.stream = a.stream;
      rr.step = a.step;
      checkpoint::RestoreResult probe;
      checkpoint::Status st = eng->Restore(rr, &probe);
      if (st != checkpoint::Status::kOk) return Err(Wire(st));
      const uint64_t need = sizeof(hz_ckpt_restore_result) + probe.meta.size();
      if (req.result_capacity < need) return Err(HZ_S_ETOOSMALL, static_cast<uint32_t>(need));
      checkpoint::RestoreResult res;
      if (a.num_slices == 0) {
        res = std::move(probe);
        // A probe reports the checkpoint's size without writing it.
        std::vector<checkpoint::ListEntry> entries;
        bool more = false;
        if (eng->List(tid, a.stream, res.step - 1, 1, &entries, &more) == checkpoint::Status::kOk &&
            !entries.empty() && entries[0].step == res.step) {
          res.bytes = entries[0].bytes;
        }
      } else {
        rr.step = probe.step;  // the same checkpoint, even if a newer one appeared
        rr.slices = spans.spans;
        st = eng->Restore(rr, &res);
        if (st != checkpoint::Status::kOk) return Err(Wire(st));
        // Scatter the bounce buffers into their guest extents.
        size_t b = 0;
        for (uint32_t i = 0; i < spans.guest.size(); ++i) {
          if (spans.guest[i].size() == 1) continue;
          const auto& buf = spans.bounce[b++];
          size_t off = 0;
          for (const auto& g : spans.guest[i]) {
            std::memcpy(g.data, buf.data() + off, g.len);
            off += g.len;
          }
        }
      }
      std::vector<uint8_t> out(need);
      hz_ckpt_restore_result r{};
      r.step = res.step;
      r.bytes = res.bytes;
      r.meta_len = static_cast<uint32_t>(res.meta.size());
      std::memcpy(out.data(), &r, sizeof(r));
      if (!res.meta.empty()) std::memcpy(out.data() + sizeof(r), res.meta.data(), res.meta.size());
      WriteResult(req, out.data(), out.size());
      if (env_.metrics != nullptr) env_.metrics->AddBytes(HZ_OP_CKPT_RESTORE, res.bytes);
      return {HZ_S_OK, static_cast<uint32_t>(need), 0, false};
    }
    case HZ_OP_CKPT_LIST: {
      hz_ckpt_list_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
      if (a.stream == 0) return Err(HZ_S_EINVAL);
      // The result space bounds the answer anyway.
      const uint32_t max = std::min<uint32_t>(a.max_entries, env_.limits.max_args_bytes / 32);
      std::vector<checkpoint::ListEntry> entries;
      bool more = false;
      checkpoint::Status st = eng->List(tid, a.stream, a.start_after_step, max, &entries, &more);
      if (st != checkpoint::Status::kOk) return Err(Wire(st));
      const uint64_t need = sizeof(hz_ckpt_list_result) + entries.size() * sizeof(hz_ckpt_entry);
      if (req.result_capacity < need) return Err(HZ_S_ETOOSMALL, static_cast<uint32_t>(need));
      std::vector<uint8_t> out(need);
      hz_ckpt_list_result h{};
      h.count = static_cast<uint32_t>(entries.size());
      h.more = more ? 1 : 0;
      std::memcpy(out.data(), &h, sizeof(h));
      for (size_t i = 0; i < entries.size(); ++i) {
        hz_ckpt_entry e{};
        e.step = entries[i].step;
        e.bytes = entries[i].bytes;
        e.time_s = entries[i].time_s;
        e.state = static_cast<uint32_t>(entries[i].state);
        e.tier = static_cast<uint32_t>(entries[i].tier);
        std::memcpy(out.data() + sizeof(h) + i * sizeof(e), &e, sizeof(e));
      }
      WriteResult(req, out.data(), out.size());
      return {HZ_S_OK, static_cast<uint32_t>(need), 0, false};
    }
    case HZ_OP_CKPT_DELETE: {
      hz_ckpt_delete_args a;
      if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
      if (a.reserved != 0) return Err(HZ_S_ENOTSUP);
      if (a.stream == 0 || a.step == 0) return Err(HZ_S_EINVAL);
      return Err(Wire(eng->Delete(tid, a.stream, a.step)));
    }
    case HZ_OP_CKPT_QUIESCE:
      return CkptQuiesce(req, tid);
    default:
      return Err(HZ_S_ENOTSUP);
  }
}

HzDevice::Reply HzDevice::CkptQuiesce(const Request& req, checkpoint::TenantId tid) {
  auto Err = [](uint32_t status, uint32_t detail = 0) { return Reply{status, 0, detail, false}; };
  checkpoint::Engine* eng = env_.engines->ckpt();
  hz_ckpt_quiesce_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Err(st);
  if (a.reserved != 0 || a.reserved2 != 0) return Err(HZ_S_ENOTSUP);
  if (a.stream == 0 || req.data_len != uint64_t{a.num_slices} * kSliceBytes) {
    return Err(HZ_S_EINVAL, a.num_slices);
  }
  const hz_slice zero{};
  if (a.num_slices == 0 && std::memcmp(&a.word, &zero, sizeof(zero)) == 0) {
    // Cancel this session's registration.
    if (quiesce_.count(a.stream) == 0) return Err(HZ_S_ENOENT);
    DropQuiesce(a.stream);
    return Err(HZ_S_OK);
  }
  if (a.num_slices == 0 || a.word.length != sizeof(hz_quiesce_word) || a.word.offset % 8 != 0) {
    return Err(HZ_S_EINVAL, a.num_slices);
  }
  std::vector<hz_slice> slices;
  if (!ReadSlices(req, 0, a.num_slices, &slices)) return Err(HZ_S_EINVAL);
  // The word first: it must be one aligned host span the engine can load
  // atomically (detail num_slices names the word).
  CkptSpans word;
  uint32_t detail = 0;
  if (uint32_t st = ResolveCkptSlices({a.word}, false, &word, &detail); st != HZ_S_OK) {
    return Err(st, a.num_slices);
  }
  if (word.guest[0].size() != 1 || reinterpret_cast<uintptr_t>(word.guest[0][0].data) % 8 != 0) {
    return Err(HZ_S_EINVAL, a.num_slices);
  }
  CkptSpans state;
  if (uint32_t st = ResolveCkptSlices(slices, false, &state, &detail); st != HZ_S_OK) {
    return Err(st, detail);
  }
  // The engine reads the state live when a notice comes, so it needs the
  // guest's own spans (a slice over several extents becomes several slices
  // of the just-in-time checkpoint).
  std::vector<checkpoint::IoSpan> live;
  for (const auto& g : state.guest) live.insert(live.end(), g.begin(), g.end());
  if (!env_.engines->ClaimQuiesce(tid, a.stream, this)) return Err(HZ_S_EBUSY);
  checkpoint::Status st = eng->DeclareQuiesce(tid, a.stream, word.guest[0][0], live);
  if (st != checkpoint::Status::kOk) {
    if (quiesce_.count(a.stream) == 0) env_.engines->ReleaseQuiesce(tid, a.stream, this);
    return Err(Wire(st));
  }
  // The registration holds its regions (REGION_UNREGISTER answers EBUSY).
  QuiesceReg& reg = quiesce_[a.stream];
  reg.tenant = tid;
  reg.pins = std::move(word.pins);
  for (auto& p : state.pins) reg.pins.push_back(std::move(p));
  return Err(HZ_S_OK);
}

void HzDevice::DropQuiesce(uint32_t stream) {
  auto it = quiesce_.find(stream);
  if (it == quiesce_.end()) return;
  // Cancel before the pins go: the engine must stop reading guest memory.
  if (env_.engines != nullptr && env_.engines->ckpt() != nullptr) {
    env_.engines->ckpt()->CancelQuiesce(it->second.tenant, stream);
    env_.engines->ReleaseQuiesce(it->second.tenant, stream, this);
  }
  quiesce_.erase(it);
}

void HzDevice::DropAllQuiesce() {
  while (!quiesce_.empty()) DropQuiesce(quiesce_.begin()->first);
}

}  // namespace hz::service
