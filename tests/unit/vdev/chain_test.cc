#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "vdev/device.h"

namespace vdev {
namespace {

// Segments of 1, 2, 3, ... bytes carved out of one buffer.
std::vector<Segment> Carve(std::vector<uint8_t>* buf, size_t count) {
  std::vector<Segment> out;
  size_t off = 0;
  for (size_t i = 0; i < count; ++i) {
    out.push_back({buf->data() + off, i + 1});
    off += i + 1;
  }
  return out;
}

TEST(VdevChainTest, LongChainsKeepEverySegmentThroughCopiesAndMoves) {
  std::vector<uint8_t> in(200), out(200);
  std::iota(in.begin(), in.end(), 0);
  const std::vector<Segment> r = Carve(&in, 12);   // 78 bytes, over the inline capacity
  const std::vector<Segment> w = Carve(&out, 15);  // 120 bytes
  Chain c(7, r, w, nullptr);
  EXPECT_EQ(c.head(), 7);
  ASSERT_EQ(c.readable().size(), 12u);
  ASSERT_EQ(c.writable().size(), 15u);
  EXPECT_EQ(c.readable_bytes(), 78u);
  EXPECT_EQ(c.writable_bytes(), 120u);

  std::vector<uint8_t> flat(78);
  EXPECT_EQ(c.Read(0, flat.data(), flat.size()), 78u);
  EXPECT_TRUE(std::equal(flat.begin(), flat.end(), in.begin()));
  EXPECT_EQ(c.Write(5, flat.data(), flat.size()), 78u);
  EXPECT_TRUE(std::equal(flat.begin(), flat.end(), out.begin() + 5));

  Chain copy;
  copy = c;
  ASSERT_EQ(copy.writable().size(), 15u);
  EXPECT_EQ(copy.writable()[14].data, w[14].data);
  EXPECT_EQ(copy.readable()[11].len, 12u);

  Chain moved(std::move(copy));
  EXPECT_EQ(moved.readable().size(), 12u);
  EXPECT_EQ(moved.writable_bytes(), 120u);
  EXPECT_TRUE(copy.readable().empty());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(copy.writable_bytes(), 0u);  // NOLINT(bugprone-use-after-move)

  // Short chains stay inline; assigning one over a long chain shrinks it.
  Chain small(1, {r[0]}, {w[0]}, nullptr);
  moved = small;
  EXPECT_EQ(moved.readable().size(), 1u);
  EXPECT_EQ(moved.writable().size(), 1u);
  EXPECT_EQ(moved.writable()[0].data, out.data());
  Chain small_moved = std::move(small);
  EXPECT_EQ(small_moved.readable()[0].data, in.data());
  EXPECT_TRUE(small.writable().empty());  // NOLINT(bugprone-use-after-move)
  c = std::move(small_moved);
  EXPECT_EQ(c.readable().size(), 1u);
  EXPECT_EQ(c.writable_bytes(), 1u);
}

TEST(VdevChainTest, EmptyChain) {
  Chain c;
  EXPECT_TRUE(c.readable().empty());
  EXPECT_TRUE(c.writable().empty());
  uint8_t b = 0;
  EXPECT_EQ(c.Read(0, &b, 1), 0u);
  EXPECT_EQ(c.Write(0, &b, 1), 0u);
}

}  // namespace
}  // namespace vdev
