// Test harness for the collective engine: communicators whose ranks are
// threads, buffers laid out as awkward extent lists with guard bytes between
// them, and a plain scalar reference for every operation.
#ifndef HZ_TESTS_UNIT_COLLECTIVES_HARNESS_H_
#define HZ_TESTS_UNIT_COLLECTIVES_HARNESS_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hz/collectives/engine.h"

namespace hz::coll::testing {

// Long enough to never fire on a slow, shared machine; only catches hangs.
inline constexpr auto kHang = std::chrono::seconds(60);

// A tenant of the tests, "t<n>".
inline TenantId Tenant(int n) {
  return TenantId("t" + std::to_string(n));
}

// Joins nranks ranks of a fresh communicator of tenant, one thread per rank.
std::vector<std::shared_ptr<Member>> MakeComm(Engine& e, TenantId tenant, uint32_t nranks,
                                              Constraints c = {});

// The outcome of a rank's Init or Rejoin.
struct InitResult {
  Status status = Status::Aborted();
  std::shared_ptr<Member> member;
};
// Init, or Rejoin, from the calling thread; the future gets the outcome.
std::future<InitResult> InitAsync(Engine& e, TenantId t, const Uid& uid, uint32_t n, uint32_t r,
                                  Constraints c = {});
std::future<InitResult> RejoinAsync(Engine& e, TenantId t, const MemberState& state);
// The outcome, or a test failure and kAborted after kHang.
InitResult Get(std::future<InitResult>& f);

// Waits for a Done with a hang deadline.
class Waiter {
 public:
  Done Callback();
  // The status, or fails the test and returns kAborted after kHang.
  // May be called again; returns the same status.
  Status Wait();
  bool Ready() const;

 private:
  std::shared_ptr<std::promise<Status>> p_ = std::make_shared<std::promise<Status>>();
  std::future<Status> f_ = p_->get_future();
  std::optional<Status> got_;
};

// A sum all-reduce descriptor of send.size() fp32 elements, send into recv.
OpDesc AllReduce(uint64_t seq, std::vector<float>& send, std::vector<float>& recv);

// Posts descs[r] on members[r] from one thread per rank; returns the statuses.
std::vector<Status> RunAll(Engine& e, const std::vector<std::shared_ptr<Member>>& members,
                           const std::vector<OpDesc>& descs);

// Posts descs[r] on members[r] one after another from the calling thread
// (posting never blocks), then waits for every completion. Cheaper than
// RunAll on a busy machine: no thread per rank to schedule.
std::vector<Status> PostAll(Engine& e, const std::vector<std::shared_ptr<Member>>& members,
                            const std::vector<OpDesc>& descs);

enum class Layout {
  kContiguous,  // one aligned extent
  kUnaligned,   // one extent at an odd address
  kSplit,       // several extents of odd lengths, some empty, out of order in memory
};

// A buffer of `len` logical bytes behind an IoVec, with guard bytes around
// every extent so that any write outside the spans is detected.
class Buffer {
 public:
  Buffer(size_t len, Layout layout, uint32_t seed);
  const IoVec& iov() const { return iov_; }
  size_t size() const { return len_; }
  // Logical contents, gathered across extents.
  std::vector<uint8_t> Get() const;
  void Set(const std::vector<uint8_t>& bytes);
  // True when no guard byte was changed.
  bool GuardsIntact() const;

 private:
  static constexpr uint8_t kGuard = 0xA5;
  size_t len_;
  std::vector<uint8_t> arena_;
  IoVec iov_;
};

// Random payload of n elements of dtype, in ranges where products and sums
// stay meaningful. fp16/bf16 values are exactly representable.
std::vector<uint8_t> RandomElements(uint8_t dtype, size_t n, std::mt19937& rng);

// Reference reduction of n elements over inputs (rank order), the engine's
// documented rules, computed the straightforward scalar way.
std::vector<uint8_t> ReferenceReduce(uint8_t dtype, uint8_t redop,
                                     const std::vector<const uint8_t*>& inputs, size_t n);

// Reference conversions, written independently of the engine's.
float RefHalfToFloat(uint16_t h);
uint16_t RefFloatToHalf(float f);
float RefBf16ToFloat(uint16_t h);
uint16_t RefFloatToBf16(float f);

}  // namespace hz::coll::testing

#endif  // HZ_TESTS_UNIT_COLLECTIVES_HARNESS_H_
