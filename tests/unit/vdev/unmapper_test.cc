#include "unmapper.h"

#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace vdev {
namespace {

// Maps len bytes of a fresh memfd called name (as guest memory is mapped).
void* MapMemfd(const std::string& name, size_t len) {
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(len)) != 0) return MAP_FAILED;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file
  return p;
}

// Mappings of memfds called name in this process. Counted by name, not by
// address: a freed address range may be mapped again by anyone at once.
int MappingsOf(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:" + name + " ") != std::string::npos) ++n;
  }
  return n;
}

TEST(Unmapper, TheQueuedMappingIsGoneOnceTheQueueDrained) {
  const size_t len = 4 * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = MapMemfd("unmapper-one", len);
  ASSERT_NE(p, MAP_FAILED);
  static_cast<char*>(p)[0] = 1;  // a touched page, as guest memory the back-end read
  ASSERT_EQ(MappingsOf("unmapper-one"), 1);
  UnmapLater(p, len);
  WaitForUnmaps();
  EXPECT_EQ(MappingsOf("unmapper-one"), 0);
}

TEST(Unmapper, AFloodBeyondTheQueueIsUnmappedAllTheSame) {
  const size_t len = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> maps;
  for (int i = 0; i < 1000; ++i) {
    void* p = MapMemfd("unmapper-flood", len);
    ASSERT_NE(p, MAP_FAILED);
    maps.push_back(p);
  }
  ASSERT_EQ(MappingsOf("unmapper-flood"), 1000);
  for (void* p : maps) UnmapLater(p, len);
  WaitForUnmaps();
  EXPECT_EQ(MappingsOf("unmapper-flood"), 0);
}

}  // namespace
}  // namespace vdev
