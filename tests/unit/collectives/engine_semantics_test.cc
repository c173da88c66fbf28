// Communicator lifecycle and failure semantics: tenant scoping, init errors,
// seq matching and mismatch, descriptor validation, timeouts, rank death,
// abort, shutdown, point-to-point pairing and operator views.
#include <atomic>
#include <chrono>
#include <limits>

#include "harness.h"
#include "protocol/harmonaize.h"

namespace hz::coll::testing {
namespace {

OpDesc Barrier(uint64_t seq) {
  OpDesc d;
  d.op = Op::kBarrier;
  d.seq = seq;
  return d;
}

TEST(CollectivesTypes, WireValuesMapToEngineValues) {
  Op op;
  ASSERT_TRUE(OpFromOpcode(0x0300, &op));
  EXPECT_EQ(op, Op::kAllReduce);
  ASSERT_TRUE(OpFromOpcode(0x0304, &op));
  EXPECT_EQ(op, Op::kReduceScatter);
  ASSERT_TRUE(OpFromOpcode(0x0308, &op));
  EXPECT_EQ(op, Op::kBarrier);
  EXPECT_FALSE(OpFromOpcode(0x0309, &op));
  EXPECT_FALSE(OpFromOpcode(0x0201, &op));
  for (size_t i = 0; i < kOpCount; ++i) {
    ASSERT_TRUE(OpFromOpcode(OpcodeOf(static_cast<Op>(i)), &op));
    EXPECT_EQ(op, static_cast<Op>(i));
  }
  // The engine's dtype values index the one size table, protocol/harmonaize.h's.
  EXPECT_EQ(hz_dtype_size(static_cast<uint8_t>(DType::kBf16)), 2u);
  EXPECT_EQ(hz_dtype_size(kDTypeCount), 0u);
  EXPECT_STREQ(StatusCodeName(StatusCode::kMismatch), "mismatch");
}

TEST(CollectivesTypes, AUidIsWrittenAndReadAsHex) {
  Uid uid;
  for (size_t i = 0; i < uid.bytes.size(); ++i) uid.bytes[i] = static_cast<uint8_t>(i * 37 + 5);
  const std::string hex = UidHex(uid);
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 4), "052a");
  Uid back;
  ASSERT_TRUE(ParseUidHex(hex, &back));
  EXPECT_EQ(back, uid);
  std::string upper = hex;
  upper[1] = 'A';
  for (const std::string& bad : {hex.substr(1), hex + "0", upper, std::string(64, 'g')}) {
    EXPECT_FALSE(ParseUidHex(bad, &back)) << bad;
  }
}

TEST(CollectivesInit, AnotherTenantsUidIsPermission) {
  Engine e;
  Uid uid;
  ASSERT_EQ(e.NewUid(Tenant(1), &uid).code(), StatusCode::kOk);
  auto f = InitAsync(e, Tenant(2), uid, 1, 0);
  InitResult r = Get(f);
  EXPECT_EQ(r.status.code(), StatusCode::kPermission);
  EXPECT_EQ(r.member, nullptr);
  // The owner can still use it.
  auto g = InitAsync(e, Tenant(1), uid, 1, 0);
  EXPECT_EQ(Get(g).status.code(), StatusCode::kOk);
}

TEST(CollectivesInit, UnknownUidIsNotFound) {
  Engine e;
  Uid uid;
  uid.bytes.fill(0x42);
  auto f = InitAsync(e, Tenant(1), uid, 2, 0);
  EXPECT_EQ(Get(f).status.code(), StatusCode::kNotFound);
}

TEST(CollectivesInit, UidsAreRandomAndLimitedPerTenant) {
  EngineOptions o;
  o.max_uids_per_tenant = 2;
  Engine e(o);
  Uid a, b, c;
  ASSERT_EQ(e.NewUid(Tenant(1), &a).code(), StatusCode::kOk);
  ASSERT_EQ(e.NewUid(Tenant(1), &b).code(), StatusCode::kOk);
  EXPECT_NE(a, b);
  EXPECT_EQ(e.NewUid(Tenant(1), &c).code(), StatusCode::kLimit);
  EXPECT_EQ(e.NewUid(Tenant(2), &c).code(), StatusCode::kOk);  // other tenants are not affected
  EXPECT_EQ(e.NewUid(Tenant(1), nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(CollectivesInit, ReleasingUnusedUidsFreesTheTenantsQuota) {
  EngineOptions o;
  o.max_uids_per_tenant = 2;
  Engine e(o);
  Uid used, fresh, other;
  ASSERT_EQ(e.NewUid(Tenant(1), &used).code(), StatusCode::kOk);
  ASSERT_EQ(e.NewUid(Tenant(1), &fresh).code(), StatusCode::kOk);
  ASSERT_EQ(e.NewUid(Tenant(2), &other).code(), StatusCode::kOk);
  auto r0 = InitAsync(e, Tenant(1), used, 2, 0);  // communicator joining: in use
  EXPECT_EQ(e.ReleaseUnusedUids(Tenant(1)), 1u);
  auto gone = InitAsync(e, Tenant(1), fresh, 1, 0);
  EXPECT_EQ(Get(gone).status.code(), StatusCode::kNotFound);
  Uid again;
  EXPECT_EQ(e.NewUid(Tenant(1), &again).code(), StatusCode::kOk);  // quota freed
  auto r1 = InitAsync(e, Tenant(1), used, 2, 1);
  EXPECT_EQ(Get(r0).status.code(), StatusCode::kOk);
  EXPECT_EQ(Get(r1).status.code(), StatusCode::kOk);
  auto still = InitAsync(e, Tenant(2), other, 1, 0);  // other tenants untouched
  EXPECT_EQ(Get(still).status.code(), StatusCode::kOk);
}

// A tenant that asked for uids and never used them is not locked out until
// the service restarts: an unused uid older than the lifetime makes room.
TEST(CollectivesInit, UnusedUidsExpireSoTheTenantIsNotLockedOut) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int64_t> elapsed_ms{0};
  EngineOptions o;
  o.max_uids_per_tenant = 2;
  o.unused_uid_lifetime_ms = 1000;
  o.clock = [&] { return start + std::chrono::milliseconds(elapsed_ms.load()); };
  Engine e(o);
  Uid used, idle, other, fresh;
  ASSERT_EQ(e.NewUid(Tenant(1), &used).code(), StatusCode::kOk);
  ASSERT_EQ(e.NewUid(Tenant(2), &other).code(), StatusCode::kOk);
  auto r0 = InitAsync(e, Tenant(1), used, 2, 0);  // joining: in use, never expires
  elapsed_ms = 500;
  ASSERT_EQ(e.NewUid(Tenant(1), &idle).code(), StatusCode::kOk);
  EXPECT_EQ(e.NewUid(Tenant(1), &fresh).code(), StatusCode::kLimit);
  elapsed_ms = 1200;  // `used` is old but in use; `idle` is not old enough
  EXPECT_EQ(e.NewUid(Tenant(1), &fresh).code(), StatusCode::kLimit);
  elapsed_ms = 1500;
  EXPECT_EQ(e.NewUid(Tenant(1), &fresh).code(), StatusCode::kOk) << "the unused uid did not expire";
  auto gone = InitAsync(e, Tenant(1), idle, 1, 0);
  EXPECT_EQ(Get(gone).status.code(), StatusCode::kNotFound);
  auto r1 = InitAsync(e, Tenant(1), used, 2, 1);
  EXPECT_EQ(Get(r0).status.code(), StatusCode::kOk);
  EXPECT_EQ(Get(r1).status.code(), StatusCode::kOk);
  // Another tenant's old unused uid is its own business until it asks.
  auto still = InitAsync(e, Tenant(2), other, 1, 0);
  EXPECT_EQ(Get(still).status.code(), StatusCode::kOk);
}

TEST(CollectivesInit, BadArgumentsAreInvalid) {
  EngineOptions o;
  o.max_ranks = 8;
  Engine e(o);
  Uid uid;
  ASSERT_EQ(e.NewUid(Tenant(1), &uid).code(), StatusCode::kOk);
  Constraints bad_prio;
  bad_prio.priority_class = 3;
  std::vector<std::future<InitResult>> fs;
  fs.push_back(InitAsync(e, Tenant(1), uid, 0, 0));            // no ranks
  fs.push_back(InitAsync(e, Tenant(1), uid, 2, 2));            // rank out of range
  fs.push_back(InitAsync(e, Tenant(1), uid, 9, 0));            // above max_ranks
  fs.push_back(InitAsync(e, Tenant(1), uid, 2, 0, bad_prio));  // priority class
  for (auto& f : fs) EXPECT_EQ(Get(f).status.code(), StatusCode::kInvalidArgument);
}

TEST(CollectivesInit, TakenRankAndDifferentRankCount) {
  Engine e;
  Uid uid;
  ASSERT_EQ(e.NewUid(Tenant(1), &uid).code(), StatusCode::kOk);
  auto r0 = InitAsync(e, Tenant(1), uid, 2, 0);
  auto dup = InitAsync(e, Tenant(1), uid, 2, 0);
  EXPECT_EQ(Get(dup).status.code(), StatusCode::kExists);
  auto other = InitAsync(e, Tenant(1), uid, 3, 1);
  EXPECT_EQ(Get(other).status.code(), StatusCode::kMismatch);
  EXPECT_FALSE(r0.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  auto r1 = InitAsync(e, Tenant(1), uid, 2, 1);
  InitResult a = Get(r0), b = Get(r1);
  ASSERT_EQ(a.status.code(), StatusCode::kOk);
  ASSERT_EQ(b.status.code(), StatusCode::kOk);
  EXPECT_EQ(a.member->rank(), 0u);
  EXPECT_EQ(b.member->rank(), 1u);
  EXPECT_EQ(a.member->nranks(), 2u);
  EXPECT_EQ(a.member->comm_id(), b.member->comm_id());
  EXPECT_EQ(a.member->tenant(), Tenant(1));
  // Everyone joined: the rank is taken.
  auto late = InitAsync(e, Tenant(1), uid, 2, 1);
  EXPECT_EQ(Get(late).status.code(), StatusCode::kExists);
}

TEST(CollectivesInit, NotAllRanksJoiningTimesOut) {
  Engine e;
  Uid uid;
  ASSERT_EQ(e.NewUid(Tenant(1), &uid).code(), StatusCode::kOk);
  Constraints c;
  c.timeout_ms = 30;
  auto r0 = InitAsync(e, Tenant(1), uid, 3, 0, c);
  auto r2 = InitAsync(e, Tenant(1), uid, 3, 2, c);
  EXPECT_EQ(Get(r0).status.code(), StatusCode::kTimedOut);
  EXPECT_EQ(Get(r2).status.code(), StatusCode::kTimedOut);
  EXPECT_EQ(e.Stats().timeouts, 1u);
  // The failed communicator is gone with its uid.
  auto late = InitAsync(e, Tenant(1), uid, 3, 1, c);
  EXPECT_EQ(Get(late).status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(e.Communicators().empty());
}

TEST(CollectivesMatch, DisagreeingRanksAllGetMismatchAndTheCommStaysUsable) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 3);
  std::vector<std::vector<float>> s(3, std::vector<float>(8, 1.0f)), r(3, std::vector<float>(8));
  std::vector<OpDesc> d;
  for (int i = 0; i < 3; ++i) d.push_back(AllReduce(0, s[i], r[i]));
  // Each field the ranks must agree on.
  for (int variant = 0; variant < 4; ++variant) {
    std::vector<OpDesc> bad = d;
    for (auto& x : bad) x.seq = static_cast<uint64_t>(variant);
    switch (variant) {
      case 0:
        bad[2].count = 4;
        break;
      case 1:
        bad[1].redop = static_cast<uint8_t>(RedOp::kMax);
        break;
      case 2:
        bad[0].dtype = static_cast<uint8_t>(DType::kInt32);
        break;
      case 3:
        bad[2].op = Op::kBroadcast;
        break;
    }
    for (Status st : RunAll(e, m, bad))
      EXPECT_EQ(st.code(), StatusCode::kMismatch) << "variant " << variant;
  }
  for (auto& x : d) x.seq = 4;
  for (Status st : RunAll(e, m, d)) EXPECT_EQ(st.code(), StatusCode::kOk);
  EXPECT_EQ(r[1][0], 3.0f);
  EXPECT_EQ(e.Stats().mismatches, 4u);
}

TEST(CollectivesMatch, RootsMustAgree) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  std::vector<float> a(4, 1), b(4, 2);
  std::vector<OpDesc> d(2);
  for (uint32_t i = 0; i < 2; ++i) {
    d[i].op = Op::kBroadcast;
    d[i].count = 4;
    d[i].dtype = static_cast<uint8_t>(DType::kFp32);
    d[i].peer = i;  // each names itself as root
    auto* buf = reinterpret_cast<uint8_t*>(i == 0 ? a.data() : b.data());
    d[i].send = d[i].recv = {IoSpan{buf, 16}};
  }
  for (Status st : RunAll(e, m, d)) EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(b[0], 2.0f);
}

TEST(CollectivesMatch, InvalidDescriptorsAreRejectedAndPeersGetMismatch) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  std::vector<float> s0(8, 1), r0(8), s1(8, 1), r1(8);
  uint64_t seq = 0;
  auto check = [&](const char* what, auto mutate) {
    SCOPED_TRACE(what);
    OpDesc good = AllReduce(seq, s1, r1);
    OpDesc bad = AllReduce(seq, s0, r0);
    ++seq;
    mutate(bad);
    Waiter wb;
    e.Post(m[0], bad, wb.Callback());
    EXPECT_EQ(wb.Wait().code(),
              StatusCode::kInvalidArgument);  // answered without waiting for peers
    Waiter wg;
    e.Post(m[1], good, wg.Callback());
    EXPECT_EQ(wg.Wait().code(), StatusCode::kMismatch);
  };
  check("short send", [](OpDesc& d) { d.send[0].len -= 1; });
  check("short recv", [](OpDesc& d) { d.recv[0].len = 4; });
  check("dtype", [](OpDesc& d) { d.dtype = kDTypeCount; });
  check("redop", [](OpDesc& d) { d.redop = kRedOpCount; });
  check("op", [](OpDesc& d) { d.op = static_cast<Op>(42); });
  check("null extent", [](OpDesc& d) { d.send.push_back(IoSpan{nullptr, 4}); });
  check("count overflow", [](OpDesc& d) { d.count = std::numeric_limits<uint64_t>::max() / 2; });
  check("extent total overflow", [](OpDesc& d) {
    d.send.push_back(IoSpan{d.send[0].data, std::numeric_limits<size_t>::max()});
  });
  check("root out of range", [](OpDesc& d) {
    d.op = Op::kReduce;
    d.peer = 2;
  });
  EXPECT_EQ(r0[0], 0.0f);  // nothing was written
  EXPECT_EQ(r1[0], 0.0f);
  EXPECT_GE(e.Stats().invalid, 9u);
}

TEST(CollectivesMatch, AllGatherAndAllToAllLengthsScaleWithRanks) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 1);
  std::vector<uint8_t> a(16), b(16);
  uint64_t seq = 0;
  for (Op op : {Op::kAllGather, Op::kReduceScatter, Op::kAllToAll}) {
    auto run = [&](uint64_t at, uint32_t nranks_worth) {
      OpDesc d;
      d.op = op;
      d.seq = at;
      d.count = 16 / nranks_worth;
      d.dtype = static_cast<uint8_t>(DType::kUint8);
      d.send = {IoSpan{a.data(), 16}};
      d.recv = {IoSpan{b.data(), 16}};
      return RunAll(e, m, {d})[0];
    };
    EXPECT_EQ(run(seq++, 1).code(), StatusCode::kOk) << OpName(op);
  }
  // Two ranks: an all-gather of 16 needs 32 bytes of recv.
  auto m2 = MakeComm(e, Tenant(1), 2);
  OpDesc d;
  d.op = Op::kAllGather;
  d.count = 16;
  d.dtype = static_cast<uint8_t>(DType::kUint8);
  d.send = {IoSpan{a.data(), 16}};
  d.recv = {IoSpan{b.data(), 16}};
  Waiter w;
  e.Post(m2[0], d, w.Callback());
  EXPECT_EQ(w.Wait().code(), StatusCode::kInvalidArgument);
}

TEST(CollectivesMatch, UnusedBuffersMayBeEmpty) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 3);
  std::vector<std::vector<int32_t>> in = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<int32_t> out(2), bc0(2), bc2(2);
  auto span = [](std::vector<int32_t>& v) {
    return IoVec{IoSpan{reinterpret_cast<uint8_t*>(v.data()), v.size() * 4}};
  };
  // Reduce to rank 1: the others have no recv buffer.
  std::vector<OpDesc> d(3);
  for (uint32_t r = 0; r < 3; ++r) {
    d[r].op = Op::kReduce;
    d[r].count = 2;
    d[r].dtype = static_cast<uint8_t>(DType::kInt32);
    d[r].redop = static_cast<uint8_t>(RedOp::kSum);
    d[r].peer = 1;
    d[r].send = span(in[r]);
  }
  d[1].recv = span(out);
  for (Status st : RunAll(e, m, d)) EXPECT_EQ(st.code(), StatusCode::kOk);
  EXPECT_EQ(out, std::vector<int32_t>({111, 222}));
  // Broadcast from rank 1: the others have no send buffer.
  for (uint32_t r = 0; r < 3; ++r) {
    d[r].op = Op::kBroadcast;
    d[r].seq = 1;
    d[r].send.clear();
  }
  d[1].send = d[1].recv = span(out);
  d[0].recv = span(bc0);
  d[2].recv = span(bc2);
  for (Status st : RunAll(e, m, d)) EXPECT_EQ(st.code(), StatusCode::kOk);
  EXPECT_EQ(bc0, out);
  EXPECT_EQ(bc2, out);
}

TEST(CollectivesMatch, SeqReuseStaleAndTooFarAhead) {
  EngineOptions o;
  o.max_seq_window = 4;
  Engine e(o);
  auto m = MakeComm(e, Tenant(1), 2);
  Waiter first;
  e.Post(m[0], Barrier(0), first.Callback());
  Waiter dup;
  e.Post(m[0], Barrier(0), dup.Callback());
  EXPECT_EQ(dup.Wait().code(), StatusCode::kInvalidArgument);
  Waiter far;
  e.Post(m[0], Barrier(4), far.Callback());
  EXPECT_EQ(far.Wait().code(), StatusCode::kLimit);
  EXPECT_FALSE(first.Ready());
  Waiter second;
  e.Post(m[1], Barrier(0), second.Callback());
  EXPECT_EQ(first.Wait().code(), StatusCode::kOk);
  EXPECT_EQ(second.Wait().code(), StatusCode::kOk);
  Waiter stale;
  e.Post(m[1], Barrier(0), stale.Callback());
  EXPECT_EQ(stale.Wait().code(), StatusCode::kInvalidArgument);
}

TEST(CollectivesMatch, OutOfOrderPostsExecuteInSeqOrder) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  // seq 0 sums into x; seq 1 broadcasts x from rank 0 into y. Rank 1 posts
  // seq 1 first; seq 1 must still see seq 0's result.
  std::vector<float> in0(64, 1), in1(64, 2), x0(64), x1(64), y1(64);
  OpDesc a0 = AllReduce(0, in0, x0), a1 = AllReduce(0, in1, x1);
  OpDesc b0, b1;
  b0.op = b1.op = Op::kBroadcast;
  b0.seq = b1.seq = 1;
  b0.count = b1.count = 64;
  b0.dtype = b1.dtype = static_cast<uint8_t>(DType::kFp32);
  b0.send = b0.recv = a0.recv;  // root broadcasts its x in place
  b1.recv = {IoSpan{reinterpret_cast<uint8_t*>(y1.data()), 256}};
  Waiter wb1, wa1, wa0, wb0;
  e.Post(m[1], b1, wb1.Callback());
  e.Post(m[1], a1, wa1.Callback());
  e.Post(m[0], b0, wb0.Callback());
  EXPECT_FALSE(wb0.Ready());
  e.Post(m[0], a0, wa0.Callback());
  for (Waiter* w : {&wa0, &wa1, &wb0, &wb1}) EXPECT_EQ(w->Wait().code(), StatusCode::kOk);
  EXPECT_EQ(y1[63], 3.0f);
}

TEST(CollectivesMatch, BarrierWaitsForEveryRank) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 4);
  std::vector<Waiter> w(4);
  for (int r = 0; r < 3; ++r) e.Post(m[r], Barrier(0), w[r].Callback());
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(w[r].Ready());
  e.Post(m[3], Barrier(0), w[3].Callback());
  for (auto& x : w) EXPECT_EQ(x.Wait().code(), StatusCode::kOk);
}

TEST(CollectivesFailure, RankMissingPastTheTimeoutAbortsEveryone) {
  Engine e;
  Constraints c;
  c.timeout_ms = 30;
  auto m = MakeComm(e, Tenant(1), 3, c);
  Waiter w0, w1;
  e.Post(m[0], Barrier(0), w0.Callback());
  e.Post(m[1], Barrier(0), w1.Callback());
  EXPECT_EQ(w0.Wait().code(), StatusCode::kTimedOut);
  EXPECT_EQ(w1.Wait().code(), StatusCode::kTimedOut);
  Waiter late;
  e.Post(m[2], Barrier(0), late.Callback());
  EXPECT_EQ(late.Wait().code(), StatusCode::kAborted);
  auto infos = e.Communicators();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].state, CommState::kAborted);
  EXPECT_EQ(infos[0].abort_reason.code(), StatusCode::kTimedOut);
  EXPECT_EQ(infos[0].abort_cause, AbortCause::kTimedOut);
  EXPECT_EQ(e.AbortCauseOf(m[2]), AbortCause::kTimedOut);  // what the late rank is told
  EXPECT_EQ(e.Stats().timeouts, 1u);
}

TEST(CollectivesFailure, DestroyedRankAbortsWaitingPeers) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 3);
  Waiter w0, w1;
  e.Post(m[0], Barrier(0), w0.Callback());
  e.Post(m[1], Barrier(0), w1.Callback());
  EXPECT_EQ(e.AbortCauseOf(m[0]), AbortCause::kNone);
  e.Destroy(m[2], AbortCause::kDestroyed);
  EXPECT_EQ(w0.Wait().code(), StatusCode::kAborted);
  EXPECT_EQ(w1.Wait().code(), StatusCode::kAborted);
  EXPECT_EQ(e.AbortCauseOf(m[0]), AbortCause::kDestroyed);
  Waiter after;
  e.Post(m[0], Barrier(1), after.Callback());
  EXPECT_EQ(after.Wait().code(), StatusCode::kAborted);
  e.Destroy(m[2]);  // idempotent
  e.Destroy(m[0]);  // a later session end does not rewrite the cause
  EXPECT_EQ(e.AbortCauseOf(m[1]), AbortCause::kDestroyed);
  EXPECT_EQ(e.Communicators().size(), 1u);
  e.Destroy(m[1]);
  EXPECT_TRUE(e.Communicators().empty());  // last member gone
  EXPECT_EQ(e.Stats().communicators, 0u);
}

TEST(CollectivesFailure, AbortFailsPendingAndFutureOpsOnEveryRank) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  Waiter w0, s0;
  e.Post(m[0], Barrier(0), w0.Callback());
  std::vector<uint8_t> buf(4);
  OpDesc send;
  send.op = Op::kSend;
  send.peer = 1;
  send.count = 4;
  send.dtype = static_cast<uint8_t>(DType::kUint8);
  send.send = {IoSpan{buf.data(), 4}};
  e.Post(m[0], send, s0.Callback());
  e.Abort(m[1]);
  EXPECT_EQ(w0.Wait().code(), StatusCode::kAborted);
  EXPECT_EQ(s0.Wait().code(), StatusCode::kAborted);
  EXPECT_EQ(e.AbortCauseOf(m[0]), AbortCause::kAbortCalled);
  Waiter w1;
  e.Post(m[1], Barrier(0), w1.Callback());
  EXPECT_EQ(w1.Wait().code(), StatusCode::kAborted);
  EXPECT_EQ(e.Stats().aborts, 1u);
}

TEST(CollectivesFailure, DestroyStopsRunningWorkBeforeReturning) {
  EngineOptions o;
  o.worker_threads = 2;
  o.block_bytes = 4096;
  Engine e(o);
  auto m = MakeComm(e, Tenant(1), 2);
  // Big enough for many blocks; the buffers are freed right after Destroy,
  // so any later access would be a use-after-free (ASan build).
  auto s0 = std::make_unique<std::vector<float>>(1 << 20, 1.0f);
  auto s1 = std::make_unique<std::vector<float>>(1 << 20, 2.0f);
  auto r0 = std::make_unique<std::vector<float>>(1 << 20);
  auto r1 = std::make_unique<std::vector<float>>(1 << 20);
  Waiter w0, w1;
  e.Post(m[0], AllReduce(0, *s0, *r0), w0.Callback());
  e.Post(m[1], AllReduce(0, *s1, *r1), w1.Callback());
  e.Destroy(m[0]);  // the default cause: the rank's session ended
  EXPECT_EQ(e.AbortCauseOf(m[1]), AbortCause::kSessionEnded);
  e.Destroy(m[1]);
  s0.reset();
  s1.reset();
  r0.reset();
  r1.reset();
  Status a = w0.Wait(), b = w1.Wait();
  EXPECT_EQ(a.code(), b.code());  // one outcome for the whole collective
  EXPECT_TRUE(a.ok() || a.code() == StatusCode::kAborted) << a;
}

TEST(CollectivesFailure, ShutdownFailsPendingAndLaterCalls) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  Uid spare;
  ASSERT_EQ(e.NewUid(Tenant(1), &spare).code(), StatusCode::kOk);
  Waiter w;
  e.Post(m[0], Barrier(0), w.Callback());
  e.Shutdown();
  EXPECT_EQ(w.Wait().code(), StatusCode::kShutdown);
  Waiter later;
  e.Post(m[1], Barrier(0), later.Callback());
  EXPECT_EQ(later.Wait().code(), StatusCode::kShutdown);
  auto f = InitAsync(e, Tenant(1), spare, 1, 0);
  EXPECT_EQ(Get(f).status.code(), StatusCode::kShutdown);
  Uid u;
  EXPECT_EQ(e.NewUid(Tenant(1), &u).code(), StatusCode::kShutdown);
}

TEST(CollectivesFailure, EngineDestructorCompletesPendingOps) {
  Waiter w;
  {
    Engine e;
    auto m = MakeComm(e, Tenant(1), 2);
    e.Post(m[0], Barrier(0), w.Callback());
  }
  EXPECT_EQ(w.Wait().code(), StatusCode::kShutdown);
}

OpDesc P2P(Op op, uint32_t peer, std::vector<uint8_t>& buf, uint64_t count) {
  OpDesc d;
  d.op = op;
  d.peer = peer;
  d.count = count;
  d.dtype = static_cast<uint8_t>(DType::kUint8);
  IoVec v = {IoSpan{buf.data(), buf.size()}};
  (op == Op::kSend ? d.send : d.recv) = v;
  return d;
}

TEST(CollectivesP2P, SendsPairWithRecvsInPostOrder) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 3);
  std::vector<uint8_t> a(100, 1), b(100, 2), x(100), y(100);
  Waiter sa, sb, rx, ry;
  e.Post(m[0], P2P(Op::kSend, 2, a, 100), sa.Callback());
  e.Post(m[0], P2P(Op::kSend, 2, b, 100), sb.Callback());
  EXPECT_FALSE(sa.Ready());
  e.Post(m[2], P2P(Op::kRecv, 0, x, 100), rx.Callback());
  e.Post(m[2], P2P(Op::kRecv, 0, y, 100), ry.Callback());
  for (Waiter* w : {&sa, &sb, &rx, &ry}) EXPECT_EQ(w->Wait().code(), StatusCode::kOk);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
  // Recv first, and a send to oneself.
  std::vector<uint8_t> self_in(10, 9), self_out(10);
  Waiter r, s;
  e.Post(m[1], P2P(Op::kRecv, 1, self_out, 10), r.Callback());
  e.Post(m[1], P2P(Op::kSend, 1, self_in, 10), s.Callback());
  EXPECT_EQ(r.Wait().code(), StatusCode::kOk);
  EXPECT_EQ(s.Wait().code(), StatusCode::kOk);
  EXPECT_EQ(self_out, self_in);
  // Collective seqs are unaffected by point-to-point traffic.
  std::vector<Waiter> w(3);
  for (int i = 0; i < 3; ++i) e.Post(m[i], Barrier(0), w[i].Callback());
  for (auto& x2 : w) EXPECT_EQ(x2.Wait().code(), StatusCode::kOk);
}

TEST(CollectivesP2P, SizeMismatchFailsBothSidesAndBadPeerIsInvalid) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  std::vector<uint8_t> a(100, 1), x(100);
  Waiter s, r;
  e.Post(m[0], P2P(Op::kSend, 1, a, 100), s.Callback());
  e.Post(m[1], P2P(Op::kRecv, 0, x, 50), r.Callback());
  EXPECT_EQ(s.Wait().code(), StatusCode::kMismatch);
  EXPECT_EQ(r.Wait().code(), StatusCode::kMismatch);
  EXPECT_EQ(x[0], 0);
  Waiter bad;
  e.Post(m[0], P2P(Op::kSend, 2, a, 100), bad.Callback());
  EXPECT_EQ(bad.Wait().code(), StatusCode::kInvalidArgument);
}

TEST(CollectivesP2P, UnmatchedSendTimesOut) {
  Engine e;
  Constraints c;
  c.timeout_ms = 30;
  auto m = MakeComm(e, Tenant(1), 2, c);
  std::vector<uint8_t> a(8);
  Waiter s;
  e.Post(m[0], P2P(Op::kSend, 1, a, 8), s.Callback());
  EXPECT_EQ(s.Wait().code(), StatusCode::kTimedOut);
}

TEST(CollectivesView, CommunicatorsAndStatsDescribeTheEngine) {
  EngineOptions o;
  o.single_thread_max_bytes = 1 << 20;  // so that 4 MiB moved would be split
  Engine e(o);
  Constraints c;
  c.priority_class = 2;
  c.max_threads = 1;
  auto m = MakeComm(e, Tenant(5), 2, c);
  std::vector<float> s0(1 << 18, 1), s1(1 << 18, 2), r0(1 << 18), r1(1 << 18);
  for (Status st : RunAll(e, m, {AllReduce(0, s0, r0), AllReduce(0, s1, r1)})) {
    EXPECT_EQ(st.code(), StatusCode::kOk);
  }
  EXPECT_EQ(r1[12345], 3.0f);
  auto infos = e.Communicators();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].tenant, Tenant(5));
  EXPECT_EQ(infos[0].nranks, 2u);
  EXPECT_EQ(infos[0].joined, 2u);
  EXPECT_EQ(infos[0].next_seq, 1u);
  EXPECT_EQ(infos[0].state, CommState::kActive);
  EXPECT_EQ(infos[0].constraints.priority_class, 2);
  EngineStats st = e.Stats();
  EXPECT_EQ(st.ops[static_cast<size_t>(Op::kAllReduce)], 1u);
  EXPECT_EQ(st.bytes[static_cast<size_t>(Op::kAllReduce)], 2u * 4 * (1 << 18));
  // The tenant capped threads at one: 4 MiB moved would otherwise run parallel.
  EXPECT_EQ(st.algorithms[static_cast<size_t>(Algorithm::kSingleThread)], 1u);
  EXPECT_EQ(st.algorithms[static_cast<size_t>(Algorithm::kBlockedParallel)], 0u);
  EXPECT_EQ(st.tenants[Tenant(5)].ops_completed, 2u);
  EXPECT_GT(st.tenants[Tenant(5)].blocks, 0u);
  EXPECT_EQ(st.communicators, 1u);
}

}  // namespace
}  // namespace hz::coll::testing
