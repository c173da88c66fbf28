// The operations of a communicator across hosts, each on its leg thread:
// within the host through the collective engine, across hosts through the
// InterHostGroup, on the staging buffer in between.
//
// Reduction order (SPEC §7.4.6): floating-point reductions of a
// communicator with HZ_COMM_F_DETERMINISTIC are the left fold in rank order,
// as on one host, from every rank's contribution gathered on every host.
// Integers, and floating point without the flag, are reduced
// hierarchically: each host's ranks in rank order (the engine), then the
// hosts' partial results by Gloo's ring or bcube, whose association depends
// only on the number of hosts and the buffer size, so a given placement
// gives the same bits on every run. Integer results are the same either way.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "cross_host_comm.h"
#include "cross_host_copy.h"
#include "hz/common/half.h"
#include "protocol/harmonaize.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

using cluster::InterHostOp;
using cluster::InterHostType;
using coll::DType;
using coll::Op;
using coll::RedOp;

// The element type the inter-host leg reduces for dtype.
InterHostType LegType(uint8_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFp32:
      return InterHostType::kF32;
    case DType::kFp64:
      return InterHostType::kF64;
    case DType::kInt8:
      return InterHostType::kI8;
    case DType::kUint8:
      return InterHostType::kU8;
    case DType::kInt32:
      return InterHostType::kI32;
    case DType::kUint32:
      return InterHostType::kU32;
    case DType::kInt64:
      return InterHostType::kI64;
    case DType::kFp16:
      return InterHostType::kF16;
    case DType::kBf16:
      return InterHostType::kBF16;
    default:  // kUint64 (the dtype was validated when posted)
      return InterHostType::kU64;
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

// The 16-bit floats divide in fp32 and round once, as the engine's avg does.
template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float)>
void DivideHalves(uint8_t* data, size_t count, uint32_t n) {
  uint16_t* v = reinterpret_cast<uint16_t*>(data);
  for (size_t i = 0; i < count; ++i) v[i] = kFromFloat(kToFloat(v[i]) / static_cast<float>(n));
}

void Divide(InterHostType t, uint8_t* data, size_t count, uint32_t n) {
  switch (t) {
    case InterHostType::kF32:
      return DivideAll<float>(data, count, n);
    case InterHostType::kF64:
      return DivideAll<double>(data, count, n);
    case InterHostType::kI8:
      return DivideAll<int8_t>(data, count, n);
    case InterHostType::kU8:
      return DivideAll<uint8_t>(data, count, n);
    case InterHostType::kI32:
      return DivideAll<int32_t>(data, count, n);
    case InterHostType::kU32:
      return DivideAll<uint32_t>(data, count, n);
    case InterHostType::kI64:
      return DivideAll<int64_t>(data, count, n);
    case InterHostType::kU64:
      return DivideAll<uint64_t>(data, count, n);
    case InterHostType::kBF16:
      return DivideHalves<Bf16ToFloat, FloatToBf16>(data, count, n);
    case InterHostType::kF16:
      return DivideHalves<HalfToFloat, FloatToHalf>(data, count, n);
  }
}

template <typename T>
T Same(T v) {
  return v;
}

// out = ((x_0 op x_1) op x_2) ... op x_(n-1), element by element, where x_r
// is the r-th of n blocks of count elements of Mem in `blocks`; avg divides
// the sum by n once (SPEC §7.4.4, §7.4.6). As the engine's kernels: each
// input converted exactly to Acc, the fold and the division in Acc (fp32 for
// the 16-bit floats), the result rounded once to Mem; ties and NaN keep the
// accumulator in min and max.
template <typename Mem, typename Acc, Acc (*kLoad)(Mem), Mem (*kStore)(Acc)>
void FoldInRankOrder(uint8_t* out, const uint8_t* blocks, size_t count, uint32_t n, uint8_t redop) {
  const Mem* x = reinterpret_cast<const Mem*>(blocks);
  std::vector<Acc> acc(count);
  for (size_t i = 0; i < count; ++i) acc[i] = kLoad(x[i]);
  for (uint32_t r = 1; r < n; ++r) {
    const Mem* y = x + r * count;
    for (size_t i = 0; i < count; ++i) {
      const Acc v = kLoad(y[i]);
      switch (static_cast<RedOp>(redop)) {
        case RedOp::kProd:
          acc[i] = acc[i] * v;
          break;
        case RedOp::kMax:
          acc[i] = acc[i] < v ? v : acc[i];
          break;
        case RedOp::kMin:
          acc[i] = v < acc[i] ? v : acc[i];
          break;
        default:
          acc[i] = acc[i] + v;
          break;
      }
    }
  }
  const bool avg = static_cast<RedOp>(redop) == RedOp::kAvg;
  Mem* result = reinterpret_cast<Mem*>(out);
  for (size_t i = 0; i < count; ++i) {
    result[i] = kStore(avg ? acc[i] / static_cast<Acc>(n) : acc[i]);
  }
}

void FoldFloatsInRankOrder(uint8_t* out, const uint8_t* blocks, size_t count, uint32_t n,
                           const coll::OpDesc& d) {
  switch (static_cast<DType>(d.dtype)) {
    case DType::kFp16:
      return FoldInRankOrder<uint16_t, float, HalfToFloat, FloatToHalf>(out, blocks, count, n,
                                                                        d.redop);
    case DType::kBf16:
      return FoldInRankOrder<uint16_t, float, Bf16ToFloat, FloatToBf16>(out, blocks, count, n,
                                                                        d.redop);
    case DType::kFp64:
      return FoldInRankOrder<double, double, Same, Same>(out, blocks, count, n, d.redop);
    default:
      return FoldInRankOrder<float, float, Same, Same>(out, blocks, count, n, d.redop);
  }
}

bool IsFloat(uint8_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFp16:
    case DType::kFp32:
    case DType::kFp64:
    case DType::kBf16:
      return true;
    default:
      return false;
  }
}

uint64_t Nanos(std::chrono::steady_clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

size_t ElementBytes(const coll::OpDesc& op) {
  return hz_dtype_size(static_cast<enum hz_dtype>(op.dtype));
}

Status WaitAll(std::vector<std::future<Status>>& done) {
  Status first_error = Status::Ok();
  for (auto& f : done) {
    if (!f.valid()) continue;
    Status st = f.get();
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  done.clear();
  return first_error;
}

}  // namespace

// The algorithm whose measured cost (the group's LegCostModel, the same on
// every host) is lowest for one call of the leg: a pipeline chunk, or the
// whole buffer when it is smaller.
cluster::InterHostAlgorithm CrossHostComm::ChooseAlgorithm(size_t bytes) {
  const size_t call = std::min(bytes, kPipelineChunkBytes);
  const cluster::InterHostAlgorithm a =
      leg_model_ ? leg_model_->Best(call) : cluster::InterHostAlgorithm::kRing;
  stats_->by_algorithm[static_cast<size_t>(a)].fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("event=cross_host_algorithm algorithm={} bytes={} hosts={}",
                cluster::InterHostAlgorithmName(a), bytes, layout_.nhosts());
  return a;
}

void CrossHostComm::Run(PendingOp op, uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_dones_ = &op.dones;
  }
  Status s;
  for (;;) {
    const uint64_t generation = generation_;  // written by this thread only
    s = RunOnce(op);
    if (s.ok()) break;
    // The group failed because a host handed the communicator to its next
    // process: no host completed this operation (it needs every host), and
    // no rank's output was written (outputs follow the group's part), so
    // it runs again from the ranks' buffers on the re-formed group.
    std::optional<uint64_t> next = NewerGeneration(s, generation);
    if (!next) break;
    if (Status r = Reform(*next, seq); !r.ok()) {
      s = r;
      break;
    }
  }
  if (!s.ok()) {
    stats_->failed.fetch_add(1, std::memory_order_relaxed);
    Abort(s, s.code() == StatusCode::kTimedOut ? coll::AbortCause::kTimedOut
                                               : coll::AbortCause::kProvider);
  }
  Finish(op, s);
}

Status CrossHostComm::RunOnce(PendingOp& op) {
  switch (op.descs[0]->op) {
    case Op::kAllReduce:
    case Op::kReduce:
    case Op::kReduceScatter:
      return RunReduction(op);
    case Op::kBroadcast:
      return RunBroadcast(op);
    case Op::kAllGather:
    case Op::kAllToAll:
      return RunGather(op);
    default:
      return InGroup([&] { return group_->Barrier(); });
  }
}

std::vector<std::future<Status>> CrossHostComm::PostLocalReduce(PendingOp& op, size_t offset,
                                                                uint64_t count, uint8_t redop) {
  const size_t bytes = count * ElementBytes(*op.descs[0]);
  std::vector<std::future<Status>> done;
  for (size_t i = 0; i < op.descs.size(); ++i) {
    coll::OpDesc d;
    d.op = Op::kReduce;
    d.seq = local_seq_;
    d.count = count;
    d.dtype = op.descs[i]->dtype;
    d.redop = redop;
    d.peer = 0;
    d.send = Slice(op.descs[i]->send, offset, bytes);
    if (i == 0) d.recv = {{staging_.data() + offset, bytes}};
    auto promise = std::make_shared<std::promise<Status>>();
    done.push_back(promise->get_future());
    local_.Post(members_[i], std::move(d), [promise](Status st) { promise->set_value(st); });
  }
  ++local_seq_;
  return done;
}

Status CrossHostComm::ReduceHierarchically(PendingOp& op, uint64_t count,
                                           const std::vector<Output>& outputs) {
  const coll::OpDesc& d = *op.descs[0];
  const size_t esize = ElementBytes(d);
  const InterHostType type = LegType(d.dtype);
  const bool avg = d.redop == static_cast<uint8_t>(RedOp::kAvg);
  const uint8_t local_op = avg ? static_cast<uint8_t>(RedOp::kSum) : d.redop;
  const cluster::InterHostAlgorithm algorithm = ChooseAlgorithm(count * esize);
  staging_.resize(count * esize);
  // A pipeline over chunks: the engine reduces chunk k+1 within the host
  // while the hosts combine chunk k, and chunk k's outputs are written
  // before chunk k+1's leg starts.
  const uint64_t chunk = std::max<uint64_t>(1, kPipelineChunkBytes / esize);
  std::vector<std::future<Status>> local = PostLocalReduce(op, 0, std::min(chunk, count), local_op);
  Status s = Status::Ok();
  for (uint64_t first = 0; first < count && s.ok(); first += chunk) {
    const uint64_t n = std::min(chunk, count - first);
    const auto t0 = std::chrono::steady_clock::now();
    s = WaitAll(local);
    if (s.ok() && first + n < count) {
      local =
          PostLocalReduce(op, (first + n) * esize, std::min(chunk, count - first - n), local_op);
    }
    const auto t1 = std::chrono::steady_clock::now();
    uint8_t* data = staging_.data() + first * esize;
    if (s.ok()) s = CombineAcrossHosts(data, n, d, algorithm);
    if (s.ok() && avg) Divide(type, data, n, layout_.nranks);
    stats_->local_ns += Nanos(t1 - t0);
    stats_->leg_ns += Nanos(std::chrono::steady_clock::now() - t1);
    if (s.ok()) s = WriteOutputs(outputs, first * esize, n * esize);
  }
  // The engine may still be reducing the next chunk: it reads the ranks'
  // memory and writes staging_ until it completes.
  Status pending = WaitAll(local);
  return s.ok() ? pending : s;
}

Status CrossHostComm::CombineAcrossHosts(uint8_t* data, uint64_t n, const coll::OpDesc& d,
                                         cluster::InterHostAlgorithm algorithm) {
  const bool lossy = layout_.allow_lossy && static_cast<DType>(d.dtype) == DType::kFp32 &&
                     (d.redop == static_cast<uint8_t>(RedOp::kSum) ||
                      d.redop == static_cast<uint8_t>(RedOp::kAvg));
  auto start = std::chrono::steady_clock::now();
  const auto measured = [&](Status s, size_t bytes) {
    if (s.ok() && leg_model_) {
      stats_->fabric.Leg(leg_model_->Seconds(algorithm, bytes),
                         Nanos(std::chrono::steady_clock::now() - start));
    }
    return s;
  };
  if (!lossy) {
    const InterHostType type = LegType(d.dtype);
    return measured(
        InGroup([&] { return group_->AllReduce(data, n, type, LegOp(d.redop), algorithm); }),
        n * ElementBytes(d));
  }
  // Half the bytes between hosts: each host's partial sums are rounded to
  // bfloat16, combined in fp32 and rounded once per step of the algorithm.
  stats_->lossy.fetch_add(1, std::memory_order_relaxed);
  float* f = reinterpret_cast<float*>(data);
  wire_.resize(n);
  for (uint64_t i = 0; i < n; ++i) wire_[i] = FloatToBf16(f[i]);
  start = std::chrono::steady_clock::now();
  Status s = measured(InGroup([&] {
                        return group_->AllReduce(wire_.data(), n, InterHostType::kBF16,
                                                 InterHostOp::kSum, algorithm);
                      }),
                      n * sizeof(uint16_t));
  for (uint64_t i = 0; s.ok() && i < n; ++i) f[i] = Bf16ToFloat(wire_[i]);
  return s;
}

Status CrossHostComm::ReduceInRankOrder(PendingOp& op, uint64_t count,
                                        const std::vector<Output>& outputs) {
  const coll::OpDesc& d = *op.descs[0];
  const size_t bytes = count * ElementBytes(d);
  // Every rank's contribution on every host, then the left fold in rank
  // order: more bytes across hosts than the hierarchical reduction, and the
  // same bits as on one host.
  if (Status s = GatherAll(op, bytes); !s.ok()) return s;
  std::vector<uint8_t> all = std::move(staging_);
  staging_.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(bytes));
  FoldFloatsInRankOrder(staging_.data(), all.data(), count, layout_.nranks, d);
  return WriteOutputs(outputs, 0, bytes);
}

Status CrossHostComm::WriteOutputs(const std::vector<Output>& outputs, size_t offset,
                                   size_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = Touching([&] {
    for (const Output& o : outputs) {
      const size_t from = std::max(offset, o.from);
      const size_t to = std::min(offset + bytes, o.from + o.len);
      if (from < to) Scatter(staging_.data() + from, to - from, *o.recv, from - o.from);
    }
  });
  stats_->output_ns += Nanos(std::chrono::steady_clock::now() - t0);
  return s;
}

Status CrossHostComm::RunReduction(PendingOp& op) {
  const coll::OpDesc& d = *op.descs[0];
  // Reduce-scatter reduces the whole send buffer, nranks blocks of count.
  const uint64_t count = d.op == Op::kReduceScatter ? d.count * layout_.nranks : d.count;
  const size_t bytes = count * ElementBytes(d);
  // What each local rank receives: the whole result, the root's, or its block.
  std::vector<Output> outputs;
  for (size_t i = 0; i < op.descs.size(); ++i) {
    const uint32_t rank = layout_.local_ranks[i];
    const coll::IoVec* recv = &op.descs[i]->recv;
    if (d.op == Op::kAllReduce || (d.op == Op::kReduce && rank == d.peer)) {
      outputs.push_back({recv, 0, bytes});
    } else if (d.op == Op::kReduceScatter) {
      const size_t block = bytes / layout_.nranks;
      outputs.push_back({recv, rank * block, block});
    }
  }
  return layout_.deterministic && IsFloat(d.dtype) ? ReduceInRankOrder(op, count, outputs)
                                                   : ReduceHierarchically(op, count, outputs);
}

Status CrossHostComm::RunBroadcast(PendingOp& op) {
  const coll::OpDesc& d = *op.descs[0];
  if (d.peer >= layout_.nranks) return Status::InvalidArgument("broadcast root out of range");
  const size_t bytes = d.count * ElementBytes(d);
  staging_.resize(bytes);
  const uint32_t root_host = layout_.host_of_rank[d.peer];
  if (root_host == layout_.host_index) {
    const coll::IoVec& send = op.descs[layout_.LocalIndex(d.peer)]->send;
    if (Status s = Touching([&] { Gather(send, 0, bytes, staging_.data()); }); !s.ok()) {
      return s;
    }
  }
  if (Status s = InGroup([&] { return group_->Broadcast(staging_.data(), bytes, root_host); });
      !s.ok()) {
    return s;
  }
  return Touching([&] {
    for (const auto& desc : op.descs) Scatter(staging_.data(), bytes, desc->recv, 0);
  });
}

Status CrossHostComm::GatherAll(PendingOp& op, size_t per_rank) {
  staging_.assign(per_rank * layout_.nranks, 0);
  Status s = Touching([&] {
    for (size_t i = 0; i < op.descs.size(); ++i) {
      Gather(op.descs[i]->send, 0, per_rank, staging_.data() + layout_.local_ranks[i] * per_rank);
    }
  });
  if (!s.ok()) return s;
  // Each host in turn broadcasts its ranks' blocks, packed in rank order.
  std::vector<uint8_t> packed;
  for (uint32_t h = 0; h < layout_.nhosts(); ++h) {
    std::vector<uint32_t> ranks;
    for (uint32_t r = 0; r < layout_.nranks; ++r) {
      if (layout_.host_of_rank[r] == h) ranks.push_back(r);
    }
    packed.resize(ranks.size() * per_rank);
    for (size_t k = 0; k < ranks.size() && h == layout_.host_index; ++k) {
      std::memcpy(packed.data() + k * per_rank, staging_.data() + ranks[k] * per_rank, per_rank);
    }
    Status b = InGroup([&] { return group_->Broadcast(packed.data(), packed.size(), h); });
    if (!b.ok()) return b;
    for (size_t k = 0; k < ranks.size() && h != layout_.host_index; ++k) {
      std::memcpy(staging_.data() + ranks[k] * per_rank, packed.data() + k * per_rank, per_rank);
    }
  }
  return Status::Ok();
}

Status CrossHostComm::RunGather(PendingOp& op) {
  const coll::OpDesc& d = *op.descs[0];
  const size_t block = d.count * ElementBytes(d);
  const uint32_t n = layout_.nranks;
  // All-gather moves one block per rank; all-to-all, each rank's whole send
  // buffer (n blocks), of which every rank keeps the blocks meant for it.
  const size_t per_rank = d.op == Op::kAllGather ? block : block * n;
  if (Status s = GatherAll(op, per_rank); !s.ok()) return s;
  return Touching([&] {
    for (size_t i = 0; i < op.descs.size(); ++i) {
      if (d.op == Op::kAllGather) {
        Scatter(staging_.data(), block * n, op.descs[i]->recv, 0);
        continue;
      }
      const uint32_t me = layout_.local_ranks[i];
      for (uint32_t j = 0; j < n; ++j) {
        Scatter(staging_.data() + j * per_rank + me * block, block, op.descs[i]->recv, j * block);
      }
    }
  });
}

}  // namespace hz::service
