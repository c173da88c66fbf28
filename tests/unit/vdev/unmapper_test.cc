#include "unmapper.h"

#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include <gtest/gtest.h>

namespace vdev {
namespace {

// mincore fails with ENOMEM on addresses that are not mapped.
bool Mapped(void* addr, size_t len) {
  unsigned char vec[8];
  return mincore(addr, len, vec) == 0;
}

TEST(Unmapper, TheQueuedMappingIsGoneOnceTheQueueDrained) {
  const size_t len = 4 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  static_cast<char*>(p)[0] = 1;  // a touched page, as guest memory the back-end read
  ASSERT_TRUE(Mapped(p, len));
  UnmapLater(p, len);
  WaitForUnmaps();
  EXPECT_FALSE(Mapped(p, len));
}

TEST(Unmapper, AFloodBeyondTheQueueIsUnmappedAllTheSame) {
  const size_t len = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> maps;
  for (int i = 0; i < 1000; ++i) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    maps.push_back(p);
  }
  for (void* p : maps) UnmapLater(p, len);
  WaitForUnmaps();
  for (void* p : maps) EXPECT_FALSE(Mapped(p, len));
}

}  // namespace
}  // namespace vdev
