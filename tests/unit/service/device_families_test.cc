// The checkpoint, event and provider families of HzDevice on scripted
// backends: each answers through the executor, and each answers or forgets
// its own requests in flight when the session ends or the service drains.
#include <gtest/gtest.h>

#include <cstring>

#include "device_fixture.h"

namespace hz::service {
namespace {

using testing::HeaderOnly;
using testing::RequestBytes;
using testing::StatusOf;

class DeviceFamiliesTest : public DeviceTest {
 protected:
  void AddBackends(DeviceEnv* env) override {
    env->ckpt = &ckpt_;
    env->events = &bus_;
    env->provider = &provider_;
  }
  // The device goes before the backends it uses, which are members of this
  // fixture and so are destroyed before the base's.
  void TearDown() override { dev_.reset(); }

  // A CKPT_SAVE of one 64-byte slice of region, step 3, on queue 2; pending.
  vdev::Chain Save(uint32_t region) {
    hz_ckpt_save_args a{};
    a.stream = 1;
    a.step = 3;
    a.num_slices = 1;
    hz_slice s = Slice(region, 0, 64);
    vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_CKPT_SAVE, a, 40, &s, sizeof(s)),
                             sizeof(hz_ckpt_save_result) + sizeof(hz_status));
    EXPECT_FALSE(Submit(2, c)) << "a save runs on an engine thread";
    return c;
  }

  uint32_t Region() {
    uint32_t id = 0;
    EXPECT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &id), HZ_S_OK);
    std::memset(ram_.at(ram_.base()), 0x5a, 64);
    return id;
  }

  // A NEG_REQUEST on queue 0; pending until the decision point.
  vdev::Chain Negotiate() {
    hz_neg_request r{};
    r.kind = HZ_DEV_GPU;
    r.count = 1;
    vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_NEG_REQUEST, r, 50), 400);
    EXPECT_FALSE(Submit(0, c)) << "a negotiation waits for the decision point";
    return c;
  }

  testing::FakeCkptBackend ckpt_;
  testing::FakeEventBackend bus_;
  testing::FakeProviderBackend provider_;
};

TEST_F(DeviceFamiliesTest, HelloGrantsTheFeatureOfEveryBackend) {
  hz_hello_result r = Hello();
  EXPECT_EQ(r.device_features, (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_INLINE_DATA) |
                                   (1ull << HZ_F_CHECKPOINT) | (1ull << HZ_F_EVENTS) |
                                   (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_NEGOTIATION) |
                                   (1ull << HZ_F_HINTS));
}

TEST_F(DeviceFamiliesTest, SaveRunsOnAnEngineThreadAndIsAnsweredOnTheExecutor) {
  Hello();
  uint32_t region = Region();
  vdev::Chain c = Save(region);
  EXPECT_EQ(dev_->in_flight(), 1u);
  hz_region_unregister_args u{};
  u.region_id = region;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 1)).status, HZ_S_EBUSY)
      << "the save pins its region";
  EXPECT_EQ(ckpt_.RunQueued(), 1u);
  EXPECT_EQ(ckpt_.saved, std::vector<uint8_t>(64, 0x5a));
  EXPECT_EQ(queues_[2]->used.size(), 0u) << "answered on the executor, not the engine thread";
  ctx_.RunPosted();
  hz_status st = StatusOf(c);
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.request_id, 40u);
  EXPECT_EQ(st.result_len, sizeof(hz_ckpt_save_result));
  hz_ckpt_save_result res;
  std::memcpy(&res, c.writable()[0].data, sizeof(res));
  EXPECT_EQ(res.step, 3u);
  EXPECT_EQ(dev_->in_flight(), 0u);
  EXPECT_EQ(metrics_.bytes(HZ_OP_CKPT_SAVE), 64u);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, 1)).status, HZ_S_OK);
}

// CKPT_POLICY and CKPT_DELETE write and flush the disk: a guest that sends
// them in bulk must not hold the connection thread its tenant shares with
// other VMs, so both are answered from an engine thread.
TEST_F(DeviceFamiliesTest, PolicyAndDeleteTouchTheDiskOnlyFromAnEngineThread) {
  Hello();
  hz_ckpt_policy_args p{};
  p.stream = 1;
  p.retention = 1;
  p.tier = HZ_TIER_LOCAL_DISK;
  vdev::Chain pc = cb_.Make(RequestBytes(HZ_OP_CKPT_POLICY, p, 41), sizeof(hz_status));
  EXPECT_FALSE(Submit(0, pc)) << "CKPT_POLICY was answered on the connection thread";
  hz_ckpt_delete_args d{};
  d.stream = 1;
  d.step = 7;
  vdev::Chain dc = cb_.Make(RequestBytes(HZ_OP_CKPT_DELETE, d, 42), sizeof(hz_status));
  EXPECT_FALSE(Submit(0, dc)) << "CKPT_DELETE was answered on the connection thread";
  EXPECT_EQ(ckpt_.policies.load() + ckpt_.deletes.load(), 0);
  EXPECT_EQ(dev_->in_flight(), 2u);
  EXPECT_EQ(ckpt_.RunQueued(), 2u);
  EXPECT_EQ(ckpt_.policies.load(), 1);
  EXPECT_EQ(ckpt_.deletes.load(), 1);
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(pc).status, HZ_S_OK);
  EXPECT_EQ(StatusOf(pc).request_id, 41u);
  EXPECT_EQ(StatusOf(dc).status, HZ_S_ENOENT);
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceFamiliesTest, ANewSessionCancelsASaveNotYetRunAndAnswersItAborted) {
  Hello();
  vdev::Chain c = Save(Region());
  Hello();  // the session ends before an engine thread picks the save up
  EXPECT_EQ(ckpt_.RunQueued(), 1u);
  EXPECT_TRUE(ckpt_.saved.empty()) << "a cancelled save never touches guest memory";
  ctx_.RunPosted();
  EXPECT_EQ(StatusOf(c).status, HZ_S_EABORTED);
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceFamiliesTest, ADisconnectForgetsTheSaveInFlight) {
  Hello();
  Save(Region());
  dev_->OnDisconnect();
  EXPECT_EQ(dev_->in_flight(), 0u);
  EXPECT_EQ(ckpt_.RunQueued(), 1u);
  EXPECT_EQ(ctx_.RunPosted(), 0u) << "nothing comes back to a gone connection";
  dev_.reset();
}

TEST_F(DeviceFamiliesTest, ASaveCompletingAfterTheDeviceIsGoneIsDropped) {
  Hello();
  Save(Region());
  dev_.reset();  // without a disconnect first: the posted answer finds no device
  EXPECT_EQ(ckpt_.RunQueued(), 1u);
  ctx_.RunPosted();
  EXPECT_TRUE(queues_[2]->used.empty());
}

TEST_F(DeviceFamiliesTest, EventBuffersFillWhenARecordIsPublished) {
  Hello();
  hz_event_subscribe_args a{};
  a.topics = 1ull << HZ_TOPIC_MAINTENANCE;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_EVENT_SUBSCRIBE, a, 1)).status, HZ_S_OK);
  EXPECT_EQ(bus_.last_tenant, "t1");
  vdev::Chain buf = cb_.Make({}, sizeof(hz_event));
  EXPECT_FALSE(Submit(1, buf));
  EXPECT_EQ(dev_->Info().events_held, 1u);
  bus_.Publish(HZ_TOPIC_MAINTENANCE);  // notifies from the publisher's thread
  EXPECT_TRUE(queues_[1]->used.empty());
  ctx_.RunPosted();
  ASSERT_EQ(queues_[1]->used.size(), 1u);
  EXPECT_EQ(queues_[1]->used[0].len, sizeof(hz_event));
  hz_event ev;
  std::memcpy(&ev, buf.writable()[0].data, sizeof(ev));
  EXPECT_EQ(ev.seq, 1u);
  EXPECT_EQ(ev.topic, HZ_TOPIC_MAINTENANCE);
  EXPECT_EQ(bus_.delivered, 1u);
  EXPECT_EQ(dev_->Info().events_held, 0u);
}

TEST_F(DeviceFamiliesTest, TheSubscriptionEndsWithTheSession) {
  Hello();
  hz_event_subscribe_args a{};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_EVENT_SUBSCRIBE, a, 1)).status, HZ_S_OK);
  EXPECT_NE(bus_.live, nullptr);
  Hello();
  EXPECT_EQ(bus_.live, nullptr);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_EVENT_ACK, hz_event_ack_args{}, 2)).status, HZ_S_ESTATE);
}

TEST_F(DeviceFamiliesTest, ANegotiationIsAnsweredAtTheDecisionPoint) {
  Hello();
  vdev::Chain c = Negotiate();
  EXPECT_EQ(provider_.last_tenant, "t1");
  EXPECT_EQ(provider_.last_weight, tenant_->spec().weight);
  EXPECT_EQ(dev_->in_flight(), 1u);
  provider_.Decide(9);
  ctx_.RunPosted();
  hz_status st = StatusOf(c);
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.result_len, sizeof(hz_neg_result) + sizeof(hz_neg_offer));
  hz_neg_result r;
  std::memcpy(&r, c.writable()[0].data, sizeof(r));
  EXPECT_EQ(r.negotiation_id, 9u);
  EXPECT_EQ(r.num_offers, 1u);
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceFamiliesTest, ANegotiationTheProviderRefusesIsAnsweredAtOnce) {
  Hello();
  provider_.submit_status = Status::Limit("too many open negotiations");
  hz_neg_request r{};
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_NEG_REQUEST, r, 1), 400).status, HZ_S_ELIMIT);
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceFamiliesTest, DrainAnswersWaitingNegotiationsAndAResetForgetsThem) {
  Hello();
  vdev::Chain drained = Negotiate();
  draining_ = true;
  dev_->Drain();
  EXPECT_EQ(StatusOf(drained).status, HZ_S_ESHUTDOWN);
  provider_.Decide(1);
  ctx_.RunPosted();
  EXPECT_EQ(queues_[0]->used.size(), 2u) << "a late decision finds nothing to answer twice";

  draining_ = false;
  Recreate();
  Hello();
  Negotiate();
  dev_->OnReset();
  EXPECT_EQ(dev_->in_flight(), 0u);
}

TEST_F(DeviceFamiliesTest, TopologyAndHintsAnswerAtOnce) {
  Hello();
  hz_status st = Call(0, HeaderOnly(HZ_OP_TOPOLOGY_GET, 1));
  EXPECT_EQ(st.status, HZ_S_OK);
  EXPECT_EQ(st.result_len, 16u);
  EXPECT_EQ(Call(0, HeaderOnly(HZ_OP_TOPOLOGY_GET, 1), 8).detail, 16u)
      << "ETOOSMALL names the size";
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_HINT_DECLARE, hz_hint_declare_args{}, 1)).status, HZ_S_OK);
}

}  // namespace
}  // namespace hz::service
