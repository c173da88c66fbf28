// EVENT_ACK's cursor writes on the bus's writer thread: an ack is answered
// only once its cursor is durable, acks that arrive during a write share the
// next one, one subscriber's acks are answered in order, a failed write
// leaves the cursor where it was, and a bus going away writes what it holds.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hz/common/file.h"
#include "hz/events/event_bus.h"
#include "state_writes.h"
#include "test_util.h"

namespace hz::events {
namespace {

constexpr auto kHang = std::chrono::seconds(10);  // only detects hangs

using testing::StateWrites;

// The answers of acks, in the order they came, each with the number of
// state writes finished when it came.
class Answers {
 public:
  Delivery::AckDone For(uint64_t seq) {
    return [this, seq](Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back({seq, s.code(), writes_->writes()});
      cv_.notify_all();
    };
  }
  struct Answer {
    uint64_t seq;
    StatusCode code;
    int writes_before;
  };
  explicit Answers(StateWrites* writes) : writes_(writes) {}
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kHang, [&] { return got_.size() >= n; });
  }
  std::vector<Answer> got() {
    std::lock_guard<std::mutex> lock(mu_);
    return got_;
  }

 private:
  StateWrites* writes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Answer> got_;
};

class EventsAckWriter : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    BusOptions o;
    o.dir = dir_.path();
    o.fsync = FsyncPolicy::kNone;
    o.write_state = [this](const std::string& path, const std::string& contents, bool sync) {
      return writes_.Write(path, contents, sync);
    };
    ASSERT_TRUE(EventBus::Open(o, &bus_).ok());
  }

  // A subscriber that received n events.
  std::unique_ptr<Delivery> Received(int n) {
    for (int i = 0; i < n; ++i) EXPECT_TRUE(bus_->Publish(tenant_, EventSpec{}, nullptr).ok());
    std::unique_ptr<Delivery> d;
    EXPECT_TRUE(bus_->Connect(tenant_, "guest", &d).ok());
    hz_event_subscribe_result r{};
    EXPECT_TRUE(d->Subscribe({HZ_TOPIC_ALL, HZ_SEQ_CURSOR}, &r).ok());
    hz_event ev;
    while (d->Next(&ev)) {
    }
    return d;
  }

  uint64_t Cursor() {
    TenantSummary s;
    EXPECT_TRUE(bus_->Summary(tenant_, &s).ok());
    return s.bindings.empty() ? 0 : s.bindings[0].cursor;
  }

  static hz_event_ack_args AckOf(uint64_t seq) {
    hz_event_ack_args a{};
    a.seq = seq;
    return a;
  }

  const TenantId tenant_{"t1"};
  testing::TempDir dir_;
  StateWrites writes_;
  Answers answers_{&writes_};
  std::unique_ptr<EventBus> bus_;
};

TEST_F(EventsAckWriter, AcksArrivingDuringAWriteAreAnsweredAfterTheNextSingleWrite) {
  constexpr int kAcks = 6;
  auto d = Received(1 + kAcks);
  writes_.Hold();
  d->AckAsync(AckOf(1), answers_.For(1));
  ASSERT_TRUE(writes_.WaitHeld());
  for (uint64_t seq = 2; seq <= 1 + kAcks; ++seq) d->AckAsync(AckOf(seq), answers_.For(seq));
  EXPECT_TRUE(answers_.got().empty()) << "an ack was answered before its cursor was written";

  writes_.Release();
  ASSERT_TRUE(answers_.WaitFor(1 + kAcks));
  EXPECT_EQ(writes_.writes(), 2);
  std::vector<Answers::Answer> got = answers_.got();
  ASSERT_EQ(got.size(), 1u + kAcks);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].seq, i + 1) << "acks answered out of order";
    EXPECT_EQ(got[i].code, StatusCode::kOk);
    EXPECT_EQ(got[i].writes_before, i == 0 ? 1 : 2);
  }
  d.reset();
  bus_.reset();
  Open();
  EXPECT_EQ(Cursor(), 1u + kAcks);
}

TEST_F(EventsAckWriter, AnAckThatMovesNothingWaitsForTheAcksBeforeIt) {
  auto d = Received(3);
  ASSERT_TRUE(d->Ack(AckOf(2)).ok());
  writes_.Hold();
  d->AckAsync(AckOf(3), answers_.For(3));
  ASSERT_TRUE(writes_.WaitHeld());
  d->AckAsync(AckOf(1), answers_.For(1));  // behind the cursor, but after 3
  d->AckAsync(AckOf(9), answers_.For(9));  // invalid, answered in turn
  EXPECT_TRUE(answers_.got().empty());
  writes_.Release();
  ASSERT_TRUE(answers_.WaitFor(3));
  std::vector<Answers::Answer> got = answers_.got();
  EXPECT_EQ(got[0].seq, 3u);
  EXPECT_EQ(got[1].seq, 1u);
  EXPECT_EQ(got[1].code, StatusCode::kOk);
  EXPECT_EQ(got[2].seq, 9u);
  EXPECT_EQ(got[2].code, StatusCode::kInvalidArgument);
  // With nothing waiting, an ack that moves nothing is answered at once.
  const int before = writes_.writes();
  EXPECT_TRUE(d->Ack(AckOf(2)).ok());
  EXPECT_EQ(writes_.writes(), before);
}

// An ack that needs no write must not overtake the answer of an earlier
// one that is just being given.
TEST_F(EventsAckWriter, ALaterAckIsNotAnsweredBeforeTheEarlierOnesAnswerEnds) {
  auto d = Received(3);
  ASSERT_TRUE(d->Ack(AckOf(1)).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool in_done = false, release = false;
  std::vector<uint64_t> order;
  d->AckAsync(AckOf(3), [&](Status) {
    std::unique_lock<std::mutex> lock(mu);
    in_done = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    order.push_back(3);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kHang, [&] { return in_done; }));
  }
  d->AckAsync(AckOf(1), [&](Status) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lock, kHang, [&] { return order.size() == 2; }));
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{3, 1}));
}

TEST_F(EventsAckWriter, AFailedWriteLeavesTheCursorAndAnswersTheError) {
  auto d = Received(2);
  ASSERT_TRUE(d->Ack(AckOf(1)).ok());
  writes_.Fail(true);
  EXPECT_EQ(d->Ack(AckOf(2)).code(), StatusCode::kIoError);
  EXPECT_EQ(Cursor(), 1u);
  writes_.Fail(false);
  EXPECT_TRUE(d->Ack(AckOf(2)).ok());
  EXPECT_EQ(Cursor(), 2u);
}

TEST_F(EventsAckWriter, ABusGoingAwayWritesTheAcksItHolds) {
  auto d = Received(3);
  writes_.Hold();
  d->AckAsync(AckOf(1), answers_.For(1));
  ASSERT_TRUE(writes_.WaitHeld());
  d->AckAsync(AckOf(2), answers_.For(2));
  std::thread closing([this] { bus_.reset(); });
  writes_.Release();
  closing.join();
  ASSERT_TRUE(answers_.WaitFor(2));
  for (const Answers::Answer& a : answers_.got()) EXPECT_EQ(a.code, StatusCode::kOk);
  // The delivery outlived the bus: an ack it can no longer write is refused,
  // not lost silently.
  EXPECT_EQ(d->Ack(AckOf(3)).code(), StatusCode::kShutdown);
  d.reset();
  Open();
  EXPECT_EQ(Cursor(), 2u);
}

}  // namespace
}  // namespace hz::events
