// The struct sizes and field offsets stated in protocol/SPEC.md. A change here
// is a wire-format change: it needs a SPEC.md change and a version bump.
#include <cstddef>
#include <cstring>

#include <gtest/gtest.h>

#include "protocol/harmonaize.h"

extern "C" size_t hz_c11_sizeof_event(void);
extern "C" size_t hz_c11_offsetof_coll_recv(void);
extern "C" uint64_t hz_c11_allgather_recv_bytes(void);

namespace {

TEST(ProtocolLayout, CAndCppAgree) {
  EXPECT_EQ(hz_c11_sizeof_event(), sizeof(hz_event));
  EXPECT_EQ(hz_c11_offsetof_coll_recv(), offsetof(hz_coll_args, recv));
  EXPECT_EQ(hz_c11_allgather_recv_bytes(), 60u);  // 5 ranks × 3 × 4 bytes
}

TEST(ProtocolLayout, DeviceIdentity) {
  EXPECT_EQ(HZ_VIRTIO_ID, 21);
  // "HZAI" as the first four bytes of config space.
  const uint32_t magic = HZ_CONFIG_MAGIC;
  EXPECT_EQ(0, memcmp(&magic, "HZAI", 4));
}

TEST(ProtocolLayout, RequestFraming) {
  EXPECT_EQ(sizeof(hz_req_hdr), 16u);
  EXPECT_EQ(offsetof(hz_req_hdr, opcode), 0u);
  EXPECT_EQ(offsetof(hz_req_hdr, flags), 2u);
  EXPECT_EQ(offsetof(hz_req_hdr, args_len), 4u);
  EXPECT_EQ(offsetof(hz_req_hdr, request_id), 8u);
  EXPECT_EQ(sizeof(hz_status), 24u);
  EXPECT_EQ(offsetof(hz_status, status), 0u);
  EXPECT_EQ(offsetof(hz_status, result_len), 4u);
  EXPECT_EQ(offsetof(hz_status, request_id), 8u);
  EXPECT_EQ(offsetof(hz_status, detail), 16u);
}

TEST(ProtocolLayout, ConfigSpace) {
  EXPECT_EQ(sizeof(hz_config), 64u);
  EXPECT_EQ(offsetof(hz_config, magic), 0u);
  EXPECT_EQ(offsetof(hz_config, num_request_queues), 8u);
  EXPECT_EQ(offsetof(hz_config, status), 12u);
  EXPECT_EQ(offsetof(hz_config, max_region_bytes), 24u);
  EXPECT_EQ(offsetof(hz_config, event_record_size), 36u);
}

TEST(ProtocolLayout, Collectives) {
  EXPECT_EQ(sizeof(hz_slice), 24u);
  EXPECT_EQ(sizeof(hz_coll_args), 80u);
  EXPECT_EQ(offsetof(hz_coll_args, count), 16u);
  EXPECT_EQ(offsetof(hz_coll_args, dtype), 24u);
  EXPECT_EQ(offsetof(hz_coll_args, redop), 25u);
  EXPECT_EQ(offsetof(hz_coll_args, peer), 28u);
  EXPECT_EQ(offsetof(hz_coll_args, send), 32u);
  EXPECT_EQ(offsetof(hz_coll_args, recv), 56u);
  EXPECT_EQ(sizeof(hz_comm_init_args), 56u);
  EXPECT_EQ(offsetof(hz_comm_init_args, nranks), 32u);
  EXPECT_EQ(offsetof(hz_comm_init_args, constraints), 40u);
}

TEST(ProtocolLayout, NcclEnumValues) {
  // The NCCL-compatible library passes NCCL's enums straight through.
  EXPECT_EQ(HZ_INT8, 0);
  EXPECT_EQ(HZ_FP16, 6);
  EXPECT_EQ(HZ_FP32, 7);
  EXPECT_EQ(HZ_BF16, 9);
  EXPECT_EQ(HZ_SUM, 0);
  EXPECT_EQ(HZ_MAX, 2);
  EXPECT_EQ(HZ_MIN, 3);
  EXPECT_EQ(HZ_AVG, 4);
}

TEST(ProtocolLayout, EventsAndOthers) {
  EXPECT_EQ(sizeof(hz_event), 112u);
  EXPECT_EQ(offsetof(hz_event, payload), 32u);
  EXPECT_EQ(sizeof(hz_hello_result), 48u);
  EXPECT_EQ(sizeof(hz_ckpt_entry), 32u);
  EXPECT_EQ(sizeof(hz_neg_request), 32u);
  EXPECT_EQ(sizeof(hz_neg_offer), 40u);
  EXPECT_EQ(sizeof(hz_topo_header), 16u);
  EXPECT_EQ(HZ_TOPIC_ALL, (1ull << (HZ_TOPIC_ENERGY + 1)) - 1);
}

}  // namespace
