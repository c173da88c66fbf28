// The peer-host tier (peer.h): two engines stand for two hosts, joined by a
// link that hands the source's chunks to the other engine's StoreReplica
// (the service carries them over the cluster's data path instead).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hz/checkpoint/engine.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::MakeState;
using testing::SmallConfig;
using testing::Spans;
using testing::TempDir;
using testing::Tenant;
using testing::ZeroState;
using namespace std::chrono_literals;

class FullSink : public EventSink {
 public:
  void Publish(const TenantId&, EventKind, StreamId, uint64_t) override {}
  void PublishEvent(const CheckpointEvent& e) override {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back(e);
  }
  std::vector<CheckpointEvent> Of(EventKind kind) const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<CheckpointEvent> out;
    for (const auto& e : events_) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<CheckpointEvent> events_;
};

// Copies to `peer` on a thread of its own; `corrupt` flips a byte of the
// chunk it names on the way; with `hold`, done waits for Release().
class LoopbackLink : public PeerLink {
 public:
  Engine* peer = nullptr;
  Status available = Status::Ok();
  int corrupt = -1;
  bool hold = false;
  // The copies are lost on the way: done is never called, as when the
  // service stops with copies on their way.
  bool drop = false;
  std::atomic<int> calls{0};  // Replicate calls
  ReplicaSource last;         // of the last call

  ~LoopbackLink() override { Join(); }
  // Waits for every copy, done included.
  void Join() {
    Release();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  Status Available(const TenantId&) override { return available; }
  void Replicate(ReplicaSource src, std::function<void(Status)> done) override {
    ++calls;
    last = src;
    if (drop) return;
    threads_.emplace_back([this, src = std::move(src), done = std::move(done)] {
      ReplicaIn in{src.tenant, src.manifest, src.policy, "host-a", nullptr};
      in.read_chunk = [&](uint64_t i, uint8_t* dst, size_t len) {
        Status st = src.read_chunk(i, dst, len);
        if (static_cast<int>(i) == corrupt) dst[len / 2] ^= 0x40;
        return st;
      };
      Status st = peer->StoreReplica(in);
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return !hold; });
      l.unlock();
      done(st);
    });
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    hold = false;
    cv_.notify_all();
  }
  // As the service's link: the copy on the peer goes, if it is the copy.
  void Forget(const TenantId& tenant, const Manifest& m) override {
    forgotten = peer->DeleteReplica(tenant, m.stream, m.step, ReplicaDigest(m), "host-a");
  }
  Status forgotten = Status::NotFound("nothing forgotten");

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
};

class PeerTier : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cb = SmallConfig(dir_b_.path(), &sink_b_);
    peer_ = testing::OpenEngine(cb);
    ASSERT_TRUE(peer_);
    link_.peer = peer_.get();
    auto ca = SmallConfig(dir_a_.path(), &sink_a_);
    ca.peer = &link_;
    src_ = testing::OpenEngine(ca);
    ASSERT_TRUE(src_);
    peer_policy_.tier = TierKind::kPeerHost;
    peer_policy_.retention = 2;
  }
  void TearDown() override {
    link_.Join();  // its copies reach both engines
    src_.reset();
  }

  // Saves `bytes` of a pattern as (stream 1, step) of tenant 1 on the source.
  std::vector<std::vector<uint8_t>> Save(uint64_t step, size_t bytes) {
    auto st = MakeState({bytes, 1000}, step);
    auto sp = Spans(st);
    SaveResult r;
    EXPECT_EQ(src_->Save({Tenant(1), 1, step, sp, {}}, &r).code(), StatusCode::kOk);
    return st;
  }

  TempDir dir_a_{"peer-src"};
  TempDir dir_b_{"peer-dst"};
  FullSink sink_a_, sink_b_;
  LoopbackLink link_;
  std::unique_ptr<Engine> peer_, src_;
  Policy peer_policy_;
};

TEST_F(PeerTier, PolicyNeedsALinkAndALivePeer) {
  TempDir dir("peer-none");
  auto lonely = testing::OpenEngine(SmallConfig(dir.path()));
  ASSERT_TRUE(lonely);
  EXPECT_EQ(lonely->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kNotSupported);
  link_.available = Status::TryAgain("no other host");
  EXPECT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kTryAgain);
  std::vector<ListEntry> e;
  bool more = false;
  EXPECT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kNotFound);
  link_.available = Status::Ok();
  EXPECT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
}

TEST_F(PeerTier, DurableOnlyOnceTheReplicaIsAndRestorableOnThePeerOnly) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  link_.hold = true;
  auto state = Save(5, 300000);  // several chunks
  // Committed here, the replica not confirmed yet: not DURABLE.
  std::vector<ListEntry> e;
  bool more = false;
  EXPECT_EQ(src_->WaitDurable(Tenant(1), 1, 5, 200ms).code(), StatusCode::kTimedOut);
  ASSERT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, CkptState::kStaged);
  EXPECT_TRUE(sink_a_.Of(EventKind::kDurable).empty());
  link_.Release();
  ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, 5, 30s).code(), StatusCode::kOk);
  auto durable = sink_a_.Of(EventKind::kDurable);
  ASSERT_EQ(durable.size(), 1u);
  EXPECT_EQ(durable[0].tier, TierKind::kPeerHost);
  EXPECT_EQ(durable[0].step, 5u);
  ASSERT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  EXPECT_EQ(e[0].state, CkptState::kDurable);
  EXPECT_EQ(e[0].tier, TierKind::kPeerHost);

  // On the peer: the same stream of the same tenant, restorable bit-exact.
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 5u);
  EXPECT_EQ(e[0].state, CkptState::kDurable);
  auto out = ZeroState({300000, 1000});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(peer_->Restore({Tenant(1), 1, kLatestStep, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, state);
  // Another tenant of the peer sees nothing of it.
  EXPECT_EQ(peer_->List(Tenant(2), 1, 0, 4, &e, &more).code(), StatusCode::kNotFound);
  EXPECT_EQ(peer_->Restore({Tenant(2), 1, 5, osp}, &rr).code(), StatusCode::kNotFound);
  EXPECT_TRUE(sink_b_.Of(EventKind::kDurable).empty());  // the tenant hears it from the source
}

TEST_F(PeerTier, ADeleteTakesTheReplicaButNeverAnotherCheckpoint) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  Save(5, 300000);
  ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, 5, 30s).code(), StatusCode::kOk);
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  // A digest that is not the copy's deletes nothing.
  EXPECT_EQ(peer_->DeleteReplica(Tenant(1), 1, 5, 12345, "host-a").code(), StatusCode::kMismatch);
  EXPECT_EQ(peer_->DeleteReplica(Tenant(1), 1, 6, 12345, "host-a").code(), StatusCode::kNotFound);
  // Nor does a host that is not the copy's source.
  EXPECT_EQ(
      peer_->DeleteReplica(Tenant(1), 1, 5, ReplicaDigest(link_.last.manifest), "host-c").code(),
      StatusCode::kMismatch);
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  EXPECT_EQ(e.size(), 1u);
  // The tenant deletes it on the source: the copy goes too.
  ASSERT_EQ(src_->Delete(Tenant(1), 1, 5).code(), StatusCode::kOk);
  EXPECT_TRUE(link_.forgotten.ok()) << link_.forgotten.ToString();
  e.clear();
  peer_->List(Tenant(1), 1, 0, 4, &e, &more);  // an empty stream lists nothing
  EXPECT_TRUE(e.empty());
  auto out = ZeroState({300000, 1000});
  auto osp = Spans(out);
  RestoreResult rr;
  EXPECT_EQ(peer_->Restore({Tenant(1), 1, 5, osp}, &rr).code(), StatusCode::kNotFound);
}

TEST_F(PeerTier, ACorruptChunkIsRefusedAndTheSourceHearsFailed) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  link_.corrupt = 1;
  Save(1, 200000);
  EXPECT_EQ(src_->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kCorruption);
  auto failed = sink_a_.Of(EventKind::kFailed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].status, StatusCode::kCorruption);
  EXPECT_EQ(failed[0].tier, TierKind::kPeerHost);
  // The local copy stands, durable on the local disk; the peer holds nothing.
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, CkptState::kDurable);
  EXPECT_EQ(e[0].tier, TierKind::kLocalDisk);
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
}

TEST_F(PeerTier, AStepThePeerHoldsIsRefusedWithExists) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  ASSERT_EQ(peer_->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
  // The tenant's own checkpoint there, even with the very bytes the source
  // saves, is not a copy: neither taken for one nor deleted as one.
  auto st = MakeState({4096, 1000}, 3);
  auto sp = Spans(st);
  SaveResult r;
  ASSERT_EQ(peer_->Save({Tenant(1), 1, 3, sp, {}}, &r).code(), StatusCode::kOk);
  EXPECT_EQ(Save(3, 4096), st);
  EXPECT_EQ(src_->WaitDurable(Tenant(1), 1, 3, 30s).code(), StatusCode::kExists);
  auto failed = sink_a_.Of(EventKind::kFailed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].status, StatusCode::kExists);
  ASSERT_EQ(src_->Delete(Tenant(1), 1, 3).code(), StatusCode::kOk);
  EXPECT_EQ(link_.forgotten.code(), StatusCode::kMismatch);
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 3u);
}

TEST_F(PeerTier, TheReplicaCountsAgainstThePeersDiskQuota) {
  TenantLimits small;
  small.disk_bytes = 64 << 10;
  ASSERT_EQ(peer_->SetLimits(Tenant(1), small).code(), StatusCode::kOk);
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  Save(1, 200000);
  EXPECT_EQ(src_->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kLimit);
}

TEST_F(PeerTier, TheReplicaSurvivesARestartOfThePeerAndRetentionAppliesThere) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  std::vector<std::vector<std::vector<uint8_t>>> states;
  for (uint64_t step = 1; step <= 3; ++step) {
    states.push_back(Save(step, 100000));
    ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, step, 30s).code(), StatusCode::kOk);
  }
  link_.Join();
  src_.reset();
  peer_.reset();
  peer_ = testing::OpenEngine(SmallConfig(dir_b_.path()));
  ASSERT_TRUE(peer_);
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(peer_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 2u);  // retention 2, as the source's policy says
  EXPECT_EQ(e[0].step, 2u);
  EXPECT_EQ(e[1].step, 3u);
  auto out = ZeroState({100000, 1000});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(peer_->Restore({Tenant(1), 1, 3, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, states[2]);
}

// The source knows after a restart which checkpoints have their copy on
// another host (they list PEER_HOST), and sends again the copy that the stop
// interrupted, and only that one; a copy it holds for another host is never
// sent on.
TEST_F(PeerTier, ARestartKeepsWhatWasCopiedAndResumesWhatWasNot) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  Save(1, 100000);
  ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  link_.drop = true;  // step 2's copy is on its way when the service stops
  auto state2 = Save(2, 100000);
  for (int i = 0; i < 3000 && link_.calls < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(link_.calls, 2) << "step 2 was never committed";
  link_.Join();
  src_.reset();

  link_.drop = false;
  FullSink after;
  auto ca = SmallConfig(dir_a_.path(), &after);
  ca.peer = &link_;
  src_ = testing::OpenEngine(ca);
  ASSERT_TRUE(src_);
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].tier, TierKind::kPeerHost) << "its copy was durable";
  EXPECT_EQ(e[1].tier, TierKind::kLocalDisk) << "its copy never arrived";

  src_->ResumeReplicas();
  ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, 2, 30s).code(), StatusCode::kOk);
  EXPECT_EQ(link_.calls, 3) << "only step 2 is sent again";
  auto durable = after.Of(EventKind::kDurable);
  ASSERT_EQ(durable.size(), 1u);
  EXPECT_EQ(durable[0].step, 2u);
  EXPECT_EQ(durable[0].tier, TierKind::kPeerHost);
  ASSERT_EQ(src_->List(Tenant(1), 1, 0, 4, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].tier, TierKind::kPeerHost);
  auto out = ZeroState({100000, 1000});
  auto osp = Spans(out);
  RestoreResult rr;
  ASSERT_EQ(peer_->Restore({Tenant(1), 1, 2, osp}, &rr).code(), StatusCode::kOk);
  EXPECT_EQ(out, state2);

  // The peer, restarted with a link of its own, holds copies: none is sent.
  link_.Join();
  peer_.reset();
  LoopbackLink onward;
  onward.peer = src_.get();
  auto cb = SmallConfig(dir_b_.path());
  cb.peer = &onward;
  peer_ = testing::OpenEngine(cb);
  ASSERT_TRUE(peer_);
  peer_->ResumeReplicas();
  EXPECT_EQ(onward.calls, 0);
  peer_.reset();  // before the link it names
}

// A copy the peer holds already is answered kOk without a chunk read: the
// source may send one again when the answer was lost.
TEST_F(PeerTier, ACopyThePeerHoldsAlreadyIsAcceptedWithoutItsBytes) {
  ASSERT_EQ(src_->SetPolicy(Tenant(1), 1, peer_policy_).code(), StatusCode::kOk);
  Save(1, 100000);
  ASSERT_EQ(src_->WaitDurable(Tenant(1), 1, 1, 30s).code(), StatusCode::kOk);
  int reads = 0;
  ReplicaIn again{link_.last.tenant, link_.last.manifest, link_.last.policy, "host-a",
                  [&](uint64_t, uint8_t*, size_t) {
                    ++reads;
                    return Status::Ok();
                  }};
  EXPECT_EQ(peer_->StoreReplica(again).code(), StatusCode::kOk);
  EXPECT_EQ(reads, 0);
  // Another checkpoint of that step is still refused, and so is the same
  // one from another host.
  again.source_host = "host-c";
  EXPECT_EQ(peer_->StoreReplica(again).code(), StatusCode::kExists);
  again.source_host = "host-a";
  again.manifest.chunk_crcs[0] ^= 1;
  EXPECT_EQ(peer_->StoreReplica(again).code(), StatusCode::kExists);
}

}  // namespace
}  // namespace hz::checkpoint
