// PopBatch / CompleteBatch against Pop / Complete, and the walk's hand-over
// from the inline path to the general one (long chains, loops, buffers
// outside the cached region) in a ring larger than a Chain's inline array.
#include <sys/eventfd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "test_util.h"
#include "vdev/split_queue.h"

namespace vdev {
namespace {

using testing::I;
using testing::kAvail;
using testing::kBuf;
using testing::kDesc;
using testing::kGpaBase;
using testing::kTable;
using testing::kUsed;
using testing::N;
using testing::RingDriver;
using testing::SimpleGuest;
using testing::W;

constexpr uint16_t kBatchRingSize = 64;

// One guest with its ring and a started queue on it.
struct Ring {
  explicit Ring(QueueLimits limits = {}) : q(0, limits) {
    q.set_size(kBatchRingSize);
    q.set_addresses(driver.desc_uva(), driver.avail_uva(), driver.used_uva());
    q.set_features(/*event_idx=*/false, /*indirect=*/true);
    std::string error;
    EXPECT_TRUE(q.Start(guest.memory, &error)) << error;
    q.set_polling(true);
  }
  // A chain of `readable` then `writable` descriptors starting at `first`
  // (consecutive indices), buffers of `len` bytes at kBuf + 0x100 * index.
  void Chain(uint16_t first, uint16_t readable, uint16_t writable, uint32_t len = 16) {
    const uint16_t n = readable + writable;
    for (uint16_t k = 0; k < n; ++k) {
      const auto i = static_cast<uint16_t>(first + k);
      const uint16_t flags = static_cast<uint16_t>((k + 1 < n ? N : 0) | (k >= readable ? W : 0));
      driver.SetDesc(i, kBuf + 0x100ull * i, len, flags, static_cast<uint16_t>(i + 1));
    }
    driver.Publish(first);
  }

  SimpleGuest guest;
  RingDriver driver{&guest, kBatchRingSize, kDesc, kAvail, kUsed};
  SplitQueue q;
};

// What a chain says about itself, comparable across two guests (whose host
// addresses differ): head, segment lengths per direction, totals, bytes.
std::string Describe(const Chain& c) {
  std::string s = "head " + std::to_string(c.head()) + " r";
  for (const Segment& g : c.readable()) s += " " + std::to_string(g.len);
  s += " w";
  for (const Segment& g : c.writable()) s += " " + std::to_string(g.len);
  s += " bytes " + std::to_string(c.readable_bytes()) + "/" + std::to_string(c.writable_bytes());
  std::vector<char> data(c.readable_bytes());
  c.Read(0, data.data(), data.size());
  s += " data " + std::string(data.begin(), data.end());
  return s;
}

// Every chain the ring has, as Pop takes them one at a time.
std::vector<std::string> PopOneByOne(Ring& r) {
  std::vector<std::string> popped;
  Chain c;
  while (r.q.Pop(&c)) popped.push_back(Describe(c));
  return popped;
}

// The same through PopBatch, kBatch chains at most per call.
template <size_t kBatch>
std::vector<std::string> PopInBatches(Ring& r) {
  std::vector<std::string> popped;
  Chain chains[kBatch];
  for (;;) {
    const size_t n = r.q.PopBatch(chains);
    for (size_t i = 0; i < n; ++i) popped.push_back(Describe(chains[i]));
    if (n < kBatch) return popped;
  }
}

// Lays out the same mix of chains in a ring: ordinary, readable- or
// writable-only, zero-length descriptors, longer than the inline array,
// indirect, and malformed ones (skipped) in between.
void LayOut(Ring& r) {
  for (uint64_t i = 0; i < 0x100ull * kBatchRingSize; ++i) {
    *r.guest.host(kBuf + i) = static_cast<uint8_t>('a' + i % 23);
  }
  r.Chain(0, 1, 1);
  r.Chain(2, 3, 0);
  r.Chain(5, 0, 2, 8);
  r.Chain(7, 10, 3);                          // 13 segments: past the inline array
  r.driver.SetDesc(20, 0x7fff0000, 8, 0, 0);  // outside guest memory: skipped
  r.driver.Publish(20);
  r.Chain(21, 1, 1, 0);                      // zero-length buffers yield no segments
  r.driver.SetDesc(23, kBuf, 8, W | N, 24);  // readable after writable: skipped
  r.driver.SetDesc(24, kBuf, 8, 0, 0);
  r.driver.Publish(23);
  for (uint16_t k = 0; k < 4; ++k) {
    r.driver.SetDesc(k, kBuf + 0x40 * k, 12,
                     static_cast<uint16_t>((k < 3 ? N : 0) | (k >= 2 ? W : 0)),
                     static_cast<uint16_t>(k + 1), kTable);
  }
  r.driver.SetDesc(25, kTable, 64, I, 0);
  r.driver.Publish(25);
  r.Chain(26, 2, 2);
}

TEST(VdevSplitQueueBatch, PopBatchPopsWhatPopWould) {
  Ring one, batch;
  LayOut(one);
  LayOut(batch);
  const std::vector<std::string> want = PopOneByOne(one);
  ASSERT_EQ(want.size(), 7u);  // nine published, two malformed
  EXPECT_EQ(PopInBatches<3>(batch), want);
  EXPECT_EQ(batch.q.stats().popped, one.q.stats().popped);
  EXPECT_EQ(batch.q.stats().malformed, 2u);
  EXPECT_EQ(batch.q.in_flight(), 7u);
  EXPECT_EQ(batch.q.last_avail(), one.q.last_avail());
  // The malformed chains were completed with length 0 as they were met.
  EXPECT_EQ(batch.driver.used_idx(), 2);
  EXPECT_EQ(batch.driver.used_elem(0), std::make_pair(20u, 0u));
  EXPECT_EQ(batch.driver.used_elem(1), std::make_pair(23u, 0u));
}

// PopBatch serves a readable-then-writable pair of direct descriptors on a
// path of its own; every chain that starts like one and then differs goes
// on from the descriptor where it differs. Each must come out as Pop has it.
void LayOutPairs(Ring& r) {
  for (uint64_t i = 0; i < 0x100ull * kBatchRingSize; ++i) {
    *r.guest.host(kBuf + i) = static_cast<uint8_t>('A' + i % 19);
  }
  r.Chain(0, 1, 1);  // the pair itself
  r.Chain(2, 1, 2);  // a second writable descriptor
  r.Chain(5, 2, 1);  // a second readable descriptor
  r.Chain(8, 1, 1);  // writable buffer outside guest memory: skipped
  r.driver.SetDesc(9, 0x7fff0000, 8, W, 0);
  r.Chain(10, 1, 1, 0);                  // zero-length buffers
  r.driver.SetDesc(12, kBuf, 8, N, 13);  // then an indirect table
  r.driver.SetDesc(0, kBuf + 0x40, 12, W, 0, kTable);
  r.driver.SetDesc(13, kTable, 16, I, 0);
  r.driver.Publish(12);
  r.Chain(14, 1, 1);  // next index outside the ring: skipped
  r.driver.SetDesc(14, kBuf, 8, N, kBatchRingSize);
  r.Chain(16, 1, 1);  // readable buffer outside guest memory: skipped
  r.driver.SetDesc(16, 0x7fff0000, 8, N, 17);
  r.Chain(18, 1, 1);  // the pair again, after all that
}

TEST(VdevSplitQueueBatch, PopBatchTakesPairsAndWhatStartsLikeThemAsPopDoes) {
  Ring one, batch;
  LayOutPairs(one);
  LayOutPairs(batch);
  const std::vector<std::string> want = PopOneByOne(one);
  ASSERT_EQ(want.size(), 6u);  // nine published, three malformed
  const std::vector<std::string> got = PopInBatches<4>(batch);
  ASSERT_EQ(got, want);
  EXPECT_EQ(batch.q.stats().malformed, 3u);
  EXPECT_EQ(batch.q.in_flight(), 6u);
  EXPECT_EQ(batch.q.last_avail(), 9);
  EXPECT_FALSE(batch.q.broken());
  // The shapes, as the device sees them.
  EXPECT_EQ(got[0].substr(0, got[0].find(" data")), "head 0 r 16 w 16 bytes 16/16");
  EXPECT_EQ(got[1].substr(0, got[1].find(" data")), "head 2 r 16 w 16 16 bytes 16/32");
  EXPECT_EQ(got[2].substr(0, got[2].find(" data")), "head 5 r 16 16 w 16 bytes 32/16");
  EXPECT_EQ(got[3].substr(0, got[3].find(" data")), "head 10 r w bytes 0/0");
  EXPECT_EQ(got[4].substr(0, got[4].find(" data")), "head 12 r 8 w 12 bytes 8/12");
  EXPECT_EQ(got[5].substr(0, got[5].find(" data")), "head 18 r 16 w 16 bytes 16/16");
}

// A ring of one descriptor cannot hold a pair: a head whose NEXT names
// itself is a loop, however the descriptor reads the second time.
TEST(VdevSplitQueueBatch, APairInARingOfOneIsALoop) {
  SimpleGuest guest;
  RingDriver driver(&guest, 1, kDesc, kAvail, kUsed);
  SplitQueue q(0);
  q.set_size(1);
  q.set_addresses(driver.desc_uva(), driver.avail_uva(), driver.used_uva());
  std::string error;
  ASSERT_TRUE(q.Start(guest.memory, &error)) << error;
  driver.SetDesc(0, kBuf, 8, N, 0);
  driver.Publish(0);
  Chain chains[2];
  EXPECT_EQ(q.PopBatch(chains), 0u);
  EXPECT_EQ(q.stats().malformed, 1u);
  EXPECT_EQ(driver.used_idx(), 1);   // completed with length 0
  driver.SetDesc(0, kBuf, 8, 0, 0);  // a single descriptor fits
  driver.Publish(0);
  ASSERT_EQ(q.PopBatch(chains), 1u);
  EXPECT_EQ(chains[0].readable_bytes(), 8u);
}

TEST(VdevSplitQueueBatch, CompleteBatchPublishesInOrderAndIgnoresWhatCompleteIgnores) {
  Ring r;
  for (uint16_t k = 0; k < 4; ++k) r.Chain(static_cast<uint16_t>(2 * k), 1, 1);
  Chain chains[4];
  ASSERT_EQ(r.q.PopBatch(chains), 4u);
  EXPECT_EQ(r.q.in_flight(), 4u);
  // Out of order, one length over the writable bytes (clamped to 16), and
  // the same chain twice (the second time it is not in flight: ignored).
  const Chain order[5] = {chains[2], chains[0], chains[3], chains[1], chains[0]};
  const uint32_t written[5] = {5, 100, 0, 16, 7};
  r.q.CompleteBatch(order, written);
  EXPECT_EQ(r.driver.used_idx(), 0);  // published by Flush only
  r.q.Flush();
  ASSERT_EQ(r.driver.used_idx(), 4);
  EXPECT_EQ(r.driver.used_elem(0), std::make_pair(4u, 5u));
  EXPECT_EQ(r.driver.used_elem(1), std::make_pair(0u, 16u));
  EXPECT_EQ(r.driver.used_elem(2), std::make_pair(6u, 0u));
  EXPECT_EQ(r.driver.used_elem(3), std::make_pair(2u, 16u));
  EXPECT_EQ(r.q.in_flight(), 0u);
  EXPECT_EQ(r.q.stats().completed, 4u);

  // Chains of a ring that was restarted since are ignored, and an empty
  // batch is nothing.
  r.Chain(0, 1, 1);
  ASSERT_EQ(r.q.PopBatch({chains, 1}), 1u);
  r.q.Stop();
  r.q.set_last_avail(5);
  std::string error;
  ASSERT_TRUE(r.q.Start(r.guest.memory, &error)) << error;
  r.q.CompleteBatch({chains, 1}, {written, 1});
  r.q.CompleteBatch({}, {});
  r.q.Flush();
  EXPECT_EQ(r.driver.used_idx(), 4);
}

TEST(VdevSplitQueueBatch, TheDefaultBatchFormsLoopOverPopAndComplete) {
  // A Queue that only has the one-chain calls.
  class Fifo final : public Queue {
   public:
    uint16_t index() const override { return 0; }
    uint16_t size() const override { return 8; }
    bool Pop(Chain* out) override {
      if (next_ == 3) return false;
      *out = Chain(next_++, {}, {}, nullptr);
      return true;
    }
    void Complete(const Chain& chain, uint32_t written) override {
      completed.emplace_back(chain.head(), written);
    }
    void Flush() override {}
    void Return(const Chain&) override {}
    std::vector<std::pair<uint16_t, uint32_t>> completed;

   private:
    uint16_t next_ = 0;
  };
  Fifo q;
  Chain chains[2];
  Queue& queue = q;
  ASSERT_EQ(queue.PopBatch(chains), 2u);
  EXPECT_EQ(chains[1].head(), 1);
  const uint32_t written[2] = {10, 11};
  queue.CompleteBatch(chains, written);
  ASSERT_EQ(queue.PopBatch(chains), 1u);
  EXPECT_EQ(chains[0].head(), 2);
  EXPECT_EQ(queue.PopBatch(chains), 0u);
  const std::vector<std::pair<uint16_t, uint32_t>> want = {{0, 10}, {1, 11}};
  EXPECT_EQ(q.completed, want);
}

// The inline walk takes at most a Chain's inline array (capped at the ring
// size) of descriptors; the general walk continues with what is left of the
// ring-size bound.
TEST(VdevSplitQueueBatch, LongChainsAndLoopsBeyondTheInlineArray) {
  static_assert(kBatchRingSize > 2 * Chain::kInlineSegments);
  Ring r;
  Chain c;
  // The longest legal chain: every descriptor of the ring, readable then writable.
  r.Chain(0, kBatchRingSize - 5, 5, 4);
  ASSERT_TRUE(r.q.Pop(&c));
  EXPECT_EQ(c.readable().size(), kBatchRingSize - 5u);
  EXPECT_EQ(c.writable().size(), 5u);
  EXPECT_EQ(c.readable_bytes(), 4u * (kBatchRingSize - 5));
  EXPECT_EQ(c.writable_bytes(), 20u);
  EXPECT_TRUE(
      testing::Aliases(c.writable()[4].data, r.guest.host(kBuf + 0x100ull * (kBatchRingSize - 1))));
  r.q.Complete(c, 0);

  // A loop through the whole ring: one descriptor more than the ring holds.
  for (uint16_t i = 0; i < kBatchRingSize; ++i) {
    r.driver.SetDesc(i, kBuf, 4, N, static_cast<uint16_t>((i + 1) % kBatchRingSize));
  }
  r.driver.Publish(0);
  EXPECT_FALSE(r.q.Pop(&c));
  EXPECT_EQ(r.q.stats().malformed, 1u);
  // A short loop, caught within the inline walk's reach or just past it.
  for (uint32_t len : {2u, 3u, Chain::kInlineSegments, Chain::kInlineSegments + 1}) {
    for (uint16_t i = 0; i < len; ++i) {
      r.driver.SetDesc(i, kBuf, 4, W | N, static_cast<uint16_t>((i + 1) % len));
    }
    r.driver.Publish(0);
    EXPECT_FALSE(r.q.Pop(&c)) << len;
  }
  EXPECT_EQ(r.q.stats().malformed, 5u);

  // Readable descriptors past the inline array, a writable one, then a
  // readable one again: the general walk still rejects it.
  r.Chain(0, 12, 2);
  r.driver.SetDesc(13, kBuf, 4, 0, 0);
  EXPECT_FALSE(r.q.Pop(&c));
  EXPECT_EQ(r.q.stats().malformed, 6u);
  EXPECT_FALSE(r.q.broken());
}

TEST(VdevSplitQueueBatch, ChainLimitCountsEachDirection) {
  Ring r(QueueLimits{.max_indirect = 64, .max_chain_bytes = 100});
  Chain c;
  r.Chain(0, 5, 0, 20);  // 100 readable bytes: at the limit
  ASSERT_TRUE(r.q.Pop(&c));
  EXPECT_EQ(c.readable_bytes(), 100u);
  r.q.Complete(c, 0);
  r.Chain(0, 4, 4, 25);  // 100 each way
  ASSERT_TRUE(r.q.Pop(&c));
  r.q.Complete(c, 0);
  r.Chain(0, 11, 0, 10);  // 110 readable, past the inline array
  EXPECT_FALSE(r.q.Pop(&c));
  r.Chain(0, 1, 6, 17);  // 102 writable
  EXPECT_FALSE(r.q.Pop(&c));
  EXPECT_EQ(r.q.stats().malformed, 2u);
  // PopBatch checks it for a readable/writable pair too.
  Chain chains[1];
  r.Chain(0, 1, 1, 100);
  ASSERT_EQ(r.q.PopBatch(chains), 1u);
  EXPECT_EQ(chains[0].writable_bytes(), 100u);
  r.q.Complete(chains[0], 0);
  r.Chain(0, 1, 1, 101);
  EXPECT_EQ(r.q.PopBatch(chains), 0u);
  r.driver.SetDesc(0, kBuf, 100, N, 1);  // only the writable one over
  r.driver.SetDesc(1, kBuf, 101, W, 0);
  r.driver.Publish(0);
  EXPECT_EQ(r.q.PopBatch(chains), 0u);
  EXPECT_EQ(r.q.stats().malformed, 4u);
}

// PopBatch takes a readable/writable pair in a loop of its own that accepts
// buffers from the first max_chain_bytes of the cached region only; a pair
// elsewhere goes through the general walk. Either way the limit holds and a
// pair within it is served, with segments where the buffers are.
TEST(VdevSplitQueueBatch, ChainLimitHoldsWhereverAPairLies) {
  constexpr uint64_t kLimit = 0x20000;  // the cut ends past kBuf, before kFar
  constexpr uint64_t kFar = kGpaBase + 0x40000;
  Ring r(QueueLimits{.max_indirect = 64, .max_chain_bytes = kLimit});
  Chain chains[1];
  const auto pop_pair = [&](uint64_t readable_gpa, uint32_t readable_len, uint64_t writable_gpa,
                            uint32_t writable_len) {
    r.driver.SetDesc(0, readable_gpa, readable_len, N, 1);
    r.driver.SetDesc(1, writable_gpa, writable_len, W, 0);
    r.driver.Publish(0);
    const size_t n = r.q.PopBatch(chains);
    if (n == 1) r.q.Complete(chains[0], 0);
    return n;
  };
  for (const uint64_t at : {kBuf, kFar}) {
    SCOPED_TRACE(at);
    ASSERT_EQ(pop_pair(at, 16, at + 0x100, 32), 1u);
    ASSERT_EQ(chains[0].readable().size(), 1u);
    ASSERT_EQ(chains[0].writable().size(), 1u);
    EXPECT_TRUE(testing::Aliases(chains[0].readable()[0].data, r.guest.host(at)));
    EXPECT_TRUE(testing::Aliases(chains[0].writable()[0].data, r.guest.host(at + 0x100)));
    EXPECT_EQ(chains[0].readable_bytes(), 16u);
    EXPECT_EQ(chains[0].writable_bytes(), 32u);
    ASSERT_EQ(pop_pair(at, kLimit, at + kLimit, kLimit), 1u);  // at the limit both ways
    EXPECT_EQ(pop_pair(at, kLimit + 1, at + 2 * kLimit, 16), 0u);
    EXPECT_EQ(pop_pair(at, 16, at + 0x100, kLimit + 1), 0u);
  }
  EXPECT_EQ(r.q.stats().malformed, 4u);
  EXPECT_FALSE(r.q.broken());
}

}  // namespace
}  // namespace vdev
