#include "hz/events/event_bus.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "hz/common/file.h"
#include "hz/events/event_log.h"
#include "test_util.h"

namespace hz::events {
namespace {

class EventsBus : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(16); }

  void Reopen(uint64_t retention) {
    bus_.reset();
    BusOptions o;
    o.dir = dir_.path();
    o.retention = retention;
    o.fsync = FsyncPolicy::kNone;
    o.clock = [this] { return now_.load(); };
    ASSERT_TRUE(EventBus::Open(o, &bus_).ok());
  }

  uint64_t Publish(const TenantId& tenant, uint16_t topic, uint16_t kind = 0) {
    EventSpec spec;
    spec.topic = topic;
    spec.kind = kind;
    spec.payload[0] = static_cast<uint8_t>(kind);
    uint64_t seq = 0;
    Status s = bus_->Publish(tenant, spec, &seq);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return seq;
  }

  std::unique_ptr<Delivery> Connect(const TenantId& tenant, const std::string& sub,
                                    uint64_t topics = HZ_TOPIC_ALL, uint64_t from = HZ_SEQ_CURSOR,
                                    hz_event_subscribe_result* result = nullptr) {
    std::unique_ptr<Delivery> d;
    Status s = bus_->Connect(tenant, sub, &d);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
    hz_event_subscribe_args args{topics, from};
    hz_event_subscribe_result r{};
    s = d->Subscribe(args, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (result != nullptr) *result = r;
    return d;
  }

  static std::vector<hz_event> Drain(Delivery& d) {
    std::vector<hz_event> out;
    hz_event ev;
    while (d.Next(&ev)) out.push_back(ev);
    return out;
  }

  static Status Ack(Delivery& d, uint64_t seq, uint32_t flags = 0) {
    hz_event_ack_args a{};
    a.seq = seq;
    a.flags = flags;
    return d.Ack(a);
  }

  testing::TempDir dir_;
  std::atomic<uint64_t> now_{1700000123};
  std::unique_ptr<EventBus> bus_;
};

TEST_F(EventsBus, SequenceStartsAtOneAndIncreases) {
  auto d = Connect(TenantId("t1"), "guest");
  for (uint64_t i = 1; i <= 5; ++i) EXPECT_EQ(Publish(TenantId("t1"), HZ_TOPIC_CAPACITY), i);
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq, i + 1);
    EXPECT_EQ(events[i].topic, HZ_TOPIC_CAPACITY);
    EXPECT_EQ(events[i].flags, 0u);
    EXPECT_EQ(events[i].time_s, 1700000120u);  // rounded down to 10 s
  }
}

TEST_F(EventsBus, DeadlinesAreRoundedDown) {
  auto d = Connect(TenantId("t1"), "guest");
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakePreemption(kPreemptionScheduled, 1700000159, 2, 0, true), nullptr)
                  .ok());
  EventSpec raw;
  raw.topic = HZ_TOPIC_MAINTENANCE;
  raw.deadline_s = 1700000999;
  ASSERT_TRUE(bus_->Publish(TenantId("t1"), raw, nullptr).ok());
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].deadline_s, 1700000150u);
  EXPECT_EQ(events[0].flags, HZ_EVENT_F_APPROVABLE);
  EXPECT_EQ(events[1].deadline_s, 1700000990u);
}

TEST_F(EventsBus, NothingIsDeliveredBeforeSubscribe) {
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  std::unique_ptr<Delivery> d;
  ASSERT_TRUE(bus_->Connect(TenantId("t1"), "guest", &d).ok());
  hz_event ev;
  EXPECT_FALSE(d->Pending());
  EXPECT_FALSE(d->Next(&ev));
  hz_event_subscribe_result r{};
  ASSERT_TRUE(d->Subscribe({HZ_TOPIC_ALL, HZ_SEQ_CURSOR}, &r).ok());
  EXPECT_EQ(r.cursor, 0u);
  EXPECT_EQ(r.next_seq, 2u);
  EXPECT_EQ(r.oldest_seq, 1u);
  EXPECT_TRUE(d->Pending());
  ASSERT_TRUE(d->Next(&ev));
  EXPECT_EQ(ev.seq, 1u);
}

TEST_F(EventsBus, TopicMaskFilters) {
  auto d = Connect(TenantId("t1"), "guest",
                   HZ_TOPIC_MASK(HZ_TOPIC_FAILURE) | HZ_TOPIC_MASK(HZ_TOPIC_HINT));
  Publish(TenantId("t1"), HZ_TOPIC_CAPACITY);
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  Publish(TenantId("t1"), HZ_TOPIC_CONGESTION);
  Publish(TenantId("t1"), HZ_TOPIC_HINT);
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].seq, 2u);
  EXPECT_EQ(events[0].topic, HZ_TOPIC_FAILURE);
  EXPECT_EQ(events[1].seq, 4u);
  EXPECT_EQ(events[1].topic, HZ_TOPIC_HINT);
}

TEST_F(EventsBus, UnknownTopicBitsAndFutureFromSeqAreRejected) {
  std::unique_ptr<Delivery> d;
  ASSERT_TRUE(bus_->Connect(TenantId("t1"), "guest", &d).ok());
  hz_event_subscribe_result r{};
  EXPECT_EQ(d->Subscribe({1ull << 12, HZ_SEQ_CURSOR}, &r).code(), StatusCode::kNotSupported);
  // LOST's own bit is allowed; a mask of 0 delivers only LOST records.
  EXPECT_TRUE(d->Subscribe({HZ_TOPIC_MASK(HZ_TOPIC_LOST), HZ_SEQ_CURSOR}, &r).ok());
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  EXPECT_EQ(d->Subscribe({HZ_TOPIC_ALL, 3}, &r).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(d->Subscribe({HZ_TOPIC_ALL, 2}, &r).ok());  // next_seq itself is fine
}

TEST_F(EventsBus, OverflowGivesOneLostRecordThenTheRest) {
  Reopen(4);
  auto d = Connect(TenantId("t1"), "guest");
  for (int i = 0; i < 10; ++i) Publish(TenantId("t1"), HZ_TOPIC_CONGESTION);
  auto events = Drain(*d);
  // Events 1..6 fell out of the 4-event window.
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].topic, HZ_TOPIC_LOST);
  EXPECT_EQ(events[0].seq, 6u);
  auto lost = testing::PayloadAs<LostPayload>(events[0].payload);
  EXPECT_EQ(lost.lost, 6u);
  EXPECT_EQ(lost.first_seq, 1u);
  EXPECT_EQ(lost.last_seq, 6u);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq, 6 + i);
    EXPECT_EQ(events[i].topic, HZ_TOPIC_CONGESTION);
  }
  // Acknowledging the LOST record acknowledges the lost range.
  EXPECT_TRUE(Ack(*d, 6).ok());
}

TEST_F(EventsBus, LostIsDeliveredEvenWhenNotSubscribed) {
  Reopen(2);
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_MASK(HZ_TOPIC_FAILURE));
  int notified = 0;
  d->SetNotify([&] { ++notified; });
  for (int i = 0; i < 5; ++i) Publish(TenantId("t1"), HZ_TOPIC_CAPACITY);
  EXPECT_GT(notified, 0);  // falling behind wakes the subscriber
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].topic, HZ_TOPIC_LOST);
  EXPECT_EQ(testing::PayloadAs<LostPayload>(events[0].payload).lost, 3u);
}

TEST_F(EventsBus, LostAfterReconnectBehindTheWindow) {
  Reopen(3);
  {
    auto d = Connect(TenantId("t1"), "guest");
    Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
    hz_event ev;
    ASSERT_TRUE(d->Next(&ev));
    ASSERT_TRUE(Ack(*d, 1).ok());
  }
  for (int i = 0; i < 6; ++i) Publish(TenantId("t1"), HZ_TOPIC_FAILURE);  // seqs 2..7, window 5..7
  hz_event_subscribe_result r{};
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_ALL, HZ_SEQ_CURSOR, &r);
  EXPECT_EQ(r.cursor, 1u);
  EXPECT_EQ(r.oldest_seq, 5u);
  EXPECT_EQ(r.next_seq, 8u);
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 4u);
  auto lost = testing::PayloadAs<LostPayload>(events[0].payload);
  EXPECT_EQ(events[0].topic, HZ_TOPIC_LOST);
  EXPECT_EQ(lost.first_seq, 2u);
  EXPECT_EQ(lost.last_seq, 4u);
  EXPECT_EQ(lost.lost, 3u);
  EXPECT_EQ(events[1].seq, 5u);
}

TEST_F(EventsBus, ReconnectReplaysFromCursorWithReplayFlag) {
  {
    auto d = Connect(TenantId("t1"), "guest");
    for (int i = 0; i < 4; ++i) Publish(TenantId("t1"), HZ_TOPIC_CHECKPOINT);
    auto events = Drain(*d);
    ASSERT_EQ(events.size(), 4u);
    ASSERT_TRUE(Ack(*d, 2).ok());
  }
  Publish(TenantId("t1"), HZ_TOPIC_CHECKPOINT);  // seq 5, never delivered
  hz_event_subscribe_result r{};
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_ALL, HZ_SEQ_CURSOR, &r);
  EXPECT_EQ(r.cursor, 2u);
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].seq, 3u);
  EXPECT_EQ(events[0].flags & HZ_EVENT_F_REPLAY, HZ_EVENT_F_REPLAY);
  EXPECT_EQ(events[1].seq, 4u);
  EXPECT_EQ(events[1].flags & HZ_EVENT_F_REPLAY, HZ_EVENT_F_REPLAY);
  EXPECT_EQ(events[2].seq, 5u);
  EXPECT_EQ(events[2].flags & HZ_EVENT_F_REPLAY, 0u);
}

TEST_F(EventsBus, CursorsSurviveABusRestart) {
  {
    auto d = Connect(TenantId("t1"), "guest");
    for (int i = 0; i < 3; ++i) Publish(TenantId("t1"), HZ_TOPIC_ENERGY);
    Drain(*d);
    ASSERT_TRUE(Ack(*d, 3).ok());
  }
  Reopen(16);
  Publish(TenantId("t1"), HZ_TOPIC_ENERGY);
  hz_event_subscribe_result r{};
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_ALL, HZ_SEQ_CURSOR, &r);
  EXPECT_EQ(r.cursor, 3u);
  EXPECT_EQ(r.next_seq, 5u);
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].seq, 4u);
  // An explicit from_seq re-reads acknowledged events, marked as replays.
  d.reset();
  d = Connect(TenantId("t1"), "guest", HZ_TOPIC_ALL, 1);
  events = Drain(*d);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_NE(events[0].flags & HZ_EVENT_F_REPLAY, 0u);
}

// A live upgrade: the next process's bus takes a delivery up where this
// process's stood, and the abandoned delivery writes nothing on its way out.
TEST_F(EventsBus, ADeliveryHandedToTheNextProcessGoesOnWhereItStood) {
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_MASK(HZ_TOPIC_ENERGY));
  for (int i = 0; i < 4; ++i) Publish(TenantId("t1"), HZ_TOPIC_ENERGY);
  hz_event ev;
  ASSERT_TRUE(d->Next(&ev));
  ASSERT_TRUE(Ack(*d, 1).ok());
  ASSERT_TRUE(d->Next(&ev));
  ASSERT_TRUE(d->Next(&ev));  // seq 3 delivered, its mark not saved yet
  const DeliveryPosition pos = d->Position();
  EXPECT_TRUE(pos.subscribed);
  EXPECT_EQ(pos.next, 4u);
  EXPECT_EQ(pos.delivered, 3u);
  const std::string path = dir_.path() + "/t1/state.json";
  const std::string saved = *ReadFile(path);

  BusOptions o;
  o.dir = dir_.path();
  o.fsync = FsyncPolicy::kNone;
  std::unique_ptr<EventBus> next;
  ASSERT_TRUE(EventBus::Open(o, &next).ok());
  d->Abandon();
  d.reset();
  EXPECT_EQ(*ReadFile(path), saved) << "the abandoned delivery wrote the state file";

  std::unique_ptr<Delivery> resumed;
  ASSERT_TRUE(next->Connect(TenantId("t1"), "guest", &resumed).ok());
  ASSERT_TRUE(resumed->Resume(pos).ok());
  ASSERT_TRUE(resumed->Next(&ev));
  EXPECT_EQ(ev.seq, 4u);
  EXPECT_EQ(ev.flags & HZ_EVENT_F_REPLAY, 0u);
  EXPECT_FALSE(resumed->Next(&ev));
  // The guest acknowledges what it was given before the hand-over.
  EXPECT_TRUE(Ack(*resumed, 3).ok());

  // A position from outside is checked against the log.
  DeliveryPosition bad = pos;
  bad.next = 99;
  EXPECT_FALSE(resumed->Resume(bad).ok());
  bad = pos;
  bad.topics = 1ull << 63;
  EXPECT_FALSE(resumed->Resume(bad).ok());
}

TEST_F(EventsBus, AckValidation) {
  auto d = Connect(TenantId("t1"), "guest");
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  hz_event ev;
  ASSERT_TRUE(d->Next(&ev));
  EXPECT_EQ(Ack(*d, 2).code(), StatusCode::kInvalidArgument);  // not delivered yet
  EXPECT_EQ(Ack(*d, 1, 0x80).code(), StatusCode::kNotSupported);
  hz_event_ack_args bad{1, 0, 7};
  EXPECT_EQ(d->Ack(bad).code(), StatusCode::kNotSupported);
  EXPECT_TRUE(Ack(*d, 1).ok());
  EXPECT_TRUE(Ack(*d, 1).ok());  // idempotent
  EXPECT_TRUE(Ack(*d, 0).ok());  // never moves the cursor back
  EXPECT_EQ(Ack(*d, 1, HZ_ACK_F_APPROVE).code(), StatusCode::kInvalidArgument);  // not approvable
}

TEST_F(EventsBus, ApproveNotifiesOperatorOnceAndPersists) {
  std::vector<std::pair<std::string, uint64_t>> approvals;
  bus_->SetApprovalCallback([&](const TenantId& tenant, const hz_event& ev) {
    approvals.emplace_back(tenant.name(), ev.seq);
  });
  auto d = Connect(TenantId("t1"), "guest");
  ASSERT_TRUE(
      bus_->Publish(TenantId("t1"),
                    MakeMaintenance(kMaintenanceScheduled, 1700009000, 600, kAllDevices, true),
                    nullptr)
          .ok());
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakeMaintenance(kMaintenanceScheduled, 1700009000, 600, 0, false),
                            nullptr)
                  .ok());
  Drain(*d);
  EXPECT_EQ(Ack(*d, 2, HZ_ACK_F_APPROVE).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(Ack(*d, 1, HZ_ACK_F_APPROVE).ok());
  ASSERT_TRUE(Ack(*d, 1, HZ_ACK_F_APPROVE).ok());
  ASSERT_EQ(approvals.size(), 1u);
  EXPECT_EQ(approvals[0].first, "t1");
  EXPECT_EQ(approvals[0].second, 1u);
  TenantSummary summary;
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &summary).ok());
  EXPECT_EQ(summary.approvals, 1u);
  d.reset();
  Reopen(16);
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &summary).ok());
  EXPECT_EQ(summary.approvals, 1u);
}

TEST_F(EventsBus, TenantsAreIsolated) {
  auto a = Connect(TenantId("tenant-a"), "guest");
  auto b = Connect(TenantId("tenant-b"), "guest");
  Publish(TenantId("tenant-a"), HZ_TOPIC_FAILURE, 1);
  Publish(TenantId("tenant-a"), HZ_TOPIC_FAILURE, 1);
  Publish(TenantId("tenant-b"), HZ_TOPIC_FAILURE, 2);
  auto ea = Drain(*a);
  auto eb = Drain(*b);
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].seq, 1u);  // each tenant has its own sequence
  EXPECT_EQ(eb[0].kind, 2u);
  for (const auto& ev : ea) EXPECT_EQ(ev.kind, 1u);
  // Acks on one tenant do not touch the other.
  EXPECT_TRUE(Ack(*a, 2).ok());
  EXPECT_EQ(Ack(*b, 2).code(), StatusCode::kInvalidArgument);
}

TEST_F(EventsBus, SubscribersOfOneTenantHaveTheirOwnCursors) {
  auto x = Connect(TenantId("t1"), "x");
  auto y = Connect(TenantId("t1"), "y");
  Publish(TenantId("t1"), HZ_TOPIC_HINT);
  Publish(TenantId("t1"), HZ_TOPIC_HINT);
  EXPECT_EQ(Drain(*x).size(), 2u);
  ASSERT_TRUE(Ack(*x, 2).ok());
  EXPECT_EQ(Drain(*y).size(), 2u);
  y.reset();
  hz_event_subscribe_result r{};
  y = Connect(TenantId("t1"), "y", HZ_TOPIC_ALL, HZ_SEQ_CURSOR, &r);
  EXPECT_EQ(r.cursor, 0u);
}

TEST_F(EventsBus, OneLiveDeliveryPerSubscriber) {
  auto d = Connect(TenantId("t1"), "guest");
  std::unique_ptr<Delivery> second;
  EXPECT_EQ(bus_->Connect(TenantId("t1"), "guest", &second).code(), StatusCode::kState);
  d.reset();
  EXPECT_TRUE(bus_->Connect(TenantId("t1"), "guest", &second).ok());
}

TEST_F(EventsBus, BadNamesAreRejected) {
  std::unique_ptr<Delivery> d;
  EXPECT_EQ(bus_->Connect(TenantId("../x"), "guest", &d).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bus_->Connect(TenantId("t1"), "a/b", &d).code(), StatusCode::kInvalidArgument);
  EventSpec spec;
  EXPECT_EQ(bus_->Publish(TenantId(""), spec, nullptr).code(), StatusCode::kInvalidArgument);
  spec.topic = HZ_TOPIC_LOST;
  EXPECT_EQ(bus_->Publish(TenantId("t1"), spec, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(EventsBus, NotifyFiresForWantedTopicsOnly) {
  auto d = Connect(TenantId("t1"), "guest", HZ_TOPIC_MASK(HZ_TOPIC_PREEMPTION));
  std::vector<hz_event> seen;
  d->SetNotify([&] {
    hz_event ev;
    while (d->Next(&ev)) seen.push_back(ev);  // the service fills posted buffers here
  });
  Publish(TenantId("t1"), HZ_TOPIC_CAPACITY);
  EXPECT_TRUE(seen.empty());
  Publish(TenantId("t1"), HZ_TOPIC_PREEMPTION);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].seq, 2u);
}

TEST_F(EventsBus, RetentionSurvivesRestartAndCompaction) {
  Reopen(5);
  for (int i = 0; i < 300; ++i) Publish(TenantId("t1"), HZ_TOPIC_CONGESTION);
  auto size = std::filesystem::file_size(dir_.path() + "/t1/events.log");
  // Compaction keeps the file within a bounded multiple of the window.
  EXPECT_LE(size, (2 * 5 + 65) * (kRecordHeaderBytes + sizeof(hz_event)));
  Reopen(5);
  TenantSummary s;
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &s).ok());
  EXPECT_EQ(s.next_seq, 301u);
  EXPECT_EQ(s.oldest_seq, 296u);
  hz_event ev;
  EXPECT_EQ(bus_->Get(TenantId("t1"), 295, &ev).code(), StatusCode::kNotFound);
  ASSERT_TRUE(bus_->Get(TenantId("t1"), 300, &ev).ok());
  EXPECT_EQ(ev.seq, 300u);
}

TEST_F(EventsBus, TornTailIsTruncatedOnRecovery) {
  for (int i = 0; i < 3; ++i) Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  bus_.reset();
  std::string path = dir_.path() + "/t1/events.log";
  auto full = std::filesystem::file_size(path);
  {
    // Half of a fourth record, as a crash mid-write would leave it.
    hz_event ev{};
    ev.seq = 4;
    std::string rec = EncodeRecord(ev);
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f.write(rec.data(), static_cast<std::streamsize>(rec.size() / 2));
  }
  Reopen(16);
  TenantSummary s;
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &s).ok());
  EXPECT_EQ(s.next_seq, 4u);
  EXPECT_EQ(std::filesystem::file_size(path), full);
  EXPECT_EQ(Publish(TenantId("t1"), HZ_TOPIC_FAILURE), 4u);
  Reopen(16);
  hz_event ev;
  ASSERT_TRUE(bus_->Get(TenantId("t1"), 4, &ev).ok());
}

// The copies of a damaged log that recovery kept in dir.
std::vector<std::string> CorruptCopies(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.log.corrupt-")) {
      out.push_back(entry.path().string());
    }
  }
  return out;
}

TEST_F(EventsBus, GarbageAfterTheLastRecordIsATornTail) {
  for (int i = 0; i < 3; ++i) Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  bus_.reset();
  const std::string path = dir_.path() + "/t1/events.log";
  const auto full = std::filesystem::file_size(path);
  {
    // Zeros where a fourth record was being written (a crash can leave the
    // file longer than what reached the disk).
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << std::string(kRecordHeaderBytes + sizeof(hz_event) + 5, '\0');
  }
  Reopen(16);
  TenantSummary s;
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &s).ok());
  EXPECT_EQ(s.next_seq, 4u);
  EXPECT_EQ(std::filesystem::file_size(path), full);
  EXPECT_TRUE(CorruptCopies(dir_.path() + "/t1").empty());
}

// A bad record with valid records after it is damage, not a torn append:
// nothing is dropped, the tenant's events are refused until the operator
// acts, a copy is kept aside, and other tenants carry on.
TEST_F(EventsBus, DamageInTheMiddleKeepsTheRecordsAndRefusesOnlyThatTenant) {
  for (int i = 0; i < 4; ++i) Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  Publish(TenantId("t2"), HZ_TOPIC_FAILURE);
  bus_.reset();
  const std::string path = dir_.path() + "/t1/events.log";
  const uint64_t bad_offset = 2 * (kRecordHeaderBytes + sizeof(hz_event));
  {
    // Flip one payload byte of the third record.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bad_offset + kRecordHeaderBytes + 40));
    f.put('\x5a');
  }
  const std::string damaged = *ReadFile(path);
  Reopen(16);

  TenantSummary s;
  Status st = bus_->Summary(TenantId("t1"), &s);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("offset " + std::to_string(bad_offset)), std::string::npos)
      << st.message();
  std::unique_ptr<Delivery> d;
  EXPECT_EQ(bus_->Connect(TenantId("t1"), "guest", &d).code(), StatusCode::kCorruption);
  EXPECT_EQ(bus_->Publish(TenantId("t1"), EventSpec{}, nullptr).code(), StatusCode::kCorruption);
  EXPECT_EQ(bus_->HoldsEvents(TenantId("t1")).status().code(), StatusCode::kCorruption);

  // Every record stays where it was, and one copy is kept aside however
  // often the tenant is refused.
  EXPECT_EQ(*ReadFile(path), damaged);
  std::vector<std::string> copies = CorruptCopies(dir_.path() + "/t1");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(*ReadFile(copies[0]), damaged);

  // Other tenants are unaffected.
  EXPECT_EQ(Publish(TenantId("t2"), HZ_TOPIC_FAILURE), 2u);

  // The operator moves the damaged log aside: the tenant is served again.
  std::filesystem::rename(path, path + ".moved");
  EXPECT_NE(Publish(TenantId("t1"), HZ_TOPIC_FAILURE), 0u);
}

TEST_F(EventsBus, CorruptStateFileIsAClearError) {
  Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
  bus_.reset();
  {
    std::ofstream f(dir_.path() + "/t1/state.json");
    f << "{\"next_seq\": \"banana\"}";
  }
  Reopen(16);
  Status s = bus_->Publish(TenantId("t1"), EventSpec{}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("state.json"), std::string::npos);
  // Other tenants are unaffected.
  EXPECT_EQ(Publish(TenantId("t2"), HZ_TOPIC_FAILURE), 1u);
  // The file stays as it was, for the operator; nor is it taken for "no events".
  EXPECT_EQ(*ReadFile(dir_.path() + "/t1/state.json"), "{\"next_seq\": \"banana\"}");
  EXPECT_EQ(bus_->HoldsEvents(TenantId("t1")).status().code(), StatusCode::kCorruption);
}

std::optional<bool> HoldsOf(EventBus* bus, const TenantId& t) {
  StatusOr<bool> h = bus->HoldsEvents(t);
  if (!h.ok()) return std::nullopt;
  return *h;
}

// Forgetting a tenant (tenant.remove) deletes its log and cursors: a tenant
// created later under the same name starts at seq 1 and sees none of them.
TEST_F(EventsBus, AForgottenTenantsNameStartsWithAnEmptyLog) {
  EXPECT_TRUE(HoldsOf(bus_.get(), TenantId("t1")) == std::optional<bool>(false));
  {
    auto d = Connect(TenantId("t1"), "guest");
    Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
    EXPECT_TRUE(HoldsOf(bus_.get(), TenantId("t1")) == std::optional<bool>(true));
    EXPECT_EQ(bus_->Forget(TenantId("t1")).code(), StatusCode::kBusy);  // still connected
  }
  ASSERT_TRUE(bus_->Forget(TenantId("t1")).ok());
  EXPECT_TRUE(HoldsOf(bus_.get(), TenantId("t1")) == std::optional<bool>(false));
  EXPECT_EQ(Publish(TenantId("t1"), HZ_TOPIC_FAILURE), 1u);
  Reopen(16);
  TenantSummary s;
  ASSERT_TRUE(bus_->Summary(TenantId("t1"), &s).ok());
  EXPECT_EQ(s.next_seq, 2u);
}

TEST_F(EventsBus, SequenceNeverGoesBackIfTheLogIsLost) {
  {
    auto d = Connect(TenantId("t1"), "guest");
    for (int i = 0; i < 3; ++i) Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
    Drain(*d);
    ASSERT_TRUE(Ack(*d, 3).ok());
  }
  bus_.reset();
  std::filesystem::remove(dir_.path() + "/t1/events.log");
  Reopen(16);
  EXPECT_EQ(Publish(TenantId("t1"), HZ_TOPIC_FAILURE), 4u);
}

TEST_F(EventsBus, AlwaysFsyncPolicyWorks) {
  bus_.reset();
  BusOptions o;
  o.dir = dir_.path() + "/synced";
  o.fsync = FsyncPolicy::kAlways;
  ASSERT_TRUE(EventBus::Open(o, &bus_).ok());
  auto d = Connect(TenantId("t1"), "guest");
  EXPECT_EQ(Publish(TenantId("t1"), HZ_TOPIC_FAILURE), 1u);
  Drain(*d);
  EXPECT_TRUE(Ack(*d, 1).ok());
}

TEST_F(EventsBus, ZeroRetentionIsRejected) {
  BusOptions o;
  o.dir = dir_.path();
  o.retention = 0;
  std::unique_ptr<EventBus> bus;
  EXPECT_EQ(EventBus::Open(o, &bus).code(), StatusCode::kInvalidArgument);
}

TEST_F(EventsBus, ApprovalIsRefusedOnceTooLate) {
  int approvals = 0;
  bus_->SetApprovalCallback([&](const TenantId&, const hz_event&) { ++approvals; });
  auto d = Connect(TenantId("t1"), "guest");
  const uint64_t deadline = now_.load() + 600;
  // 1: maintenance of device 2; 2: preemption of everything; 3: maintenance of device 5.
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakeMaintenance(kMaintenanceScheduled, deadline, 60, 2, true), nullptr)
                  .ok());
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakePreemption(kPreemptionScheduled, deadline, 4, 0, true), nullptr)
                  .ok());
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakeMaintenance(kMaintenanceScheduled, deadline, 60, 5, true), nullptr)
                  .ok());
  // 4: device 2's maintenance started; 5: the preemption was cancelled.
  ASSERT_TRUE(
      bus_->Publish(TenantId("t1"), MakeMaintenance(kMaintenanceStarted, 0, 60, 2, false), nullptr)
          .ok());
  ASSERT_TRUE(
      bus_->Publish(TenantId("t1"), MakePreemption(kPreemptionCancelled, 0, 4, 0, false), nullptr)
          .ok());
  Drain(*d);
  EXPECT_EQ(Ack(*d, 1, HZ_ACK_F_APPROVE).code(), StatusCode::kState);
  EXPECT_EQ(Ack(*d, 2, HZ_ACK_F_APPROVE).code(), StatusCode::kState);
  EXPECT_TRUE(Ack(*d, 3, HZ_ACK_F_APPROVE).ok());  // device 5 is unaffected
  EXPECT_EQ(approvals, 1);
  // Past its deadline an event can no longer be approved.
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakeMaintenance(kMaintenanceScheduled, deadline, 60, 7, true), nullptr)
                  .ok());
  Drain(*d);
  now_ = deadline;
  EXPECT_EQ(Ack(*d, 6, HZ_ACK_F_APPROVE).code(), StatusCode::kState);
  // Approving again what was approved is harmless, even later.
  EXPECT_TRUE(Ack(*d, 3, HZ_ACK_F_APPROVE).ok());
  EXPECT_EQ(approvals, 1);
}

TEST_F(EventsBus, ApprovalOfAnEventNoLongerRetainedIsInvalid) {
  Reopen(2);
  auto d = Connect(TenantId("t1"), "guest");
  ASSERT_TRUE(bus_->Publish(TenantId("t1"),
                            MakeMaintenance(kMaintenanceScheduled, now_.load() + 600, 60, 0, true),
                            nullptr)
                  .ok());
  hz_event ev;
  ASSERT_TRUE(d->Next(&ev));
  Publish(TenantId("t1"), HZ_TOPIC_CAPACITY);
  Publish(TenantId("t1"), HZ_TOPIC_CAPACITY);
  EXPECT_EQ(Ack(*d, 1, HZ_ACK_F_APPROVE).code(), StatusCode::kInvalidArgument);
}

TEST_F(EventsBus, ReplayMarksSurviveARestartWithoutAck) {
  {
    auto d = Connect(TenantId("t1"), "guest");
    Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
    Publish(TenantId("t1"), HZ_TOPIC_FAILURE);
    ASSERT_EQ(Drain(*d).size(), 2u);  // delivered, never acknowledged
  }
  Reopen(16);
  auto d = Connect(TenantId("t1"), "guest");
  auto events = Drain(*d);
  ASSERT_EQ(events.size(), 2u);
  for (const auto& ev : events) EXPECT_NE(ev.flags & HZ_EVENT_F_REPLAY, 0u);
}

}  // namespace
}  // namespace hz::events
