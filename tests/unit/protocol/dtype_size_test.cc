// hz_dtype_size() is what both sides size buffers with (the only dtype table
// in the tree; the engine and the NCCL library call it too): it must match the
// table of SPEC.md §7.4.4 and refuse values outside it.
#include <gtest/gtest.h>

#include "protocol/harmonaize.h"

namespace {

TEST(ProtocolDtypeSize, MatchesTheSpecTable) {
  const struct {
    unsigned dtype;
    unsigned size;
  } kTable[] = {{HZ_INT8, 1},   {HZ_UINT8, 1}, {HZ_INT32, 4}, {HZ_UINT32, 4}, {HZ_INT64, 8},
                {HZ_UINT64, 8}, {HZ_FP16, 2},  {HZ_FP32, 4},  {HZ_FP64, 8},   {HZ_BF16, 2}};
  ASSERT_EQ(sizeof(kTable) / sizeof(kTable[0]), static_cast<size_t>(HZ_DTYPE_MAX));
  for (const auto& row : kTable) EXPECT_EQ(hz_dtype_size(row.dtype), row.size) << row.dtype;
}

TEST(ProtocolDtypeSize, UnknownValuesHaveNoSize) {
  for (unsigned d : {static_cast<unsigned>(HZ_DTYPE_MAX), 11u, 255u, 0xffffffffu}) {
    EXPECT_EQ(hz_dtype_size(d), 0u) << d;
  }
}

}  // namespace
