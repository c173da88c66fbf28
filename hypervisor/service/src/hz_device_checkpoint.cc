// CKPT_POLICY, CKPT_SAVE, CKPT_RESTORE, CKPT_LIST, CKPT_DELETE and
// CKPT_QUIESCE (SPEC §7.5) on top of the checkpoint engine. Slices resolve
// to host spans through the region table, as for collectives. A slice whose
// region spans several host extents is staged through a bounce buffer, so
// each guest slice is one slice of the checkpoint whatever the VM's layout.
//
// CKPT_SAVE and CKPT_RESTORE are validated and resolved on the connection's
// executor, then run on a checkpoint-engine request thread (CkptBackend::RunAsync):
// a save's copy into staging, its wait for staging memory and a restore's
// disk reads never hold up the other VMs this executor serves. The answer
// comes back through the executor, like a collective's. The regions stay
// pinned until then. When the session ends, Teardown (DropAllQuiesce) cancels
// them and waits until none touches guest memory any more; a SAVE answers
// when its bytes are in staging (SPEC §7.5.2), as before.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include "hz/service/hz_device.h"

namespace hz::service {

namespace {

constexpr uint32_t kSliceBytes = sizeof(hz_slice);

uint32_t Wire(checkpoint::Status s) {
  return checkpoint::ToWireStatus(s);
}

}  // namespace

struct HzDevice::CkptOp {
  enum class Phase { kQueued, kRunning, kDone };
  // The request, answered on the executor.
  vdev::Chain chain;
  Request req;  // req.chain points at chain
  uint16_t queue = 0;
  uint64_t queue_gen = 0;
  std::chrono::steady_clock::time_point start;
  // What the engine thread works on. The pins keep the regions (and the
  // guest memory map) alive until the answer.
  CkptBackend* eng = nullptr;
  checkpoint::TenantId tid = 0;
  uint32_t stream = 0;
  uint64_t step = 0;
  uint32_t num_slices = 0;
  std::vector<uint8_t> meta;
  CkptSpans spans;
  const std::atomic<bool>* draining = nullptr;  // the service's; outlives the engine
  // Set on the executor when the session ends; the engine polls it.
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kQueued;  // under mu
  // The outcome, written by the engine thread before kDone.
  uint32_t status = HZ_S_OK;
  uint32_t detail = 0;
  std::vector<uint8_t> result;
  uint64_t bytes = 0;  // for metrics
  // The request's work, on the engine thread; touches only this object.
  std::function<void(CkptOp&)> work;

  bool Cancelled() const {
    return cancel.load(std::memory_order_relaxed) ||
           (draining != nullptr && draining->load(std::memory_order_relaxed));
  }
  // An engine status as the guest sees it: a cancelled request was aborted
  // by its session's end, or by the service's shutdown.
  uint32_t Wire(checkpoint::Status st) const {
    if (st != checkpoint::Status::kCancelled && st != checkpoint::Status::kShutdown) {
      return checkpoint::ToWireStatus(st);
    }
    return draining != nullptr && draining->load() ? HZ_S_ESHUTDOWN : HZ_S_EABORTED;
  }
};

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
      // Several extents (or an empty slice): one contiguous bounce buffer,
      // allocated and filled by whoever moves the bytes (GatherBounce), not
      // here on the executor.
      out->bounce.emplace_back();
      out->spans.push_back({nullptr, s.length});
    }
  }
  *detail = 0;
  return HZ_S_OK;
}

HzDevice::Reply HzDevice::HandleCheckpoint(vdev::Queue& q, const Request& req) {
  auto Err = [](uint32_t status, uint32_t detail = 0) { return Reply{status, 0, detail, false}; };
  CkptBackend* eng = env_.ckpt;
  if (eng == nullptr || (features_ & (1ull << HZ_F_CHECKPOINT)) == 0) return Err(HZ_S_ENOTSUP);
  const auto start = std::chrono::steady_clock::now();
  const checkpoint::TenantId tid = eng->TenantIdOf(tenant_->name());
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
      auto op = std::make_shared<CkptOp>();
      op->eng = eng;
      op->tid = tid;
      op->stream = a.stream;
      op->step = a.step;
      op->start = start;
      op->meta = std::move(meta);
      op->spans = std::move(spans);
      op->work = [](CkptOp& o) {
        // Slices over several extents are gathered into their bounce buffers.
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
        checkpoint::SaveRequest sr;
        sr.tenant = o.tid;
        sr.stream = o.stream;
        sr.step = o.step;
        sr.slices = o.spans.spans;
        sr.meta = o.meta;
        sr.cancelled = [&o] { return o.Cancelled(); };
        checkpoint::SaveResult res;
        checkpoint::Status st = o.eng->Save(sr, &res);
        if (st != checkpoint::Status::kOk) {
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
      };
      return StartCkptOp(q, req, std::move(op));
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
      auto op = std::make_shared<CkptOp>();
      op->eng = eng;
      op->tid = tid;
      op->stream = a.stream;
      op->step = a.step;
      op->num_slices = a.num_slices;
      op->start = start;
      op->spans = std::move(spans);
      op->work = [](CkptOp& o) {
        // A probe first: it verifies the checkpoint and says how much result
        // space the metadata needs, before any destination byte is touched.
        checkpoint::RestoreRequest rr;
        rr.tenant = o.tid;
        rr.stream = o.stream;
        rr.step = o.step;
        rr.cancelled = [&o] { return o.Cancelled(); };
        checkpoint::RestoreResult probe;
        checkpoint::Status st = o.eng->Restore(rr, &probe);
        if (st != checkpoint::Status::kOk) {
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
          // A probe reports the checkpoint's size without writing it.
          std::vector<checkpoint::ListEntry> entries;
          bool more = false;
          if (o.eng->List(o.tid, o.stream, res.step - 1, 1, &entries, &more) ==
                  checkpoint::Status::kOk &&
              !entries.empty() && entries[0].step == res.step) {
            res.bytes = entries[0].bytes;
          }
        } else {
          // Slices over several extents come back through bounce buffers.
          size_t b = 0;
          for (size_t i = 0; i < o.spans.guest.size(); ++i) {
            if (o.spans.guest[i].size() == 1) continue;
            auto& buf = o.spans.bounce[b++];
            buf.resize(o.spans.spans[i].len);
            o.spans.spans[i].data = buf.data();
          }
          rr.step = probe.step;  // the same checkpoint, even if a newer one appeared
          rr.slices = o.spans.spans;
          st = o.eng->Restore(rr, &res);
          if (st == checkpoint::Status::kOk && o.Cancelled()) st = checkpoint::Status::kCancelled;
          if (st != checkpoint::Status::kOk) {
            o.status = o.Wire(st);
            return;
          }
          // Scatter the bounce buffers into their guest extents.
          b = 0;
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
      };
      return StartCkptOp(q, req, std::move(op));
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
  CkptBackend* eng = env_.ckpt;
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
  if (!eng->ClaimQuiesce(tid, a.stream, this)) return Err(HZ_S_EBUSY);
  checkpoint::Status st = eng->DeclareQuiesce(tid, a.stream, word.guest[0][0], live);
  if (st != checkpoint::Status::kOk) {
    if (quiesce_.count(a.stream) == 0) eng->ReleaseQuiesce(tid, a.stream, this);
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
  if (env_.ckpt != nullptr) {
    env_.ckpt->CancelQuiesce(it->second.tenant, stream);
    env_.ckpt->ReleaseQuiesce(it->second.tenant, stream, this);
  }
  quiesce_.erase(it);
}

void HzDevice::DropAllQuiesce() {
  while (!quiesce_.empty()) DropQuiesce(quiesce_.begin()->first);
  StopCkptOps();
}

HzDevice::Reply HzDevice::StartCkptOp(vdev::Queue& q, const Request& req,
                                      std::shared_ptr<CkptOp> op) {
  op->chain = *req.chain;
  op->req = req;
  op->req.chain = &op->chain;
  op->queue = q.index();
  op->queue_gen = queues_[q.index()].gen;
  op->draining = env_.draining;
  const uint64_t id = next_ckpt_op_++;
  ckpt_ops_[id] = op;
  in_flight_++;
  std::weak_ptr<Link> weak = link_;
  op->eng->RunAsync([op, weak, id] {
    {
      std::unique_lock<std::mutex> l(op->mu);
      if (op->phase == CkptOp::Phase::kQueued) {  // else the session ended first
        op->phase = CkptOp::Phase::kRunning;
        l.unlock();
        op->work(*op);
        l.lock();
        op->phase = CkptOp::Phase::kDone;
        op->cv.notify_all();
      }
    }
    // The answer goes out on the executor (the device may be gone by now).
    std::shared_ptr<Link> link = weak.lock();
    if (!link) return;
    std::lock_guard<std::recursive_mutex> lock(link->mu);
    if (link->ctx == nullptr) return;
    link->ctx->Post([link, id] {
      HzDevice* dev;
      {
        std::lock_guard<std::recursive_mutex> l(link->mu);
        dev = link->dev;
      }
      if (dev != nullptr) dev->OnCkptDone(id);
    });
  });
  return {HZ_S_OK, 0, 0, true};
}

void HzDevice::OnCkptDone(uint64_t id) {
  auto it = ckpt_ops_.find(id);
  if (it == ckpt_ops_.end()) return;  // its connection went away
  std::shared_ptr<CkptOp> op = it->second;
  ckpt_ops_.erase(it);
  in_flight_--;
  const uint16_t opcode = op->req.hdr.opcode;
  requests_++;
  if (op->status != HZ_S_OK) errors_++;
  if (env_.metrics != nullptr) {
    env_.metrics->CountRequest(opcode, op->status);
    if (op->status == HZ_S_OK) env_.metrics->AddBytes(opcode, op->bytes);
  }
  op->spans.pins.clear();
  const QueueSlot& slot = queues_[op->queue];
  // A queue stopped (or restarted) since the request was popped has lost
  // the ring the chain belonged to; there is nobody left to answer.
  if (slot.queue == nullptr || slot.gen != op->queue_gen) return;
  uint32_t result_len = 0;
  if (op->status == HZ_S_OK && !op->result.empty() &&
      WriteResult(op->req, op->result.data(), op->result.size())) {
    result_len = static_cast<uint32_t>(op->result.size());
  }
  uint32_t used =
      WriteStatus(op->chain, op->status, result_len, op->req.hdr.request_id, op->detail);
  slot.queue->Complete(op->chain, used);
  slot.queue->Flush();
}

void HzDevice::StopCkptOps() {
  // Cancel, then wait for the ones running: once this returns no engine
  // thread touches this session's guest memory. A queued one never starts.
  for (auto& [id, op] : ckpt_ops_) op->cancel.store(true);
  for (auto& entry : ckpt_ops_) {
    CkptOp& op = *entry.second;  // a plain reference: lambdas may capture it
    std::unique_lock<std::mutex> l(op.mu);
    if (op.phase == CkptOp::Phase::kQueued) {
      op.phase = CkptOp::Phase::kDone;
      op.status = op.Wire(checkpoint::Status::kCancelled);
    }
    op.cv.wait(l, [&] { return op.phase == CkptOp::Phase::kDone; });
  }
  // With the rings alive (a new HELLO) or a reset, the answers still come
  // back through the executor (OnCkptDone: answered, or dropped with their
  // ring). Without a connection nothing will deliver them: forget them.
  if (ctx_ == nullptr) {
    in_flight_ -= ckpt_ops_.size();
    ckpt_ops_.clear();
  }
}

}  // namespace hz::service
