// HzDevice request handling with hand-built chains: no sockets, no engine.
#include <gtest/gtest.h>

#include <cstring>

#include "device_fixture.h"

namespace hz::service {
namespace {

using testing::HeaderOnly;
using testing::RequestBytes;
using testing::StatusOf;

TEST_F(DeviceTest, ConfigSpaceDescribesTheDevice) {
  std::vector<uint8_t> raw = dev_->ConfigSpace();
  ASSERT_EQ(raw.size(), sizeof(hz_config));
  hz_config c;
  std::memcpy(&c, raw.data(), sizeof(c));
  EXPECT_EQ(c.magic, HZ_CONFIG_MAGIC);
  EXPECT_EQ(c.version_major, HZ_VERSION_MAJOR);
  EXPECT_EQ(c.num_request_queues, limits_.num_request_queues);
  EXPECT_EQ(c.status, HZ_CFG_S_READY | HZ_CFG_S_LATENCY_WINDOW);
  EXPECT_EQ(c.max_regions, limits_.max_regions);
  EXPECT_EQ(c.event_record_size, sizeof(hz_event));
  EXPECT_EQ(c.latency_poll_us, limits_.low_latency_poll_us);  // the tenant sets none
  EXPECT_EQ(dev_->NumQueues(), HZ_VQ_REQUEST_BASE + limits_.num_request_queues);
  draining_ = true;
  std::memcpy(&c, dev_->ConfigSpace().data(), sizeof(c));
  EXPECT_EQ(c.status, HZ_CFG_S_DRAINING | HZ_CFG_S_LATENCY_WINDOW);
}

// A front-end that polls for its completions learns how long the device
// polls for its requests (SPEC §5.1): the window the operator set for the
// tenant, 0 where it grants the latency class no effect; the status bit
// tells that 0 from a device that does not report a window.
TEST_F(DeviceTest, ConfigSpaceReportsTheTenantsPollingWindow) {
  for (uint32_t window : {0u, 75u}) {
    SCOPED_TRACE(window);
    TenantSpec spec = tenant_->spec();
    spec.latency_poll_us = window;
    tenant_ = std::make_shared<Tenant>(spec);
    Recreate();
    hz_config c;
    std::memcpy(&c, dev_->ConfigSpace().data(), sizeof(c));
    EXPECT_EQ(c.latency_poll_us, window);
    EXPECT_TRUE(c.status & HZ_CFG_S_LATENCY_WINDOW);
  }
}

TEST_F(DeviceTest, ChainWithoutRoomForStatusCompletesWithZeroLength) {
  vdev::Chain c = cb_.Make(HeaderOnly(HZ_OP_HELLO, 1, 0), sizeof(hz_status) - 1);
  ASSERT_TRUE(Submit(0, c));
  EXPECT_EQ(queues_[0]->used.back().len, 0u);
  vdev::Chain none = cb_.Make(HeaderOnly(HZ_OP_HELLO, 1, 0), 0);
  ASSERT_TRUE(Submit(0, none));
  EXPECT_EQ(queues_[0]->used.back().len, 0u);
  EXPECT_EQ(metrics_.dropped(), 2u);
}

TEST_F(DeviceTest, MalformedHeadersAreRejected) {
  std::vector<uint8_t> shorthdr(8, 0);
  EXPECT_EQ(Call(0, shorthdr).status, HZ_S_EINVAL);
  EXPECT_EQ(last_used_, sizeof(hz_status));
  hz_status st = Call(0, HeaderOnly(HZ_OP_HELLO, 77, 0, /*flags=*/1));
  EXPECT_EQ(st.status, HZ_S_ENOTSUP);
  EXPECT_EQ(st.request_id, 77u);
  // args_len larger than what the chain holds.
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_HELLO, 78, 1000)).status, HZ_S_EINVAL);
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_HELLO, 79, 0xffffffffu)).status, HZ_S_EINVAL);
}

TEST_F(DeviceTest, HelloComesFirst) {
  hz_region_unregister_args a{};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, a, 5)).status, HZ_S_ESTATE);
  // An unknown opcode is unknown whatever the state.
  EXPECT_EQ(Call(0, HeaderOnly(0x7777, 6)).status, HZ_S_ENOTSUP);
  Hello();
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, a, 5)).status, HZ_S_ENOENT);
}

TEST_F(DeviceTest, OpcodesMustUseTheirQueue) {
  hz_hello_args h{};
  h.version_major = HZ_VERSION_MAJOR;
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_HELLO, h, 1)).status, HZ_S_EQUEUE);
  Hello();
  hz_coll_args c{};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_ALLREDUCE, c, 2)).status, HZ_S_EQUEUE);
  EXPECT_EQ(Call(3, RequestBytes(HZ_OP_REGION_UNREGISTER, hz_region_unregister_args{}, 3)).status,
            HZ_S_EQUEUE);
}

TEST_F(DeviceTest, HelloNegotiatesOnlyImplementedFeatures) {
  hz_hello_result r = Hello();
  EXPECT_EQ(r.version_major, HZ_VERSION_MAJOR);
  EXPECT_EQ(r.num_request_queues, limits_.num_request_queues);
  EXPECT_EQ(r.device_features, (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_INLINE_DATA));
  EXPECT_NE(r.session_id, 0u);
  EXPECT_EQ(last_used_, sizeof(hz_hello_result) + sizeof(hz_status));
  // Only what the driver asked for is granted.
  r = Hello(1ull << HZ_F_COLLECTIVES);
  EXPECT_EQ(r.device_features, 1ull << HZ_F_COLLECTIVES);
}

// SPEC §4.2: HELLO grants only what the operator allows the tenant, and a
// change of the allowance applies from the session's next HELLO.
TEST_F(DeviceTest, HelloGrantsOnlyTheTenantsAllowance) {
  tenant_->set_features(1ull << HZ_F_COLLECTIVES);
  hz_hello_result r = Hello();
  EXPECT_EQ(r.device_features, 1ull << HZ_F_COLLECTIVES);
  tenant_->set_features(0);
  EXPECT_EQ(r.device_features, 1ull << HZ_F_COLLECTIVES) << "the session keeps its grant";
  r = Hello();
  EXPECT_EQ(r.device_features, 0u);
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_COMM_UID, 2)).status, HZ_S_ENOTSUP);
}

TEST_F(DeviceTest, HelloAcrossManySegments) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  a.driver_features = 1;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HELLO, a, 9), 64, /*chunk=*/3).status, HZ_S_OK);
  EXPECT_EQ(StatusOf(last_).request_id, 9u);
}

TEST_F(DeviceTest, HelloVersionMismatch) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR + 1;
  hz_status st = Call(0, RequestBytes(HZ_OP_HELLO, a, 1));
  EXPECT_EQ(st.status, HZ_S_EVERSION);
  EXPECT_EQ(st.result_len, 0u);
  EXPECT_EQ(st.detail, (HZ_VERSION_MAJOR << 16) | HZ_VERSION_MINOR);
  // Still not initialised.
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_COMM_UID, 2)).status, HZ_S_ESTATE);
}

TEST_F(DeviceTest, HelloResultSpaceTooSmall) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  hz_status st = Call(0, RequestBytes(HZ_OP_HELLO, a, 1), 8);
  EXPECT_EQ(st.status, HZ_S_ETOOSMALL);
  EXPECT_EQ(st.detail, sizeof(hz_hello_result));
}

TEST_F(DeviceTest, ArgumentsAreForwardCompatible) {
  struct Longer {
    hz_hello_args a;
    uint8_t extra[8];
  } l{};
  l.a.version_major = HZ_VERSION_MAJOR;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HELLO, l, 1)).status, HZ_S_OK);
  l.extra[7] = 1;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HELLO, l, 1)).status, HZ_S_ENOTSUP);
  uint32_t shorter = HZ_VERSION_MAJOR;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HELLO, shorter, 1)).status, HZ_S_EINVAL);
}

TEST_F(DeviceTest, UnimplementedFamiliesAnswerNotSupported) {
  Hello();
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_CKPT_POLICY, hz_ckpt_policy_args{}, 1)).status,
            HZ_S_ENOTSUP);
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_CKPT_SAVE, hz_ckpt_save_args{}, 1)).status, HZ_S_ENOTSUP);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_EVENT_SUBSCRIBE, hz_event_subscribe_args{}, 1)).status,
            HZ_S_ENOTSUP);
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_TOPOLOGY_GET, 1)).status, HZ_S_ENOTSUP);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_NEG_REQUEST, hz_neg_request{}, 1)).status, HZ_S_ENOTSUP);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HINT_DECLARE, hz_hint_declare_args{}, 1)).status,
            HZ_S_ENOTSUP);
}

TEST_F(DeviceTest, CollectivesNeedTheNegotiatedFeature) {
  Hello(0);
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_COMM_UID, 1)).status, HZ_S_ENOTSUP);
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_BARRIER, hz_coll_args{}, 1)).status, HZ_S_ENOTSUP);
}

TEST_F(DeviceTest, RegionRegisterAndUnregister) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t id = 0;
  ASSERT_EQ(Register({{b + 8192, 4096}, {b, 100}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &id),
            HZ_S_OK);
  EXPECT_NE(id, HZ_REGION_NONE);
  EXPECT_NE(id, HZ_REGION_INLINE);
  EXPECT_EQ(tenant_->usage().regions, 1u);
  EXPECT_EQ(tenant_->usage().region_bytes, 4196u);
  EXPECT_EQ(dev_->Info().regions, 1u);
  hz_region_unregister_args u{};
  u.region_id = id;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 5)).status, HZ_S_OK);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 5)).status, HZ_S_ENOENT);
  EXPECT_EQ(tenant_->usage().regions, 0u);
  EXPECT_EQ(tenant_->usage().region_bytes, 0u);
}

TEST_F(DeviceTest, RegionRegisterRejectsBadExtents) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t id = 0;
  const uint32_t rw = HZ_REGION_F_READ | HZ_REGION_F_WRITE;
  EXPECT_EQ(Register({{b, 0}}, rw, &id), HZ_S_EINVAL);                    // empty extent
  EXPECT_EQ(Register({{b, 4096}, {b + 100, 10}}, rw, &id), HZ_S_EINVAL);  // overlap
  EXPECT_EQ(last_detail_, 1u);
  EXPECT_EQ(Register({{b - 4096, 4096}}, rw, &id), HZ_S_EFAULT);            // below RAM
  EXPECT_EQ(Register({{b + ram_.size() - 10, 20}}, rw, &id), HZ_S_EFAULT);  // past the end
  EXPECT_EQ(Register({{~0ull - 10, 100}}, rw, &id), HZ_S_EINVAL);           // wraps
  EXPECT_EQ(Register({{b, 4096}}, rw, &id, 4095), HZ_S_EINVAL);             // total_len
  EXPECT_EQ(Register({{b, 4096}}, 0, &id), HZ_S_EINVAL);                    // no access
  EXPECT_EQ(Register({{b, 4096}}, 0x80 | rw, &id), HZ_S_ENOTSUP);           // unknown flag
  // Overlap with an existing region of this VM.
  ASSERT_EQ(Register({{b, 4096}}, rw, &id), HZ_S_OK);
  EXPECT_EQ(Register({{b + 4000, 4096}}, rw, &id), HZ_S_EINVAL);
  EXPECT_EQ(Register({{b + 4096, 4096}}, rw, &id), HZ_S_OK);  // adjacent is fine
  // Extent count that disagrees with the data segment.
  hz_region_register_args a{};
  a.num_extents = 3;
  a.flags = rw;
  a.total_len = 10;
  hz_extent one{b + 65536, 10};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_REGISTER, a, 2, &one, sizeof(one))).status,
            HZ_S_EINVAL);
  EXPECT_EQ(tenant_->usage().regions, 2u);
}

TEST_F(DeviceTest, RegionQuotas) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t id = 0;
  // The tenant allows 1 MiB in total.
  EXPECT_EQ(Register({{b, (1 << 20) + 1}}, HZ_REGION_F_READ, &id), HZ_S_ELIMIT);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(Register({{b + i * 4096ull, 4096}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  }
  EXPECT_EQ(Register({{b + 9 * 4096ull, 4096}}, HZ_REGION_F_READ, &id), HZ_S_ELIMIT);
  // Device limit on bytes per region.
  limits_.max_region_bytes = 100;
  Recreate();
  EXPECT_EQ(tenant_->usage().regions, 0u) << "a torn-down device returns its quota";
  Hello();
  EXPECT_EQ(Register({{b, 101}}, HZ_REGION_F_READ, &id), HZ_S_ELIMIT);
}

TEST_F(DeviceTest, CommunicatorLifecycle) {
  Hello();
  uint64_t comm = InitComm();
  EXPECT_NE(comm, 0u);
  ASSERT_EQ(dev_->Info().comms.size(), 1u);
  hz_comm_args a{};
  a.comm = comm;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_ABORT, a, 1)).status, HZ_S_OK);
  EXPECT_EQ(backend_.aborted.size(), 1u);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, a, 1)).status, HZ_S_OK);
  EXPECT_EQ(backend_.destroyed.size(), 1u);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, a, 1)).status, HZ_S_ENOENT);
}

TEST_F(DeviceTest, CommInitCompletesWhenAllRanksJoined) {
  Hello();
  Call(0, HeaderOnly(HZ_OP_COMM_UID, 3));
  hz_comm_init_args a{};
  std::memcpy(&a.uid, last_.writable()[0].data, sizeof(a.uid));
  a.nranks = 2;
  a.rank = 1;
  a.constraints.flags = HZ_COMM_F_DETERMINISTIC;
  a.constraints.priority_class = HZ_PRIO_NORMAL;
  a.constraints.timeout_ms = 1234;
  vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_COMM_INIT, a, 42), 64);
  EXPECT_FALSE(Submit(0, c));
  EXPECT_EQ(dev_->in_flight(), 1u);
  ASSERT_EQ(backend_.inits.size(), 1u);
  EXPECT_TRUE(backend_.last_constraints.deterministic);
  EXPECT_EQ(backend_.last_constraints.priority_class, HZ_PRIO_NORMAL);
  EXPECT_EQ(backend_.last_constraints.timeout_ms, 1234u);
  // The engine completes on its own thread; the device finishes on its executor.
  backend_.inits[0].done(Status::Ok(), std::make_shared<testing::FakeMember>(1, 2, 7));
  EXPECT_EQ(queues_[0]->used.size(), 2u);
  ctx_.RunPosted();
  ASSERT_EQ(queues_[0]->used.size(), 3u);
  hz_status st = StatusOf(c);
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.request_id, 42u);
  EXPECT_EQ(st.result_len, sizeof(hz_comm_init_result));
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceTest, CommInitValidatesArguments) {
  Hello();
  hz_comm_init_args a{};
  a.nranks = 0;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_EINVAL);
  a.nranks = 2;
  a.rank = 2;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_EINVAL);
  a.rank = 0;
  a.constraints.priority_class = HZ_PRIO_MAX;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_EINVAL);
  a.constraints.priority_class = 0;
  a.constraints.flags = 1u << 7;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_ENOTSUP);
  a.constraints.flags = 0;
  a.constraints.reserved = 1;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_ENOTSUP);
  a.constraints.reserved = 0;
  a.nranks = limits_.max_comm_ranks + 1;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_ELIMIT);
  // The tenant (normal priority) may not ask for a higher class.
  a.nranks = 1;
  a.constraints.priority_class = HZ_PRIO_HIGH;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_INIT, a, 1)).status, HZ_S_EPERM);
  EXPECT_TRUE(backend_.inits.empty());
}

TEST_F(DeviceTest, AnotherTenantsUidIsRefused) {
  Hello();
  coll::Uid foreign;
  ASSERT_EQ(backend_.NewUid(TenantId("another"), &foreign).code(), StatusCode::kOk);
  hz_comm_init_args a{};
  std::memcpy(&a.uid, foreign.bytes.data(), sizeof(a.uid));
  a.nranks = 1;
  vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_COMM_INIT, a, 1), 64);
  Submit(0, c);
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(c).status, HZ_S_EPERM);
}

TEST_F(DeviceTest, AllReduceResolvesSlicesAcrossExtents) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t src = 0, dst = 0;
  // 256 bytes split across two non-adjacent extents, in reverse gpa order.
  ASSERT_EQ(Register({{b + 65536, 100}, {b, 156}}, HZ_REGION_F_READ, &src), HZ_S_OK);
  ASSERT_EQ(Register({{b + 131072, 256}}, HZ_REGION_F_WRITE, &dst), HZ_S_OK);
  uint64_t comm = InitComm();
  hz_coll_args a = Coll(comm, 40, Slice(src, 96, 160), Slice(dst, 0, 160));
  a.seq = 5;
  vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_ALLREDUCE, a, 77), 0 + sizeof(hz_status));
  EXPECT_FALSE(Submit(2, c));
  ASSERT_EQ(backend_.posts.size(), 1u);
  const coll::OpDesc& d = backend_.posts[0].op;
  EXPECT_EQ(d.op, coll::Op::kAllReduce);
  EXPECT_EQ(d.seq, 5u);
  EXPECT_EQ(d.count, 40u);
  EXPECT_EQ(d.dtype, HZ_FP32);
  ASSERT_EQ(d.send.size(), 2u);
  EXPECT_EQ(d.send[0].data, ram_.at(b + 65536 + 96));
  EXPECT_EQ(d.send[0].len, 4u);
  EXPECT_EQ(d.send[1].data, ram_.at(b));
  EXPECT_EQ(d.send[1].len, 156u);
  ASSERT_EQ(d.recv.size(), 1u);
  EXPECT_EQ(d.recv[0].data, ram_.at(b + 131072));
  EXPECT_EQ(d.recv[0].len, 160u);

  // A region in use cannot go away.
  hz_region_unregister_args u{};
  u.region_id = src;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 1)).status, HZ_S_EBUSY);

  backend_.posts[0].done(Status::Ok());
  ctx_.RunPosted();
  hz_status st = StatusOf(c);
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.request_id, 77u);
  EXPECT_EQ(queues_[2]->used.back().len, sizeof(hz_status));
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 1)).status, HZ_S_OK);
  EXPECT_EQ(metrics_.requests(HZ_OP_ALLREDUCE, HZ_S_OK), 1u);
  EXPECT_EQ(metrics_.bytes(HZ_OP_ALLREDUCE), 160u);
}

TEST_F(DeviceTest, BadSlicesAreRejected) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t ro = 0, rw = 0;
  ASSERT_EQ(Register({{b, 4096}}, HZ_REGION_F_READ, &ro), HZ_S_OK);
  ASSERT_EQ(Register({{b + 8192, 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &rw), HZ_S_OK);
  uint64_t comm = InitComm();
  auto status = [&](hz_coll_args a) { return Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 1)).status; };
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, 0, 64), Slice(ro, 0, 64))),
            HZ_S_EFAULT);  // not writable
  EXPECT_EQ(status(Coll(comm, 16, Slice(99, 0, 64), Slice(rw, 0, 64))), HZ_S_ENOENT);  // unknown
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, 4090, 64), Slice(rw, 0, 64))), HZ_S_EFAULT);
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, ~0ull - 8, 64), Slice(rw, 0, 64))), HZ_S_EFAULT);
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, 0, ~0ull), Slice(rw, 0, 64))), HZ_S_EFAULT);
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, 0, 63), Slice(rw, 0, 64))), HZ_S_EINVAL);  // short
  EXPECT_EQ(status(Coll(comm, 16, Slice(ro, 0, 68), Slice(rw, 0, 64))), HZ_S_EINVAL);  // long
  EXPECT_EQ(status(Coll(comm, 16, Slice(0, 0, 0), Slice(rw, 0, 64))), HZ_S_EINVAL);    // missing
  hz_coll_args a = Coll(comm, 16, Slice(ro, 0, 64), Slice(rw, 0, 64));
  a.send.reserved = 1;
  EXPECT_EQ(status(a), HZ_S_ENOTSUP);
  a = Coll(comm, ~0ull / 2, Slice(ro, 0, 64), Slice(rw, 0, 64));
  EXPECT_EQ(status(a), HZ_S_EINVAL);  // count * size overflows
  a = Coll(comm, 16, Slice(ro, 0, 64), Slice(rw, 0, 64));
  a.dtype = HZ_DTYPE_MAX;
  EXPECT_EQ(status(a), HZ_S_EINVAL);
  a.dtype = HZ_FP32;
  a.redop = HZ_REDOP_MAX;
  EXPECT_EQ(status(a), HZ_S_EINVAL);
  a.redop = HZ_SUM;
  a.flags = 1;
  EXPECT_EQ(status(a), HZ_S_ENOTSUP);
  a.flags = 0;
  a.comm = comm + 1000;
  EXPECT_EQ(status(a), HZ_S_ENOENT);
  EXPECT_TRUE(backend_.posts.empty());
}

TEST_F(DeviceTest, InlineSendAndReceive) {
  Hello();
  uint64_t comm = InitComm();
  float in[4] = {1, 2, 3, 4};
  hz_slice send = Slice(HZ_REGION_INLINE, 0, sizeof(in));
  hz_slice recv = Slice(HZ_REGION_INLINE, 0, sizeof(in));
  hz_coll_args a = Coll(comm, 4, send, recv);
  vdev::Chain c =
      cb_.Make(RequestBytes(HZ_OP_ALLREDUCE, a, 3, in, sizeof(in)), 32 + sizeof(hz_status));
  EXPECT_FALSE(Submit(2, c));
  ASSERT_EQ(backend_.posts.size(), 1u);
  coll::OpDesc& d = backend_.posts[0].op;
  ASSERT_EQ(d.send.size(), 1u);
  EXPECT_EQ(std::memcmp(d.send[0].data, in, sizeof(in)), 0);
  ASSERT_EQ(d.recv.size(), 1u);
  EXPECT_EQ(d.recv[0].data, c.writable()[0].data);
  std::memcpy(d.recv[0].data, in, sizeof(in));  // what the engine would write
  backend_.posts[0].done(Status::Ok());
  ctx_.RunPosted();
  hz_status st = StatusOf(c);
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.result_len, sizeof(in));
  EXPECT_EQ(queues_[2]->used.back().len, sizeof(in) + sizeof(hz_status));
  // Inline receive data larger than the result space.
  hz_status small = Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 3, in, sizeof(in)), 8);
  EXPECT_EQ(small.status, HZ_S_ETOOSMALL);
  EXPECT_EQ(small.detail, sizeof(in));
  // Inline send length must be the data segment's; offsets must be 0.
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 3, in, 8), 32).status, HZ_S_EINVAL);
  a.recv.offset = 4;
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 3, in, sizeof(in)), 32).status, HZ_S_EINVAL);
  // Without HZ_F_INLINE_DATA inline slices are not supported.
  Hello(1ull << HZ_F_COLLECTIVES);
  comm = InitComm();
  a = Coll(comm, 4, send, Slice(HZ_REGION_INLINE, 0, sizeof(in)));
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 3, in, sizeof(in)), 32).status, HZ_S_ENOTSUP);
}

TEST_F(DeviceTest, EngineErrorsMapToStatuses) {
  Hello();
  uint64_t comm = InitComm();
  hz_coll_args a{};
  a.comm = comm;
  vdev::Chain c1 = cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 1), sizeof(hz_status));
  vdev::Chain c2 = cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 2), sizeof(hz_status));
  Submit(2, c1);
  Submit(3, c2);
  ASSERT_EQ(backend_.posts.size(), 2u);
  EXPECT_EQ(backend_.posts[0].op.op, coll::Op::kBarrier);
  backend_.posts[0].done(Status::Mismatch());
  backend_.posts[1].done(Status::TimedOut());
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(c1).status, HZ_S_EMISMATCH);
  EXPECT_EQ(StatusOf(c2).status, HZ_S_ETIMEDOUT);
  EXPECT_EQ(metrics_.requests(HZ_OP_BARRIER, HZ_S_EMISMATCH), 1u);
}

TEST_F(DeviceTest, RootedAndPointToPointShapes) {
  Hello();
  uint64_t b = ram_.base();
  uint32_t r = 0;
  ASSERT_EQ(Register({{b, 65536}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &r), HZ_S_OK);
  uint64_t comm = InitComm();  // 1 rank: rank 0 is the root
  hz_coll_args a = Coll(comm, 8, Slice(r, 0, 32), Slice(r, 32, 32));
  a.redop = 0;
  a.peer = 1;  // out of range for a 1-rank communicator
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_BROADCAST, a, 1)).status, HZ_S_EINVAL);
  a.peer = 0;
  EXPECT_FALSE(Submit(2, cb_.Make(RequestBytes(HZ_OP_BROADCAST, a, 1), 64)));
  // A send carries no receive slice.
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_SEND, a, 1)).status, HZ_S_EINVAL);
  a.recv = Slice(0, 0, 0);
  EXPECT_FALSE(Submit(2, cb_.Make(RequestBytes(HZ_OP_SEND, a, 1), 64)));
  // All-gather needs nranks * count elements of receive space.
  a = Coll(comm, 8, Slice(r, 0, 32), Slice(r, 64, 32));
  a.redop = 0;
  EXPECT_FALSE(Submit(2, cb_.Make(RequestBytes(HZ_OP_ALLGATHER, a, 1), 64)));
  // Unused fields must be zero: redop for a broadcast, peer for an all-reduce.
  a.redop = HZ_MAX;
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_BROADCAST, a, 1)).status, HZ_S_EINVAL);
  a.redop = 0;
  a.peer = 3;
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 1)).status, HZ_S_EINVAL);
  ASSERT_EQ(backend_.posts.size(), 3u);
  EXPECT_EQ(backend_.posts[0].op.op, coll::Op::kBroadcast);
  EXPECT_EQ(backend_.posts[1].op.op, coll::Op::kSend);
  EXPECT_TRUE(backend_.posts[1].op.recv.empty());
  EXPECT_EQ(backend_.posts[2].op.op, coll::Op::kAllGather);
}

TEST_F(DeviceTest, DrainAnswersEverythingWithShutdown) {
  Hello();
  uint64_t comm = InitComm();
  hz_coll_args a{};
  a.comm = comm;
  vdev::Chain op = cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 1), sizeof(hz_status));
  Submit(2, op);
  Call(0, HeaderOnly(HZ_OP_COMM_UID, 3));
  hz_comm_init_args ia{};
  std::memcpy(&ia.uid, last_.writable()[0].data, sizeof(ia.uid));
  ia.nranks = 3;
  vdev::Chain init = cb_.Make(RequestBytes(HZ_OP_COMM_INIT, ia, 2), 64);
  Submit(0, init);
  vdev::Chain event = cb_.Make({}, sizeof(hz_event));
  EXPECT_FALSE(Submit(1, event)) << "event buffers are held";
  vdev::Chain tiny = cb_.Make({}, sizeof(hz_event) - 1);
  EXPECT_TRUE(Submit(1, tiny)) << "a buffer too small for a record goes back at once";
  EXPECT_EQ(queues_[1]->used.back().len, 0u);
  EXPECT_EQ(dev_->Info().events_held, 1u);
  EXPECT_EQ(dev_->in_flight(), 2u);

  draining_ = true;
  dev_->Drain();
  EXPECT_EQ(StatusOf(op).status, HZ_S_ESHUTDOWN);
  EXPECT_EQ(StatusOf(init).status, HZ_S_ESHUTDOWN);
  ASSERT_EQ(queues_[1]->used.size(), 2u);
  EXPECT_EQ(queues_[1]->used.back().len, 0u) << "event buffers are returned unused";
  EXPECT_EQ(dev_->in_flight(), 0u);
  EXPECT_EQ(ctx_.config_changes, 1);
  // Late engine completions find nothing to answer twice.
  backend_.posts[0].done(Status::Shutdown());
  ctx_.RunPosted();
  EXPECT_EQ(queues_[2]->used.size(), 1u);
  // New requests are refused.
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_COMM_UID, 9)).status, HZ_S_ESHUTDOWN);
}

TEST_F(DeviceTest, DisconnectLeavesCommunicatorsAndReturnsQuota) {
  Hello();
  uint32_t id = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  InitComm();
  EXPECT_EQ(tenant_->usage().regions, 1u);
  dev_->OnDisconnect();
  EXPECT_EQ(backend_.destroyed.size(), 1u);
  EXPECT_EQ(tenant_->usage().regions, 0u);
  EXPECT_FALSE(dev_->Info().connected);
  EXPECT_TRUE(dev_->Info().comms.empty());
}

TEST_F(DeviceTest, CompletionAfterDisconnectIsDropped) {
  Hello();
  uint64_t comm = InitComm();
  hz_coll_args a{};
  a.comm = comm;
  Submit(2, cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 1), sizeof(hz_status)));
  dev_->OnDisconnect();
  backend_.posts[0].done(Status::Aborted());
  EXPECT_EQ(ctx_.RunPosted(), 0u);
  dev_.reset();
}

}  // namespace
}  // namespace hz::service

namespace hz::service {
namespace {

TEST_F(DeviceTest, DataSegmentOnlyWhereDefined) {
  hz_hello_args a{};
  a.version_major = HZ_VERSION_MAJOR;
  uint8_t junk[4] = {1, 2, 3, 4};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HELLO, a, 1, junk, sizeof(junk))).status, HZ_S_EINVAL);
}

TEST_F(DeviceTest, SecondHelloStartsANewSession) {
  uint64_t first = Hello().session_id;
  uint32_t id = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  uint64_t comm = InitComm();
  hz_coll_args a{};
  a.comm = comm;
  vdev::Chain op = cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 1), sizeof(hz_status));
  Submit(2, op);
  uint64_t second = Hello().session_id;
  EXPECT_NE(first, second);
  EXPECT_EQ(tenant_->usage().regions, 0u);
  EXPECT_EQ(backend_.destroyed.size(), 1u) << "the old session's rank left its communicator";
  // The engine aborts the old session's operation; it is still answered.
  backend_.posts[0].done(Status::Aborted());
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(op).status, HZ_S_EABORTED);
  hz_comm_args ca{};
  ca.comm = comm;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, ca, 1)).status, HZ_S_ENOENT);
}

TEST_F(DeviceTest, DestroyWithOperationsInFlightIsBusyAndAbortWaitsForThem) {
  Hello();
  uint64_t comm = InitComm();
  hz_coll_args a{};
  a.comm = comm;
  vdev::Chain op = cb_.Make(RequestBytes(HZ_OP_BARRIER, a, 1), sizeof(hz_status));
  Submit(2, op);
  hz_comm_args ca{};
  ca.comm = comm;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, ca, 2)).status, HZ_S_EBUSY);
  vdev::Chain abort = cb_.Make(RequestBytes(HZ_OP_COMM_ABORT, ca, 3), sizeof(hz_status));
  EXPECT_FALSE(Submit(0, abort)) << "COMM_ABORT waits for the handle's operations";
  EXPECT_EQ(backend_.aborted.size(), 1u);
  backend_.posts[0].done(Status::Aborted());
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(op).status, HZ_S_EABORTED);
  EXPECT_EQ(StatusOf(abort).status, HZ_S_OK);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, ca, 4)).status, HZ_S_OK);
}

TEST_F(DeviceTest, InPlaceFormsAndOverlap) {
  Hello();
  uint32_t r = 0;
  ASSERT_EQ(Register({{ram_.base(), 65536}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &r), HZ_S_OK);
  uint64_t comm = InitComm();
  // All-reduce in place: send and recv coincide.
  EXPECT_FALSE(Submit(
      2,
      cb_.Make(RequestBytes(HZ_OP_ALLREDUCE, Coll(comm, 8, Slice(r, 64, 32), Slice(r, 64, 32)), 1),
               64)));
  // Partial overlap is refused (detail 1: the recv slice).
  hz_status st =
      Call(2, RequestBytes(HZ_OP_ALLREDUCE, Coll(comm, 8, Slice(r, 64, 32), Slice(r, 80, 32)), 2));
  EXPECT_EQ(st.status, HZ_S_EINVAL);
  EXPECT_EQ(st.detail, 1u);
  // All-to-all has no in-place form.
  hz_coll_args a = Coll(comm, 8, Slice(r, 0, 32), Slice(r, 0, 32));
  a.redop = 0;
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLTOALL, a, 3)).status, HZ_S_EINVAL);
  EXPECT_EQ(backend_.posts.size(), 1u);
}

}  // namespace
}  // namespace hz::service
