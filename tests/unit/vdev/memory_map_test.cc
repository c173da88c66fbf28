#include "vdev/memory_map.h"

#include <fcntl.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <limits>

#include "gtest/gtest.h"
#include "test_util.h"

namespace vdev {
namespace {

using testing::FdIsOpen;
using testing::GuestRam;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

MemoryMap MapOf(std::vector<std::shared_ptr<MappedRegion>> regions) {
  EXPECT_EQ(MemoryMap::Validate(regions), "");
  return MemoryMap(std::move(regions));
}

TEST(VdevMemoryMap, TranslatesInsideOneRegionAndRejectsPastItsEnd) {
  GuestRam ram(0x4000);
  MemoryMap map = MapOf({ram.Region(0x100000, 0x4000, 0, 0x7000000)});
  EXPECT_TRUE(testing::Aliases(map.GpaToHost(0x100000, 0x4000), ram.at(0)));
  EXPECT_TRUE(testing::Aliases(map.GpaToHost(0x100010, 16), ram.at(0x10)));
  EXPECT_TRUE(testing::Aliases(map.GpaToHost(0x103fff, 1), ram.at(0x3fff)));
  EXPECT_EQ(map.GpaToHost(0x103fff, 2), nullptr);
  EXPECT_EQ(map.GpaToHost(0x104000, 0), nullptr);  // first byte past the end
  EXPECT_EQ(map.GpaToHost(0xfffff, 1), nullptr);
  EXPECT_EQ(map.GpaToHost(0x100000, kMax), nullptr);
  EXPECT_TRUE(testing::Aliases(map.UvaToHost(0x7000000 + 8, 8), ram.at(8)));
  EXPECT_EQ(map.UvaToHost(0x7003ff8, 9), nullptr);
  EXPECT_EQ(map.UvaToHost(0x6ffffff, 1), nullptr);
  EXPECT_EQ(map.total_bytes(), 0x4000u);
}

TEST(VdevMemoryMap, RangesWrappingTwoToTheSixtyFourAreRejected) {
  GuestRam ram(0x2000);
  MemoryMap map = MapOf({ram.Region(0x1000, 0x1000, 0, 0x1000)});
  std::vector<Segment> out;
  EXPECT_FALSE(map.TranslateGpa(0x1800, kMax, &out));
  EXPECT_FALSE(map.TranslateGpa(kMax, 2, &out));
  EXPECT_FALSE(map.TranslateGpa(kMax - 0x7ff, 0x1000, &out));
  EXPECT_EQ(map.GpaToHost(kMax, 1), nullptr);
  EXPECT_EQ(map.UvaToHost(0x1800, kMax - 0x10), nullptr);
  EXPECT_TRUE(out.empty());
}

TEST(VdevMemoryMap, RegionsNearTheTopOfTheAddressSpace) {
  GuestRam ram(0x2000);
  std::string error;
  // Ends exactly at 2^64: its end is not representable, so it is refused.
  vu::MemRegion top{kMax - 0xfff, 0x1000, 0x1000, 0};
  EXPECT_EQ(MapGuestRegion(top, dup(ram.fd()), 1ull << 40, &error), nullptr);
  EXPECT_NE(error.find("wraps"), std::string::npos) << error;
  // One page lower is fine and translates up to its last byte.
  auto r = ram.Region(kMax - 0x1fff, 0x1000, 0, 0x1000);
  ASSERT_NE(r, nullptr);
  MemoryMap map = MapOf({r});
  EXPECT_TRUE(testing::Aliases(map.GpaToHost(kMax - 0x1000, 1), ram.at(0xfff)));
  EXPECT_EQ(map.GpaToHost(kMax - 0x1000, 2), nullptr);
  std::vector<Segment> out;
  EXPECT_FALSE(map.TranslateGpa(kMax - 0x1000, 2, &out));
  EXPECT_TRUE(map.TranslateGpa(kMax - 0x1fff, 0x1000, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].len, 0x1000u);
}

TEST(VdevMemoryMap, TranslationFollowsAdjacentRegionsAndStopsAtGaps) {
  GuestRam ram(0x10000);
  // gpa [0x0, 0x2000) -> file 0x8000; gpa [0x2000, 0x3000) -> file 0x1000;
  // gap; gpa [0x5000, 0x6000) -> file 0x4000.
  MemoryMap map = MapOf({ram.Region(0x2000, 0x1000, 0x1000, 0x200000),
                         ram.Region(0x0, 0x2000, 0x8000, 0x100000),
                         ram.Region(0x5000, 0x1000, 0x4000, 0x300000)});
  std::vector<Segment> out;
  ASSERT_TRUE(map.TranslateGpa(0x1ff0, 0x20, &out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(testing::Aliases(out[0].data, ram.at(0x8000 + 0x1ff0)));
  EXPECT_EQ(out[0].len, 0x10u);
  EXPECT_TRUE(testing::Aliases(out[1].data, ram.at(0x1000)));
  EXPECT_EQ(out[1].len, 0x10u);
  EXPECT_EQ(map.GpaToHost(0x1ff0, 0x20), nullptr);  // one host view cannot span both

  // Crossing into the gap fails as a whole and leaves *out untouched.
  std::vector<Segment> keep = {{nullptr, 7}};
  EXPECT_FALSE(map.TranslateGpa(0x2ff0, 0x20, &keep));
  ASSERT_EQ(keep.size(), 1u);
  EXPECT_EQ(keep[0].len, 7u);
  EXPECT_FALSE(map.TranslateGpa(0x4fff, 2, &keep));
  EXPECT_EQ(keep.size(), 1u);

  // Zero length translates to nothing.
  EXPECT_TRUE(map.TranslateGpa(0x9999999, 0, &keep));
  EXPECT_EQ(keep.size(), 1u);
}

TEST(VdevMemoryMap, FindRangeGivesTheWholeRegionAndItsTranslationIsBounded) {
  GuestRam ram(0x10000);
  MemoryMap map = MapOf(
      {ram.Region(0x2000, 0x1000, 0x1000, 0x200000), ram.Region(0x0, 0x2000, 0x8000, 0x100000)});
  MemoryMap::HostRange r;
  ASSERT_TRUE(map.FindRange(0x2abc, &r));
  EXPECT_EQ(r.gpa, 0x2000u);
  EXPECT_EQ(r.size, 0x1000u);
  EXPECT_TRUE(testing::Aliases(r.Translate(0x2000, 1), ram.at(0x1000)));
  EXPECT_TRUE(testing::Aliases(r.Translate(0x2ff0, 0x10), ram.at(0x1ff0)));
  EXPECT_EQ(r.Translate(0x2ff0, 0x11), nullptr);  // past the region's end
  EXPECT_EQ(r.Translate(0x1fff, 1), nullptr);     // below its start (offset wraps)
  EXPECT_EQ(r.Translate(0x3000, 0), nullptr);     // its end is outside it
  EXPECT_EQ(r.Translate(0x2800, ~0ull), nullptr);
  EXPECT_EQ(r.Translate(~0ull, 1), nullptr);
  // Gaps and addresses past every region leave *out as it was.
  MemoryMap::HostRange keep{1, 2, nullptr};
  EXPECT_FALSE(map.FindRange(0x3000, &keep));
  EXPECT_FALSE(map.FindRange(~0ull, &keep));
  EXPECT_EQ(keep.gpa, 1u);
  EXPECT_EQ(keep.size, 2u);
  // An empty range holds nothing.
  EXPECT_EQ(MemoryMap::HostRange{}.Translate(0, 1), nullptr);
}

TEST(VdevMemoryMap, MmapOffsetIsHonoured) {
  GuestRam ram(0x6000);
  for (uint32_t i = 0; i < 0x6000; ++i) *ram.at(i) = static_cast<uint8_t>(i * 7);
  // A page-aligned and an unaligned offset.
  MemoryMap map = MapOf(
      {ram.Region(0x40000, 0x1000, 0x3000, 0x10000), ram.Region(0x50000, 0x100, 0x1234, 0x20000)});
  EXPECT_EQ(*map.GpaToHost(0x40000, 1), static_cast<uint8_t>(0x3000 * 7));
  EXPECT_EQ(*map.GpaToHost(0x40fff, 1), static_cast<uint8_t>(0x3fff * 7));
  EXPECT_EQ(*map.GpaToHost(0x50000, 1), static_cast<uint8_t>(0x1234 * 7));
  EXPECT_EQ(map.GpaToHost(0x500ff, 2), nullptr);
  const auto& r = map.regions()[0];
  EXPECT_EQ(r->mapping_len, 0x1000u + 0x3000u);
  EXPECT_EQ(r->host, r->mapping + 0x3000);
}

TEST(VdevMemoryMap, BadRegionsAreRefusedAndTheirFdsClosed) {
  GuestRam ram(0x4000);
  struct Case {
    const char* name;
    vu::MemRegion d;
  } cases[] = {
      {"zero size", {0x1000, 0, 0x1000, 0}},
      {"past end of file", {0x1000, 0x4000, 0x1000, 0x1}},
      {"larger than file", {0x1000, 0x5000, 0x1000, 0}},
      {"gpa wraps", {kMax - 0x10, 0x1000, 0x1000, 0}},
      {"uva wraps", {0x1000, 0x1000, kMax - 0x10, 0}},
      {"offset wraps", {0x1000, 0x1000, 0x1000, kMax - 0x10}},
      {"over limit", {0x1000, 0x4000, 0x1000, 0}},
  };
  for (const Case& c : cases) {
    int fd = dup(ram.fd());
    std::string error;
    uint64_t limit = std::string(c.name) == "over limit" ? 0x2000 : 1ull << 40;
    EXPECT_EQ(MapGuestRegion(c.d, fd, limit, &error), nullptr) << c.name;
    EXPECT_FALSE(error.empty()) << c.name;
    EXPECT_FALSE(FdIsOpen(fd)) << c.name;
  }
  // Not a regular file: an eventfd cannot back guest memory.
  int efd = eventfd(0, EFD_CLOEXEC);
  std::string error;
  EXPECT_EQ(MapGuestRegion({0, 0x1000, 0, 0}, efd, 1ull << 40, &error), nullptr);
  EXPECT_FALSE(FdIsOpen(efd));
  EXPECT_EQ(MapGuestRegion({0, 0x1000, 0, 0}, -1, 1ull << 40, &error), nullptr);
}

TEST(VdevMemoryMap, GuestMemoryIsSealedAgainstShrinking) {
  // A sealable memfd gets F_SEAL_SHRINK: the front-end can no longer pull
  // pages out from under the mapping (which would SIGBUS the back-end).
  int fd = memfd_create("sealable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(ftruncate(fd, 0x2000), 0);
  std::string error;
  auto r = MapGuestRegion({0, 0x2000, 0x1000, 0}, dup(fd), 1ull << 40, &error, true);
  ASSERT_NE(r, nullptr) << error;
  EXPECT_NE(ftruncate(fd, 0x1000), 0);
  EXPECT_EQ(ftruncate(fd, 0x3000), 0);  // growing stays allowed
  close(fd);
  // An unsealable memfd is refused when seals are required, accepted otherwise.
  fd = memfd_create("unsealable", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(fd, 0x2000), 0);
  EXPECT_EQ(MapGuestRegion({0, 0x2000, 0x1000, 0}, dup(fd), 1ull << 40, &error, true), nullptr);
  EXPECT_NE(error.find("sealed"), std::string::npos);
  EXPECT_NE(MapGuestRegion({0, 0x2000, 0x1000, 0}, dup(fd), 1ull << 40, &error, false), nullptr);
  close(fd);
}

TEST(VdevMemoryMap, OverlappingRegionsAreRefused) {
  GuestRam ram(0x4000);
  std::vector<std::shared_ptr<MappedRegion>> regions = {ram.Region(0x1000, 0x2000, 0, 0x10000),
                                                        ram.Region(0x2fff, 0x1000, 0, 0x20000)};
  EXPECT_NE(MemoryMap::Validate(regions), "");
  regions[1] = ram.Region(0x3000, 0x1000, 0, 0x20000);  // adjacent is fine
  EXPECT_EQ(MemoryMap::Validate(regions), "");
  auto empty = std::make_shared<MappedRegion>();
  EXPECT_NE(MemoryMap::Validate({empty}), "");
}

TEST(VdevMemoryMap, ManyRegionsUseTheSortedLookup) {
  GuestRam ram(0x20000);
  std::vector<std::shared_ptr<MappedRegion>> regions;
  for (int i = 19; i >= 0; --i) {  // out of order on purpose
    regions.push_back(ram.Region(0x100000ull * i, 0x1000, 0x1000ull * i, 0x1000000ull * (i + 1)));
  }
  MemoryMap map = MapOf(regions);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(testing::Aliases(map.GpaToHost(0x100000ull * i + 5, 1), ram.at(0x1000ull * i + 5)))
        << i;
    EXPECT_EQ(map.GpaToHost(0x100000ull * i + 0x1000, 1), nullptr) << i;
  }
  EXPECT_EQ(map.GpaToHost(0x100000ull * 20, 1), nullptr);
}

TEST(VdevMemoryMap, RegionsStayMappedWhileAnOldMapIsHeld) {
  GuestRam ram(0x2000);
  auto old_map = std::make_shared<const MemoryMap>(
      std::vector<std::shared_ptr<MappedRegion>>{ram.Region(0, 0x2000, 0, 0x1000)});
  uint8_t* p = old_map->GpaToHost(0x10, 1);
  MemoryMapPtr held = old_map;                    // e.g. an in-flight Chain
  old_map = std::make_shared<const MemoryMap>();  // the session swapped in a new map
  *p = 42;  // still mapped: ASan/segfault would catch a use after unmap
  EXPECT_EQ(*ram.at(0x10), 42);
  EXPECT_EQ(held->regions().size(), 1u);
}

}  // namespace
}  // namespace vdev
