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
  // Their addresses, for reduce_into.
  std::vector<const uint8_t*> in_ptr;
  std::vector<uint8_t*> out_ptr;
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

// Places the block's cursors: every rank's input at in_off, each output at
// out_off.
void StartCursors(const Job& job, Outputs out, uint64_t in_off, uint64_t out_off) {
  Scratch& s = t_scratch;
  s.in_at.clear();
  s.out_at.clear();
  for (uint32_t r = 0; r < job.nranks; ++r) s.in_at.emplace_back(job.io[r].send, in_off);
  for (uint32_t k = 0; k < out.count; ++k)
    s.out_at.emplace_back(job.io[out.first + k].recv, out_off);
}

// Elements of the piece that starts at the cursors: a whole piece, or what
// is left of the block. With streamed outputs, stretched to end on a cache
// line of the first output, so that no line is written in two parts at
// different times, each part a partial-line write that costs the memory a
// read as well. (Outputs at other offsets from a line share this for all but
// the first.)
uint64_t PieceElems(const Job& job, uint64_t piece, uint64_t left) {
  const uint64_t m = std::min(piece, left);
  if (!job.stream_stores || m == left) return m;
  SpanCursor end = t_scratch.out_at[0];
  end.Skip(m * job.esize);
  const uint64_t to_line = (64 - reinterpret_cast<uintptr_t>(end.data()) % 64) % 64;
  if (to_line % job.esize != 0) return m;
  return std::min(left, m + to_line / job.esize);
}

// One pass of the kernel over the accumulator, with the inputs of up to four
// ranks.
enum class Pass { kLoad, kCombine, kCombine4, kAccumulate, kAccumulate4 };

uint32_t RanksOf(Pass pass) {
  switch (pass) {
    case Pass::kLoad:
    case Pass::kAccumulate:
      return 1;
    case Pass::kCombine:
      return 2;
    default:
      return 4;
  }
}

void RunPass(const ReduceKernel& k, Pass pass, void* acc, const uint8_t* const* in, uint64_t n) {
  switch (pass) {
    case Pass::kLoad:
      return k.load(acc, in[0], n);
    case Pass::kCombine:
      return k.combine(acc, in[0], in[1], n);
    case Pass::kCombine4:
      return k.combine4(acc, in[0], in[1], in[2], in[3], n);
    case Pass::kAccumulate:
      return k.accumulate(acc, in[0], n);
    case Pass::kAccumulate4:
      return k.accumulate4(acc, in[0], in[1], in[2], in[3], n);
  }
}

// A pass over the piece's m elements with the inputs of RanksOf(pass) ranks
// from first, at their cursors, which it moves on: in runs that each of
// those inputs holds in one extent, so each input streams the whole piece
// in one go however its extents fall (cutting the piece for every rank's
// extents would shorten the runs of all 2p streams to the shortest one's).
void ReducePass(const Job& job, Pass pass, uint32_t first, uint64_t m, uint8_t* acc) {
  Scratch& s = t_scratch;
  const uint64_t es = job.esize, as = job.kernel->acc_size;
  const uint32_t ranks = RanksOf(pass);
  const uint8_t* in[4];
  for (uint64_t done = 0, run = 0; done < m; done += run) {
    run = m - done;
    for (uint32_t i = 0; i < ranks; ++i) run = std::min(run, s.in_at[first + i].run() / es);
    if (run == 0) {
      // An element split across extents: each rank's copy gathered.
      run = 1;
      uint8_t* gathered = Ensure(s.in, ranks * es);
      for (uint32_t i = 0; i < ranks; ++i) {
        ReadAt(s.in_at[first + i], gathered + i * es, es);
        in[i] = gathered + i * es;
      }
    } else {
      for (uint32_t i = 0; i < ranks; ++i) in[i] = s.in_at[first + i].data();
    }
    RunPass(*job.kernel, pass, acc + done * as, in, run);
    for (uint32_t i = 0; i < ranks; ++i) s.in_at[first + i].Skip(run * es);
  }
}

// acc = reduction over ranks, in rank order, of the m elements at the input
// cursors. Up to four ranks per pass over the accumulator: each pass costs a
// read and a write of it, as much cache traffic as a rank's input.
void ReducePiece(const Job& job, uint64_t m, uint8_t* acc) {
  const uint32_t p = job.nranks;
  uint32_t r = 0;
  if (p == 1) {
    ReducePass(job, Pass::kLoad, 0, m, acc);
    return;
  }
  if (p >= 4) {
    ReducePass(job, Pass::kCombine4, 0, m, acc);
    r = 4;
  } else {
    ReducePass(job, Pass::kCombine, 0, m, acc);
    r = 2;
  }
  for (; r + 4 <= p; r += 4) ReducePass(job, Pass::kAccumulate4, r, m, acc);
  for (; r < p; ++r) ReducePass(job, Pass::kAccumulate, r, m, acc);
}

// Writes the piece's m finished elements to every output at its cursor,
// extent run by extent run, and moves the cursors on. Streamed when the job
// streams: finished once into cache (unless the accumulator already holds the
// output bytes), then copied to every output. Otherwise finished straight
// into each output.
void StorePiece(const Job& job, uint64_t m, const uint8_t* acc) {
  Scratch& s = t_scratch;
  const ReduceKernel& k = *job.kernel;
  const uint64_t es = job.esize, as = k.acc_size;
  const bool direct = !k.store_copies && !job.stream_stores;
  const uint8_t* finished = acc;
  if (!k.store_copies && !direct) {
    uint8_t* converted = Ensure(s.out, m * es);
    k.store(converted, acc, m, job.nranks);
    finished = converted;
  }
  for (SpanCursor& at : s.out_at) {
    for (uint64_t done = 0, run = 0; done < m; done += run) {
      run = std::min(m - done, at.run() / es);
      if (run == 0) {
        // An element split across extents: finished, then written in parts.
        run = 1;
        const uint8_t* element = finished + done * es;
        if (direct) {
          uint8_t* one = Ensure(s.tmp, es);
          k.store(one, acc + done * as, 1, job.nranks);
          element = one;
        }
        WriteAt(at, element, es, job.stream_stores);
      } else if (direct) {
        k.store(at.data(), acc + done * as, run, job.nranks);
      } else if (job.stream_stores) {
        StreamCopy(at.data(), finished + done * es, run * es);
      } else {
        std::memcpy(at.data(), finished + done * es, run * es);
      }
      at.Skip(run * es);
    }
  }
}

// The most memory streams (inputs and outputs) that reduce_into walks at
// once while its outputs stay in the caches. Over more, the pieces of
// AccPieceBytes do better: with collectives_bench (AMD EPYC), cached 1 MiB
// all-reduces took 15-30% less time in one pass over 2 and 4 ranks and
// 15-20% more over 8 ranks, whose 16 streams at the same offsets in their
// pages contend for the same cache sets. Streamed outputs skip the caches,
// and one pass won at every rank count measured: 16 and 64 MiB over 2, 4,
// 8 and 16 ranks took 28-45% less time (12-35% at 2 ranks and 16 MiB).
constexpr uint32_t kReduceIntoMaxCachedStreams = 8;

// Elements at the cursors that reduce_into can take in one call: as many as
// every input and output holds in its current extent, whole 64-byte lines
// of them when the outputs are streamed (each output then aligned for the
// stores); 0 for none, and the piece passes take over.
uint64_t ReduceIntoElems(const Job& job, uint64_t left) {
  const Scratch& s = t_scratch;
  if (!job.stream_stores && s.in_at.size() + s.out_at.size() > kReduceIntoMaxCachedStreams) {
    return 0;
  }
  const uint64_t es = job.esize;
  uint64_t m = left;
  for (const SpanCursor& at : s.in_at) m = std::min(m, at.run() / es);
  for (const SpanCursor& at : s.out_at) {
    m = std::min(m, at.run() / es);
    if (job.stream_stores && reinterpret_cast<uintptr_t>(at.data()) % kReduceIntoStreamAlign != 0) {
      return 0;
    }
  }
  // Cut short by an extent, the run keeps whole lines: the rest goes with
  // the next extent's first elements through the piece passes, which stream
  // them too (a line written partly by plain stores and partly by streamed
  // ones costs the memory a read).
  if (job.stream_stores && m != left) m = m * es / 64 * 64 / es;
  return m;
}

// reduce_into over the m elements at the cursors, which it moves on.
void ReduceInto(const Job& job, uint64_t m) {
  Scratch& s = t_scratch;
  s.in_ptr.clear();
  s.out_ptr.clear();
  for (const SpanCursor& at : s.in_at) s.in_ptr.push_back(at.data());
  for (const SpanCursor& at : s.out_at) s.out_ptr.push_back(at.data());
  job.kernel->reduce_into(s.out_ptr.data(), static_cast<uint32_t>(s.out_ptr.size()),
                          s.in_ptr.data(), static_cast<uint32_t>(s.in_ptr.size()), m, job.nranks,
                          job.stream_stores);
  for (SpanCursor& at : s.in_at) at.Skip(m * job.esize);
  for (SpanCursor& at : s.out_at) at.Skip(m * job.esize);
}

// One block of a reduction: n elements from byte offset off of the output
// (of the input, for reduce-scatter, shifted to the unit's range), reduced
// from the inputs straight into the outputs where reduce_into can take them,
// else piece by piece in the accumulator and written from there.
void RunReduceBlock(const Job& job, uint64_t unit, uint64_t off, uint64_t n) {
  const uint64_t es = job.esize;
  // Reduce-scatter: unit is the rank that receives this range.
  const uint64_t in_off = job.op == Op::kReduceScatter ? unit * job.count * es + off : off;
  StartCursors(job, OutputsOf(job, unit), in_off, off);
  const uint64_t piece = std::max<uint64_t>(1, AccPieceBytes(job.nranks) / job.kernel->acc_size);
  // A piece stretched to a line takes fewer than 64 more elements.
  uint8_t* acc = Ensure(t_scratch.acc, std::min(n, piece + 63) * job.kernel->acc_size);
  for (uint64_t done = 0, m = 0; done < n; done += m) {
    m = ReduceIntoElems(job, n - done);
    if (m != 0) {
      ReduceInto(job, m);
      continue;
    }
    m = PieceElems(job, piece, n - done);
    ReducePiece(job, m, acc);
    StorePiece(job, m, acc);
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
