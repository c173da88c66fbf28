// The per-opcode table of SPEC.md §7.4.2 as protocol/harmonaize.h gives it:
// which opcodes reduce, have a root or a peer, and how many bytes each side
// of a collective needs. The device, the engine, libharmonaize and the NCCL
// library all size and check collectives with these helpers, so this is
// where the table is tested.
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "protocol/harmonaize.h"

namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

struct Uses {
  unsigned opcode;
  bool reduces;
  bool rooted;
  bool point_to_point;
};

// The redop and peer columns of §7.4.2.
constexpr Uses kUses[] = {
    {HZ_OP_ALLREDUCE, true, false, false},      {HZ_OP_BROADCAST, false, true, false},
    {HZ_OP_REDUCE, true, true, false},          {HZ_OP_ALLGATHER, false, false, false},
    {HZ_OP_REDUCE_SCATTER, true, false, false}, {HZ_OP_ALLTOALL, false, false, false},
    {HZ_OP_SEND, false, false, true},           {HZ_OP_RECV, false, false, true},
    {HZ_OP_BARRIER, false, false, false},
};

TEST(ProtocolCollTable, PredicatesFollowTheSpecColumns) {
  ASSERT_EQ(sizeof(kUses) / sizeof(kUses[0]), size_t{HZ_OP_BARRIER - HZ_OP_ALLREDUCE + 1});
  for (const Uses& u : kUses) {
    EXPECT_TRUE(hz_op_is_collective(u.opcode)) << u.opcode;
    EXPECT_EQ(hz_op_reduces(u.opcode), u.reduces) << u.opcode;
    EXPECT_EQ(hz_op_rooted(u.opcode), u.rooted) << u.opcode;
    EXPECT_EQ(hz_op_point_to_point(u.opcode), u.point_to_point) << u.opcode;
    EXPECT_EQ(hz_op_uses_peer(u.opcode), u.rooted || u.point_to_point) << u.opcode;
  }
}

TEST(ProtocolCollTable, OtherOpcodesAreNoCollectives) {
  for (unsigned op : {0u, unsigned{HZ_OP_HELLO}, unsigned{HZ_OP_COMM_INIT}, 0x02ffu, 0x0309u,
                      unsigned{HZ_OP_CKPT_POLICY}, 0xffffu}) {
    EXPECT_FALSE(hz_op_is_collective(op)) << op;
    EXPECT_FALSE(hz_op_reduces(op)) << op;
    EXPECT_FALSE(hz_op_uses_peer(op)) << op;
    uint64_t send = 1, recv = 1;
    EXPECT_EQ(hz_coll_bytes(op, 1, HZ_FP32, 2, false, &send, &recv), HZ_S_EINVAL) << op;
    EXPECT_EQ(send, 0u);
    EXPECT_EQ(recv, 0u);
  }
}

struct Bytes {
  unsigned opcode;
  bool is_root;
  uint64_t send;
  uint64_t recv;
};

TEST(ProtocolCollTable, BytesFollowTheSpecTable) {
  // count 3 of FP32 on 5 ranks: B = 12, n × B = 60.
  constexpr uint64_t b = 12, nb = 60;
  const Bytes kTable[] = {
      {HZ_OP_ALLREDUCE, false, b, b},
      {HZ_OP_BROADCAST, true, b, b},
      {HZ_OP_BROADCAST, false, 0, b},
      {HZ_OP_REDUCE, true, b, b},
      {HZ_OP_REDUCE, false, b, 0},
      {HZ_OP_ALLGATHER, false, b, nb},
      {HZ_OP_REDUCE_SCATTER, false, nb, b},
      {HZ_OP_ALLTOALL, false, nb, nb},
      {HZ_OP_SEND, false, b, 0},
      {HZ_OP_RECV, false, 0, b},
      {HZ_OP_BARRIER, false, 0, 0},
  };
  for (const Bytes& row : kTable) {
    uint64_t send = 0, recv = 0;
    ASSERT_EQ(hz_coll_bytes(row.opcode, 3, HZ_FP32, 5, row.is_root, &send, &recv), HZ_S_OK)
        << row.opcode;
    EXPECT_EQ(send, row.send) << row.opcode << " root " << row.is_root;
    EXPECT_EQ(recv, row.recv) << row.opcode << " root " << row.is_root;
  }
}

TEST(ProtocolCollTable, BarrierMovesNoDataWhateverItsFields) {
  uint64_t send = 1, recv = 1;
  EXPECT_EQ(hz_coll_bytes(HZ_OP_BARRIER, kU64Max, HZ_DTYPE_MAX, kU64Max, true, &send, &recv),
            HZ_S_OK);
  EXPECT_EQ(send, 0u);
  EXPECT_EQ(recv, 0u);
}

TEST(ProtocolCollTable, UnknownDtypeIsInvalid) {
  uint64_t send = 1, recv = 1;
  EXPECT_EQ(hz_coll_bytes(HZ_OP_ALLREDUCE, 1, HZ_DTYPE_MAX, 2, false, &send, &recv), HZ_S_EINVAL);
  EXPECT_EQ(send, 0u);
  EXPECT_EQ(recv, 0u);
}

TEST(ProtocolCollTable, OverflowOfBOrNTimesBIsInvalidForEveryOpcode) {
  for (const Uses& u : kUses) {
    if (u.opcode == HZ_OP_BARRIER) continue;
    uint64_t send = 0, recv = 0;
    // B = count × 8 overflows.
    EXPECT_EQ(hz_coll_bytes(u.opcode, uint64_t{1} << 61, HZ_FP64, 1, true, &send, &recv),
              HZ_S_EINVAL)
        << u.opcode;
    // B = 2^61 fits, n × B = 2^64 does not: refused also where only B is needed.
    EXPECT_EQ(hz_coll_bytes(u.opcode, uint64_t{1} << 61, HZ_INT8, 8, true, &send, &recv),
              HZ_S_EINVAL)
        << u.opcode;
    EXPECT_EQ(send, 0u);
    EXPECT_EQ(recv, 0u);
    // n × B = 2^63 fits.
    EXPECT_EQ(hz_coll_bytes(u.opcode, uint64_t{1} << 60, HZ_INT8, 8, true, &send, &recv), HZ_S_OK)
        << u.opcode;
  }
}

TEST(ProtocolCollTable, LargestRepresentableLengthsAreExact) {
  uint64_t send = 0, recv = 0;
  ASSERT_EQ(hz_coll_bytes(HZ_OP_ALLTOALL, kU64Max / 8, HZ_INT8, 8, false, &send, &recv), HZ_S_OK);
  EXPECT_EQ(send, kU64Max / 8 * 8);
  EXPECT_EQ(recv, kU64Max / 8 * 8);
  EXPECT_EQ(hz_coll_bytes(HZ_OP_ALLTOALL, kU64Max / 8 + 1, HZ_INT8, 8, false, &send, &recv),
            HZ_S_EINVAL);
}

TEST(ProtocolCollTable, NoRanksIsNotADivisionByZero) {
  uint64_t send = 1, recv = 1;
  EXPECT_EQ(hz_coll_bytes(HZ_OP_ALLGATHER, 4, HZ_INT32, 0, false, &send, &recv), HZ_S_OK);
  EXPECT_EQ(send, 16u);
  EXPECT_EQ(recv, 0u);
}

TEST(ProtocolCollTable, DetailNamesTheSlice) {
  // SPEC.md §7.4: "detail 0 designates" send, "detail 1" recv.
  EXPECT_EQ(HZ_DETAIL_SEND, 0);
  EXPECT_EQ(HZ_DETAIL_RECV, 1);
}

}  // namespace
