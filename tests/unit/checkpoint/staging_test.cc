#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "copy_pool.h"
#include "staging_pool.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

TEST(CheckpointStagingPool, ChunksAreAlignedDistinctAndBounded) {
  StagingPool pool(8192, 16);
  ASSERT_TRUE(pool.ok());
  std::vector<uint32_t> a, b;
  ASSERT_TRUE(pool.TryAcquire(10, &a));
  EXPECT_EQ(pool.free_count(), 6u);
  EXPECT_FALSE(pool.TryAcquire(7, &b));  // all or nothing
  EXPECT_EQ(pool.free_count(), 6u);
  ASSERT_TRUE(pool.TryAcquire(6, &b));
  std::set<uint32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 16u);
  for (uint32_t c : all) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.chunk(c)) % 4096, 0u);
    std::memset(pool.chunk(c), static_cast<int>(c), pool.chunk_bytes());  // writable
  }
  pool.Release(a);
  EXPECT_EQ(pool.free_count(), 10u);
  auto iov = pool.Iovecs();
  ASSERT_EQ(iov.size(), 16u);
  EXPECT_EQ(iov[3].iov_base, pool.chunk(3));
  EXPECT_EQ(iov[3].iov_len, 8192u);
}

// A live upgrade's successor reserves its staging memory early; the pool of
// that size takes it, zeroed and whole, and a pool of another size does not.
TEST(CheckpointStagingPool, APoolTakesTheMemoryReservedForItsSize) {
  const void* reserved = StagingPool::Reserve(8192, 4);
  ASSERT_NE(reserved, nullptr);
  StagingPool other(4096, 4);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(static_cast<const void*>(other.chunk(0)), reserved);
  StagingPool pool(8192, 4);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(static_cast<const void*>(pool.chunk(0)), reserved);
  for (uint32_t i = 0; i < 4; ++i) {
    const uint8_t* c = pool.chunk(i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 4096, 0u);
    for (size_t b = 0; b < 8192; b += 512) EXPECT_EQ(c[b], 0);
  }
  std::memset(pool.chunk(3), 0x5a, 8192);  // writable to the end
  // Taken once: the next pool of that size maps its own.
  StagingPool again(8192, 4);
  EXPECT_TRUE(again.ok());
  EXPECT_NE(again.chunk(0), pool.chunk(0));
}

TEST(CheckpointCopyPool, ParallelCopyMovesEveryByte) {
  CopyPool copier(3);
  for (size_t size : {size_t{1}, size_t{4095}, size_t{3u << 20}, size_t{(7u << 20) + 13}}) {
    auto src = testing::Pattern(size, size);
    std::vector<uint8_t> dst(size + 64, 0xee);
    // Several ops of uneven sizes, as a snapshot into chunks produces.
    std::vector<CopyOp> ops;
    size_t off = 0, piece = 1;
    while (off < size) {
      size_t n = std::min(size - off, piece);
      ops.push_back({dst.data() + off, src.data() + off, n});
      off += n;
      piece = piece * 3 + 7;
    }
    copier.Run(ops);
    ASSERT_EQ(std::memcmp(dst.data(), src.data(), size), 0) << size;
    for (size_t i = size; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xee);
  }
}

TEST(CheckpointCopyPool, SingleThreadPoolCopiesOnCaller) {
  CopyPool copier(1);
  auto src = testing::Pattern(5u << 20, 1);
  std::vector<uint8_t> dst(src.size());
  copier.Run({{dst.data(), src.data(), src.size()}});
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace hz::checkpoint
