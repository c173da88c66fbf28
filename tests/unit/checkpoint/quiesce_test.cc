// The seqlock copy against a live writer thread.
#include "quiesce.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "protocol/harmonaize.h"

namespace hz::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

// The writer fills the whole state with one value per step, marking the
// update with the seqlock; a consistent copy therefore holds a single value,
// and that value equals the step it reports.
TEST(CheckpointQuiesce, CopiesAreConsistentUnderAMutatingWriter) {
  alignas(8) hz_quiesce_word word{};
  std::vector<uint64_t> state(64 * 1024, 0);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint64_t step = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      SeqlockBeginWrite(reinterpret_cast<uint8_t*>(&word));
      ++step;
      for (auto& v : state) std::atomic_ref<uint64_t>(v).store(step, std::memory_order_relaxed);
      SeqlockEndWrite(reinterpret_cast<uint8_t*>(&word), step);
      // Like a training loop: consistent between updates for a while.
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::vector<uint64_t> copy(state.size());
  int consistent = 0;
  for (int round = 0; round < 20; ++round) {
    auto r = SeqlockCopy(
        reinterpret_cast<uint8_t*>(&word),
        [&] {
          for (size_t i = 0; i < state.size(); ++i) {
            copy[i] = std::atomic_ref<uint64_t>(state[i]).load(std::memory_order_relaxed);
          }
        },
        Clock::now() + std::chrono::seconds(20));
    if (!r.consistent) continue;
    ++consistent;
    for (uint64_t v : copy) ASSERT_EQ(v, r.step) << "torn copy accepted";
  }
  stop = true;
  writer.join();
  EXPECT_GT(consistent, 0);
}

TEST(CheckpointQuiesce, NeverEvenWordTimesOut) {
  alignas(8) hz_quiesce_word word{};
  word.seq = 1;  // mutating forever
  int copies = 0;
  auto r = SeqlockCopy(
      reinterpret_cast<uint8_t*>(&word), [&] { ++copies; },
      Clock::now() + std::chrono::milliseconds(20));
  EXPECT_FALSE(r.consistent);
  EXPECT_EQ(copies, 0);
}

// A tenant that keeps seq odd for the whole notice window must not keep a
// host core busy: the copy sleeps between looks at the word, with back-off.
TEST(CheckpointQuiesce, AWordHeldOddIsWatchedWithBackOffNotSpunOn) {
  alignas(8) hz_quiesce_word word{};
  word.seq = 1;
  auto r = SeqlockCopy(
      reinterpret_cast<uint8_t*>(&word), [] {}, Clock::now() + std::chrono::milliseconds(500));
  EXPECT_FALSE(r.consistent);
  EXPECT_GT(r.polls, 0u);
  // Half a second of back-off is a few dozen looks; a spin is millions.
  EXPECT_LT(r.polls, 1000u);
}

// A tenant whose state changes during every copy gets a bounded number of
// copies, not one after another until the deadline.
TEST(CheckpointQuiesce, TornCopiesStopAtTheAttemptCap) {
  alignas(8) hz_quiesce_word word{};
  SeqlockLimits lim;
  lim.max_attempts = 5;
  auto r = SeqlockCopy(
      reinterpret_cast<uint8_t*>(&word), [&] { word.seq += 2; },
      Clock::now() + std::chrono::seconds(3), lim);
  EXPECT_FALSE(r.consistent);
  EXPECT_EQ(r.attempts, 5u);
}

// Cancellation ends the wait for an odd word at once, whatever the deadline.
TEST(CheckpointQuiesce, CancelEndsTheCopy) {
  alignas(8) hz_quiesce_word word{};
  word.seq = 1;
  std::atomic<int> asked{0};
  SeqlockLimits lim;
  lim.cancelled = [&] { return ++asked > 3; };
  auto r = SeqlockCopy(
      reinterpret_cast<uint8_t*>(&word), [] {}, Clock::now() + std::chrono::seconds(3), lim);
  EXPECT_FALSE(r.consistent);
  EXPECT_EQ(asked.load(), 4);
}

TEST(CheckpointQuiesce, QuietWordCopiesOnce) {
  alignas(8) hz_quiesce_word word{};
  SeqlockBeginWrite(reinterpret_cast<uint8_t*>(&word));
  SeqlockEndWrite(reinterpret_cast<uint8_t*>(&word), 77);
  EXPECT_EQ(word.seq, 2u);
  int copies = 0;
  auto r = SeqlockCopy(
      reinterpret_cast<uint8_t*>(&word), [&] { ++copies; }, Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(r.consistent);
  EXPECT_EQ(r.step, 77u);
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(r.attempts, 1u);
}

}  // namespace
}  // namespace hz::checkpoint
