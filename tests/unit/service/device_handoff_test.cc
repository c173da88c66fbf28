// HzDevice in a live upgrade: what one device saves when its session is
// frozen, a new device restores on the same rings, as the next process of
// the service would, and the guest carries on without another HELLO.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "device_fixture.h"

namespace hz::service {
namespace {

using testing::RequestBytes;
using testing::StatusOf;

class DeviceHandoffTest : public DeviceTest {
 protected:
  void AddBackends(DeviceEnv* env) override {
    env->events = &bus_;
    env->ckpt = &ckpt_;
  }
  void TearDown() override { dev_.reset(); }

  // Freezes dev_ and returns its saved state; false when it refused.
  bool Freeze(std::string* state) {
    for (auto& q : queues_) dev_->OnQueueFreezing(*q);
    ctx_.RunPosted();
    return dev_->SaveState(state);
  }

  // A new device on the same rings takes state over, as the next process
  // would after an upgrade (or, with recover, after a crash, from what the
  // journal held); on success the old device lets go and the new one serves.
  bool Restore(const std::string& state, bool recover = false) {
    auto next = std::make_unique<HzDevice>(Env(), tenant_, "/run/vm0.sock");
    next->OnConnect(ctx_);
    if (!(recover ? next->RecoverState(state) : next->RestoreState(state))) return false;
    dev_->OnHandedOver();
    dev_ = std::move(next);
    for (auto& q : queues_) dev_->OnQueueStarted(*q);
    for (auto& q : queues_) dev_->OnKick(*q);  // what the guest posted meanwhile
    ctx_.RunPosted();
    return true;
  }

  bool HandOver() {
    std::string state;
    return Freeze(&state) && Restore(state);
  }

  uint32_t Unregister(uint32_t id) {
    hz_region_unregister_args a{};
    a.region_id = id;
    return Call(0, RequestBytes(HZ_OP_REGION_UNREGISTER, a, 9)).status;
  }

  void Subscribe() {
    hz_event_subscribe_args a{};
    a.topics = 1ull << HZ_TOPIC_MAINTENANCE;
    ASSERT_EQ(Call(0, RequestBytes(HZ_OP_EVENT_SUBSCRIBE, a, 1)).status, HZ_S_OK);
  }

  // The process crashes: what its journal last held.
  std::string Crash() {
    ctx_.journal_source = nullptr;
    return ctx_.journaled;
  }

  // A session with one read-write region and stream 7 registered over it.
  uint32_t QuiescedRegion() {
    Hello();
    uint32_t region = 0;
    EXPECT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region),
              HZ_S_OK);
    EXPECT_EQ(Quiesce(region), HZ_S_OK);
    return region;
  }

  // CKPT_QUIESCE for stream 7: the word at the region's start, the state
  // in one slice after it; or, with num_slices 0 and no word, a cancel.
  uint32_t Quiesce(uint32_t region, uint32_t num_slices = 1) {
    hz_ckpt_quiesce_args a{};
    a.stream = 7;
    a.num_slices = num_slices;
    hz_slice state = Slice(region, 64, 256);
    if (num_slices != 0) a.word = Slice(region, 0, sizeof(hz_quiesce_word));
    return Call(0, RequestBytes(HZ_OP_CKPT_QUIESCE, a, 12, &state, num_slices * sizeof(state)))
        .status;
  }

  testing::FakeEventBackend bus_;
  testing::FakeCkptBackend ckpt_;
};

TEST_F(DeviceHandoffTest, TheSessionAndItsRegionsGoOnWithoutAnotherHello) {
  const uint64_t session = Hello().session_id;
  uint32_t id = 0;
  ASSERT_EQ(Register({{ram_.base(), 8192}}, HZ_REGION_F_READ, &id), HZ_S_OK);

  ASSERT_TRUE(HandOver());
  DeviceInfo info = dev_->Info();
  EXPECT_TRUE(info.hello);
  EXPECT_EQ(info.session_id, session);
  EXPECT_EQ(info.regions, 1u);
  EXPECT_EQ(info.region_bytes, 8192u);
  // The region is there under its id, in a session that needs no HELLO.
  EXPECT_EQ(Unregister(id), HZ_S_OK);
  EXPECT_EQ(Unregister(id), HZ_S_ENOENT);
  // Ids are not reused after the upgrade either.
  uint32_t again = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ, &again), HZ_S_OK);
  EXPECT_GT(again, id);
}

TEST_F(DeviceHandoffTest, ADeviceWithoutASessionHandsOverNone) {
  ASSERT_TRUE(HandOver());
  EXPECT_FALSE(dev_->Info().hello);
  EXPECT_EQ(Unregister(1), HZ_S_ESTATE);
}

TEST_F(DeviceHandoffTest, HeldEventBuffersGoBackAndTheNextDeviceFillsThem) {
  Hello();
  Subscribe();
  vdev::Chain buf = cb_.Make({}, sizeof(hz_event));
  EXPECT_FALSE(Submit(1, buf));
  ASSERT_EQ(dev_->Info().events_held, 1u);

  std::string state;
  ASSERT_TRUE(Freeze(&state));
  // Handed back to the ring unanswered, to be taken again first.
  EXPECT_TRUE(queues_[1]->used.empty());
  ASSERT_EQ(queues_[1]->avail.size(), 1u);
  ASSERT_TRUE(Restore(state));
  EXPECT_EQ(bus_.abandoned, 1) << "the old device must not write the bus's state";
  ASSERT_EQ(bus_.resumed.size(), 1u);
  EXPECT_TRUE(bus_.resumed[0].subscribed);
  EXPECT_EQ(dev_->Info().events_held, 1u);

  bus_.Publish(HZ_TOPIC_MAINTENANCE);
  ctx_.RunPosted();
  ASSERT_EQ(queues_[1]->used.size(), 1u);
  EXPECT_EQ(queues_[1]->used[0].len, sizeof(hz_event));
  hz_event ev;
  std::memcpy(&ev, buf.writable()[0].data, sizeof(ev));
  EXPECT_EQ(ev.topic, HZ_TOPIC_MAINTENANCE);
}

TEST_F(DeviceHandoffTest, AFailedHandOverLeavesTheOldDeviceServing) {
  Hello();
  Subscribe();
  vdev::Chain buf = cb_.Make({}, sizeof(hz_event));
  EXPECT_FALSE(Submit(1, buf));
  std::string state;
  ASSERT_TRUE(Freeze(&state));
  // The next process refused; vdev thaws the session, which pops the
  // returned buffer again.
  dev_->OnKick(*queues_[1]);
  EXPECT_EQ(dev_->Info().events_held, 1u);
  bus_.Publish(HZ_TOPIC_MAINTENANCE);
  ctx_.RunPosted();
  EXPECT_EQ(queues_[1]->used.size(), 1u);
  EXPECT_EQ(bus_.abandoned, 0);
}

TEST_F(DeviceHandoffTest, AStateFromOutsideIsCheckedAndRefusedWhole) {
  Hello();
  uint32_t id = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ, &id), HZ_S_OK);
  std::string state;
  ASSERT_TRUE(Freeze(&state));
  const nlohmann::json good = nlohmann::json::parse(state);

  auto refused = [this](const std::string& bad) {
    HzDevice next(Env(), tenant_, "/run/vm0.sock");
    next.OnConnect(ctx_);
    const bool ok = next.RestoreState(bad);
    // Nothing half restored: no session, no region.
    EXPECT_FALSE(next.Info().hello);
    EXPECT_EQ(next.Info().regions, 0u);
    return !ok;
  };
  EXPECT_TRUE(refused("{"));
  EXPECT_TRUE(refused("[]"));
  nlohmann::json j = good;
  j["format"] = 2;
  EXPECT_TRUE(refused(j.dump()));
  j = good;
  j["session"]["id"] = 0;
  EXPECT_TRUE(refused(j.dump()));
  j = good;
  j["session"]["features"] = ~0ull;
  EXPECT_TRUE(refused(j.dump()));
  j = good;
  j.erase("events");
  EXPECT_TRUE(refused(j.dump()));
  // A region outside the guest's memory, or overlapping another.
  j = good;
  j["regions"]["regions"][0]["extents"][0][0] = ram_.base() + (64ull << 30);
  EXPECT_TRUE(refused(j.dump()));
  j = good;
  j["regions"]["regions"].push_back(good["regions"]["regions"][0]);
  j["regions"]["regions"][1]["id"] = id + 1;
  EXPECT_TRUE(refused(j.dump()));
  j = good;
  j["regions"]["regions"][0]["extents"][0][1] = "4096";
  EXPECT_TRUE(refused(j.dump()));
  // The unchanged state restores.
  HzDevice next(Env(), tenant_, "/run/vm0.sock");
  next.OnConnect(ctx_);
  EXPECT_TRUE(next.RestoreState(good.dump()));
  EXPECT_EQ(next.Info().regions, 1u);
}

TEST_F(DeviceHandoffTest, ACollectiveWaitingForPeersIsServedAgainOnceItsCommunicatorReforms) {
  Hello();
  uint32_t region = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region),
            HZ_S_OK);
  const uint64_t comm = InitComm();
  hz_coll_args a = Coll(comm, 16, Slice(region, 0, 64), Slice(region, 64, 64));
  a.seq = 7;
  vdev::Chain c = cb_.Make(RequestBytes(HZ_OP_ALLREDUCE, a, 70), sizeof(hz_status));
  EXPECT_FALSE(Submit(2, c));
  ASSERT_EQ(backend_.posts.size(), 1u);

  backend_.next_seq = 7;
  std::string state;
  ASSERT_TRUE(Freeze(&state));
  // Withdrawn from the engine and back in its ring, unanswered.
  EXPECT_TRUE(backend_.posts.empty());
  EXPECT_TRUE(queues_[2]->used.empty());
  ASSERT_EQ(queues_[2]->avail.size(), 1u);
  EXPECT_EQ(dev_->in_flight(), 0u);

  ASSERT_TRUE(Restore(state));
  ASSERT_EQ(backend_.rejoins.size(), 1u);
  EXPECT_EQ(backend_.rejoins[0].state.nranks, 1u);
  EXPECT_EQ(backend_.rejoins[0].state.rank, 0u);
  EXPECT_EQ(backend_.rejoins[0].state.next_seq, 7u);
  // Nothing is taken from the rings until the communicator is back.
  EXPECT_EQ(queues_[2]->avail.size(), 1u);
  EXPECT_TRUE(dev_->Info().comms.empty());

  backend_.rejoins[0].done(Status::Ok(), std::make_shared<testing::FakeMember>(0, 1, 200));
  ctx_.RunPosted();
  EXPECT_TRUE(queues_[2]->avail.empty());
  ASSERT_EQ(backend_.posts.size(), 1u);
  EXPECT_EQ(backend_.posts[0].op.seq, 7u);
  EXPECT_EQ(backend_.posts[0].member->comm_id(), 200u);
  backend_.posts[0].done(Status::Ok());
  ctx_.RunPosted();
  ASSERT_EQ(queues_[2]->used.size(), 1u);
  EXPECT_EQ(StatusOf(c).status, HZ_S_OK);
  EXPECT_EQ(StatusOf(c).request_id, 70u);
  ASSERT_EQ(dev_->Info().comms.size(), 1u);
  EXPECT_EQ(dev_->Info().comms[0].handle, comm);
}

TEST_F(DeviceHandoffTest, AHandleWhoseCommunicatorDidNotReformFailsAborted) {
  Hello();
  const uint64_t comm = InitComm();
  ASSERT_TRUE(HandOver());
  ASSERT_EQ(backend_.rejoins.size(), 1u);
  backend_.rejoins[0].done(Status::TimedOut("rank 1 never came back"), nullptr);
  ctx_.RunPosted();
  hz_coll_args a = Coll(comm, 0, Slice(HZ_REGION_NONE, 0, 0), Slice(HZ_REGION_NONE, 0, 0));
  hz_status st = Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 71));
  EXPECT_EQ(st.status, HZ_S_EABORTED);
  // The handle can still be destroyed, and then it is gone.
  hz_comm_args d{};
  d.comm = comm;
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, d, 72)).status, HZ_S_OK);
  EXPECT_EQ(Call(0, RequestBytes(HZ_OP_COMM_DESTROY, d, 73)).status, HZ_S_ENOENT);
}

// A crash (SPEC.md §2.10): the journal holds the device's durable state as
// of every change, written before the guest sees the change; the process
// started after the crash goes on with the session and its regions, and its
// communicators are lost.
TEST_F(DeviceHandoffTest, AfterACrashTheSessionGoesOnAndItsCommunicatorsAreLost) {
  ctx_.journal_source = [this] { return dev_->DurableState(); };
  EXPECT_EQ(dev_->DurableState(), "") << "no session, nothing to go on with";
  const uint64_t session = Hello().session_id;
  uint32_t region = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region),
            HZ_S_OK);
  const uint64_t comm = InitComm();
  const int changes = ctx_.state_changes;
  EXPECT_GE(changes, 3) << "HELLO, the region and the communicator were journaled";
  // Nothing durable changes with a collective.
  hz_coll_args a = Coll(comm, 16, Slice(region, 0, 64), Slice(region, 64, 64));
  EXPECT_FALSE(Submit(2, cb_.Make(RequestBytes(HZ_OP_ALLREDUCE, a, 80), sizeof(hz_status))));
  EXPECT_EQ(ctx_.state_changes, changes);

  // The next process, from what the journal holds.
  ASSERT_TRUE(Restore(Crash(), /*recover=*/true));
  EXPECT_TRUE(backend_.rejoins.empty()) << "the engine that served the communicator is gone";
  EXPECT_EQ(dev_->Info().session_id, session);
  EXPECT_EQ(Call(2, RequestBytes(HZ_OP_ALLREDUCE, a, 81)).status, HZ_S_EABORTED);
  EXPECT_EQ(Unregister(region), HZ_S_OK);
}

// A quiescence registration goes to the next process as the guest declared
// it, and is declared there again over the same guest memory.
TEST_F(DeviceHandoffTest, AQuiescenceRegistrationIsDeclaredAgainOverTheSameMemory) {
  const uint32_t region = QuiescedRegion();
  ASSERT_EQ(ckpt_.declared.size(), 1u);

  ASSERT_TRUE(HandOver());
  ASSERT_EQ(ckpt_.declared.size(), 2u);
  const auto& before = ckpt_.declared[0];
  const auto& after = ckpt_.declared[1];
  EXPECT_EQ(after.stream, 7u);
  EXPECT_EQ(after.word, before.word);
  ASSERT_EQ(after.slices.size(), 1u);
  EXPECT_EQ(after.slices[0].data, before.slices[0].data);
  EXPECT_EQ(after.slices[0].len, 256u);
  // It holds its region in the new session too, until the guest cancels it.
  EXPECT_EQ(Unregister(region), HZ_S_EBUSY);
  const int cancels = ckpt_.cancels;
  EXPECT_EQ(Quiesce(region, 0), HZ_S_OK);
  EXPECT_EQ(ckpt_.cancels, cancels + 1);
  EXPECT_EQ(Unregister(region), HZ_S_OK);
}

// A registration that no longer fits the engine (the operator shrank the
// staging meanwhile) is dropped; the session goes on.
TEST_F(DeviceHandoffTest, ARegistrationTheNextEngineRefusesIsDroppedAndTheSessionGoesOn) {
  const uint32_t region = QuiescedRegion();
  const uint64_t session = dev_->Info().session_id;
  ckpt_.declare_status = Status::Limit();
  ASSERT_TRUE(HandOver());
  EXPECT_EQ(dev_->Info().session_id, session);
  EXPECT_EQ(Quiesce(region, 0), HZ_S_ENOENT) << "nothing registered";
  EXPECT_EQ(Unregister(region), HZ_S_OK);
}

// After a crash: the journal follows every change of the registrations.
TEST_F(DeviceHandoffTest, AQuiescenceRegistrationIsJournaledAndRecoveredAfterACrash) {
  ctx_.journal_source = [this] { return dev_->DurableState(); };
  Hello();
  uint32_t region = 0;
  ASSERT_EQ(Register({{ram_.base(), 4096}}, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region),
            HZ_S_OK);
  int changes = ctx_.state_changes;
  ASSERT_EQ(Quiesce(region), HZ_S_OK);
  EXPECT_EQ(ctx_.state_changes, changes + 1) << "declaring it is journaled";
  changes = ctx_.state_changes;
  ASSERT_EQ(Quiesce(region, 0), HZ_S_OK);
  EXPECT_EQ(ctx_.state_changes, changes + 1) << "cancelling it too";
  ASSERT_EQ(Quiesce(region), HZ_S_OK);

  const size_t declared = ckpt_.declared.size();
  ASSERT_TRUE(Restore(Crash(), /*recover=*/true));
  ASSERT_EQ(ckpt_.declared.size(), declared + 1);
  EXPECT_EQ(ckpt_.declared.back().word, ckpt_.declared[0].word);
  EXPECT_EQ(Unregister(region), HZ_S_EBUSY);
}

// A registration in a state from outside is checked like the rest.
TEST_F(DeviceHandoffTest, AMalformedRegistrationRefusesTheState) {
  QuiescedRegion();
  std::string state;
  ASSERT_TRUE(Freeze(&state));
  nlohmann::json j = nlohmann::json::parse(state);
  ASSERT_EQ(j["checkpoints"]["quiesce"].size(), 1u);
  for (const char* bad :
       {R"([{"stream": 0, "word": [1, 0, 8], "slices": [[1, 64, 256]]}])",
        R"([{"stream": 7, "word": [1, 0], "slices": [[1, 64, 256]]}])",
        R"([{"stream": 7, "word": [1, 0, 8], "slices": [[1, -64, 256]]}])", R"({"stream": 7})"}) {
    nlohmann::json broken = j;
    broken["checkpoints"]["quiesce"] = nlohmann::json::parse(bad);
    HzDevice next(Env(), tenant_, "/run/vm0.sock");
    next.OnConnect(ctx_);
    EXPECT_FALSE(next.RestoreState(broken.dump())) << bad;
  }
}

// The device state a release of format 1 hands over, written by hand: every
// later release must keep taking it over.
TEST_F(DeviceHandoffTest, AFormatOneStateIsStillTakenOver) {
  std::ifstream in(std::string(HZ_SERVICE_UNIT_TEST_DATA) + "/hz_device_state_v1.json");
  ASSERT_TRUE(in) << "fixture missing";
  std::stringstream state;
  state << in.rdbuf();
  HzDevice next(Env(), tenant_, "/run/vm0.sock");
  next.OnConnect(ctx_);
  ASSERT_TRUE(next.RestoreState(state.str()));
  DeviceInfo info = next.Info();
  EXPECT_TRUE(info.hello);
  EXPECT_EQ(info.session_id, 0x0123456789abcdefull);
  EXPECT_EQ(info.features, (1ull << HZ_F_COLLECTIVES) | (1ull << HZ_F_EVENTS));
  EXPECT_EQ(info.regions, 2u);
  EXPECT_EQ(info.region_bytes, 16384u);
  ASSERT_EQ(bus_.resumed.size(), 1u);
  EXPECT_TRUE(bus_.resumed[0].subscribed);
  EXPECT_EQ(bus_.resumed[0].topics, (1ull << HZ_TOPIC_LOST) | (1ull << HZ_TOPIC_MAINTENANCE));
  EXPECT_EQ(bus_.resumed[0].next, 5u);
  EXPECT_EQ(bus_.resumed[0].delivered, 4u);
  ASSERT_EQ(backend_.rejoins.size(), 1u) << "the lost handle does not rejoin";
  const coll::MemberState& m = backend_.rejoins[0].state;
  EXPECT_EQ(m.uid.bytes[0], 0x01);
  EXPECT_EQ(m.uid.bytes[31], 0xef);
  EXPECT_EQ(m.nranks, 2u);
  EXPECT_EQ(m.rank, 1u);
  EXPECT_EQ(m.next_seq, 41u);
  EXPECT_TRUE(m.constraints.deterministic);
  EXPECT_EQ(m.constraints.priority_class, 1u);
  backend_.rejoins[0].done(Status::TimedOut(), nullptr);  // the peers never came
  ctx_.RunPosted();
}

}  // namespace
}  // namespace hz::service
