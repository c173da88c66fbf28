// RegisteredPool: blocks are registered once and reused by size class; the
// cache is bounded; a refusing device makes the pool drop its cache and
// retry, then report the refusal instead of failing the caller.
#include "registered_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"

namespace hz::py {
namespace {

// Hands out heap memory and counts what a device would register.
class FakeSource : public MemorySource {
 public:
  int Alloc(size_t bytes, void** ptr) override {
    std::lock_guard<std::mutex> lock(mu);
    if (live_bytes + bytes > capacity) return HZ_ENOMEM;
    *ptr = std::aligned_alloc(4096, bytes);
    sizes[*ptr] = bytes;
    live_bytes += bytes;
    ++registrations;
    return HZ_OK;
  }
  void Free(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu);
    live_bytes -= sizes.at(ptr);
    sizes.erase(ptr);
    ++unregistrations;
    std::free(ptr);
  }

  std::mutex mu;
  std::map<void*, size_t> sizes;
  size_t capacity = size_t{1} << 30;
  size_t live_bytes = 0;
  int registrations = 0;
  int unregistrations = 0;
};

TEST(RegisteredPool, SizeClassesArePagesWithBoundedWaste) {
  size_t last = 0;
  for (size_t n : {1ul, 4096ul, 4097ul, 65536ul, 100000ul, 1ul << 20, 26214400ul, 26214401ul}) {
    const size_t c = RegisteredPool::SizeClass(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 4096, 0u) << n;
    EXPECT_LE(c, n + n / 2 + 4096) << n;
    EXPECT_GE(c, last);
    last = c;
  }
  EXPECT_EQ(RegisteredPool::SizeClass(100000), RegisteredPool::SizeClass(100001));
}

TEST(RegisteredPool, ReleasedBlocksAreReusedWithoutRegisteringAgain) {
  FakeSource src;
  RegisteredPool pool(&src, 1u << 30);
  void* a = pool.Allocate(100000);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(pool.Release(a));
  void* b = pool.Allocate(99000);  // same size class
  EXPECT_EQ(a, b);
  EXPECT_EQ(src.registrations, 1);
  const PoolStats s = pool.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_GE(s.live_bytes, 99000u);
  EXPECT_TRUE(pool.Release(b));
  EXPECT_FALSE(pool.Release(b)) << "a block is released once";
  int on_stack = 0;
  EXPECT_FALSE(pool.Release(&on_stack));
}

TEST(RegisteredPool, ContainsCoversLiveAndCachedBlocksOnly) {
  FakeSource src;
  RegisteredPool pool(&src, 1u << 30);
  auto* p = static_cast<uint8_t*>(pool.Allocate(8192));
  EXPECT_TRUE(pool.Contains(p, 8192));
  EXPECT_TRUE(pool.Contains(p + 100, 8000));
  EXPECT_FALSE(pool.Contains(p + 100, 8192));
  EXPECT_FALSE(pool.Contains(p - 1, 2));
  pool.Release(p);
  EXPECT_TRUE(pool.Contains(p, 8192)) << "cached blocks stay registered";
  pool.Trim();
  EXPECT_FALSE(pool.Contains(p, 1));
  EXPECT_EQ(src.unregistrations, 1);
}

TEST(RegisteredPool, TheCacheIsBounded) {
  FakeSource src;
  RegisteredPool pool(&src, 3 * 4096);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(pool.Allocate(4096));
  for (void* b : blocks) pool.Release(b);
  EXPECT_EQ(pool.Stats().cached_bytes, 3u * 4096);
  EXPECT_EQ(src.unregistrations, 2);
  pool.set_max_cached(4096);
  EXPECT_EQ(pool.Stats().cached_bytes, 4096u);
  EXPECT_EQ(pool.Stats().blocks, 1u);
}

TEST(RegisteredPool, ARefusingDeviceFirstGetsTheCacheBack) {
  FakeSource src;
  src.capacity = 3 * 65536;
  RegisteredPool pool(&src, 1u << 30);
  void* a = pool.Allocate(65536);
  void* b = pool.Allocate(65536);
  pool.Release(a);  // cached: the device still holds it
  void* c = pool.Allocate(2 * 65536);
  EXPECT_NE(c, nullptr) << "the cached block was given back to make room";
  EXPECT_EQ(pool.Allocate(4 * 65536), nullptr);
  EXPECT_EQ(pool.Stats().refusals, 1u);
  pool.Release(b);
  pool.Release(c);
}

TEST(RegisteredPool, ThreadsShareThePool) {
  FakeSource src;
  RegisteredPool pool(&src, 1u << 30);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 500; ++i) {
        void* p = pool.Allocate(4096 * (1 + (i + t) % 7));
        ASSERT_NE(p, nullptr);
        static_cast<char*>(p)[0] = 1;
        pool.Release(p);
      }
    });
  }
  for (auto& t : threads) t.join();
  const PoolStats s = pool.Stats();
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.hits + s.misses, 2000u);
  EXPECT_LE(src.registrations, 28) << "at most one block per size class and thread";
}

}  // namespace
}  // namespace hz::py
