// SPDX-License-Identifier: Apache-2.0
// ProcessGroupHz. Each file that includes libtorch's headers takes minutes
// and over a gigabyte of memory to compile, so the whole process group (how
// tensors reach the device, each collective, its Work) is this one file;
// what needs no torch is in comm_engine.cc and errors.cc.
#include "process_group.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "errors.h"

namespace hz::c10d {

using ::c10d::OpType;
using ::c10d::ReduceOp;

namespace {

// Unregistered buffers up to this size travel inside the request
// (libharmonaize's inline data), which costs less than staging them.
constexpr size_t kInlineMax = 64 * 1024;

size_t Bytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

[[noreturn]] void Unsupported(const std::string& what) {
  throw CollectiveError(HZ_ENOTSUP, "harmonaize: " + what);
}

void Require(bool ok, const std::string& what) {
  if (!ok) throw CollectiveError(HZ_EINVAL, "harmonaize: " + what);
}

void CheckTensor(const at::Tensor& t, const char* op) {
  Require(t.device().is_cpu(), std::string(op) + ": tensors must be on the CPU");
  Require(t.layout() == c10::kStrided, std::string(op) + ": only dense tensors are supported");
}

const at::Tensor& Single(const std::vector<at::Tensor>& ts, const char* op) {
  Require(ts.size() == 1,
          std::string(op) + ": expects one tensor per process, got " + std::to_string(ts.size()));
  CheckTensor(ts[0], op);
  return ts[0];
}

// n tensors like `like` (same dtype and number of elements).
void CheckList(const std::vector<at::Tensor>& ts, const at::Tensor& like, size_t n,
               const char* op) {
  Require(ts.size() == n, std::string(op) + ": expects " + std::to_string(n) +
                              " tensors (one per rank), got " + std::to_string(ts.size()));
  for (const at::Tensor& t : ts) {
    CheckTensor(t, op);
    Require(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(),
            std::string(op) + ": every tensor must have the input's dtype and size");
  }
}

// ---- reductions --------------------------------------------------------------

struct Reduction {
  hz_dtype dtype;
  hz_redop op;
  size_t count;
};

std::optional<hz_dtype> DeviceType(at::ScalarType s) {
  switch (s) {
    case at::kFloat:
    case at::kComplexFloat:
      return HZ_FP32;
    case at::kDouble:
    case at::kComplexDouble:
      return HZ_FP64;
    case at::kHalf:
    case at::kComplexHalf:
      return HZ_FP16;
    case at::kBFloat16:
      return HZ_BF16;
    case at::kChar:
      return HZ_INT8;
    case at::kByte:
    case at::kBool:
      return HZ_UINT8;
    case at::kInt:
      return HZ_INT32;
    case at::kLong:
      return HZ_INT64;
    default:
      return std::nullopt;
  }
}

const char* OpName(ReduceOp::RedOpType op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::BAND:
      return "BAND";
    case ReduceOp::BOR:
      return "BOR";
    case ReduceOp::BXOR:
      return "BXOR";
    case ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

// The device op for `op` on a tensor of kind bool/complex/other. Bool tensors
// reduce as NCCL does them: SUM and BOR are a logical or (MAX), PRODUCT and
// BAND a logical and (MIN). Complex tensors reduce as pairs of reals, which
// is exact for SUM and AVG only.
std::optional<hz_redop> DeviceOp(ReduceOp::RedOpType op, bool boolean, bool complex) {
  switch (op) {
    case ReduceOp::SUM:
      return boolean ? HZ_MAX : HZ_SUM;
    case ReduceOp::AVG:
      return boolean ? std::nullopt : std::optional(HZ_AVG);
    case ReduceOp::PRODUCT:
      return complex ? std::nullopt : std::optional(boolean ? HZ_MIN : HZ_PROD);
    case ReduceOp::MIN:
      return complex ? std::nullopt : std::optional(HZ_MIN);
    case ReduceOp::MAX:
      return complex ? std::nullopt : std::optional(HZ_MAX);
    case ReduceOp::BAND:
      return boolean ? std::optional(HZ_MIN) : std::nullopt;
    case ReduceOp::BOR:
      return boolean ? std::optional(HZ_MAX) : std::nullopt;
    default:
      return std::nullopt;
  }
}

Reduction MapReduction(const at::Tensor& t, const ReduceOp& rop, const char* op) {
  const std::optional<hz_dtype> dt = DeviceType(t.scalar_type());
  if (!dt) {
    Unsupported(std::string(op) + ": the device cannot reduce " + c10::toString(t.scalar_type()) +
                " tensors (it reduces float32, float64, float16, bfloat16, int8, uint8, int32, "
                "int64, bool, and complex with SUM or AVG)");
  }
  const bool boolean = t.scalar_type() == at::kBool;
  const bool complex = at::isComplexType(t.scalar_type());
  const std::optional<hz_redop> hop = DeviceOp(rop.op_, boolean, complex);
  if (!hop) {
    Unsupported(std::string(op) + ": ReduceOp." + OpName(rop.op_) + " is not supported for " +
                c10::toString(t.scalar_type()) +
                " tensors (the device reduces with SUM, PRODUCT, MIN, MAX and AVG; BAND and BOR "
                "only on bool tensors)");
  }
  return {*dt, *hop, static_cast<size_t>(t.numel()) * (complex ? 2 : 1)};
}

}  // namespace

// ---- where each tensor's bytes are when the device runs ------------------------

// The memory one operation hands the device: a tensor's own memory when the
// device can use it in place (contiguous, and registered or small enough to
// travel inline), otherwise a registered block from the pool, copied in when
// the operation is posted and out when it completes.
class OpIo {
 public:
  explicit OpIo(py::DeviceContext& ctx) : ctx_(ctx) {}
  ~OpIo() {
    for (void* b : blocks_) ctx_.pool().Release(b);
  }
  OpIo(const OpIo&) = delete;
  OpIo& operator=(const OpIo&) = delete;

  void* In(const at::Tensor& t) {
    if (Direct(t)) return t.data_ptr();
    void* p = Stage(Bytes(t));
    View(p, t).copy_(t);
    return p;
  }
  void* Out(const at::Tensor& t) {
    if (Direct(t)) return t.data_ptr();
    void* p = Stage(Bytes(t));
    after_.push_back([p, t] { t.copy_(View(p, t)); });
    return p;
  }
  void* InOut(const at::Tensor& t) {
    if (Direct(t)) return t.data_ptr();
    void* p = In(t);
    after_.push_back([p, t] { t.copy_(View(p, t)); });
    return p;
  }
  // The tensors back to back, read by the device.
  void* InList(const std::vector<at::Tensor>& ts) {
    if (void* p = Adjacent(ts)) return p;
    const size_t n = Bytes(ts.front());
    auto* p = static_cast<uint8_t*>(Stage(n * ts.size()));
    for (size_t i = 0; i < ts.size(); ++i) View(p + i * n, ts[i]).copy_(ts[i]);
    return p;
  }
  // The tensors back to back, written by the device.
  void* OutList(const std::vector<at::Tensor>& ts) {
    if (void* p = Adjacent(ts)) return p;
    const size_t n = Bytes(ts.front());
    auto* p = static_cast<uint8_t*>(Stage(n * ts.size()));
    for (size_t i = 0; i < ts.size(); ++i) {
      after_.push_back([q = p + i * n, t = ts[i]] { t.copy_(View(q, t)); });
    }
    return p;
  }
  void* Scratch(size_t bytes) { return Stage(bytes); }
  // Runs after the device completed successfully, in order.
  void After(std::function<void()> fn) { after_.push_back(std::move(fn)); }
  void Finish() {
    for (auto& fn : after_) fn();
  }

  static at::Tensor View(void* p, const at::Tensor& like) {
    return at::from_blob(p, like.sizes(), like.options());
  }

 private:
  bool Usable(const void* p, size_t n) const { return n <= kInlineMax || ctx_.IsRegistered(p, n); }
  bool Direct(const at::Tensor& t) const {
    return t.is_contiguous() && Usable(t.data_ptr(), Bytes(t));
  }
  // ts[i] at base + i * bytes, all contiguous, the span usable in place.
  void* Adjacent(const std::vector<at::Tensor>& ts) const {
    const size_t n = Bytes(ts.front());
    auto* base = static_cast<uint8_t*>(ts.front().data_ptr());
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].is_contiguous() || ts[i].data_ptr() != base + i * n) return nullptr;
    }
    return Usable(base, n * ts.size()) ? base : nullptr;
  }
  void* Stage(size_t bytes) {
    if (void* p = ctx_.pool().Allocate(std::max<size_t>(bytes, 1))) {
      blocks_.push_back(p);
      return p;
    }
    // No registered memory to be had: ordinary memory, which libharmonaize
    // then stages itself (slower, still correct).
    temps_.push_back(at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, at::kByte));
    return temps_.back().data_ptr();
  }

  py::DeviceContext& ctx_;
  std::vector<void*> blocks_;
  std::vector<at::Tensor> temps_;
  std::vector<std::function<void()>> after_;
};

namespace {

// ---- Work ------------------------------------------------------------------------

class WorkHz : public ::c10d::Work {
 public:
  WorkHz(int rank, int size, OpType type, const char* name, std::vector<at::Tensor> outputs,
         std::weak_ptr<CommEngine> engine)
      : Work(rank, type),
        size_(size),
        name_(name),
        outputs_(std::move(outputs)),
        engine_(std::move(engine)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // The waiting thread drives the device itself (no hand-off to another
  // thread). kNoTimeout waits for the completion, which the engine bounds;
  // a timeout of the caller's own aborts the communicator when it passes,
  // so that the other ranks fail too instead of waiting for this one.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    const auto until = timeout == kNoTimeout ? CommEngine::Clock::time_point::max()
                                             : CommEngine::Clock::now() + timeout;
    if (auto engine = engine_.lock()) {
      engine->Help(
          [this] {
            std::lock_guard<std::mutex> lock(mutex_);
            return completed_;
          },
          until);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, until, [&] { return completed_; })) {
      lock.unlock();
      if (auto engine = engine_.lock()) engine->Abort();
      throw CollectiveError(HZ_ETIMEDOUT,
                            "harmonaize " + name_ + " on rank " + std::to_string(rank_) + " of " +
                                std::to_string(size_) + ": Work.wait() gave up after " +
                                std::to_string(timeout.count()) +
                                " ms and aborted the communicator, so that every "
                                "rank's collectives fail instead of waiting");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // On the completion thread.
  void Complete(int rc) {
    if (rc == HZ_OK) {
      future_->markCompleted(c10::IValue(outputs_));
      finish();
      return;
    }
    auto error = std::make_exception_ptr(CollectiveError(rc, Describe(rc, name_, rank_, size_)));
    future_->setError(error);
    finish(error);
  }

 private:
  const int size_;
  const std::string name_;
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<CommEngine> engine_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// An operation of one request.
std::vector<RequestFn> One(RequestFn post) {
  return {std::move(post)};
}

std::chrono::milliseconds OpTimeout(std::chrono::milliseconds t) {
  return t.count() > 0 ? t : std::chrono::milliseconds(0);
}

// Agrees on a communicator uid through the store. Every rank's add() comes
// before its join, and a join completes only when all have joined, so the
// k-th process group created on a store (also a reused one) sees tickets
// k*size+1 .. (k+1)*size and its own key.
hz_uid_t ExchangeUid(::c10d::Store& store, int rank, int size, py::DeviceContext& ctx) {
  const int64_t ticket = store.add("harmonaize/joined", 1);
  const std::string key = "harmonaize/uid/" + std::to_string((ticket - 1) / size);
  hz_uid_t uid;
  if (rank == 0) {
    const int rc = hz_comm_get_uid(ctx.get(), &uid);
    if (rc != HZ_OK) Fail(rc, "process group creation (communicator uid)", rank, size);
    store.set(key, std::vector<uint8_t>(uid.bytes, uid.bytes + sizeof(uid.bytes)));
  } else {
    const std::vector<uint8_t> v = store.get(key);
    Require(v.size() == sizeof(uid.bytes), "the store holds a malformed communicator uid");
    std::memcpy(uid.bytes, v.data(), sizeof(uid.bytes));
  }
  return uid;
}

}  // namespace

// ---- the process group ---------------------------------------------------------

ProcessGroupHz::ProcessGroupHz(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout,
                               std::shared_ptr<py::DeviceContext> ctx)
    : ProcessGroup(rank, size), ctx_(std::move(ctx)), timeout_(timeout) {
  init();
  const hz_uid_t uid = ExchangeUid(*store, rank, size, *ctx_);
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  // The device aborts a collective that not every rank posted within this.
  cfg.timeout_ms = static_cast<uint32_t>(
      std::clamp<int64_t>(timeout.count(), 1, std::numeric_limits<uint32_t>::max()));
  hz_comm_t* comm = nullptr;
  const int rc = hz_comm_init(ctx_->get(), &uid, size, rank, &cfg, &comm);
  if (rc != HZ_OK) Fail(rc, "process group creation (joining the communicator)", rank, size);
  CommEngine::Options options;
  options.timeout = timeout;
  engine_ = std::make_shared<CommEngine>(ctx_, comm, options);
}

ProcessGroupHz::~ProcessGroupHz() = default;

void ProcessGroupHz::Abort() {
  engine_->Abort();
}

ProcessGroupHz::WorkPtr ProcessGroupHz::Launch(OpType type, const char* name, Tensors outputs,
                                               const std::shared_ptr<OpIo>& io,
                                               std::chrono::milliseconds timeout,
                                               std::vector<RequestFn> requests) {
  auto work = c10::make_intrusive<WorkHz>(rank_, size_, type, name, std::move(outputs), engine_);
  engine_->Submit(
      std::move(requests),
      [work, io](int rc) {
        if (rc == HZ_OK) {
          try {
            io->Finish();
          } catch (const std::exception&) {
            rc = HZ_EFAULT;  // the result could not be copied into the output tensors
          }
        }
        work->Complete(rc);
      },
      OpTimeout(timeout));
  return work;
}

ProcessGroupHz::WorkPtr ProcessGroupHz::Exchange(OpType type, const char* name, Tensors outputs,
                                                 const std::shared_ptr<OpIo>& io,
                                                 std::chrono::milliseconds timeout,
                                                 std::vector<Transfer> transfers) {
  // Sends and receives pair per peer in posting order, and none waits for
  // another, so posting them all at once cannot deadlock.
  std::vector<RequestFn> requests;
  for (const Transfer& t : transfers) {
    requests.push_back([t](hz_comm_t* c, hz_request_t** r) {
      return t.send != nullptr ? hz_send_async(c, t.send, t.bytes, HZ_UINT8, t.peer, r)
                               : hz_recv_async(c, t.recv, t.bytes, HZ_UINT8, t.peer, r);
    });
  }
  return Launch(type, name, std::move(outputs), io, timeout, std::move(requests));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::allreduce(Tensors& tensors,
                                                  const ::c10d::AllreduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "allreduce");
  const Reduction r = MapReduction(t, opts.reduceOp, "allreduce");
  auto io = std::make_shared<OpIo>(*ctx_);
  void* p = io->InOut(t);
  return Launch(OpType::ALLREDUCE, "allreduce", tensors, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_allreduce_async(c, p, p, r.count, r.dtype, r.op, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::allreduce_coalesced(
    Tensors& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  Require(!tensors.empty(), "allreduce_coalesced: no tensors");
  size_t total = 0;
  for (const at::Tensor& t : tensors) {
    CheckTensor(t, "allreduce_coalesced");
    Require(t.scalar_type() == tensors[0].scalar_type(),
            "allreduce_coalesced: every tensor must have the same dtype");
    total += Bytes(t);
  }
  // One all-reduce over the tensors packed back to back.
  auto io = std::make_shared<OpIo>(*ctx_);
  auto* flat = static_cast<uint8_t*>(io->Scratch(total));
  size_t off = 0;
  for (const at::Tensor& t : tensors) {
    OpIo::View(flat + off, t).copy_(t);
    io->After([q = flat + off, t] { t.copy_(OpIo::View(q, t)); });
    off += Bytes(t);
  }
  Reduction r = MapReduction(tensors[0], opts.reduceOp, "allreduce_coalesced");
  r.count = total / tensors[0].element_size() * (tensors[0].is_complex() ? 2 : 1);
  return Launch(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_allreduce_async(c, flat, flat, r.count, r.dtype, r.op, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::broadcast(Tensors& tensors,
                                                  const ::c10d::BroadcastOptions& opts) {
  const at::Tensor& t = Single(tensors, "broadcast");
  Require(opts.rootTensor == 0, "broadcast: rootTensor must be 0");
  Require(opts.rootRank >= 0 && opts.rootRank < size_, "broadcast: root rank out of range");
  const auto root = static_cast<uint32_t>(opts.rootRank);
  auto io = std::make_shared<OpIo>(*ctx_);
  void* p = rank_ == opts.rootRank ? io->In(t) : io->Out(t);
  const size_t n = Bytes(t);
  return Launch(OpType::BROADCAST, "broadcast", tensors, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_broadcast_async(c, p, p, n, HZ_UINT8, root, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::reduce(Tensors& tensors,
                                               const ::c10d::ReduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "reduce");
  Require(opts.rootTensor == 0, "reduce: rootTensor must be 0");
  Require(opts.rootRank >= 0 && opts.rootRank < size_, "reduce: root rank out of range");
  const Reduction r = MapReduction(t, opts.reduceOp, "reduce");
  const auto root = static_cast<uint32_t>(opts.rootRank);
  auto io = std::make_shared<OpIo>(*ctx_);
  // Only the root's tensor receives the result; the others are left as they were.
  void* p = rank_ == opts.rootRank ? io->InOut(t) : io->In(t);
  return Launch(OpType::REDUCE, "reduce", tensors, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_reduce_async(c, p, p, r.count, r.dtype, r.op, root, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::allgather(TensorLists& outputs, Tensors& inputs,
                                                  const ::c10d::AllgatherOptions& opts) {
  const at::Tensor& in = Single(inputs, "allgather");
  Require(outputs.size() == 1, "allgather: expects one output list per process");
  CheckList(outputs[0], in, size_, "allgather");
  auto io = std::make_shared<OpIo>(*ctx_);
  void* send = io->In(in);
  void* recv = io->OutList(outputs[0]);
  const size_t n = Bytes(in);
  return Launch(OpType::ALLGATHER, "allgather", outputs[0], io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_allgather_async(c, send, recv, n, HZ_UINT8, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::AllgatherOptions& opts) {
  CheckTensor(input, "_allgather_base");
  CheckTensor(output, "_allgather_base");
  Require(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
          "_allgather_base: the output must hold world_size inputs of the same dtype");
  auto io = std::make_shared<OpIo>(*ctx_);
  void* send = io->In(input);
  void* recv = io->Out(output);
  const size_t n = Bytes(input);
  return Launch(OpType::_ALLGATHER_BASE, "_allgather_base", {output}, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_allgather_async(c, send, recv, n, HZ_UINT8, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                       const ::c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = Single(outputs, "reduce_scatter");
  Require(inputs.size() == 1, "reduce_scatter: expects one input list per process");
  CheckList(inputs[0], out, size_, "reduce_scatter");
  const Reduction r = MapReduction(out, opts.reduceOp, "reduce_scatter");
  auto io = std::make_shared<OpIo>(*ctx_);
  void* send = io->InList(inputs[0]);
  void* recv = io->Out(out);
  return Launch(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_reduce_scatter_async(c, send, recv, r.count, r.dtype, r.op, q);
                }));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  CheckTensor(input, "_reduce_scatter_base");
  CheckTensor(output, "_reduce_scatter_base");
  Require(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * size_,
          "_reduce_scatter_base: the input must hold world_size outputs of the same dtype");
  const Reduction r = MapReduction(output, opts.reduceOp, "_reduce_scatter_base");
  auto io = std::make_shared<OpIo>(*ctx_);
  void* send = io->In(input);
  void* recv = io->Out(output);
  return Launch(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, io, opts.timeout,
                One([=](hz_comm_t* c, hz_request_t** q) {
                  return hz_reduce_scatter_async(c, send, recv, r.count, r.dtype, r.op, q);
                }));
}

namespace {

// Byte offsets of the rows each rank gets (splits in rows of dim 0; empty: equal).
std::vector<size_t> Offsets(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                            std::vector<size_t>* lengths) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t row_bytes = rows == 0 ? 0 : Bytes(t) / static_cast<size_t>(rows);
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    Require(rows % size == 0, "alltoall_base: dim 0 must divide evenly among the ranks");
    s.assign(size, rows / size);
  }
  Require(static_cast<int>(s.size()) == size, "alltoall_base: one split size per rank");
  int64_t sum = 0;
  std::vector<size_t> offsets;
  for (int64_t v : s) {
    Require(v >= 0, "alltoall_base: negative split size");
    offsets.push_back(static_cast<size_t>(sum) * row_bytes);
    lengths->push_back(static_cast<size_t>(v) * row_bytes);
    sum += v;
  }
  Require(sum == rows, "alltoall_base: split sizes must add up to dim 0");
  return offsets;
}

}  // namespace

ProcessGroupHz::WorkPtr ProcessGroupHz::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const ::c10d::AllToAllOptions& opts) {
  CheckTensor(input, "alltoall_base");
  CheckTensor(output, "alltoall_base");
  Require(input.scalar_type() == output.scalar_type(), "alltoall_base: dtypes differ");
  std::vector<size_t> in_len, out_len;
  const std::vector<size_t> in_off = Offsets(input, input_splits, size_, &in_len);
  const std::vector<size_t> out_off = Offsets(output, output_splits, size_, &out_len);
  auto io = std::make_shared<OpIo>(*ctx_);
  auto* send = static_cast<uint8_t*>(io->In(input));
  auto* recv = static_cast<uint8_t*>(io->Out(output));
  const bool even =
      std::all_of(in_len.begin(), in_len.end(), [&](size_t v) { return v == in_len[0]; }) &&
      std::all_of(out_len.begin(), out_len.end(), [&](size_t v) { return v == in_len[0]; });
  if (even) {
    const size_t n = in_len[0];
    return Launch(OpType::ALLTOALL_BASE, "alltoall_base", {output}, io, opts.timeout,
                  One([=](hz_comm_t* c, hz_request_t** q) {
                    return hz_alltoall_async(c, send, recv, n, HZ_UINT8, q);
                  }));
  }
  // Uneven splits: one send and one receive per peer; this rank's own rows are copied.
  Require(in_len[rank_] == out_len[rank_], "alltoall_base: this rank's own split sizes differ");
  std::memcpy(recv + out_off[rank_], send + in_off[rank_], in_len[rank_]);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    transfers.push_back({send + in_off[peer], nullptr, in_len[peer], peer});
    transfers.push_back({nullptr, recv + out_off[peer], out_len[peer], peer});
  }
  return Exchange(OpType::ALLTOALL_BASE, "alltoall_base", {output}, io, opts.timeout,
                  std::move(transfers));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::alltoall(Tensors& outputs, Tensors& inputs,
                                                 const ::c10d::AllToAllOptions& opts) {
  Require(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
          "alltoall: expects one input and one output tensor per rank");
  auto io = std::make_shared<OpIo>(*ctx_);
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    CheckTensor(inputs[peer], "alltoall");
    CheckTensor(outputs[peer], "alltoall");
    Require(inputs[peer].scalar_type() == outputs[peer].scalar_type(), "alltoall: dtypes differ");
    if (peer == rank_) {
      Require(Bytes(inputs[peer]) == Bytes(outputs[peer]),
              "alltoall: this rank's own input and output sizes differ");
      io->After([in = inputs[peer], out = outputs[peer]] { out.copy_(in.view_as(out)); });
      continue;
    }
    transfers.push_back({io->In(inputs[peer]), nullptr, Bytes(inputs[peer]), peer});
    transfers.push_back({nullptr, io->Out(outputs[peer]), Bytes(outputs[peer]), peer});
  }
  return Exchange(OpType::ALLTOALL, "alltoall", outputs, io, opts.timeout, std::move(transfers));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::gather(TensorLists& outputs, Tensors& inputs,
                                               const ::c10d::GatherOptions& opts) {
  const at::Tensor& in = Single(inputs, "gather");
  Require(opts.rootRank >= 0 && opts.rootRank < size_, "gather: root rank out of range");
  const int root = static_cast<int>(opts.rootRank);
  auto io = std::make_shared<OpIo>(*ctx_);
  if (rank_ != root) {
    Require(outputs.empty() || outputs[0].empty(), "gather: only the root passes output tensors");
    return Exchange(OpType::GATHER, "gather", {}, io, opts.timeout,
                    {{io->In(in), nullptr, Bytes(in), root}});
  }
  Require(outputs.size() == 1, "gather: the root expects one output list");
  CheckList(outputs[0], in, size_, "gather");
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == root) continue;
    transfers.push_back({nullptr, io->Out(outputs[0][peer]), Bytes(in), peer});
  }
  io->After([in, out = outputs[0][root]] { out.copy_(in); });
  return Exchange(OpType::GATHER, "gather", outputs[0], io, opts.timeout, std::move(transfers));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::scatter(Tensors& outputs, TensorLists& inputs,
                                                const ::c10d::ScatterOptions& opts) {
  const at::Tensor& out = Single(outputs, "scatter");
  Require(opts.rootRank >= 0 && opts.rootRank < size_, "scatter: root rank out of range");
  const int root = static_cast<int>(opts.rootRank);
  auto io = std::make_shared<OpIo>(*ctx_);
  if (rank_ != root) {
    Require(inputs.empty() || inputs[0].empty(), "scatter: only the root passes input tensors");
    return Exchange(OpType::SCATTER, "scatter", outputs, io, opts.timeout,
                    {{nullptr, io->Out(out), Bytes(out), root}});
  }
  Require(inputs.size() == 1, "scatter: the root expects one input list");
  CheckList(inputs[0], out, size_, "scatter");
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == root) continue;
    transfers.push_back({io->In(inputs[0][peer]), nullptr, Bytes(out), peer});
  }
  io->After([in = inputs[0][root], out] { out.copy_(in); });
  return Exchange(OpType::SCATTER, "scatter", outputs, io, opts.timeout, std::move(transfers));
}

ProcessGroupHz::WorkPtr ProcessGroupHz::send(Tensors& tensors, int dst, int tag) {
  (void)tag;  // pairs match by order per peer, as with NCCL
  const at::Tensor& t = Single(tensors, "send");
  Require(dst >= 0 && dst < size_ && dst != rank_, "send: destination rank out of range");
  auto io = std::make_shared<OpIo>(*ctx_);
  return Exchange(OpType::SEND, "send", tensors, io, ::c10d::kUnsetTimeout,
                  {{io->In(t), nullptr, Bytes(t), dst}});
}

ProcessGroupHz::WorkPtr ProcessGroupHz::recv(Tensors& tensors, int src, int tag) {
  (void)tag;
  const at::Tensor& t = Single(tensors, "recv");
  Require(src >= 0 && src < size_ && src != rank_, "recv: source rank out of range");
  auto io = std::make_shared<OpIo>(*ctx_);
  return Exchange(OpType::RECV, "recv", tensors, io, ::c10d::kUnsetTimeout,
                  {{nullptr, io->Out(t), Bytes(t), src}});
}

ProcessGroupHz::WorkPtr ProcessGroupHz::recvAnysource(Tensors& tensors, int tag) {
  (void)tensors;
  (void)tag;
  Unsupported(
      "recv without a source rank is not supported: the device pairs each receive with a send "
      "from a named peer");
}

ProcessGroupHz::WorkPtr ProcessGroupHz::barrier(const ::c10d::BarrierOptions& opts) {
  auto io = std::make_shared<OpIo>(*ctx_);
  return Launch(OpType::BARRIER, "barrier", {}, io, opts.timeout,
                One([](hz_comm_t* c, hz_request_t** q) { return hz_barrier_async(c, q); }));
}

}  // namespace hz::c10d
