// A ring's in-flight journal (ring_journal.h): after the process serving a
// ring dies at any point, the next one, started from the journal, completes
// every chain the driver made available exactly once and loses none. A
// "crash" here is a SplitQueue dropped without Stop() or Flush(), as SIGKILL
// leaves it: guest memory and the journal keep what had been stored.
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "test_util.h"
#include "vdev/split_queue.h"

namespace vdev {
namespace {

using testing::kAvail;
using testing::kBuf;
using testing::kDesc;
using testing::kUsed;
using testing::RingDriver;
using testing::SimpleGuest;
using testing::W;

using testing::kRingSize;

class RingJournalTest : public ::testing::Test {
 protected:
  RingJournalTest() : journal_(std::make_unique<RingJournal>()) {}

  // A queue on the guest's ring, journaled; started fresh or recovered.
  std::unique_ptr<SplitQueue> NewQueue() {
    auto q = std::make_unique<SplitQueue>(0);
    q->set_size(kRingSize);
    q->set_addresses(ring_.desc_uva(), ring_.avail_uva(), ring_.used_uva());
    q->set_journal(journal_.get());
    return q;
  }
  std::unique_ptr<SplitQueue> Started() {
    auto q = NewQueue();
    std::string error;
    EXPECT_TRUE(q->Start(guest_.memory, &error)) << error;
    return q;
  }
  std::unique_ptr<SplitQueue> Recovered() {
    auto q = NewQueue();
    std::string error;
    EXPECT_TRUE(q->Recover(guest_.memory, &error)) << error;
    return q;
  }
  // The driver makes head available (one writable buffer).
  void Post(uint16_t head) {
    ring_.SetDesc(head, kBuf + 64ull * head, 4, W, 0);
    ring_.Publish(head);
  }
  // Completes every chain q can pop, and what it holds, and publishes.
  static void Drain(SplitQueue* q, std::vector<Chain>* held) {
    Chain c;
    while (q->Pop(&c)) held->push_back(c);
    for (const Chain& h : *held) q->Complete(h, 4);
    held->clear();
    q->Flush();
  }
  // The driver's rings as new (the descriptors are rewritten by Post).
  void ResetRing() {
    std::memset(guest_.host(kAvail), 0, 4 + 2 * kRingSize + 2);
    std::memset(guest_.host(kUsed), 0, 4 + 8 * kRingSize + 2);
  }
  // How many times each head was completed where the driver can see it.
  std::vector<int> CompletionsPerHead() {
    std::vector<int> n(kRingSize, 0);
    for (uint16_t i = 0; i < ring_.used_idx(); ++i) ++n.at(ring_.used_elem(i).first);
    return n;
  }

  SimpleGuest guest_;
  RingDriver ring_{&guest_, kRingSize, kDesc, kAvail, kUsed};
  std::unique_ptr<RingJournal> journal_;
};

TEST_F(RingJournalTest, ChainsTakenButNotPublishedAreServedAgainOnce) {
  auto q = Started();
  for (uint16_t h = 0; h < 4; ++h) Post(h);
  Chain c0, c1, c2;
  ASSERT_TRUE(q->Pop(&c0));
  ASSERT_TRUE(q->Pop(&c1));
  ASSERT_TRUE(q->Pop(&c2));
  q->Complete(c0, 4);
  q->Flush();          // head 0: the driver saw it
  q->Complete(c1, 4);  // head 1: written, never published
  q.reset();           // crash

  Post(4);  // posted while no process ran
  q = Recovered();
  EXPECT_EQ(q->last_avail(), 3) << "used idx 1 + heads 1 and 2 still marked";
  EXPECT_EQ(q->in_flight(), 2u);
  std::vector<Chain> held;
  Chain c;
  ASSERT_TRUE(q->Pop(&c));
  EXPECT_EQ(c.head(), 1);
  held.push_back(c);
  Drain(q.get(), &held);
  EXPECT_EQ(ring_.used_idx(), 5);
  const std::vector<int> n = CompletionsPerHead();
  EXPECT_EQ(std::vector<int>(n.begin(), n.begin() + 5), std::vector<int>(5, 1));
}

TEST_F(RingJournalTest, ACrashBetweenPublishingAndClearingMarksRedoesNothing) {
  auto q = Started();
  Post(0);
  Post(1);
  std::vector<Chain> held;
  Drain(q.get(), &held);
  ASSERT_EQ(ring_.used_idx(), 2);
  // As if the process died right after storing the used index: the marks
  // and the journal's used index are those of before.
  journal_->marks[0] = journal_->marks[1] = 1;
  journal_->used_idx = 0;
  q.reset();

  q = Recovered();
  EXPECT_EQ(q->in_flight(), 0u);
  EXPECT_EQ(q->last_avail(), 2);
  Chain c;
  EXPECT_FALSE(q->Pop(&c));
  EXPECT_EQ(CompletionsPerHead()[0], 1);
  EXPECT_EQ(CompletionsPerHead()[1], 1);
}

TEST_F(RingJournalTest, EveryCrashPointCompletesEachChainExactlyOnce) {
  // Random schedules of pops, completions and flushes over kRingSize chains,
  // cut at every step; the next process drains the rest.
  std::mt19937 rng(42);
  for (int schedule = 0; schedule < 50; ++schedule) {
    std::vector<int> ops;
    for (int i = 0; i < 24; ++i) ops.push_back(static_cast<int>(rng() % 3));
    for (size_t cut = 0; cut <= ops.size(); ++cut) {
      ResetRing();
      auto q = Started();
      for (uint16_t h = 0; h < kRingSize; ++h) Post(h);
      std::vector<Chain> held;
      for (size_t i = 0; i < cut; ++i) {
        Chain c;
        if (ops[i] == 0 && q->Pop(&c)) held.push_back(c);
        if (ops[i] == 1 && !held.empty()) {
          q->Complete(held.front(), 4);
          held.erase(held.begin());
        }
        if (ops[i] == 2) q->Flush();
      }
      q.reset();  // crash
      held.clear();
      q = Recovered();
      Drain(q.get(), &held);
      ASSERT_EQ(ring_.used_idx(), kRingSize) << "schedule " << schedule << " cut " << cut;
      EXPECT_EQ(CompletionsPerHead(), std::vector<int>(kRingSize, 1))
          << "schedule " << schedule << " cut " << cut;
    }
  }
}

TEST_F(RingJournalTest, ChainsAnUpgradeHandedBackAreJournaledToo) {
  // A predecessor took heads 0-2, completed 0 and handed 1 and 2 back.
  auto old = Started();
  for (uint16_t h = 0; h < 4; ++h) Post(h);
  Chain c0, c1, c2;
  ASSERT_TRUE(old->Pop(&c0) && old->Pop(&c1) && old->Pop(&c2));
  old->Complete(c0, 4);
  old->Flush();
  old.reset();
  // The successor starts the ring where the snapshot says, then crashes.
  auto q = NewQueue();
  q->set_last_avail(3);
  std::string error;
  ASSERT_TRUE(q->Start(guest_.memory, &error)) << error;
  ASSERT_TRUE(q->AdoptReturned(std::vector<uint16_t>{1, 2}));
  q.reset();

  q = Recovered();
  EXPECT_EQ(q->last_avail(), 3);
  EXPECT_EQ(q->in_flight(), 2u);
  std::vector<Chain> held;
  Drain(q.get(), &held);
  EXPECT_EQ(CompletionsPerHead(), (std::vector<int>{1, 1, 1, 1, 0, 0, 0, 0}));
}

TEST_F(RingJournalTest, AStoppedRingHasNothingToRecover) {
  auto q = Started();
  q->Stop();
  q.reset();
  auto next = NewQueue();
  std::string error;
  EXPECT_FALSE(next->Recover(guest_.memory, &error));
  EXPECT_NE(error.find("no journal"), std::string::npos) << error;
  EXPECT_FALSE(next->started());
}

// GET_VRING_BASE gave up on heads 1 and 2 (they stayed in flight past the
// drain bound) and answered base 3; the front-end started the ring there.
// Those two are not the driver's to see again, so a crash must not serve
// them: the next avail entry is the used index + marks + what was skipped.
TEST_F(RingJournalTest, ChainsAStopGaveUpOnAreNotServedAfterACrash) {
  auto q = Started();
  for (uint16_t h = 0; h < 4; ++h) Post(h);
  Chain c0, c1, c2;
  ASSERT_TRUE(q->Pop(&c0) && q->Pop(&c1) && q->Pop(&c2));
  q->Complete(c0, 4);
  q->Flush();
  q->Stop();
  q = NewQueue();
  q->set_last_avail(3);
  std::string error;
  ASSERT_TRUE(q->Start(guest_.memory, &error)) << error;
  q.reset();  // crash before it served anything

  q = Recovered();
  EXPECT_EQ(q->last_avail(), 3) << "used idx 1 + 2 skipped";
  EXPECT_EQ(q->in_flight(), 0u);
  Chain c;
  ASSERT_TRUE(q->Pop(&c));
  EXPECT_EQ(c.head(), 3);
}

// A message a crashed process had begun is served again (Session::Replay):
// stopping the ring it restarts keeps the journal, so it can go on where
// the crashed process stood.
TEST_F(RingJournalTest, AStopThatKeepsTheJournalLeavesTheRingRecoverable) {
  auto q = Started();
  Post(0);
  Chain c;
  ASSERT_TRUE(q->Pop(&c));
  EXPECT_TRUE(q->journaled());
  q->Stop(/*keep_journal=*/true);
  EXPECT_TRUE(q->journaled());
  std::string error;
  ASSERT_TRUE(q->Recover(guest_.memory, &error)) << error;
  EXPECT_EQ(q->in_flight(), 1u);
  EXPECT_EQ(q->last_avail(), 1);
  q->Stop();
  EXPECT_FALSE(q->journaled());
}

TEST_F(RingJournalTest, ADriverThatSpoilsItsUsedIndexLosesOnlyItsOwnRing) {
  auto q = Started();
  Post(0);
  Chain c;
  ASSERT_TRUE(q->Pop(&c));
  q.reset();
  // The driver writes a used index far from what the device published.
  uint16_t bogus = 100;
  std::memcpy(guest_.host(kUsed + 2), &bogus, 2);
  auto next = NewQueue();
  std::string error;
  EXPECT_FALSE(next->Recover(guest_.memory, &error));
  EXPECT_NE(error.find("used idx"), std::string::npos) << error;
  EXPECT_FALSE(next->started());
  // Marks past the ring size are never trusted either.
  bogus = 0;
  std::memcpy(guest_.host(kUsed + 2), &bogus, 2);
  journal_->marks[kRingSize + 3] = 1;
  next = NewQueue();
  ASSERT_TRUE(next->Recover(guest_.memory, &error)) << error;
  EXPECT_EQ(next->in_flight(), 1u);
}

TEST_F(RingJournalTest, AnAvailIndexOutOfStepWithTheJournalIsRefused) {
  auto q = Started();
  Post(0);
  Chain c;
  ASSERT_TRUE(q->Pop(&c));
  q.reset();
  ring_.set_avail_idx(static_cast<uint16_t>(ring_.avail_idx() + 3 * kRingSize));
  auto next = NewQueue();
  std::string error;
  EXPECT_FALSE(next->Recover(guest_.memory, &error));
  EXPECT_NE(error.find("avail idx"), std::string::npos) << error;
}

}  // namespace
}  // namespace vdev
