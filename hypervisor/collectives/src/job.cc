#include "job.h"

#include "stream_copy.h"

#include <algorithm>
#include <cstring>

namespace hz::coll::internal {
namespace {

// Per-thread scratch: the accumulator and bounce buffers for blocks that
// cross an extent boundary. Sized on first use, reused afterwards.
struct Scratch {
  std::vector<uint64_t> acc, in, in2, in3, out, tmp;
  // Per rank, the extent of its send and recv lists that the last lookup
  // found (SpanList::Find's hint).
  std::vector<size_t> send_hint, recv_hint;
};
thread_local Scratch t_scratch;

uint8_t* Ensure(std::vector<uint64_t>& v, size_t bytes) {
  if (v.size() * sizeof(uint64_t) < bytes) v.resize((bytes + sizeof(uint64_t) - 1) / 8);
  return reinterpret_cast<uint8_t*>(v.data());
}

// Units a count-sized range is repeated over: ranks for all-gather and
// reduce-scatter, rank pairs for all-to-all.
uint64_t Units(const Job& job) {
  switch (job.op) {
    case Op::kAllGather:
    case Op::kReduceScatter:
      return job.nranks;
    case Op::kAllToAll:
      return job.pairs.size();
    default:
      return 1;
  }
}

// The accumulator is filled and drained in pieces, so it stays in the
// cache while the rank inputs stream past it once and the outputs are
// written from it. (A whole block's accumulator would cost a pass through
// L2 or memory per rank.) The best size depends on the rank count, measured
// with collectives_bench on all-reduces of 16 and 64 MiB:
//   - up to 4 ranks, 2 KiB (in L1): each burst of streaming stores stays
//     short between the input reads; p=2 and p=4 took 20-30% less time than
//     with 8 KiB pieces;
//   - more ranks, 32 KiB: every piece switches between 2p memory streams,
//     and longer runs per stream pay more than L1 residence; p=6 and p=8
//     took 10-25% less time than with 2 KiB pieces. (With four ranks per
//     pass over the accumulator, p=8 measured the same with 8, 32 and 64
//     KiB pieces.)
uint64_t AccPieceBytes(uint32_t nranks) {
  return nranks <= 4 ? 2 * 1024 : 32 * 1024;
}

// Rank r's send bytes [off, off + bytes): in place when contiguous, else
// gathered into the given scratch buffer.
const uint8_t* SendBytes(const Job& job, uint32_t r, uint64_t off, uint64_t bytes,
                         std::vector<uint64_t>& bounce) {
  const SpanList& s = job.io[r].send;
  const uint8_t* src = s.Contiguous(off, bytes, &t_scratch.send_hint[r]);
  if (src != nullptr) return src;
  uint8_t* b = Ensure(bounce, bytes);
  s.Read(off, b, bytes);
  return b;
}

// acc = reduction over ranks, in rank order, of n elements at byte offset off
// of every rank's send buffer.
void ReduceInto(const Job& job, uint64_t off, uint64_t n, void* acc) {
  const ReduceKernel& k = *job.kernel;
  const uint64_t bytes = n * job.esize;
  if (job.nranks == 1) {
    k.load(acc, SendBytes(job, 0, off, bytes, t_scratch.in), n);
    return;
  }
  // Up to four ranks per pass over the accumulator, in rank order: each
  // pass costs a read and a write of it, as much cache traffic as a rank's
  // input.
  const uint32_t p = job.nranks;
  uint32_t r = 0;
  if (p >= 4) {
    k.combine4(acc, SendBytes(job, 0, off, bytes, t_scratch.in),
               SendBytes(job, 1, off, bytes, t_scratch.tmp),
               SendBytes(job, 2, off, bytes, t_scratch.in2),
               SendBytes(job, 3, off, bytes, t_scratch.in3), n);
    r = 4;
  } else {
    k.combine(acc, SendBytes(job, 0, off, bytes, t_scratch.in),
              SendBytes(job, 1, off, bytes, t_scratch.tmp), n);
    r = 2;
  }
  for (; r + 4 <= p; r += 4) {
    k.accumulate4(acc, SendBytes(job, r, off, bytes, t_scratch.in),
                  SendBytes(job, r + 1, off, bytes, t_scratch.tmp),
                  SendBytes(job, r + 2, off, bytes, t_scratch.in2),
                  SendBytes(job, r + 3, off, bytes, t_scratch.in3), n);
  }
  for (; r < p; ++r) k.accumulate(acc, SendBytes(job, r, off, bytes, t_scratch.in), n);
}

// Writes the finished accumulator to dst at off: straight into the extent
// when it holds the whole range, else through a bounce buffer. Streamed
// either way: a piece that straddles two extents (a buffer made of a guest's
// pages, not starting on a page boundary) shares its lines with pieces that
// stream, and a plain store into such a line costs its flush and re-read.
void StoreTo(const Job& job, uint32_t r, uint64_t off, uint64_t n, const void* acc,
             uint8_t** converted) {
  const SpanList& dst = job.io[r].recv;
  const uint64_t bytes = n * job.esize;
  uint8_t* out = dst.Contiguous(off, bytes, &t_scratch.recv_hint[r]);
  if (out != nullptr && job.stream_stores) {
    // Finish once into cache (unless the accumulator already holds the
    // output bytes), then stream to every destination.
    if (job.kernel->store_copies) {
      StreamCopy(out, static_cast<const uint8_t*>(acc), bytes);
      return;
    }
    if (*converted == nullptr) {
      *converted = Ensure(t_scratch.out, bytes);
      job.kernel->store(*converted, acc, n, job.nranks);
    }
    StreamCopy(out, *converted, bytes);
    return;
  }
  if (out != nullptr) {
    job.kernel->store(out, acc, n, job.nranks);
    return;
  }
  if (job.kernel->store_copies) {
    dst.Write(off, acc, bytes, job.stream_stores);
    return;
  }
  if (*converted == nullptr) {
    *converted = Ensure(t_scratch.out, bytes);
    job.kernel->store(*converted, acc, n, job.nranks);
  }
  dst.Write(off, *converted, bytes, job.stream_stores);
}

// The ranks whose outputs a reduction writes: every rank's for an
// all-reduce, else one (the root's, or the unit's for reduce-scatter).
struct Outputs {
  uint32_t first = 0;
  uint32_t count = 0;
};

Outputs OutputsOf(const Job& job, uint64_t unit) {
  switch (job.op) {
    case Op::kAllReduce:
      return {0, job.nranks};
    case Op::kReduce:
      return {job.root, 1};
    default:
      return {static_cast<uint32_t>(unit), 1};
  }
}

// Elements the first piece of a block takes beyond a whole piece, so that
// later pieces start on a cache line of rank r's output: with streamed
// outputs, a line two pieces share is written in two parts at different
// times, each part a partial-line write that costs the memory a read as well.
// (Ranks whose outputs lie at different offsets from a line share this for
// all but r; 0 when r's output does not start a line within an element.)
uint64_t LeadElems(const Job& job, uint32_t r, uint64_t off, uint64_t n) {
  if (!job.stream_stores) return 0;
  const uint8_t* d = job.io[r].recv.Contiguous(off, 1, &t_scratch.recv_hint[r]);
  if (d == nullptr) return 0;
  const uint64_t lead_bytes = (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64;
  if (lead_bytes % job.esize != 0) return 0;
  return std::min(n, lead_bytes / job.esize);
}

// A piece of m elements at input offset in_o and output offset o, cut where
// an input or output extent ends, so that the kernels read and write it in
// place: a piece across a page of a guest's buffer would be gathered into
// scratch from every input and scattered from it to every output. At least
// one element (an element split across extents goes through scratch).
uint64_t CutAtExtents(const Job& job, Outputs out, uint64_t in_o, uint64_t o, uint64_t m) {
  uint64_t bytes = m * job.esize;
  for (uint32_t r = 0; r < job.nranks; ++r) {
    bytes = std::min(bytes, job.io[r].send.ExtentBytesFrom(in_o, &t_scratch.send_hint[r]));
  }
  for (uint32_t k = 0; k < out.count; ++k) {
    const uint32_t r = out.first + k;
    bytes = std::min(bytes, job.io[r].recv.ExtentBytesFrom(o, &t_scratch.recv_hint[r]));
  }
  return std::max<uint64_t>(1, bytes / job.esize);
}

// One block of a reduction: n elements from byte offset off of the output
// (of the input, for reduce-scatter, shifted to the unit's range), reduced
// piece by piece in the accumulator and written from there.
void RunReduceBlock(const Job& job, uint64_t unit, uint64_t off, uint64_t n) {
  const uint64_t es = job.esize, stride = job.count * es;
  if (t_scratch.send_hint.size() < job.nranks) {
    t_scratch.send_hint.resize(job.nranks);
    t_scratch.recv_hint.resize(job.nranks);
  }
  const Outputs out = OutputsOf(job, unit);
  const uint64_t piece = std::max<uint64_t>(1, AccPieceBytes(job.nranks) / job.kernel->acc_size);
  const uint64_t lead = LeadElems(job, out.first, off, n);
  void* acc = Ensure(t_scratch.acc, std::min(n, lead + piece) * job.kernel->acc_size);
  for (uint64_t done = 0, m = 0; done < n; done += m) {
    m = std::min(done == 0 ? lead + piece : piece, n - done);
    const uint64_t o = off + done * es;
    // Reduce-scatter: unit is the rank that receives this range.
    const uint64_t in_o = job.op == Op::kReduceScatter ? unit * stride + o : o;
    if (job.fragmented) m = CutAtExtents(job, out, in_o, o, m);
    ReduceInto(job, in_o, m, acc);
    uint8_t* converted = nullptr;
    for (uint32_t k = 0; k < out.count; ++k) StoreTo(job, out.first + k, o, m, acc, &converted);
  }
  if (job.stream_stores) StreamFence();
}

}  // namespace

uint64_t TouchedBytes(const Job& job) {
  const uint64_t b = job.count * job.esize, p = job.nranks;
  switch (job.op) {
    case Op::kAllReduce:
      return 2 * p * b;
    case Op::kReduce:
      return p * b + b;
    case Op::kBroadcast:
      return b + p * b;
    case Op::kAllGather:
      return p * b + p * p * b;
    case Op::kReduceScatter:
      return p * p * b + p * b;
    case Op::kAllToAll:
      return 2 * p * p * b;
    case Op::kSend:
    case Op::kRecv:
      return 2 * b;
    case Op::kBarrier:
      return 0;
  }
  return 0;
}

void Layout(Job& job, uint64_t block_bytes) {
  if (job.op == Op::kAllToAll) {
    job.pairs.clear();
    for (uint32_t i = 0; i < job.nranks; ++i) {
      for (uint32_t j = i; j < job.nranks; ++j) job.pairs.emplace_back(i, j);
    }
  }
  job.total_bytes = TouchedBytes(job);
  job.fragmented = std::any_of(job.io.begin(), job.io.end(), [](const RankIo& io) {
    return io.send.extents() > 1 || io.recv.extents() > 1;
  });
  if (job.op == Op::kBarrier || job.count == 0 || job.esize == 0) {
    job.block_elems = job.blocks_per_unit = job.nblocks = 0;
    return;
  }
  job.block_elems = std::max<uint64_t>(1, block_bytes / job.esize);
  job.blocks_per_unit = (job.count + job.block_elems - 1) / job.block_elems;
  job.nblocks = job.blocks_per_unit * Units(job);
}

uint64_t BlockCost(const Job& job) {
  return job.nblocks == 0 ? 1 : std::max<uint64_t>(1, job.total_bytes / job.nblocks);
}

void RunBlock(const Job& job, uint64_t b) {
  const uint64_t unit = b / job.blocks_per_unit;
  const uint64_t first = (b % job.blocks_per_unit) * job.block_elems;
  const uint64_t n = std::min(job.block_elems, job.count - first);
  const uint64_t es = job.esize;
  const uint64_t off = first * es, bytes = n * es, stride = job.count * es;
  const uint32_t p = job.nranks;

  switch (job.op) {
    case Op::kAllReduce:
    case Op::kReduce:
    case Op::kReduceScatter:
      RunReduceBlock(job, unit, off, n);
      break;
    case Op::kBroadcast:
      // The root's block stays in cache while it is written to every rank.
      for (uint32_t r = 0; r < p; ++r) {
        CopySpans(job.io[r].recv, off, job.io[job.root].send, off, bytes, job.stream_stores);
      }
      if (job.stream_stores) StreamFence();
      break;
    case Op::kAllGather:
      // unit = source rank; its block lands at unit * stride in every recv.
      for (uint32_t r = 0; r < p; ++r) {
        CopySpans(job.io[r].recv, unit * stride + off, job.io[unit].send, off, bytes,
                  job.stream_stores);
      }
      if (job.stream_stores) StreamFence();
      break;
    case Op::kAllToAll: {
      auto [i, j] = job.pairs[unit];
      if (i == j) {
        CopySpans(job.io[i].recv, i * stride + off, job.io[i].send, i * stride + off, bytes);
        break;
      }
      // Both directions go through scratch, read before either is written,
      // so the exchange is correct even when a rank's send is its recv.
      uint8_t* a = Ensure(t_scratch.in, bytes);
      uint8_t* c = Ensure(t_scratch.tmp, bytes);
      job.io[i].send.Read(j * stride + off, a, bytes);
      job.io[j].send.Read(i * stride + off, c, bytes);
      job.io[j].recv.Write(i * stride + off, a, bytes);
      job.io[i].recv.Write(j * stride + off, c, bytes);
      break;
    }
    case Op::kSend:
    case Op::kRecv:
      CopySpans(job.io[0].recv, off, job.io[0].send, off, bytes, job.stream_stores);
      if (job.stream_stores) StreamFence();
      break;
    case Op::kBarrier:
      break;
  }
}

}  // namespace hz::coll::internal
