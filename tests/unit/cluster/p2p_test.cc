// Point-to-point between the members of a Gloo group (InterHostGroup::Send
// and Recv): two members in one process over loopback, each on threads of
// its own, meeting through a private redis-server.
#include <chrono>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hz/cluster/inter_host.h"
#include "redis_server.h"

namespace hz::cluster {
namespace {

using std::chrono::milliseconds;

class InterHostP2PTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start()) << redis_.error();
    auto connect = [this](uint32_t rank) {
      GlooGroupOptions o;
      o.store = *RedisAddress::Parse(redis_.address());
      o.key = "p2p-test/";
      o.data_address = "127.0.0.1";
      o.rank = rank;
      o.size = 2;
      o.timeout = milliseconds(5000);
      return ConnectGlooGroup(o);
    };
    auto other = std::async(std::launch::async, connect, 1);
    StatusOr<std::unique_ptr<InterHostGroup>> g0 = connect(0);
    StatusOr<std::unique_ptr<InterHostGroup>> g1 = other.get();
    ASSERT_TRUE(g0.ok()) << g0.status().ToString();
    ASSERT_TRUE(g1.ok()) << g1.status().ToString();
    groups_[0] = std::move(*g0);
    groups_[1] = std::move(*g1);
  }

  test::RedisServer redis_;
  std::unique_ptr<InterHostGroup> groups_[2];
};

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

// Both members receive first and send afterwards, on several tags at once,
// while an all-reduce runs beside them: no message waits for another, and
// none lands under another tag.
TEST_F(InterHostP2PTest, ConcurrentTaggedMessagesBesideACollective) {
  constexpr int kTags = 4;
  constexpr size_t kBytes = 3 << 20;
  auto member = [&](uint32_t me) {
    InterHostGroup& g = *groups_[me];
    const uint32_t peer = 1 - me;
    std::vector<std::vector<uint8_t>> in(kTags, std::vector<uint8_t>(kBytes));
    std::vector<std::future<Status>> done;
    for (int t = 0; t < kTags; ++t) {
      done.push_back(std::async(std::launch::async, [&, t] {
        return g.Recv(peer, t, in[t].data(), kBytes, milliseconds(5000));
      }));
    }
    std::vector<int32_t> sum(1000, static_cast<int32_t>(me + 1));
    done.push_back(std::async(std::launch::async, [&] {
      return g.AllReduce(sum.data(), sum.size(), InterHostType::kI32, InterHostOp::kSum,
                         InterHostAlgorithm::kRing);
    }));
    std::vector<std::vector<uint8_t>> out;
    for (int t = 0; t < kTags; ++t)
      out.push_back(Pattern(kBytes, static_cast<uint8_t>(me * 16 + t)));
    for (int t = kTags - 1; t >= 0; --t) {
      done.push_back(std::async(std::launch::async, [&, t] {
        return g.Send(peer, t, out[t].data(), kBytes, milliseconds(5000));
      }));
    }
    for (auto& f : done) EXPECT_TRUE(f.get().ok());
    for (int t = 0; t < kTags; ++t) {
      EXPECT_EQ(in[t], Pattern(kBytes, static_cast<uint8_t>(peer * 16 + t))) << t;
    }
    EXPECT_EQ(sum, std::vector<int32_t>(1000, 3));
  };
  std::thread other(member, 1);
  member(0);
  other.join();
}

TEST_F(InterHostP2PTest, EmptyMessagesAndTheLargestTagArrive) {
  const uint64_t tag = InterHostGroup::kMaxTag - 1;
  auto recv = std::async(std::launch::async,
                         [&] { return groups_[1]->Recv(0, tag, nullptr, 0, milliseconds(5000)); });
  EXPECT_TRUE(groups_[0]->Send(1, tag, nullptr, 0, milliseconds(5000)).ok());
  EXPECT_TRUE(recv.get().ok());
  uint8_t b = 0;
  EXPECT_EQ(groups_[0]->Send(1, InterHostGroup::kMaxTag, &b, 1, milliseconds(10)).code(),
            StatusCode::kInvalidArgument);
}

// A receive nobody answers times out within its timeout, and the group is
// unusable afterwards on both members (the peer's pending receive fails too).
TEST_F(InterHostP2PTest, AnUnansweredReceiveTimesOutAndBreaksTheGroup) {
  uint8_t b = 0;
  auto peer = std::async(std::launch::async,
                         [&] { return groups_[1]->Recv(0, 9, &b, 1, milliseconds(5000)); });
  const auto start = std::chrono::steady_clock::now();
  Status s = groups_[0]->Recv(1, 7, &b, 1, milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s.ToString();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_FALSE(peer.get().ok());
  EXPECT_FALSE(groups_[0]->Barrier().ok());
}

// Close, as a host re-forming its group after a peer's upgrade: this
// member's waits end with kAborted, the other member's operation with it
// fails at once rather than at its timeout, and the closed group refuses
// what comes after.
TEST_F(InterHostP2PTest, ClosingAGroupEndsEveryWaitOnBothMembers) {
  uint8_t here = 0, there = 0;
  auto waiting_here = std::async(
      std::launch::async, [&] { return groups_[0]->Recv(1, 3, &here, 1, milliseconds(60000)); });
  auto waiting_there = std::async(
      std::launch::async, [&] { return groups_[1]->Recv(0, 4, &there, 1, milliseconds(60000)); });
  // Both receives are posted (a recv announces itself to its sender; the
  // sends below, on other tags, show the pairs carry traffic meanwhile).
  auto ping = std::async(std::launch::async,
                         [&] { return groups_[1]->Recv(0, 5, &there, 1, milliseconds(60000)); });
  uint8_t one = 1;
  ASSERT_TRUE(groups_[0]->Send(1, 5, &one, 1, milliseconds(60000)).ok());
  ASSERT_TRUE(ping.get().ok());
  groups_[0]->Close();
  EXPECT_EQ(waiting_here.get().code(), StatusCode::kAborted);
  // Well before the 60 s it would wait for the message otherwise (ctest's
  // timeout for this binary is 120 s).
  EXPECT_FALSE(waiting_there.get().ok());
  EXPECT_EQ(groups_[0]->Send(1, 6, &one, 1, milliseconds(100)).code(), StatusCode::kAborted);
  groups_[0]->Close();  // again: nothing happens
}

}  // namespace
}  // namespace hz::cluster
