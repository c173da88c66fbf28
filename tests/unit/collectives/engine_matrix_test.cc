// Every operation x every dtype x every redop x 1..8 ranks x sizes from 0 to
// several blocks, out of place and in place, on buffers made of unaligned
// extents, against the scalar reference: bytes must be identical, and no
// byte outside the buffers may change.
#include <algorithm>
#include <map>
#include <tuple>

#include "harness.h"
#include "protocol/harmonaize.h"

namespace hz::coll::testing {
namespace {

IoVec SubIoVec(const IoVec& v, size_t off, size_t len) {
  IoVec out;
  for (const IoSpan& s : v) {
    if (len == 0) break;
    if (off >= s.len) {
      off -= s.len;
      continue;
    }
    size_t n = std::min(len, s.len - off);
    out.push_back(IoSpan{s.data + off, n});
    len -= n;
    off = 0;
  }
  return out;
}

struct Case {
  Op op;
  uint8_t dtype;
  uint8_t redop;
  uint32_t nranks;
  uint64_t count;
  bool in_place;
  uint32_t seed;
};

// Communicators per rank count, reused across cases with increasing seq.
class Fixture {
 public:
  explicit Fixture(EngineOptions o) : engine_(o) {}
  Engine& engine() { return engine_; }
  std::vector<std::shared_ptr<Member>>& Comm(uint32_t p) {
    auto& c = comms_[p];
    if (c.empty()) c = MakeComm(engine_, Tenant(7), p);
    return c;
  }
  uint64_t NextSeq(uint32_t p) { return seq_[p]++; }
  ~Fixture() {
    for (auto& [p, c] : comms_) {
      for (auto& m : c) engine_.Destroy(m);
    }
  }

 private:
  Engine engine_;
  std::map<uint32_t, std::vector<std::shared_ptr<Member>>> comms_;
  std::map<uint32_t, uint64_t> seq_;
};

std::string Describe(const Case& c) {
  return std::string(OpName(c.op)) + " dtype " + std::to_string(c.dtype) + " redop " +
         std::to_string(c.redop) + " ranks " + std::to_string(c.nranks) + " count " +
         std::to_string(c.count) + (c.in_place ? " in-place" : "");
}

// One case, ready to post: its buffers, descriptors and inputs.
struct Prepared {
  Case c;
  uint32_t root = 0;
  std::vector<std::vector<uint8_t>> inputs;  // rank r's logical send contents
  std::vector<std::vector<uint8_t>> recv_before;
  std::vector<std::unique_ptr<Buffer>> sends, recvs;
  std::vector<OpDesc> descs;
  std::vector<Waiter> waiters;
};

std::unique_ptr<Prepared> Prepare(Fixture& fx, const Case& c) {
  auto pr = std::make_unique<Prepared>();
  pr->c = c;
  const uint32_t p = c.nranks;
  const size_t es = hz_dtype_size(c.dtype);
  const size_t b = c.count * es;
  const uint32_t root = p > 1 ? (c.seed % p) : 0;
  std::mt19937 rng(c.seed);
  auto layout = [&](uint32_t r) { return static_cast<Layout>((c.seed + r) % 3); };

  size_t send_len = b, recv_len = b;
  if (c.op == Op::kAllGather) recv_len = p * b;
  if (c.op == Op::kReduceScatter) send_len = p * b;
  if (c.op == Op::kAllToAll) send_len = recv_len = p * b;

  auto& inputs = pr->inputs;
  inputs.resize(p);
  for (uint32_t r = 0; r < p; ++r)
    inputs[r] = RandomElements(c.dtype, send_len / std::max<size_t>(es, 1), rng);

  auto& sends = pr->sends;
  auto& recvs = pr->recvs;
  auto& recv_before = pr->recv_before;
  auto& descs = pr->descs;
  sends.resize(p);
  recvs.resize(p);
  recv_before.resize(p);
  descs.resize(p);
  pr->waiters.resize(p);
  pr->root = root;
  const uint64_t seq = fx.NextSeq(p);
  for (uint32_t r = 0; r < p; ++r) {
    OpDesc& d = descs[r];
    d.op = c.op;
    d.count = c.count;
    d.dtype = c.dtype;
    d.redop = c.redop;
    d.peer = root;
    recvs[r] = std::make_unique<Buffer>(recv_len, layout(r), c.seed * 31 + r);
    recv_before[r] = RandomElements(1, recv_len, rng);  // garbage to be overwritten
    recvs[r]->Set(recv_before[r]);
    const bool shares =
        c.in_place && (c.op != Op::kBroadcast || r == root) && (c.op != Op::kReduce || r == root);
    if (!shares) {
      sends[r] = std::make_unique<Buffer>(send_len, layout(r + 1), c.seed * 17 + r);
      sends[r]->Set(inputs[r]);
      d.send = sends[r]->iov();
      d.recv = recvs[r]->iov();
      continue;
    }
    // In place, with NCCL's layouts.
    switch (c.op) {
      case Op::kAllGather: {
        std::vector<uint8_t> init = recv_before[r];
        std::copy(inputs[r].begin(), inputs[r].end(), init.begin() + r * b);
        recvs[r]->Set(init);
        recv_before[r] = init;
        d.recv = recvs[r]->iov();
        d.send = SubIoVec(d.recv, r * b, b);
        break;
      }
      case Op::kReduceScatter: {
        // The send buffer is the big one; recv is rank r's slice of it.
        recvs[r] = std::make_unique<Buffer>(send_len, layout(r), c.seed * 31 + r);
        recvs[r]->Set(inputs[r]);
        d.send = recvs[r]->iov();
        d.recv = SubIoVec(d.send, r * b, b);
        break;
      }
      default:
        recvs[r]->Set(inputs[r]);
        d.send = d.recv = recvs[r]->iov();
    }
  }
  for (OpDesc& d : descs) d.seq = seq;
  return pr;
}

void Verify(Prepared& pr) {
  const Case& c = pr.c;
  SCOPED_TRACE(Describe(c));
  const uint32_t p = c.nranks;
  const size_t b = c.count * hz_dtype_size(c.dtype);
  const uint32_t root = pr.root;
  auto& inputs = pr.inputs;
  auto& sends = pr.sends;
  auto& recvs = pr.recvs;
  auto& recv_before = pr.recv_before;
  for (uint32_t r = 0; r < p; ++r)
    ASSERT_EQ(pr.waiters[r].Wait().code(), StatusCode::kOk) << "rank " << r;

  auto slice = [&](const std::vector<uint8_t>& v, size_t off) {
    return std::vector<uint8_t>(v.begin() + off, v.begin() + off + b);
  };
  for (uint32_t r = 0; r < p; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(recvs[r]->GuardsIntact());
    if (sends[r]) {
      ASSERT_TRUE(sends[r]->GuardsIntact());
      ASSERT_EQ(sends[r]->Get(), inputs[r]) << "input changed";
    }
    std::vector<uint8_t> got = recvs[r]->Get();
    std::vector<uint8_t> want;
    std::vector<const uint8_t*> ptrs;
    switch (c.op) {
      case Op::kAllReduce:
      case Op::kReduce:
        for (auto& in : inputs) ptrs.push_back(in.data());
        want = ReferenceReduce(c.dtype, c.redop, ptrs, c.count);
        if (c.op == Op::kReduce && r != root) want = recv_before[r];
        break;
      case Op::kBroadcast:
        want = inputs[root];
        break;
      case Op::kAllGather:
        for (auto& in : inputs) want.insert(want.end(), in.begin(), in.end());
        break;
      case Op::kReduceScatter: {
        for (auto& in : inputs) ptrs.push_back(in.data() + r * b);
        want = ReferenceReduce(c.dtype, c.redop, ptrs, c.count);
        if (c.in_place) {
          // The rest of rank r's big buffer is its untouched input.
          std::vector<uint8_t> whole = inputs[r];
          std::copy(want.begin(), want.end(), whole.begin() + r * b);
          want = whole;
        }
        break;
      }
      case Op::kAllToAll:
        for (uint32_t j = 0; j < p; ++j) {
          auto part = slice(inputs[j], r * b);
          want.insert(want.end(), part.begin(), part.end());
        }
        break;
      default:
        break;
    }
    ASSERT_EQ(got.size(), want.size());
    ASSERT_TRUE(got == want) << "result differs from the reference";
  }
}

class CollectivesMatrix : public ::testing::TestWithParam<std::tuple<Op, uint8_t>> {};

TEST_P(CollectivesMatrix, MatchesReference) {
  auto [op, dtype] = GetParam();
  // Default planning (inline for small, blocked above) ...
  Fixture plain(EngineOptions{});
  // ... and forced worker execution in tiny blocks, so that a few KB span
  // many blocks, spread over three workers, with streaming stores.
  EngineOptions small;
  small.worker_threads = 3;
  small.inline_max_bytes = 0;
  small.block_bytes = 1024;
  small.stream_min_bytes = 1;  // non-temporal stores on every op
  Fixture blocked(small);

  const std::vector<uint64_t> counts = {0, 1, 7, 1001, 3001};
  const uint8_t nredops = hz_op_reduces(OpcodeOf(op)) ? kRedOpCount : 1;
  uint32_t seed = 1;
  for (uint32_t p = 1; p <= 8; ++p) {
    // All cases of one rank count are posted back to back (in seq order,
    // every rank of a seq before the next seq) and checked afterwards, so
    // the workers run them without a round trip to this thread each.
    std::vector<std::unique_ptr<Prepared>> batch;
    for (uint8_t redop = 0; redop < nredops; ++redop) {
      for (uint64_t count : counts) {
        // The largest size only for a few rank counts, to keep the matrix fast.
        if (count == 3001 && p != 3 && p != 8) continue;
        Case c{op, dtype, redop, p, count, false, seed++};
        batch.push_back(Prepare(plain, c));
        c.in_place = true;
        c.seed = seed++;
        batch.push_back(Prepare(blocked, c));
      }
    }
    for (auto& pr : batch) {
      Fixture& fx = pr->c.in_place ? blocked : plain;
      for (uint32_t i = 0; i < p; ++i) {
        uint32_t r = pr->c.seed % 2 ? i : p - 1 - i;  // both posting orders
        fx.engine().Post(fx.Comm(p)[r], pr->descs[r], pr->waiters[r].Callback());
      }
    }
    for (auto& pr : batch) {
      Verify(*pr);
      if (::testing::Test::HasFatalFailure()) break;
    }
    // Nothing may still write into the buffers when they are freed.
    for (auto& pr : batch) {
      for (auto& w : pr->waiters) w.Wait();
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Reductions whose blocks hold many accumulator pieces, with streamed
// outputs: pieces stretched to an output's cache line and passes that read
// each input across its extents, on layouts whose extents split elements.
TEST(CollectivesPieces, ManyPiecesPerBlockMatchReference) {
  EngineOptions o;
  o.worker_threads = 2;
  o.inline_max_bytes = 0;
  o.block_bytes = 256 * 1024;
  o.stream_min_bytes = 1;
  Fixture fx(o);
  uint32_t seed = 1;
  for (uint32_t p : {2u, 3u, 5u, 8u}) {
    std::vector<std::unique_ptr<Prepared>> batch;
    for (Op op : {Op::kAllReduce, Op::kReduce, Op::kReduceScatter}) {
      // fp32 sums finish in the accumulator; bf16 and averages convert it.
      const std::pair<uint8_t, uint8_t> kinds[] = {
          {HZ_FP32, HZ_SUM}, {HZ_BF16, HZ_SUM}, {HZ_FP64, HZ_AVG}};
      for (auto [dtype, redop] : kinds) {
        for (bool in_place : {false, true}) {
          batch.push_back(Prepare(fx, Case{op, dtype, redop, p, 40001, in_place, seed++}));
        }
      }
    }
    for (auto& pr : batch) {
      for (uint32_t r = 0; r < p; ++r) {
        fx.engine().Post(fx.Comm(p)[r], pr->descs[r], pr->waiters[r].Callback());
      }
    }
    for (auto& pr : batch) Verify(*pr);
    for (auto& pr : batch) {
      for (auto& w : pr->waiters) w.Wait();
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<Op, uint8_t>>& info) {
  static const char* kTypes[] = {"int8",   "uint8", "int32", "uint32", "int64",
                                 "uint64", "fp16",  "fp32",  "fp64",   "bf16"};
  return std::string(OpName(std::get<0>(info.param))) + "_" + kTypes[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(All, CollectivesMatrix,
                         ::testing::Combine(::testing::Values(Op::kAllReduce, Op::kBroadcast,
                                                              Op::kReduce, Op::kAllGather,
                                                              Op::kReduceScatter, Op::kAllToAll),
                                            ::testing::Range<uint8_t>(0, kDTypeCount)),
                         ParamName);

}  // namespace
}  // namespace hz::coll::testing
