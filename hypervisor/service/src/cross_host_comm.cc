#include "cross_host_comm.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "protocol/harmonaize.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

using cluster::InterHostOp;
using cluster::InterHostType;
using coll::DType;
using coll::RedOp;

// The element type the inter-host leg reduces for dtype and redop; nothing
// where the leg cannot reduce it yet. Unsigned sums and products wrap as
// their signed twins do, bit for bit; their min and max differ.
std::optional<InterHostType> LegType(uint8_t dtype, uint8_t redop) {
  const bool wraps =
      redop == static_cast<uint8_t>(RedOp::kSum) || redop == static_cast<uint8_t>(RedOp::kProd);
  switch (static_cast<DType>(dtype)) {
    case DType::kFp32:
      return InterHostType::kF32;
    case DType::kFp64:
      return InterHostType::kF64;
    case DType::kInt32:
      return InterHostType::kI32;
    case DType::kInt64:
      return InterHostType::kI64;
    case DType::kUint32:
      return wraps ? std::optional(InterHostType::kI32) : std::nullopt;
    case DType::kUint64:
      return wraps ? std::optional(InterHostType::kI64) : std::nullopt;
    default:
      return std::nullopt;
  }
}

InterHostOp LegOp(uint8_t redop) {
  switch (static_cast<RedOp>(redop)) {
    case RedOp::kProd:
      return InterHostOp::kProd;
    case RedOp::kMax:
      return InterHostOp::kMax;
    case RedOp::kMin:
      return InterHostOp::kMin;
    default:
      return InterHostOp::kSum;  // sum, and avg before its division
  }
}

template <typename T>
void DivideAll(uint8_t* data, size_t count, uint32_t n) {
  T* v = reinterpret_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(v[i] / static_cast<T>(n));
}

void Divide(InterHostType t, uint8_t* data, size_t count, uint32_t n) {
  switch (t) {
    case InterHostType::kF32:
      return DivideAll<float>(data, count, n);
    case InterHostType::kF64:
      return DivideAll<double>(data, count, n);
    case InterHostType::kI32:
      return DivideAll<int32_t>(data, count, n);
    case InterHostType::kI64:
      return DivideAll<int64_t>(data, count, n);
  }
}

// Whether the leg can run op at all (checked at post, answered at run).
Status Supported(const coll::OpDesc& op) {
  switch (op.op) {
    case coll::Op::kBarrier:
    case coll::Op::kBroadcast:
      return Status::Ok();
    case coll::Op::kAllReduce:
      if (LegType(op.dtype, op.redop)) return Status::Ok();
      return Status::NotSupported(
          "across hosts, all-reduce takes fp32, fp64, int32 and int64 (uint32 and uint64 with "
          "sum or prod) so far");
    default:
      return Status::NotSupported(
          "across hosts, only all-reduce, broadcast and barrier are supported so far");
  }
}

size_t Bytes(const coll::OpDesc& op) {
  return op.count * hz_dtype_size(static_cast<enum hz_dtype>(op.dtype));
}

}  // namespace

uint32_t CrossHostLayout::LocalIndex(uint32_t global_rank) const {
  auto it = std::lower_bound(local_ranks.begin(), local_ranks.end(), global_rank);
  return static_cast<uint32_t>(it - local_ranks.begin());
}

CrossHostComm::CrossHostComm(CollBackend& local, CrossHostLayout layout,
                             cluster::GlooGroupOptions group)
    : local_(local), layout_(std::move(layout)), group_options_(std::move(group)) {
  members_.resize(layout_.local_ranks.size());
  init_dones_.resize(layout_.local_ranks.size());
}

void CrossHostComm::Start() {
  // The thread keeps the communicator alive until it ends (after an abort or
  // Stop), so the last reference usually goes on the thread itself.
  leg_ = std::thread([self = shared_from_this()] { self->Loop(); });
}

CrossHostComm::~CrossHostComm() {
  if (!leg_.joinable()) return;
  if (leg_.get_id() == std::this_thread::get_id()) {
    leg_.detach();
  } else {
    leg_.join();
  }
}

bool CrossHostComm::Stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    if (aborted_.ok()) aborted_ = Status::Shutdown("the service is stopping");
    wake_.notify_all();
    return wake_.wait_until(lock, deadline, [this] { return finished_; });
  }
}

Status CrossHostComm::abort_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void CrossHostComm::AddLocal(uint32_t global_rank, MemberPtr local_member, InitDone done) {
  const uint32_t i = layout_.LocalIndex(global_rank);
  std::unique_lock<std::mutex> lock(mu_);
  if (inits_answered_) {  // the formation failed before this rank joined
    Status why = aborted_.ok() ? Status::Aborted("the communicator failed") : aborted_;
    lock.unlock();
    return done(why, nullptr);
  }
  members_[i] = std::move(local_member);
  init_dones_[i] = std::move(done);
  ++joined_;
  wake_.notify_all();
}

void CrossHostComm::Post(uint32_t global_rank, coll::OpDesc op, coll::Done done) {
  const uint32_t i = layout_.LocalIndex(global_rank);
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) {
    Status why = aborted_;
    lock.unlock();
    return done(why);
  }
  PendingOp& p = pending_[op.seq];
  if (p.descs.empty()) {
    p.descs.resize(layout_.local_ranks.size());
    p.dones.resize(layout_.local_ranks.size());
  }
  if (p.descs[i]) {
    lock.unlock();
    return done(Status::InvalidArgument("seq posted twice by the same rank"));
  }
  p.descs[i] = std::move(op);
  p.dones[i] = std::move(done);
  ++p.posted;
  wake_.notify_all();
}

void CrossHostComm::Abort(Status why) {
  std::vector<PendingOp> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return;
    aborted_ = std::move(why);
    for (auto& [seq, p] : pending_) failed.push_back(std::move(p));
    pending_.clear();
    wake_.notify_all();
  }
  spdlog::warn("event=cross_host_comm_aborted host_index={} error=\"{}\"", layout_.host_index,
               abort_status().ToString());
  for (PendingOp& p : failed) Complete(p, abort_status());
}

void CrossHostComm::Release(uint32_t /*global_rank*/) {
  Abort(Status::Aborted("a rank of the communicator left"));
  // Copies to and from the ranks' memory run under mu_ and check the abort
  // first: once the lock is taken here, none is running or will run.
  std::lock_guard<std::mutex> lock(mu_);
}

void CrossHostComm::Complete(PendingOp& op, const Status& s) {
  for (coll::Done& d : op.dones) {
    if (d) std::exchange(d, nullptr)(s);
  }
}

bool CrossHostComm::FormGroup() {
  std::vector<InitDone> dones;
  std::vector<MemberPtr> members;
  Status why;
  {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock,
               [this] { return stop_ || !aborted_.ok() || joined_ == layout_.local_ranks.size(); });
    why = aborted_;
    if (why.ok()) members = members_;
  }
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> g =
      why.ok() ? cluster::ConnectGlooGroup(group_options_) : why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dones = std::move(init_dones_);
    inits_answered_ = true;
  }
  if (!g.ok()) {
    spdlog::warn("event=cross_host_comm_failed step=connect error=\"{}\"", g.status().ToString());
    Abort(g.status());
    for (InitDone& d : dones) {
      if (d) d(g.status(), nullptr);
    }
    return false;
  }
  group_ = std::move(*g);
  spdlog::info("event=cross_host_comm_formed nranks={} hosts={} host_index={} local_ranks={}",
               layout_.nranks, layout_.nhosts, layout_.host_index, layout_.local_ranks.size());
  for (size_t i = 0; i < dones.size(); ++i) {
    dones[i](Status::Ok(), std::make_shared<CrossHostMember>(shared_from_this(),
                                                             layout_.local_ranks[i], members[i]));
  }
  return true;
}

void CrossHostComm::Loop() {
  if (FormGroup()) {
    for (;;) {
      PendingOp op;
      uint64_t seq = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] {
          auto it = pending_.find(next_seq_);
          return stop_ || !aborted_.ok() ||
                 (it != pending_.end() && it->second.posted == layout_.local_ranks.size());
        });
        if (stop_ || !aborted_.ok()) break;
        seq = next_seq_++;
        op = std::move(pending_[seq]);
        pending_.erase(seq);
      }
      Run(seq, std::move(op));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  wake_.notify_all();
}

void CrossHostComm::Run(uint64_t /*seq*/, PendingOp op) {
  const coll::OpDesc& first = *op.descs[0];
  Status s = Supported(first);
  if (s.ok()) {
    switch (first.op) {
      case coll::Op::kAllReduce:
        s = RunAllReduce(op);
        break;
      case coll::Op::kBroadcast:
        s = RunBroadcast(op);
        break;
      default:
        s = group_->Barrier();
        break;
    }
    if (!s.ok() && s.code() != StatusCode::kNotSupported) Abort(s);
  }
  Complete(op, s);
}

Status CrossHostComm::RunAllReduce(PendingOp& op) {
  const coll::OpDesc& d = *op.descs[0];
  const InterHostType type = *LegType(d.dtype, d.redop);
  const bool avg = d.redop == static_cast<uint8_t>(RedOp::kAvg);
  // 1. Within the host: the engine reduces into every local rank's output.
  const size_t n = op.descs.size();
  std::vector<std::promise<Status>> local(n);
  for (size_t i = 0; i < n; ++i) {
    coll::OpDesc ld = *op.descs[i];
    ld.seq = local_seq_;
    if (avg) ld.redop = static_cast<uint8_t>(RedOp::kSum);
    local_.Post(members_[i], std::move(ld), [&local, i](Status st) { local[i].set_value(st); });
  }
  ++local_seq_;
  Status first_error = Status::Ok();
  for (auto& p : local) {
    Status st = p.get_future().get();
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  if (!first_error.ok()) return first_error;
  // 2. Across hosts, from the first local rank's output.
  const size_t bytes = Bytes(d);
  if (Status s = CopyIn(op.descs[0]->recv, bytes); !s.ok()) return s;
  Status s = group_->AllReduce(staging_.data(), d.count, type, LegOp(d.redop),
                               cluster::InterHostAlgorithm::kRing);
  if (!s.ok()) return s;
  if (avg) Divide(type, staging_.data(), d.count, layout_.nranks);
  // 3. Every local rank's output.
  return CopyOutToAll(op, bytes);
}

Status CrossHostComm::RunBroadcast(PendingOp& op) {
  const coll::OpDesc& d = *op.descs[0];
  const uint32_t root = d.peer;
  if (root >= layout_.nranks) return Status::InvalidArgument("broadcast root out of range");
  const size_t bytes = Bytes(d);
  staging_.resize(bytes);
  const uint32_t root_host = layout_.host_of_rank[root];
  if (root_host == layout_.host_index) {
    if (Status s = CopyIn(op.descs[layout_.LocalIndex(root)]->send, bytes); !s.ok()) return s;
  }
  if (Status s = group_->Broadcast(staging_.data(), bytes, root_host); !s.ok()) return s;
  return CopyOutToAll(op, bytes);
}

Status CrossHostComm::CopyIn(const coll::IoVec& from, size_t bytes) {
  staging_.resize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  size_t off = 0;
  for (const coll::IoSpan& span : from) {
    const size_t n = std::min(span.len, bytes - off);
    std::memcpy(staging_.data() + off, span.data, n);
    off += n;
    if (off == bytes) break;
  }
  return off == bytes ? Status::Ok() : Status::Fault("a buffer is shorter than the operation");
}

Status CrossHostComm::CopyOutToAll(PendingOp& op, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  for (const auto& d : op.descs) {
    size_t off = 0;
    for (const coll::IoSpan& span : d->recv) {
      const size_t n = std::min(span.len, bytes - off);
      std::memcpy(span.data, staging_.data() + off, n);
      off += n;
      if (off == bytes) break;
    }
  }
  return Status::Ok();
}

}  // namespace hz::service
