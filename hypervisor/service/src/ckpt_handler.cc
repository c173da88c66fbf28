#include "hz/service/ckpt_handler.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ckpt_op.h"
#include "hz/service/device_link.h"
#include "hz/service/device_state.h"
#include "hz/service/pending_table.h"
#include "hz/service/wire_status.h"

namespace hz::service {

namespace {

constexpr uint32_t kSliceBytes = sizeof(hz_slice);

// Reads n slices from the request's data segment at `at`.
bool ReadSlices(const Request& req, uint64_t at, uint32_t n, std::vector<hz_slice>* out) {
  out->resize(n);
  if (n == 0) return true;
  return req.chain->Read(req.data_offset + at, out->data(), uint64_t{n} * kSliceBytes) ==
         uint64_t{n} * kSliceBytes;
}

// Two restore destinations that overlap in guest memory: the later slice's
// index, or -1.
int64_t OverlappingSlice(const CkptSpans& spans) {
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
      return std::max(ranges[i].slice, ranges[i - 1].slice);
    }
  }
  return -1;
}

// The CKPT_LIST result: hz_ckpt_list_result, then the entries.
std::vector<uint8_t> ListResultBytes(const std::vector<checkpoint::ListEntry>& entries, bool more) {
  std::vector<uint8_t> out(sizeof(hz_ckpt_list_result) + entries.size() * sizeof(hz_ckpt_entry));
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
  return out;
}

}  // namespace

CheckpointHandler::CheckpointHandler(CkptBackend* backend, const HandlerContext& ctx,
                                     const RegionTable& regions, const DeviceLimits& limits,
                                     const Tenant& tenant)
    : backend_(backend), ctx_(ctx), regions_(regions), limits_(limits), tenant_(tenant) {}

CheckpointHandler::~CheckpointHandler() = default;

uint64_t CheckpointHandler::Features() const {
  return backend_ != nullptr ? 1ull << HZ_F_CHECKPOINT : 0;
}

Reply CheckpointHandler::Handle(const vdev::Queue& queue, const Request& req) {
  if (!ctx_.session.Granted(HZ_F_CHECKPOINT)) return Reply::Error(HZ_S_ENOTSUP);
  const auto start = std::chrono::steady_clock::now();  // a save's stall starts here
  const TenantId& tid = tenant_.id();
  switch (req.hdr.opcode) {
    case HZ_OP_CKPT_POLICY:
      return SetPolicy(queue, req, tid);
    case HZ_OP_CKPT_SAVE:
      return Save(queue, req, tid, start);
    case HZ_OP_CKPT_RESTORE:
      return Restore(queue, req, tid);
    case HZ_OP_CKPT_LIST:
      return List(req, tid);
    case HZ_OP_CKPT_DELETE:
      return Delete(queue, req, tid);
    case HZ_OP_CKPT_QUIESCE:
      return Quiesce(req, tid);
    default:
      return Reply::Error(HZ_S_ENOTSUP);
  }
}

uint32_t CheckpointHandler::ResolveSlices(const std::vector<hz_slice>& slices, bool write,
                                          CkptSpans* out, uint32_t* detail) const {
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

Reply CheckpointHandler::SetPolicy(const vdev::Queue& queue, const Request& req,
                                   const TenantId& tid) {
  hz_ckpt_policy_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if ((a.flags & ~HZ_CKPT_F_AUTO_SAVE_ON_NOTICE) != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.stream == 0 || a.retention == 0 || a.tier > HZ_TIER_PEER_HOST) {
    return Reply::Error(HZ_S_EINVAL);
  }
  checkpoint::Policy p;
  p.retention = a.retention;
  p.tier = static_cast<checkpoint::TierKind>(a.tier);
  p.stall_budget_ms = a.stall_budget_ms;
  p.rpo_s = a.rpo_s;
  p.auto_save_on_notice = (a.flags & HZ_CKPT_F_AUTO_SAVE_ON_NOTICE) != 0;
  // The policy is written and flushed to disk: on an engine thread, never on
  // the connection thread this VM shares with others.
  auto op = std::make_shared<CkptOp>();
  op->tid = tid;
  op->stream = a.stream;
  op->policy = p;
  op->policy_op = true;
  op->work = PolicyWork;
  return Start(queue, req, std::move(op));
}

Reply CheckpointHandler::Save(const vdev::Queue& queue, const Request& req, const TenantId& tid,
                              std::chrono::steady_clock::time_point start) {
  hz_ckpt_save_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.flags != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.stream == 0 || a.num_slices == 0 || a.step == 0 || a.step == HZ_STEP_LATEST) {
    return Reply::Error(HZ_S_EINVAL);
  }
  // u32 * 24 + u32 cannot overflow u64.
  const uint64_t slice_bytes = uint64_t{a.num_slices} * kSliceBytes;
  if (req.data_len != slice_bytes + a.meta_len) return Reply::Error(HZ_S_EINVAL);
  if (req.result_capacity < sizeof(hz_ckpt_save_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_ckpt_save_result));
  }
  std::vector<hz_slice> slices;
  if (!ReadSlices(req, 0, a.num_slices, &slices)) return Reply::Error(HZ_S_EINVAL);
  auto op = std::make_shared<CkptOp>();
  op->meta.resize(a.meta_len);
  if (a.meta_len != 0 &&
      req.chain->Read(req.data_offset + slice_bytes, op->meta.data(), a.meta_len) != a.meta_len) {
    return Reply::Error(HZ_S_EINVAL);
  }
  uint32_t detail = 0;
  if (uint32_t st = ResolveSlices(slices, false, &op->spans, &detail); st != HZ_S_OK) {
    return Reply::Error(st, detail);
  }
  op->tid = tid;
  op->stream = a.stream;
  op->step = a.step;
  op->start = start;
  op->work = SaveWork;
  return Start(queue, req, std::move(op));
}

Reply CheckpointHandler::Restore(const vdev::Queue& queue, const Request& req,
                                 const TenantId& tid) {
  hz_ckpt_restore_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.stream == 0 || req.data_len != uint64_t{a.num_slices} * kSliceBytes) {
    return Reply::Error(HZ_S_EINVAL);
  }
  std::vector<hz_slice> slices;
  if (!ReadSlices(req, 0, a.num_slices, &slices)) return Reply::Error(HZ_S_EINVAL);
  auto op = std::make_shared<CkptOp>();
  uint32_t detail = 0;
  if (uint32_t st = ResolveSlices(slices, true, &op->spans, &detail); st != HZ_S_OK) {
    return Reply::Error(st, detail);
  }
  // Two destinations that overlap in guest memory (detail: the later).
  if (int64_t i = OverlappingSlice(op->spans); i >= 0) {
    return Reply::Error(HZ_S_EINVAL, static_cast<uint32_t>(i));
  }
  op->tid = tid;
  op->stream = a.stream;
  op->step = a.step;
  op->num_slices = a.num_slices;
  op->work = RestoreWork;
  return Start(queue, req, std::move(op));
}

Reply CheckpointHandler::List(const Request& req, const TenantId& tid) {
  hz_ckpt_list_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.stream == 0) return Reply::Error(HZ_S_EINVAL);
  // The result space bounds the answer anyway.
  const uint32_t max = std::min<uint32_t>(a.max_entries, limits_.max_args_bytes / 32);
  std::vector<checkpoint::ListEntry> entries;
  bool more = false;
  Status st = backend_->List(tid, a.stream, a.start_after_step, max, &entries, &more);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  const std::vector<uint8_t> out = ListResultBytes(entries, more);
  if (req.result_capacity < out.size()) {
    return Reply::Error(HZ_S_ETOOSMALL, static_cast<uint32_t>(out.size()));
  }
  WriteResult(req, out.data(), out.size());
  return Reply::Ok(static_cast<uint32_t>(out.size()));
}

Reply CheckpointHandler::Delete(const vdev::Queue& queue, const Request& req, const TenantId& tid) {
  hz_ckpt_delete_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.reserved != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.stream == 0 || a.step == 0) return Reply::Error(HZ_S_EINVAL);
  // Unlinks, flushes and removes directories: on an engine thread.
  auto op = std::make_shared<CkptOp>();
  op->tid = tid;
  op->stream = a.stream;
  op->step = a.step;
  op->work = DeleteWork;
  return Start(queue, req, std::move(op));
}

Reply CheckpointHandler::Quiesce(const Request& req, const TenantId& tid) {
  hz_ckpt_quiesce_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.reserved != 0 || a.reserved2 != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.stream == 0 || req.data_len != uint64_t{a.num_slices} * kSliceBytes) {
    return Reply::Error(HZ_S_EINVAL, a.num_slices);
  }
  const hz_slice zero{};
  if (a.num_slices == 0 && std::memcmp(&a.word, &zero, sizeof(zero)) == 0) {
    // Cancel this session's registration.
    if (quiesce_.count(a.stream) == 0) return Reply::Error(HZ_S_ENOENT);
    DropQuiesce(a.stream);
    return Reply::Ok();
  }
  std::vector<hz_slice> slices;
  if (!ReadSlices(req, 0, a.num_slices, &slices)) return Reply::Error(HZ_S_EINVAL);
  uint32_t detail = 0;
  const uint32_t st = Register(tid, a.stream, a.word, std::move(slices), &detail);
  return st == HZ_S_OK ? Reply::Ok() : Reply::Error(st, detail);
}

uint32_t CheckpointHandler::Register(const TenantId& tid, uint32_t stream,
                                     const hz_slice& word_slice, std::vector<hz_slice> slices,
                                     uint32_t* detail) {
  // Detail num_slices names the word.
  *detail = static_cast<uint32_t>(slices.size());
  if (slices.empty() || word_slice.length != sizeof(hz_quiesce_word) ||
      word_slice.offset % 8 != 0) {
    return HZ_S_EINVAL;
  }
  // The word first: it must be one aligned host span the engine can load
  // atomically.
  CkptSpans word;
  uint32_t ignored = 0;
  if (uint32_t st = ResolveSlices({word_slice}, false, &word, &ignored); st != HZ_S_OK) return st;
  if (word.guest[0].size() != 1 || reinterpret_cast<uintptr_t>(word.guest[0][0].data) % 8 != 0) {
    return HZ_S_EINVAL;
  }
  CkptSpans state;
  if (uint32_t st = ResolveSlices(slices, false, &state, detail); st != HZ_S_OK) return st;
  *detail = 0;
  // The engine reads the state live when a notice comes, so it needs the
  // guest's own spans (a slice over several extents becomes several slices
  // of the just-in-time checkpoint).
  std::vector<checkpoint::IoSpan> live;
  for (const auto& g : state.guest) live.insert(live.end(), g.begin(), g.end());
  if (!backend_->ClaimQuiesce(tid, stream, this, ctx_.vm)) return HZ_S_EBUSY;
  Status st = backend_->DeclareQuiesce(tid, stream, word.guest[0][0], live);
  if (!st.ok()) {
    if (quiesce_.count(stream) == 0) backend_->ReleaseQuiesce(tid, stream, this);
    return ToWireStatus(st);
  }
  // The registration holds its regions (REGION_UNREGISTER answers EBUSY).
  QuiesceReg& reg = quiesce_[stream];
  reg.tenant = tid;
  reg.word = word_slice;
  reg.slices = std::move(slices);
  reg.pins = std::move(word.pins);
  for (auto& p : state.pins) reg.pins.push_back(std::move(p));
  ++registrations_changed_;
  ctx_.info_changed();  // a crash journal keeps it
  return HZ_S_OK;
}

void CheckpointHandler::DropQuiesce(uint32_t stream) {
  auto it = quiesce_.find(stream);
  if (it == quiesce_.end()) return;
  // Cancel before the pins go: the engine must stop reading guest memory.
  backend_->CancelQuiesce(it->second.tenant, stream);
  backend_->ReleaseQuiesce(it->second.tenant, stream, this);
  quiesce_.erase(it);
  ++registrations_changed_;
  ctx_.info_changed();
}

Reply CheckpointHandler::Start(const vdev::Queue& queue, const Request& req,
                               std::shared_ptr<CkptOp> op) {
  op->backend = backend_;
  op->draining = ctx_.session.service_draining();
  ctx_.pending.Add(this, queue, req, op);
  backend_->RunAsync(tenant_.id(), [this, op, link = ctx_.link] {
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
    DeviceLink::Post(link, [this, op] { OnOpDone(*op); });
  });
  return Reply::Pending();
}

void CheckpointHandler::OnOpDone(CkptOp& op) {
  if (!ctx_.pending.Take(op.id)) return;  // its connection went away
  op.spans.pins.clear();
  // Clearing AUTO_SAVE_ON_NOTICE ended the registration (the engine's part,
  // with its copy); the session lets go of its regions.
  if (op.policy_op && op.status == HZ_S_OK && !op.policy.auto_save_on_notice) {
    DropQuiesce(op.stream);
  }
  const Reply reply = op.status == HZ_S_OK ? Reply::Ok() : Reply::Error(op.status, op.detail);
  ctx_.pending.Finish(op, reply, op.result);
}

void CheckpointHandler::StopOps() {
  // Cancel, then wait for the ones running: once this returns no engine
  // thread touches this session's guest memory. A queued one never starts.
  const std::vector<std::shared_ptr<CkptOp>> ops = ctx_.pending.Owned<CkptOp>(this);
  for (const auto& op : ops) op->cancel.store(true);
  for (const auto& entry : ops) {
    CkptOp& op = *entry;  // a plain reference: lambdas may capture it
    std::unique_lock<std::mutex> l(op.mu);
    if (op.phase == CkptOp::Phase::kQueued) {
      op.phase = CkptOp::Phase::kDone;
      op.status = op.Wire(Status::Aborted("the session ended"));
    }
    op.cv.wait(l, [&] { return op.phase == CkptOp::Phase::kDone; });
  }
}

void CheckpointHandler::EndSession(SessionEnd end) {
  // Quiescence registrations are session-scoped and hold regions.
  while (!quiesce_.empty()) DropQuiesce(quiesce_.begin()->first);
  StopOps();
  // With the rings alive (a new HELLO) or a reset, the answers still come
  // back through the executor (OnOpDone: answered, or dropped with their
  // ring). Without a connection nothing will deliver them: forget them.
  if (end == SessionEnd::kDisconnect) ctx_.pending.ForgetAll(this);
}

}  // namespace hz::service
