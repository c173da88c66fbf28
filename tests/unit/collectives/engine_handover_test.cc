// Handing communicators to another engine, as a live upgrade of the service
// does: operations that have not started are withdrawn, each rank's place is
// saved, and a fresh engine re-forms the communicator at the same sequence
// number once every rank rejoined.
#include <future>

#include "harness.h"
#include "protocol/harmonaize.h"

namespace hz::coll::testing {
namespace {

OpDesc Send(uint32_t peer, std::vector<uint8_t>& buf) {
  OpDesc d;
  d.op = Op::kSend;
  d.peer = peer;
  d.count = buf.size();
  d.dtype = static_cast<uint8_t>(DType::kUint8);
  d.send = {IoSpan{buf.data(), buf.size()}};
  return d;
}

// Runs one verified all-reduce of rank+1+seq on every member.
void RunVerified(Engine& e, const std::vector<std::shared_ptr<Member>>& m, uint64_t seq) {
  const size_t n = m.size();
  std::vector<std::vector<float>> s(n), r(n, std::vector<float>(16));
  std::vector<OpDesc> d;
  float expect = 0;
  for (size_t i = 0; i < n; ++i) {
    s[i].assign(16, static_cast<float>(i + 1 + seq));
    expect += static_cast<float>(i + 1 + seq);
    d.push_back(AllReduce(seq, s[i], r[i]));
  }
  for (Status st : PostAll(e, m, d)) EXPECT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(r[i][15], expect) << "rank " << i << " seq " << seq;
}

TEST(CollectivesHandOver, AHalfPostedCollectiveIsWithdrawnAndCanBePostedAgain) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  std::vector<float> s0(8, 1), r0(8), s1(8, 2), r1(8);
  Waiter first;
  e.Post(m[0], AllReduce(0, s0, r0), first.Callback());
  EXPECT_FALSE(first.Ready());
  EXPECT_EQ(e.Withdraw(m[0]), 1u);
  ASSERT_TRUE(first.Ready()) << "the withdrawn op is answered before Withdraw returns";
  EXPECT_EQ(first.Wait().code(), StatusCode::kTryAgain);
  EXPECT_EQ(e.Withdraw(m[0]), 0u);
  // The same seq again, now with its peer: it runs once, normally.
  Waiter again, peer;
  e.Post(m[0], AllReduce(0, s0, r0), again.Callback());
  e.Post(m[1], AllReduce(0, s1, r1), peer.Callback());
  EXPECT_TRUE(again.Wait().ok());
  EXPECT_TRUE(peer.Wait().ok());
  EXPECT_EQ(r0[7], 3.0f);
  EXPECT_EQ(e.Stats().tenants[Tenant(1)].ops_failed, 0u) << "a withdrawal is not a failure";
}

TEST(CollectivesHandOver, OnlyTheWithdrawingRanksPostsGo) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 3);
  std::vector<std::vector<float>> s(3, std::vector<float>(8, 1)), r(3, std::vector<float>(8));
  Waiter w0, w1;
  e.Post(m[0], AllReduce(0, s[0], r[0]), w0.Callback());
  e.Post(m[1], AllReduce(0, s[1], r[1]), w1.Callback());
  EXPECT_EQ(e.Withdraw(m[0]), 1u);
  EXPECT_EQ(w0.Wait().code(), StatusCode::kTryAgain);
  EXPECT_FALSE(w1.Ready());
  // Rank 1's post still counts: ranks 0 and 2 complete the collective.
  Waiter again, w2;
  e.Post(m[0], AllReduce(0, s[0], r[0]), again.Callback());
  e.Post(m[2], AllReduce(0, s[2], r[2]), w2.Callback());
  for (Waiter* w : {&again, &w1, &w2}) EXPECT_TRUE(w->Wait().ok());
  EXPECT_EQ(r[2][0], 3.0f);
}

TEST(CollectivesHandOver, WaitingSendsAreWithdrawnAndCompletedOnesAreNot) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  std::vector<float> s0(8, 1), r0(8), s1(8, 2), r1(8);
  RunVerified(e, m, 0);
  std::vector<uint8_t> a(32, 7);
  Waiter send;
  e.Post(m[0], Send(1, a), send.Callback());
  EXPECT_EQ(e.Withdraw(m[1]), 0u) << "rank 1 has nothing waiting";
  EXPECT_EQ(e.Withdraw(m[0]), 1u);
  EXPECT_EQ(send.Wait().code(), StatusCode::kTryAgain);
  EXPECT_TRUE(e.Communicators()[0].pending == 0);
}

TEST(CollectivesHandOver, ACommunicatorReformsInAnotherEngineAtItsSequenceNumber) {
  Engine old_engine;
  auto m = MakeComm(old_engine, Tenant(1), 3);
  for (uint64_t seq = 0; seq < 5; ++seq) RunVerified(old_engine, m, seq);
  // Seq 5 is half posted when the hand-over starts.
  std::vector<float> s0(16, 1 + 5), r0(16);
  Waiter half;
  old_engine.Post(m[0], AllReduce(5, s0, r0), half.Callback());
  for (auto& member : m) old_engine.Withdraw(member);
  EXPECT_EQ(half.Wait().code(), StatusCode::kTryAgain);
  std::vector<MemberState> saved(3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(old_engine.SaveMember(m[r], &saved[r]).ok());
    EXPECT_EQ(saved[r].rank, static_cast<uint32_t>(r));
    EXPECT_EQ(saved[r].nranks, 3u);
    EXPECT_EQ(saved[r].next_seq, 5u);
  }

  Engine next;
  std::vector<std::future<InitResult>> f;
  for (int r = 0; r < 3; ++r) f.push_back(RejoinAsync(next, Tenant(1), saved[r]));
  std::vector<std::shared_ptr<Member>> again;
  for (auto& x : f) {
    InitResult j = Get(x);
    ASSERT_TRUE(j.status.ok()) << j.status.ToString();
    again.push_back(j.member);
  }
  // The withdrawn seq 5 runs here, then the sequence goes on.
  for (uint64_t seq = 5; seq < 9; ++seq) RunVerified(next, again, seq);
  std::vector<float> stale_s(16), stale_r(16);
  Waiter stale;
  next.Post(again[0], AllReduce(4, stale_s, stale_r), stale.Callback());
  EXPECT_EQ(stale.Wait().code(), StatusCode::kInvalidArgument) << "seq 4 ran before the hand-over";
  // It is an ordinary communicator here: an Init on its uid is refused, a
  // destroyed rank aborts the others.
  Uid uid = saved[0].uid;
  std::promise<Status> init;
  next.Init(Tenant(1), uid, 3, 0, {},
            [&](Status st, std::shared_ptr<Member>) { init.set_value(st); });
  EXPECT_EQ(init.get_future().get().code(), StatusCode::kExists);
  next.Destroy(again[2]);
  std::vector<float> s(16), r(16);
  Waiter after;
  next.Post(again[0], AllReduce(9, s, r), after.Callback());
  EXPECT_EQ(after.Wait().code(), StatusCode::kAborted);
}

TEST(CollectivesHandOver, RanksThatDisagreeOrComeFromAnotherTenantAreRefused) {
  Engine old_engine;
  auto m = MakeComm(old_engine, Tenant(1), 2);
  RunVerified(old_engine, m, 0);
  MemberState s0, s1;
  ASSERT_TRUE(old_engine.SaveMember(m[0], &s0).ok());
  ASSERT_TRUE(old_engine.SaveMember(m[1], &s1).ok());
  Engine next;
  auto first = RejoinAsync(next, Tenant(1), s0);
  MemberState ahead = s1;
  ahead.next_seq += 1;
  auto bad_seq = RejoinAsync(next, Tenant(1), ahead);
  EXPECT_EQ(Get(bad_seq).status.code(), StatusCode::kMismatch);
  MemberState other = s1;
  other.constraints.priority_class = 2;
  auto bad_constraints = RejoinAsync(next, Tenant(1), other);
  EXPECT_EQ(Get(bad_constraints).status.code(), StatusCode::kMismatch);
  auto stranger = RejoinAsync(next, Tenant(2), s1);
  EXPECT_EQ(Get(stranger).status.code(), StatusCode::kPermission);
  auto twice = RejoinAsync(next, Tenant(1), s0);
  EXPECT_EQ(Get(twice).status.code(), StatusCode::kExists);
  auto second = RejoinAsync(next, Tenant(1), s1);
  EXPECT_TRUE(Get(first).status.ok());
  EXPECT_TRUE(Get(second).status.ok());
}

TEST(CollectivesHandOver, ARankThatNeverComesBackAbortsTheOthersAtTheTimeout) {
  Engine old_engine;
  Constraints c;
  c.timeout_ms = 30;
  auto m = MakeComm(old_engine, Tenant(1), 2, c);
  MemberState s0;
  ASSERT_TRUE(old_engine.SaveMember(m[0], &s0).ok());
  Engine next;
  auto alone = RejoinAsync(next, Tenant(1), s0);
  EXPECT_EQ(Get(alone).status.code(), StatusCode::kTimedOut);
  EXPECT_TRUE(next.Communicators().empty());
}

TEST(CollectivesHandOver, RejoiningCountsAgainstTheTenantsUids) {
  EngineOptions o;
  o.max_uids_per_tenant = 1;
  Engine next(o);
  Engine old_engine;
  auto a = MakeComm(old_engine, Tenant(1), 1);
  auto b = MakeComm(old_engine, Tenant(1), 1);
  MemberState sa, sb;
  ASSERT_TRUE(old_engine.SaveMember(a[0], &sa).ok());
  ASSERT_TRUE(old_engine.SaveMember(b[0], &sb).ok());
  auto ja = RejoinAsync(next, Tenant(1), sa);
  EXPECT_TRUE(Get(ja).status.ok());
  auto jb = RejoinAsync(next, Tenant(1), sb);
  EXPECT_EQ(Get(jb).status.code(), StatusCode::kLimit);
}

TEST(CollectivesHandOver, OnlyAnActiveCommunicatorIsSaved) {
  Engine e;
  auto m = MakeComm(e, Tenant(1), 2);
  e.Abort(m[0]);
  MemberState s;
  EXPECT_EQ(e.SaveMember(m[1], &s).code(), StatusCode::kState);
}

}  // namespace
}  // namespace hz::coll::testing
