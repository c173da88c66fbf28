// Consistent copies of live tenant state for just-in-time saves.
//
// The tenant keeps a struct hz_quiesce_word {seq, step} as a sequence lock:
// seq is odd while it mutates the state, and it stores step before making seq
// even at a consistent point. A copy is consistent when seq was even before
// it and unchanged after it (acquire loads on both sides).
#ifndef HZ_CHECKPOINT_QUIESCE_H_
#define HZ_CHECKPOINT_QUIESCE_H_

#include <chrono>
#include <cstdint>
#include <functional>

namespace hz::checkpoint {

struct SeqlockCopyResult {
  bool consistent = false;
  uint64_t step = 0;
  uint32_t attempts = 0;  // copies started
  uint64_t polls = 0;     // loads of seq that found it odd
};

// Bounds on one seqlock copy. The word and its state are the tenant's, so
// the tenant decides how often a copy tears and how long seq stays odd.
struct SeqlockLimits {
  uint32_t max_attempts = 64;       // copies started, at most
  std::function<bool()> cancelled;  // optional: true ends the copy (not consistent)
};

// Runs copy() until it ran wholly inside one even seq period of the word at
// `word` (16 bytes, 8-aligned), or the deadline passes, the attempts run out
// or the copy is cancelled.
SeqlockCopyResult SeqlockCopy(uint8_t* word, const std::function<void()>& copy,
                              std::chrono::steady_clock::time_point deadline,
                              const SeqlockLimits& limits = {});

// The tenant side, for tests and in-process tenants: BeginWrite makes seq odd,
// EndWrite stores step and makes seq even again.
void SeqlockBeginWrite(uint8_t* word);
void SeqlockEndWrite(uint8_t* word, uint64_t step);

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_QUIESCE_H_
