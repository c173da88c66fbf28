// Cluster membership against a real redis-server, with short leases: hosts
// see each other, a host that dies or leaves is dropped in bounded time, a
// name is one host's, and a lost store isolates a host until it returns.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hz/cluster/membership.h"
#include "hz/cluster/redis_lease_store.h"
#include "redis_server.h"

namespace hz::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kLeaseMs = 300;

std::vector<std::string> Names(const MembershipView& v) {
  std::vector<std::string> out;
  for (const HostInfo& h : v.hosts) out.push_back(h.name);
  return out;
}

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()) << redis_.error(); }

  std::unique_ptr<Membership> Host(const std::string& name, Membership::Listener listener = {},
                                   std::function<nlohmann::json()> attributes = {},
                                   std::string instance = {}) {
    auto store = std::make_unique<RedisLeaseStore>(*RedisAddress::Parse(redis_.address()), "hz/",
                                                   milliseconds(kLeaseMs / 4));
    return std::make_unique<Membership>(
        std::move(store),
        MembershipOptions{name, "10.0.0." + name.substr(1), kLeaseMs, std::move(attributes),
                          std::move(instance)},
        std::move(listener));
  }

  // Waits until pred holds (polling); how long it took, or nothing when it
  // did not within `limit`, a bound far above what the design promises.
  static std::optional<milliseconds> WaitFor(const std::function<bool()>& pred,
                                             milliseconds limit = milliseconds(20 * kLeaseMs)) {
    const auto start = Clock::now();
    while (Clock::now() - start < limit) {
      if (pred()) return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      std::this_thread::sleep_for(milliseconds(5));
    }
    return std::nullopt;
  }

  test::RedisServer redis_;
};

TEST_F(MembershipTest, HostsSeeEachOtherWithTheirDataAddresses) {
  auto h0 = Host("h0");
  auto h1 = Host("h1");
  ASSERT_TRUE(h0->Start().ok());
  ASSERT_TRUE(h1->Start().ok());
  // h1 saw h0 when it joined; h0 sees h1 at its next round.
  EXPECT_EQ(Names(h1->View()), (std::vector<std::string>{"h0", "h1"}));
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 2; }));
  MembershipView v = h0->View();
  EXPECT_EQ(v.state, MemberState::kMember);
  EXPECT_EQ(v.store, "unix:" + redis_.socket_path());
  ASSERT_EQ(v.hosts.size(), 2u);
  EXPECT_TRUE(v.hosts[0].self);
  EXPECT_FALSE(v.hosts[1].self);
  EXPECT_EQ(v.hosts[1].data_address, "10.0.0.1");
  EXPECT_GT(v.hosts[1].lease_remaining_ms, 0);
  EXPECT_LE(v.hosts[1].lease_remaining_ms, kLeaseMs);
  EXPECT_GE(v.ms_since_contact, 0);
}

TEST_F(MembershipTest, AttributesReachTheOtherHostsAndTheirChangesAreTold) {
  std::mutex mu;
  nlohmann::json published = {{"tenants", {{"acme", 1}}}};
  std::vector<MembershipChange> changes;
  auto h0 = Host("h0", [&](const MembershipChange& c) {
    std::lock_guard<std::mutex> lock(mu);
    changes.push_back(c);
  });
  auto h1 = Host("h1", {}, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return published;
  });
  ASSERT_TRUE(h0->Start().ok());
  ASSERT_TRUE(h1->Start().ok());
  auto attributes_of_h1 = [&] {
    for (const HostInfo& h : h0->View().hosts) {
      if (h.name == "h1") return h.attributes;
    }
    return nlohmann::json();
  };
  ASSERT_TRUE(WaitFor([&] { return attributes_of_h1() == published; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    published["tenants"]["acme"] = 2;
  }
  ASSERT_TRUE(WaitFor([&] { return attributes_of_h1()["tenants"]["acme"] == 2; }));
  // Past its bound, the attributes are left out of the record; the host
  // stays a member.
  {
    std::lock_guard<std::mutex> lock(mu);
    published["big"] = std::string(kMaxRecordBytes, 'x');
  }
  ASSERT_TRUE(WaitFor([&] { return attributes_of_h1().empty(); }));
  EXPECT_EQ(h1->View().state, MemberState::kMember);
  // The listener is told after the view changed, outside its lock.
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return changes.size() >= 3;
  })) << "the listener was not told of every change";
  std::lock_guard<std::mutex> lock(mu);
  std::vector<MembershipChange::Kind> kinds;
  for (const MembershipChange& c : changes) kinds.push_back(c.kind);
  using Kind = MembershipChange::Kind;
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::kJoined, Kind::kAttributes, Kind::kAttributes}));
}

TEST_F(MembershipTest, AHostThatDiesIsDroppedByTheOthersOnceItsLeaseEnds) {
  std::mutex mu;
  std::vector<MembershipChange> changes;
  auto h0 = Host("h0", [&](const MembershipChange& c) {
    std::lock_guard<std::mutex> lock(mu);
    changes.push_back(c);
  });
  auto h1 = Host("h1");
  ASSERT_TRUE(h0->Start().ok());
  ASSERT_TRUE(h1->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 2; }));
  h1->Stop(/*release=*/false);  // a crash: the record stays until its lease ends
  std::optional<milliseconds> took = WaitFor([&] { return h0->View().hosts.size() == 1; });
  ASSERT_TRUE(took) << "h0 still lists the dead host";
  // Not before the lease ended (it was renewed at most a round before).
  EXPECT_GE(took->count(), kLeaseMs - h0->round_ms() - 50);
  std::cout << "dead host dropped after " << took->count() << " ms (lease " << kLeaseMs
            << " ms, round " << h0->round_ms() << " ms)\n";
  // The listener is told after the view changed, outside its lock.
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return changes.size() >= 2;
  })) << "the listener was not told that h1 left";
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].kind, MembershipChange::Kind::kJoined);
  EXPECT_EQ(changes[0].host, "h1");
  EXPECT_EQ(changes[1].kind, MembershipChange::Kind::kLeft);
  EXPECT_EQ(changes[1].host, "h1");
  EXPECT_NE(changes[1].why.find("lease ended"), std::string::npos);
  EXPECT_EQ(h0->View().hosts_left, 1u);
}

TEST_F(MembershipTest, AHostThatLeavesGracefullyIsDroppedAtTheNextRound) {
  auto h0 = Host("h0");
  ASSERT_TRUE(h0->Start().ok());
  {
    auto h1 = Host("h1");
    ASSERT_TRUE(h1->Start().ok());
    ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 2; }));
  }  // destroyed without Stop(true): a crash, which the lease covers
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 1; }));
  auto h2 = Host("h2");
  ASSERT_TRUE(h2->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 2; }));
  h2->Stop(/*release=*/true);
  // The record is gone at once: the next listing no longer has it.
  EXPECT_EQ(redis_.Cli("EXISTS hz/hosts/h2").find('1'), std::string::npos);
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 1; }));
}

TEST_F(MembershipTest, ANameHeldByALiveHostIsRefusedAfterOneLease) {
  auto h0 = Host("h0");
  ASSERT_TRUE(h0->Start().ok());
  auto impostor = Host("h0");
  const auto start = Clock::now();
  Status s = impostor->Start();
  EXPECT_EQ(s.code(), StatusCode::kExists) << s.ToString();
  EXPECT_NE(s.message().find("host name h0 is held by another live harmonaized"), std::string::npos)
      << s.message();
  // It waited for a crashed predecessor's lease before refusing.
  EXPECT_GE(Clock::now() - start, milliseconds(kLeaseMs));
  EXPECT_EQ(h0->View().state, MemberState::kMember);
  EXPECT_EQ(h0->View().hosts.size(), 1u);
}

TEST_F(MembershipTest, AHostRestartedAfterACrashTakesItsNameOnceTheOldLeaseEnds) {
  auto before = Host("h0");
  ASSERT_TRUE(before->Start().ok());
  before->Stop(/*release=*/false);
  auto after = Host("h0");
  ASSERT_TRUE(after->Start().ok());
  EXPECT_EQ(after->View().state, MemberState::kMember);
  EXPECT_EQ(Names(after->View()), (std::vector<std::string>{"h0"}));
  EXPECT_TRUE(after->View().hosts[0].self);
}

// A live upgrade: the new process holds the lease under its predecessor's
// instance id. It is not refused while the predecessor still renews (a new
// id would be, after a lease), and the other hosts never see the host leave.
TEST_F(MembershipTest, ASuccessorWithItsPredecessorsInstanceKeepsTheLease) {
  auto h1 = Host("h1");
  auto before = Host("h0");
  ASSERT_TRUE(h1->Start().ok());
  ASSERT_TRUE(before->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return h1->View().hosts.size() == 2; }));
  auto after = Host("h0", {}, {}, before->instance());
  Status s = after->Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(after->View().state, MemberState::kMember);
  before->Stop(/*release=*/false);  // it exits without a word
  const uint64_t rounds = h1->View().rounds;
  ASSERT_TRUE(WaitFor([&] { return h1->View().rounds >= rounds + 3 * 3; }));  // three leases
  EXPECT_EQ(Names(h1->View()), (std::vector<std::string>{"h0", "h1"}));
  EXPECT_EQ(h1->View().hosts_left, 0u);
  EXPECT_NE(redis_.Cli("HGET hz/hosts/h0 holder").find(before->instance()), std::string::npos);
}

TEST_F(MembershipTest, AMalformedInstanceIdIsRefused) {
  for (const std::string bad : {"0123456789ABCDEF", "0123", "0123456789abcdef0", "../x"}) {
    Status s = Host("h0", {}, {}, bad)->Start();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad << ": " << s.ToString();
  }
  EXPECT_TRUE(IsInstanceId("0123456789abcdef"));
}

TEST_F(MembershipTest, ALostStoreIsolatesTheHostAndItRejoinsWhenTheStoreReturns) {
  std::atomic<int> left{0};
  auto h0 = Host("h0", [&](const MembershipChange& c) {
    if (c.kind == MembershipChange::Kind::kLeft) ++left;
  });
  auto h1 = Host("h1");
  ASSERT_TRUE(h0->Start().ok());
  ASSERT_TRUE(h1->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return h0->View().hosts.size() == 2; }));
  redis_.Kill();
  ASSERT_TRUE(WaitFor([&] { return h0->View().state == MemberState::kIsolated; }));
  MembershipView lost = h0->View();
  EXPECT_TRUE(lost.hosts.empty());
  EXPECT_GT(lost.failed_rounds, 0u);
  EXPECT_NE(lost.detail.find("cluster store"), std::string::npos) << lost.detail;
  // The listener is told after the view changed, outside its lock.
  ASSERT_TRUE(WaitFor([&] { return left.load() >= 1; }))
      << "the listener was not told that h1 left";
  EXPECT_EQ(left.load(), 1);  // h1, the only other host
  // A restarted store is empty; both hosts register again and see each other.
  ASSERT_TRUE(redis_.Start()) << redis_.error();
  ASSERT_TRUE(WaitFor([&] {
    return h0->View().state == MemberState::kMember && h0->View().hosts.size() == 2 &&
           h1->View().hosts.size() == 2;
  }));
}

TEST_F(MembershipTest, AStoreThatCannotBeReachedAtStartIsNotFatal) {
  redis_.Kill();
  auto h0 = Host("h0");
  ASSERT_TRUE(h0->Start().ok());
  EXPECT_EQ(h0->View().state, MemberState::kIsolated);  // never reached it
  ASSERT_TRUE(redis_.Start()) << redis_.error();
  ASSERT_TRUE(WaitFor([&] { return h0->View().state == MemberState::kMember; }));
}

TEST_F(MembershipTest, RecordsThatNoHostWroteAreCountedAndIgnored) {
  auto h0 = Host("h0");
  ASSERT_TRUE(h0->Start().ok());
  redis_.Cli("SADD hz/hosts bogus");
  redis_.Cli("SET hz/hosts/bogus not-json PX 60000");
  ASSERT_TRUE(WaitFor([&] { return h0->View().malformed_records > 0; }));
  EXPECT_EQ(Names(h0->View()), (std::vector<std::string>{"h0"}));
  EXPECT_EQ(h0->View().state, MemberState::kMember);
}

}  // namespace
}  // namespace hz::cluster
