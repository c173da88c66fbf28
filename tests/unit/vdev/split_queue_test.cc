#include "vdev/split_queue.h"

#include <sys/eventfd.h>

#include <chrono>
#include <limits>
#include <thread>

#include "gtest/gtest.h"
#include "test_util.h"

namespace vdev {
namespace {

using testing::Drain;
using testing::I;
using testing::kAvail;
using testing::kBuf;
using testing::kDesc;
using testing::kGpaBase;
using testing::kTable;
using testing::kUsed;
using testing::kUvaDelta;
using testing::N;
using testing::RingDriver;
using testing::SimpleGuest;
using testing::W;

using testing::kRingSize;
// <linux/virtio_ring.h> values (its inline helpers are not C++).
constexpr uint16_t kAvailNoInterrupt = 1;  // VRING_AVAIL_F_NO_INTERRUPT
constexpr uint16_t kUsedNoNotify = 1;      // VRING_USED_F_NO_NOTIFY

class VdevSplitQueueTest : public ::testing::Test {
 protected:
  explicit VdevSplitQueueTest(QueueLimits limits = {}) : q_(0, limits) {}

  void SetUp() override {
    call_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    err_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    Configure(&q_, /*event_idx=*/false, /*indirect=*/true);
  }
  void TearDown() override {
    close(call_);
    close(err_);
  }
  void Configure(SplitQueue* q, bool event_idx, bool indirect) {
    q->set_size(kRingSize);
    q->set_addresses(ring_.desc_uva(), ring_.avail_uva(), ring_.used_uva());
    q->set_features(event_idx, indirect);
    q->set_call_fd(call_);
    q->set_err_fd(err_);
    std::string error;
    ASSERT_TRUE(q->Start(guest_.memory, &error)) << error;
  }
  // Pops one chain expecting a malformed one to be skipped (completed with 0).
  // Publishes n one-descriptor writable chains, heads 0..n-1.
  void PublishWritableChains(uint16_t n) {
    for (uint16_t i = 0; i < n; ++i) {
      ring_.SetDesc(i, kBuf, 4, W, 0);
      ring_.Publish(i);
    }
  }
  void ExpectMalformed(const char* what) {
    uint16_t used_before = ring_.used_idx();
    uint64_t malformed_before = q_.stats().malformed;
    Chain c;
    EXPECT_FALSE(q_.Pop(&c)) << what;
    EXPECT_EQ(q_.stats().malformed, malformed_before + 1) << what;
    EXPECT_EQ(ring_.used_idx(), static_cast<uint16_t>(used_before + 1)) << what;
    EXPECT_EQ(ring_.used_elem(used_before).second, 0u) << what;
    EXPECT_FALSE(q_.broken()) << what;
  }

  SimpleGuest guest_;
  RingDriver ring_{&guest_, kRingSize, kDesc, kAvail, kUsed};
  SplitQueue q_;
  int call_ = -1;
  int err_ = -1;
};

TEST_F(VdevSplitQueueTest, PopsAChainAndPublishesTheCompletion) {
  std::memcpy(guest_.host(kBuf), "hello", 5);
  ring_.SetDesc(0, kBuf, 5, N, 1);
  ring_.SetDesc(1, kBuf + 0x1000, 64, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_EQ(c.head(), 0);
  ASSERT_EQ(c.readable().size(), 1u);
  EXPECT_TRUE(testing::Aliases(c.readable()[0].data, guest_.host(kBuf)));
  EXPECT_EQ(c.readable_bytes(), 5u);
  EXPECT_EQ(c.writable_bytes(), 64u);
  char text[6] = {};
  EXPECT_EQ(c.Read(0, text, 5), 5u);
  EXPECT_STREQ(text, "hello");
  EXPECT_EQ(c.Write(60, "abcdefgh", 8), 4u);  // clipped at the end of the writable part
  EXPECT_EQ(std::memcmp(guest_.host(kBuf + 0x1000 + 60), "abcd", 4), 0);
  EXPECT_EQ(c.memory(), guest_.memory);
  EXPECT_FALSE(q_.Pop(&c));

  q_.Complete(c, 7);
  EXPECT_EQ(ring_.used_idx(), 0);  // batched until Flush
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), 1);
  EXPECT_EQ(ring_.used_elem(0), std::make_pair(0u, 7u));
  EXPECT_EQ(Drain(call_), 1u);
  EXPECT_EQ(q_.last_avail(), 1);
}

TEST_F(VdevSplitQueueTest, CompletionLengthIsClampedToTheWritableBytes) {
  ring_.SetDesc(0, kBuf, 16, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  q_.Complete(c, 1000);
  q_.Flush();
  EXPECT_EQ(ring_.used_elem(0).second, 16u);
}

TEST_F(VdevSplitQueueTest, ZeroLengthDescriptorsYieldNoSegments) {
  ring_.SetDesc(0, kBuf, 0, N, 1);
  ring_.SetDesc(1, 0xdead0000ull, 0, W, 0);  // address irrelevant at length 0
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_TRUE(c.readable().empty());
  EXPECT_TRUE(c.writable().empty());
}

TEST_F(VdevSplitQueueTest, OutOfOrderCompletionsAndAFullRing) {
  for (uint16_t i = 0; i < kRingSize; ++i) {
    ring_.SetDesc(i, kBuf + 0x100 * i, 8, W, 0);
    ring_.Publish(i);
  }
  std::vector<Chain> chains(kRingSize);
  for (auto& c : chains) ASSERT_TRUE(q_.Pop(&c));
  Chain extra;
  EXPECT_FALSE(q_.Pop(&extra));
  for (int i = kRingSize - 1; i >= 0; --i) q_.Complete(chains[i], i);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), kRingSize);
  for (uint16_t k = 0; k < kRingSize; ++k) {
    EXPECT_EQ(ring_.used_elem(k).first, static_cast<uint32_t>(kRingSize - 1 - k));
  }
  EXPECT_EQ(Drain(call_), 1u);  // one notification for the batch
  // Double completion is a device bug: ignored, nothing published.
  q_.Complete(chains[0], 1);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), kRingSize);
}

TEST_F(VdevSplitQueueTest, AReturnedChainIsPoppedAgainBeforeNewOnes) {
  PublishWritableChains(3);
  Chain first, second;
  ASSERT_TRUE(q_.Pop(&first));
  ASSERT_TRUE(q_.Pop(&second));
  q_.Return(second);
  EXPECT_EQ(q_.in_flight(), 2u);  // still the back-end's
  EXPECT_TRUE(q_.HasAvailable());
  Chain again, next;
  ASSERT_TRUE(q_.Pop(&again));
  EXPECT_EQ(again.head(), second.head());
  EXPECT_EQ(again.writable_bytes(), 4u);
  ASSERT_TRUE(q_.Pop(&next));
  EXPECT_EQ(next.head(), 2);
  for (const Chain* c : {&first, &again, &next}) q_.Complete(*c, 4);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), 3);
  EXPECT_EQ(q_.in_flight(), 0u);
}

TEST_F(VdevSplitQueueTest, ASuccessorAdoptsReturnedHeadsAndServesThemFirst) {
  PublishWritableChains(3);
  Chain c0, c1;
  ASSERT_TRUE(q_.Pop(&c0));
  ASSERT_TRUE(q_.Pop(&c1));
  q_.Return(c1);
  q_.Return(c0);
  const std::vector<uint16_t> heads(q_.returned().begin(), q_.returned().end());
  const uint16_t base = q_.last_avail();
  // The successor's queue, over the same ring.
  SplitQueue successor(0);
  successor.set_last_avail(base);
  Configure(&successor, /*event_idx=*/false, /*indirect=*/true);
  EXPECT_FALSE(successor.AdoptReturned(std::vector<uint16_t>{kRingSize}));  // outside the ring
  ASSERT_TRUE(successor.AdoptReturned(heads));
  EXPECT_FALSE(successor.AdoptReturned(heads));  // already in flight
  EXPECT_EQ(successor.in_flight(), 2u);
  std::vector<uint16_t> order;
  for (Chain c; successor.Pop(&c);) {
    order.push_back(c.head());
    successor.Complete(c, 4);
  }
  successor.Flush();
  EXPECT_EQ(order, (std::vector<uint16_t>{1, 0, 2}));
  EXPECT_EQ(ring_.used_idx(), 3);
  EXPECT_EQ(successor.in_flight(), 0u);
}

TEST_F(VdevSplitQueueTest, DescriptorLoopIsSkipped) {
  ring_.SetDesc(0, kBuf, 8, N, 1);
  ring_.SetDesc(1, kBuf, 8, N, 0);
  ring_.Publish(0);
  ExpectMalformed("loop");
  // Self-loop through the whole table with writable descriptors.
  for (uint16_t i = 0; i < kRingSize; ++i) ring_.SetDesc(i, kBuf, 8, W | N, (i + 1) % kRingSize);
  ring_.Publish(3);
  ExpectMalformed("ring-sized loop");
  // The ring keeps working afterwards.
  ring_.SetDesc(2, kBuf, 8, W, 0);
  ring_.Publish(2);
  Chain c;
  EXPECT_TRUE(q_.Pop(&c));
}

TEST_F(VdevSplitQueueTest, LongestLegalChainIsAccepted) {
  for (uint16_t i = 0; i < kRingSize; ++i) {
    ring_.SetDesc(i, kBuf + i, 1, (i + 1 < kRingSize) ? N : 0, i + 1);
  }
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_EQ(c.readable_bytes(), kRingSize);
  EXPECT_EQ(c.readable().size(), kRingSize);  // one segment per descriptor
}

TEST_F(VdevSplitQueueTest, BadBuffersAreSkipped) {
  ring_.SetDesc(0, 0x5000000, 8, 0, 0);  // outside guest memory
  ring_.Publish(0);
  ExpectMalformed("outside memory");
  ring_.SetDesc(0, std::numeric_limits<uint64_t>::max() - 3, 8, 0, 0);  // wraps 2^64
  ring_.Publish(0);
  ExpectMalformed("wrapping");
  ring_.SetDesc(0, kBuf + (1 << 20) - 4 - kGpaBase, 8, 0, 0);  // crosses the end of RAM
  ring_.Publish(0);
  ExpectMalformed("past end");
  ring_.SetDesc(0, kBuf, 8, W | N, 1);
  ring_.SetDesc(1, kBuf, 8, 0, 0);
  ring_.Publish(0);
  ExpectMalformed("readable after writable");
  ring_.SetDesc(0, kBuf, 8, N, 9);
  ring_.Publish(0);
  ExpectMalformed("next out of range");
}

TEST_F(VdevSplitQueueTest, IndirectTablesAreFollowed) {
  ring_.SetDesc(0, kBuf, 4, 0, 1, kTable);
  ring_.SetDesc(1, kBuf + 0x100, 4, 0, 2, kTable);  // NEXT not set: chain ends here
  ring_.SetDesc(0, kTable, 48, I, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_EQ(c.readable_bytes(), 4u);

  ring_.SetDesc(0, kBuf, 4, N, 1, kTable);
  ring_.SetDesc(1, kBuf + 0x100, 4, N | W, 2, kTable);
  ring_.SetDesc(2, kBuf + 0x200, 12, W, 0, kTable);
  ring_.SetDesc(1, kTable, 48, I, 0);
  ring_.Publish(1);
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_EQ(c.head(), 1);
  EXPECT_EQ(c.readable_bytes(), 4u);
  EXPECT_EQ(c.writable_bytes(), 16u);
  EXPECT_EQ(c.writable().size(), 2u);
}

// An indirect table of many entries gives a chain with more segments than a
// Chain holds inline; the same Chain then takes a short chain again.
TEST_F(VdevSplitQueueTest, LongIndirectChainSpillsAndTheChainIsReused) {
  constexpr uint16_t kEntries = 100;  // 40 readable, then 60 writable
  constexpr uint16_t kReadable = 40;
  static_assert(kEntries > Chain::kInlineSegments);
  for (uint16_t i = 0; i < kEntries; ++i) {
    const bool last = i + 1 == kEntries;
    const uint16_t flags = static_cast<uint16_t>((last ? 0 : N) | (i >= kReadable ? W : 0));
    ring_.SetDesc(i, kBuf + 0x10 * i, 1 + i % 7, flags, static_cast<uint16_t>(i + 1), kTable);
  }
  ring_.SetDesc(0, kTable, 16 * kEntries, I, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  ASSERT_EQ(c.readable().size(), kReadable);
  ASSERT_EQ(c.writable().size(), kEntries - kReadable);
  size_t readable_bytes = 0, writable_bytes = 0;
  for (uint16_t i = 0; i < kEntries; ++i) {
    const Segment& s = i < kReadable ? c.readable()[i] : c.writable()[i - kReadable];
    EXPECT_TRUE(testing::Aliases(s.data, guest_.host(kBuf + 0x10 * i))) << i;
    EXPECT_EQ(s.len, 1u + i % 7) << i;
    (i < kReadable ? readable_bytes : writable_bytes) += s.len;
  }
  EXPECT_EQ(c.readable_bytes(), readable_bytes);
  EXPECT_EQ(c.writable_bytes(), writable_bytes);

  // A copy holds the same segments; the moved-from chain is left empty.
  Chain copy = c;
  ASSERT_EQ(copy.writable().size(), kEntries - kReadable);
  EXPECT_EQ(copy.writable()[5].data, c.writable()[5].data);
  Chain moved = std::move(copy);
  EXPECT_EQ(moved.readable().size(), kReadable);
  EXPECT_TRUE(copy.readable().empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(copy.writable().empty());  // NOLINT(bugprone-use-after-move)
  q_.Complete(moved, 3);
  q_.Flush();
  EXPECT_EQ(ring_.used_elem(0).second, 3u);

  ring_.SetDesc(1, kBuf, 4, N, 2);
  ring_.SetDesc(2, kBuf + 0x100, 8, W, 0);
  ring_.Publish(1);
  ASSERT_TRUE(q_.Pop(&c));
  ASSERT_EQ(c.readable().size(), 1u);
  ASSERT_EQ(c.writable().size(), 1u);
  EXPECT_TRUE(testing::Aliases(c.readable()[0].data, guest_.host(kBuf)));
  EXPECT_TRUE(testing::Aliases(c.writable()[0].data, guest_.host(kBuf + 0x100)));
  EXPECT_EQ(c.readable_bytes(), 4u);
  EXPECT_EQ(c.writable_bytes(), 8u);
}

// The inline/heap boundary itself: exactly kInlineSegments, then one more.
TEST_F(VdevSplitQueueTest, ChainsAroundTheInlineCapacity) {
  for (uint32_t n : {Chain::kInlineSegments, Chain::kInlineSegments + 1}) {
    for (uint16_t i = 0; i < n; ++i) {
      ring_.SetDesc(i, kBuf + 0x10 * i, 2, static_cast<uint16_t>((i + 1u < n ? N : 0) | W),
                    static_cast<uint16_t>(i + 1), kTable);
    }
    ring_.SetDesc(0, kTable, 16u * n, I, 0);
    ring_.Publish(0);
    Chain c;
    ASSERT_TRUE(q_.Pop(&c)) << n;
    EXPECT_TRUE(c.readable().empty());
    ASSERT_EQ(c.writable().size(), n);
    EXPECT_EQ(c.writable_bytes(), 2u * n);
    EXPECT_TRUE(testing::Aliases(c.writable()[n - 1].data, guest_.host(kBuf + 0x10 * (n - 1))));
    q_.Complete(c, 0);
    q_.Flush();
  }
}

TEST_F(VdevSplitQueueTest, IndirectAbuseIsSkipped) {
  ring_.SetDesc(0, kTable, 0, I, 0);
  ring_.Publish(0);
  ExpectMalformed("zero-length table");
  ring_.SetDesc(0, kTable, 24, I, 0);
  ring_.Publish(0);
  ExpectMalformed("length not a multiple of 16");
  ring_.SetDesc(0, kTable + 8, 32, I, 0);
  ring_.Publish(0);
  ExpectMalformed("misaligned table");
  ring_.SetDesc(0, 0x7000000, 32, I, 0);
  ring_.Publish(0);
  ExpectMalformed("table outside memory");
  ring_.SetDesc(0, kTable, 16 * 2048, I, 0);
  ring_.Publish(0);
  ExpectMalformed("table over the entry limit");
  ring_.SetDesc(0, kTable, 32, I | N, 1);
  ring_.Publish(0);
  ExpectMalformed("indirect with NEXT");
  // Nested: the table points at another table.
  ring_.SetDesc(0, kTable + 0x100, 16, I, 0, kTable);
  ring_.SetDesc(0, kTable, 16, I, 0);
  ring_.Publish(0);
  ExpectMalformed("nested indirect");
  // A loop inside the table.
  ring_.SetDesc(0, kBuf, 4, N, 1, kTable);
  ring_.SetDesc(1, kBuf, 4, N, 0, kTable);
  ring_.SetDesc(0, kTable, 32, I, 0);
  ring_.Publish(0);
  ExpectMalformed("loop in table");
  // next beyond the table's own entry count.
  ring_.SetDesc(0, kBuf, 4, N, 2, kTable);
  ring_.SetDesc(0, kTable, 32, I, 0);
  ring_.Publish(0);
  ExpectMalformed("next outside table");
}

TEST_F(VdevSplitQueueTest, IndirectWithoutTheFeatureIsSkipped) {
  q_.Stop();
  Configure(&q_, false, /*indirect=*/false);
  ring_.SetDesc(0, kBuf, 4, 0, 0, kTable);
  ring_.SetDesc(0, kTable, 16, I, 0);
  ring_.Publish(0);
  ExpectMalformed("indirect not negotiated");
}

TEST_F(VdevSplitQueueTest, AvailIndexJumpBreaksTheRing) {
  ring_.SetDesc(0, kBuf, 4, 0, 0);
  ring_.set_avail_idx(kRingSize + 1);
  Chain c;
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_TRUE(q_.broken());
  EXPECT_EQ(Drain(err_), 1u);
  EXPECT_EQ(ring_.used_idx(), 0);  // nothing processed
  ring_.set_avail_idx(1);          // even a repaired index is ignored until restart
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_FALSE(q_.HasAvailable());
  EXPECT_EQ(Drain(err_), 0u);  // signalled once
  // A restart (GET_VRING_BASE + SET_VRING_KICK) clears it.
  q_.Stop();
  q_.set_last_avail(0);
  std::string error;
  ASSERT_TRUE(q_.Start(guest_.memory, &error));
  ring_.SetDesc(0, kBuf, 4, 0, 0);
  EXPECT_TRUE(q_.Pop(&c));
}

TEST_F(VdevSplitQueueTest, AvailIndexExactlyOneRingAheadIsLegal) {
  for (uint16_t i = 0; i < kRingSize; ++i) {
    ring_.SetDesc(i, kBuf, 4, 0, 0);
    ring_.Publish(i);
  }
  EXPECT_TRUE(q_.HasAvailable());
  EXPECT_FALSE(q_.broken());
}

TEST_F(VdevSplitQueueTest, HeadOutsideTheRingBreaksIt) {
  ring_.Publish(kRingSize);
  Chain c;
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_TRUE(q_.broken());
}

TEST_F(VdevSplitQueueTest, HeadAlreadyInFlightBreaksTheRing) {
  ring_.SetDesc(0, kBuf, 4, 0, 0);
  ring_.Publish(0);
  ring_.Publish(0);
  Chain a, b;
  ASSERT_TRUE(q_.Pop(&a));
  EXPECT_FALSE(q_.Pop(&b));
  EXPECT_TRUE(q_.broken());
}

TEST_F(VdevSplitQueueTest, CompletionFromAStoppedRingIsIgnored) {
  ring_.SetDesc(0, kBuf, 4, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  q_.Stop();
  q_.set_last_avail(1);
  std::string error;
  ASSERT_TRUE(q_.Start(guest_.memory, &error));
  q_.Complete(c, 4);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), 0);
}

TEST_F(VdevSplitQueueTest, StartValidatesRingAddresses) {
  SplitQueue q(1);
  std::string error;
  EXPECT_FALSE(q.Start(guest_.memory, &error));  // no size, no addresses
  q.set_size(3);
  q.set_addresses(ring_.desc_uva(), ring_.avail_uva(), ring_.used_uva());
  EXPECT_FALSE(q.Start(guest_.memory, &error));  // not a power of two
  q.set_size(kRingSize);
  EXPECT_FALSE(q.Start(nullptr, &error));
  q.set_addresses(ring_.desc_uva() + 8, ring_.avail_uva(), ring_.used_uva());
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  EXPECT_NE(error.find("misaligned"), std::string::npos);
  q.set_addresses(ring_.desc_uva(), ring_.avail_uva() + 1, ring_.used_uva());
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  q.set_addresses(ring_.desc_uva(), ring_.avail_uva(), ring_.used_uva() + 2);
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  // Used ring running past the end of guest RAM.
  q.set_addresses(ring_.desc_uva(), ring_.avail_uva(), kGpaBase + kUvaDelta + (1 << 20) - 16);
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  EXPECT_NE(error.find("outside"), std::string::npos);
  // Overlapping parts (avail inside used).
  q.set_addresses(ring_.desc_uva(), ring_.used_uva() + 8, ring_.used_uva());
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  EXPECT_NE(error.find("overlap"), std::string::npos);
  // Guest-physical addresses are not front-end addresses.
  q.set_addresses(kDesc, kAvail, kUsed);
  EXPECT_FALSE(q.Start(guest_.memory, &error));
  EXPECT_FALSE(SplitQueue::ValidSize(0));
  EXPECT_FALSE(SplitQueue::ValidSize(65536));
  EXPECT_TRUE(SplitQueue::ValidSize(32768));
}

TEST_F(VdevSplitQueueTest, ChainTotalsAreCapped) {
  SplitQueue q(1, QueueLimits{.max_indirect = 1024, .max_chain_bytes = 1000});
  Configure(&q, false, true);
  ring_.SetDesc(0, kBuf, 600, W | N, 1);
  ring_.SetDesc(1, kBuf, 600, W, 0);
  ring_.Publish(0);
  Chain c;
  EXPECT_FALSE(q.Pop(&c));
  EXPECT_EQ(q.stats().malformed, 1u);
  ring_.SetDesc(1, kBuf, 400, W, 0);
  ring_.Publish(0);
  EXPECT_TRUE(q.Pop(&c));
  EXPECT_EQ(c.writable_bytes(), 1000u);
}

TEST_F(VdevSplitQueueTest, ATurnIsBoundedAndYields) {
  int yields = 0;
  q_.set_on_yield([&](uint16_t index) {
    EXPECT_EQ(index, 0);
    ++yields;
  });
  q_.NewTurn();
  for (uint16_t i = 0; i < kRingSize; ++i) ring_.SetDesc(i, kBuf, 4, W, 0);
  Chain c;
  // Twice the ring size per turn, here with a device that completes and
  // publishes each chain at once while the driver keeps re-posting.
  for (int round = 0; round < 2 * kRingSize; ++round) {
    ring_.Publish(static_cast<uint16_t>(round % kRingSize));
    ASSERT_TRUE(q_.Pop(&c)) << round;
    q_.Complete(c, 0);
    q_.Flush();
  }
  ring_.Publish(0);
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_EQ(yields, 1);
  q_.NewTurn();
  EXPECT_TRUE(q_.Pop(&c));
}

TEST_F(VdevSplitQueueTest, ATurnServesAtMostMaxChainsPerTurn) {
  SplitQueue q(0, QueueLimits{.max_chains_per_turn = 3});
  Configure(&q, false, false);
  int yields = 0;
  q.set_on_yield([&](uint16_t) { ++yields; });
  PublishWritableChains(5);
  q.NewTurn();
  Chain c;
  int popped = 0;
  while (q.Pop(&c)) ++popped;
  EXPECT_EQ(popped, 3);
  EXPECT_EQ(yields, 1) << "the owner is asked for another turn";
  q.NewTurn();
  while (q.Pop(&c)) ++popped;
  EXPECT_EQ(popped, 5);
  EXPECT_EQ(yields, 1) << "nothing was left over";
}

TEST_F(VdevSplitQueueTest, ATurnEndsOnceItsTimeIsSpentAndTheNextTurnServesTheRest) {
  SplitQueue q(0, QueueLimits{.max_turn_time = std::chrono::milliseconds(1)});
  Configure(&q, false, false);
  int yields = 0;
  q.set_on_yield([&](uint16_t) { ++yields; });
  PublishWritableChains(3);
  q.NewTurn();
  Chain c;
  ASSERT_TRUE(q.Pop(&c)) << "the first chain of a turn is always served";
  // An expensive chain: its handling outlasts the turn's time.
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_FALSE(q.Pop(&c));
  EXPECT_FALSE(q.Pop(&c)) << "a spent turn stays spent";
  EXPECT_EQ(yields, 1) << "the owner is asked for another turn";
  EXPECT_EQ(q.stats().yields, 1u);
  q.NewTurn();
  EXPECT_TRUE(q.Pop(&c));
}

TEST_F(VdevSplitQueueTest, ATimeBoundLeavesCheapChainsToTheCount) {
  // A bound far longer than the test: only the count ends the turn.
  SplitQueue q(0, QueueLimits{.max_chains_per_turn = 3, .max_turn_time = std::chrono::hours(1)});
  Configure(&q, false, false);
  PublishWritableChains(5);
  q.NewTurn();
  Chain c;
  int popped = 0;
  while (q.Pop(&c)) ++popped;
  EXPECT_EQ(popped, 3);
  EXPECT_EQ(q.stats().yields, 1u);
}

TEST_F(VdevSplitQueueTest, NoInterruptFlagSuppressesCallsWithoutEventIdx) {
  ring_.set_avail_flags(kAvailNoInterrupt);
  ring_.SetDesc(0, kBuf, 4, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  q_.Complete(c, 0);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), 1);
  EXPECT_EQ(Drain(call_), 0u);
  EXPECT_EQ(q_.stats().suppressed, 1u);
}

TEST_F(VdevSplitQueueTest, EventIdxDecidesNotifications) {
  q_.Stop();
  Configure(&q_, /*event_idx=*/true, true);
  for (uint16_t i = 0; i < 4; ++i) ring_.SetDesc(i, kBuf, 4, W, 0);
  auto complete_one = [&](uint16_t head) {
    ring_.Publish(head);
    Chain c;
    ASSERT_TRUE(q_.Pop(&c));
    q_.Complete(c, 1);
    q_.Flush();
  };
  ring_.set_used_event(0);
  complete_one(0);  // used 0 -> 1: the driver asked for an interrupt after entry 0
  EXPECT_EQ(Drain(call_), 1u);
  complete_one(1);  // used 1 -> 2: event 0 already passed
  EXPECT_EQ(Drain(call_), 0u);
  ring_.set_used_event(2);
  complete_one(2);  // used 2 -> 3 crosses event 2
  EXPECT_EQ(Drain(call_), 1u);
  ring_.set_used_event(10);
  complete_one(3);
  EXPECT_EQ(Drain(call_), 0u);

  // Draining the ring re-arms avail_event at the next index to pop.
  Chain c;
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_EQ(ring_.avail_event(), q_.last_avail());
  // A chain published after the re-arm is still seen (the re-check).
  ring_.Publish(0);
  EXPECT_TRUE(q_.Pop(&c));
}

TEST_F(VdevSplitQueueTest, BusyPollAsksTheDriverNotToKick) {
  EXPECT_EQ(ring_.used_flags(), 0);
  q_.set_polling(true);
  EXPECT_EQ(ring_.used_flags(), kUsedNoNotify);
  ring_.SetDesc(0, kBuf, 4, 0, 0);
  ring_.Publish(0);
  EXPECT_TRUE(q_.HasAvailable());
  q_.set_polling(false);
  EXPECT_EQ(ring_.used_flags(), 0);
}

TEST_F(VdevSplitQueueTest, BusyPollWithEventIdxLeavesNoKickArmed) {
  q_.Stop();
  Configure(&q_, /*event_idx=*/true, true);
  ring_.SetDesc(0, kBuf, 4, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  EXPECT_FALSE(q_.Pop(&c));  // empty: avail_event armed at the next index
  EXPECT_TRUE(ring_.Kicks(true, 1, 2));
  q_.set_polling(true);
  EXPECT_FALSE(ring_.Kicks(true, 1, 2));  // nor for the chains after it
  EXPECT_FALSE(ring_.Kicks(true, 1, 9));
}

// A process that crashed while it polled a ring left the driver asked not
// to kick; the ring's next owner asks for kicks again as it starts.
TEST_F(VdevSplitQueueTest, StartingARingUndoesAPredecessorsSuppression) {
  for (bool event_idx : {false, true}) {
    SCOPED_TRACE(event_idx ? "EVENT_IDX" : "flags");
    q_.Stop();
    Configure(&q_, event_idx, true);
    q_.set_polling(true);
    const uint16_t base = ring_.avail_idx();
    ASSERT_FALSE(ring_.Kicks(event_idx, base, static_cast<uint16_t>(base + 1)));
    SplitQueue successor(0);
    Configure(&successor, event_idx, true);
    EXPECT_TRUE(ring_.Kicks(event_idx, base, static_cast<uint16_t>(base + 1)));
  }
}

// Polling that ends must not strand a chain the driver added while it was
// asked not to kick: EndPolling says so and the caller serves it.
TEST_F(VdevSplitQueueTest, EndPollingFindsWhatCameWithoutAKick) {
  for (bool event_idx : {false, true}) {
    SCOPED_TRACE(event_idx ? "EVENT_IDX" : "flags");
    q_.Stop();
    Configure(&q_, event_idx, true);
    const uint16_t base = ring_.avail_idx();
    q_.set_polling(true);
    EXPECT_FALSE(q_.EndPolling());  // nothing came
    EXPECT_TRUE(ring_.Kicks(event_idx, base, static_cast<uint16_t>(base + 1)));
    q_.set_polling(true);
    ring_.SetDesc(0, kBuf, 4, W, 0);
    ring_.Publish(0);
    EXPECT_TRUE(q_.EndPolling());
    Chain c;
    ASSERT_TRUE(q_.Pop(&c));
    q_.Complete(c, 0);
    q_.Flush();
  }
}

TEST_F(VdevSplitQueueTest, NoCallFdMeansNoNotification) {
  q_.set_call_fd(-1);
  ring_.SetDesc(0, kBuf, 4, W, 0);
  ring_.Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  q_.Complete(c, 2);
  q_.Flush();
  EXPECT_EQ(ring_.used_idx(), 1);
  EXPECT_EQ(Drain(call_), 0u);
}

TEST(VdevSplitQueueRegions, BuffersAreSplitAtRegionBoundariesAndRemapKeepsChainsValid) {
  testing::GuestRam ram(0x40000);
  // gpa [0x0, 0x10000) -> file 0x20000; gpa [0x10000, 0x20000) -> file 0x0.
  auto lo = ram.Region(0x0, 0x10000, 0x20000, 0x100000);
  auto hi = ram.Region(0x10000, 0x10000, 0x0, 0x200000);
  auto memory =
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{lo, hi});
  // Ring in the high region: desc 0x10000, avail 0x11000, used 0x12000.
  auto host = [&](uint64_t gpa) {
    return gpa >= 0x10000 ? ram.at(gpa - 0x10000) : ram.at(0x20000 + gpa);
  };
  uint8_t* d = host(0x10000);
  uint64_t addr = 0xfff0;
  uint32_t len = 0x20;
  uint16_t flags = W, next = 0, head = 0, idx = 1;
  std::memcpy(d, &addr, 8);
  std::memcpy(d + 8, &len, 4);
  std::memcpy(d + 12, &flags, 2);
  std::memcpy(d + 14, &next, 2);
  std::memcpy(host(0x11004), &head, 2);
  std::memcpy(host(0x11002), &idx, 2);

  SplitQueue q(0);
  q.set_size(4);
  q.set_addresses(0x200000, 0x201000, 0x202000);
  std::string error;
  ASSERT_TRUE(q.Start(memory, &error)) << error;
  Chain c;
  ASSERT_TRUE(q.Pop(&c));
  ASSERT_EQ(c.writable().size(), 2u);
  EXPECT_TRUE(testing::Aliases(c.writable()[0].data, host(0xfff0)));
  EXPECT_EQ(c.writable()[0].len, 0x10u);
  EXPECT_TRUE(testing::Aliases(c.writable()[1].data, host(0x10000)));
  EXPECT_EQ(c.writable()[1].len, 0x10u);

  // Hot-remove of the low region: the ring (high region) is re-translated and
  // keeps running; the popped chain still holds the old map.
  auto smaller = std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{hi});
  lo.reset();
  memory.reset();
  ASSERT_TRUE(q.Remap(smaller, &error)) << error;
  std::memset(c.writable()[0].data, 0xab, c.writable()[0].len);  // still mapped
  q.Complete(c, 0x20);
  q.Flush();
  uint16_t used_idx;
  std::memcpy(&used_idx, host(0x12002), 2);
  EXPECT_EQ(used_idx, 1);
  // Removing the ring's own region breaks the ring instead of dangling.
  EXPECT_FALSE(q.Remap(std::make_shared<const MemoryMap>(), &error));
  EXPECT_TRUE(q.broken());
}

// The queue translates most buffers through a copy of the region the previous
// buffer hit. These check that the copy never changes what a chain means.
class VdevSplitQueueHotRegion : public ::testing::Test {
 protected:
  // gpa [0x0, 0x10000) -> file 0x20000; gpa [0x10000, 0x20000) -> file 0x0;
  // the ring lives in the high region (desc 0x10000, avail 0x11000, used 0x12000).
  VdevSplitQueueHotRegion()
      : ram_(0x40000),
        lo_(ram_.Region(0x0, 0x10000, 0x20000, 0x100000)),
        hi_(ram_.Region(0x10000, 0x10000, 0x0, 0x200000)),
        q_(0) {
    q_.set_size(4);
    q_.set_addresses(0x200000, 0x201000, 0x202000);
  }
  uint8_t* host(uint64_t gpa) {
    return gpa >= 0x10000 ? ram_.at(gpa - 0x10000) : ram_.at(0x20000 + gpa);
  }
  void SetDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    uint8_t* d = host(0x10000 + 16ull * i);
    std::memcpy(d, &addr, 8);
    std::memcpy(d + 8, &len, 4);
    std::memcpy(d + 12, &flags, 2);
    std::memcpy(d + 14, &next, 2);
  }
  void Publish(uint16_t head) {
    uint16_t idx;
    std::memcpy(&idx, host(0x11002), 2);
    std::memcpy(host(0x11004 + 2ull * (idx % 4)), &head, 2);
    ++idx;
    std::memcpy(host(0x11002), &idx, 2);
  }
  uint32_t UsedLen(uint16_t i) {
    uint32_t len;
    std::memcpy(&len, host(0x12004 + 8ull * (i % 4) + 4), 4);
    return len;
  }
  // Pops a one-buffer writable chain at addr and completes it.
  void PopOne(uint64_t addr, uint32_t len, size_t expect_segments) {
    SetDesc(0, addr, len, W, 0);
    Publish(0);
    Chain c;
    ASSERT_TRUE(q_.Pop(&c));
    EXPECT_EQ(c.writable().size(), expect_segments);
    q_.Complete(c, 0);
    q_.Flush();
  }

  testing::GuestRam ram_;
  std::shared_ptr<MappedRegion> lo_, hi_;
  SplitQueue q_;
};

TEST_F(VdevSplitQueueHotRegion, BufferCrossingOutOfTheCachedRegionIsStillSplit) {
  auto memory =
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{lo_, hi_});
  std::string error;
  ASSERT_TRUE(q_.Start(memory, &error)) << error;
  // Prime the cache with the low region, then cross from it into the high one.
  PopOne(0x8000, 0x100, 1);
  SetDesc(0, 0x9000, 0x10, N, 1);  // readable, low region
  SetDesc(1, 0xfff0, 0x20, W, 0);  // writable, crosses 0x10000
  Publish(0);
  Chain c;
  ASSERT_TRUE(q_.Pop(&c));
  ASSERT_EQ(c.readable().size(), 1u);
  EXPECT_TRUE(testing::Aliases(c.readable()[0].data, host(0x9000)));
  ASSERT_EQ(c.writable().size(), 2u);
  EXPECT_TRUE(testing::Aliases(c.writable()[0].data, host(0xfff0)));
  EXPECT_EQ(c.writable()[0].len, 0x10u);
  EXPECT_TRUE(testing::Aliases(c.writable()[1].data, host(0x10000)));
  EXPECT_EQ(c.writable()[1].len, 0x10u);
  EXPECT_EQ(c.writable_bytes(), 0x20u);
  q_.Complete(c, 0x20);
  q_.Flush();
  EXPECT_EQ(UsedLen(1), 0x20u);
  // Back and forth between the regions: every buffer lands where its gpa says.
  for (uint64_t gpa : {0x100ull, 0x18000ull, 0x200ull, 0x1f000ull}) {
    SetDesc(0, gpa, 0x40, W, 0);
    Publish(0);
    ASSERT_TRUE(q_.Pop(&c)) << gpa;
    ASSERT_EQ(c.writable().size(), 1u) << gpa;
    EXPECT_TRUE(testing::Aliases(c.writable()[0].data, host(gpa))) << gpa;
    q_.Complete(c, 0);
    q_.Flush();
  }
  // The end of the last region: one byte past it is refused.
  SetDesc(0, 0x1ffc0, 0x41, W, 0);
  Publish(0);
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_EQ(q_.stats().malformed, 1u);
  EXPECT_FALSE(q_.broken());
}

TEST_F(VdevSplitQueueHotRegion, RegionRemovedByAMemoryChangeIsNeverUsedAgain) {
  auto memory =
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{lo_, hi_});
  std::string error;
  ASSERT_TRUE(q_.Start(memory, &error)) << error;
  PopOne(0x4000, 0x80, 1);  // the low region is now the cached one
  // Hot-remove the low region: the ring (high region) keeps running.
  ASSERT_TRUE(q_.Remap(
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{hi_}), &error))
      << error;
  memory.reset();
  lo_.reset();  // unmapped now: a stale translation would touch unmapped memory
  // A buffer in the removed region is malformed (completed with 0), not
  // translated through the old region.
  SetDesc(0, 0x4000, 0x80, W, 0);
  Publish(0);
  Chain c;
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_EQ(q_.stats().malformed, 1u);
  EXPECT_EQ(UsedLen(1), 0u);
  EXPECT_FALSE(q_.broken());
  // The remaining region still translates.
  PopOne(0x18000, 0x80, 1);
}

TEST_F(VdevSplitQueueHotRegion, RestartWithADifferentMapDropsTheCachedRegion) {
  auto both =
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{lo_, hi_});
  std::string error;
  ASSERT_TRUE(q_.Start(both, &error)) << error;
  PopOne(0x2000, 0x80, 1);
  q_.Stop();
  q_.set_last_avail(1);
  ASSERT_TRUE(q_.Start(
      std::make_shared<const MemoryMap>(std::vector<std::shared_ptr<MappedRegion>>{hi_}), &error))
      << error;
  SetDesc(0, 0x2000, 0x80, W, 0);
  Publish(0);
  Chain c;
  EXPECT_FALSE(q_.Pop(&c));
  EXPECT_EQ(q_.stats().malformed, 1u);
}

}  // namespace
}  // namespace vdev
