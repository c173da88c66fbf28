#include "job.h"

#include "stream_copy.h"

#include <algorithm>
#include <cstring>

namespace hz::coll::internal {
namespace {

// Per-thread scratch: the accumulator, the converted output, and bounce
// buffers for elements split across extents and for all-to-all. Sized on
// first use, reused afterwards.
struct Scratch {
  std::vector<uint64_t> acc, in, out, tmp;
  // A reduction block's position in every rank's input and in each output
  // (placed afresh by each block; stale between blocks).
  std::vector<SpanCursor> in_at, out_at;
  std::vector<const uint8_t*> inputs;  // the current piece's, per rank
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

// acc = reduction over ranks, in rank order, of n elements from each of the
// p = job.nranks inputs.
void ReduceInto(const Job& job, const uint8_t* const* in, uint64_t n, void* acc) {
  const ReduceKernel& k = *job.kernel;
  const uint32_t p = job.nranks;
  if (p == 1) {
    k.load(acc, in[0], n);
    return;
  }
  // Up to four ranks per pass over the accumulator, in rank order: each
  // pass costs a read and a write of it, as much cache traffic as a rank's
  // input.
  uint32_t r = 0;
  if (p >= 4) {
    k.combine4(acc, in[0], in[1], in[2], in[3], n);
    r = 4;
  } else {
    k.combine(acc, in[0], in[1], n);
    r = 2;
  }
  for (; r + 4 <= p; r += 4) k.accumulate4(acc, in[r], in[r + 1], in[r + 2], in[r + 3], n);
  for (; r < p; ++r) k.accumulate(acc, in[r], n);
}

// Writes the finished accumulator's n elements to out, or, where out is
// nullptr (an element split across extents), to dst at off. Streamed either
// way when the job streams: a split element shares its lines with pieces
// that stream, and a plain store into such a line costs its flush and
// re-read.
void StoreTo(const Job& job, uint8_t* out, const SpanList& dst, uint64_t off, uint64_t n,
             const void* acc, uint8_t** converted) {
  const uint64_t bytes = n * job.esize;
  // Finish once into cache (unless the accumulator already holds the output
  // bytes), then copy to every destination; without streaming, finish
  // straight into the destination.
  const uint8_t* finished = static_cast<const uint8_t*>(acc);
  if (!job.kernel->store_copies) {
    if (out != nullptr && !job.stream_stores) {
      job.kernel->store(out, acc, n, job.nranks);
      return;
    }
    if (*converted == nullptr) {
      *converted = Ensure(t_scratch.out, bytes);
      job.kernel->store(*converted, acc, n, job.nranks);
    }
    finished = *converted;
  }
  if (out == nullptr) {
    dst.Write(off, finished, bytes, job.stream_stores);
  } else if (job.stream_stores) {
    StreamCopy(out, finished, bytes);
  } else {
    std::memcpy(out, finished, bytes);
  }
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
// later pieces start on a cache line of the output at out: with streamed
// outputs, a line two pieces share is written in two parts at different
// times, each part a partial-line write that costs the memory a read as well.
// (Ranks whose outputs lie at different offsets from a line share this for
// all but the first; 0 when out does not start a line within an element.)
uint64_t LeadElems(const Job& job, const uint8_t* out, uint64_t n) {
  if (!job.stream_stores || out == nullptr) return 0;
  const uint64_t lead_bytes = (64 - reinterpret_cast<uintptr_t>(out) % 64) % 64;
  if (lead_bytes % job.esize != 0) return 0;
  return std::min(n, lead_bytes / job.esize);
}

// Places the block's cursors: every rank's input at in_off, each output at
// out_off.
void StartCursors(const Job& job, Outputs out, uint64_t in_off, uint64_t out_off) {
  Scratch& s = t_scratch;
  s.in_at.clear();
  s.out_at.clear();
  for (uint32_t r = 0; r < job.nranks; ++r) s.in_at.emplace_back(job.io[r].send, in_off);
  for (uint32_t k = 0; k < out.count; ++k)
    s.out_at.emplace_back(job.io[out.first + k].recv, out_off);
  s.inputs.resize(job.nranks);
}

// Elements from the cursors that every input and output holds in one
// extent: a piece cut there is read and written in place, where a piece
// across a page of a guest's buffer would be gathered into scratch from
// every input and scattered from it to every output. 0 when an element is
// split across extents.
uint64_t InPlaceElems(const Job& job) {
  uint64_t bytes = UINT64_MAX;
  for (const SpanCursor& c : t_scratch.in_at) bytes = std::min(bytes, c.run());
  for (const SpanCursor& c : t_scratch.out_at) bytes = std::min(bytes, c.run());
  return bytes / job.esize;
}

void SkipCursors(uint64_t bytes) {
  for (SpanCursor& c : t_scratch.in_at) c.Skip(bytes);
  for (SpanCursor& c : t_scratch.out_at) c.Skip(bytes);
}

// One block of a reduction: n elements from byte offset off of the output
// (of the input, for reduce-scatter, shifted to the unit's range), reduced
// piece by piece in the accumulator and written from there.
void RunReduceBlock(const Job& job, uint64_t unit, uint64_t off, uint64_t n) {
  Scratch& s = t_scratch;
  const uint64_t es = job.esize;
  const Outputs out = OutputsOf(job, unit);
  // Reduce-scatter: unit is the rank that receives this range.
  const uint64_t in_off = job.op == Op::kReduceScatter ? unit * job.count * es + off : off;
  StartCursors(job, out, in_off, off);
  const uint64_t piece = std::max<uint64_t>(1, AccPieceBytes(job.nranks) / job.kernel->acc_size);
  const uint64_t lead = LeadElems(job, s.out_at[0].data(), n);
  void* acc = Ensure(s.acc, std::min(n, lead + piece) * job.kernel->acc_size);
  for (uint64_t done = 0, m = 0; done < n; done += m) {
    m = std::min(done == 0 ? lead + piece : piece, n - done);
    const uint64_t in_place = InPlaceElems(job);
    const bool split = in_place == 0;
    if (split) {
      // One element across extents: each rank's copy gathered into scratch.
      m = 1;
      uint8_t* gathered = Ensure(s.in, job.nranks * es);
      for (uint32_t r = 0; r < job.nranks; ++r) {
        job.io[r].send.Read(in_off + done * es, gathered + r * es, es);
        s.inputs[r] = gathered + r * es;
      }
    } else {
      m = std::min(m, in_place);
      for (uint32_t r = 0; r < job.nranks; ++r) s.inputs[r] = s.in_at[r].data();
    }
    ReduceInto(job, s.inputs.data(), m, acc);
    uint8_t* converted = nullptr;
    for (uint32_t k = 0; k < out.count; ++k) {
      StoreTo(job, split ? nullptr : s.out_at[k].data(), job.io[out.first + k].recv,
              off + done * es, m, acc, &converted);
    }
    SkipCursors(m * es);
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
