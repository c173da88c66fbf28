// RedisLeaseStore against a real redis-server: the atomic hold, renew and
// release of leased records that cluster membership is built on.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "hz/cluster/redis_lease_store.h"
#include "redis_server.h"

namespace hz::cluster {
namespace {

using std::chrono::milliseconds;
using Outcome = HoldResult::Outcome;

class LeaseStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()) << redis_.error(); }

  RedisLeaseStore Store() {
    return RedisLeaseStore(*RedisAddress::Parse(redis_.address()), "t/", milliseconds(500));
  }

  test::RedisServer redis_;
};

TEST(RedisAddressTest, ParsesHostPortAndUnixSocketsAndRejectsTheRest) {
  StatusOr<RedisAddress> a = RedisAddress::Parse("10.0.0.1:6379");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->ToString(), "10.0.0.1:6379");
  StatusOr<RedisAddress> v6 = RedisAddress::Parse("[fd00::1]:7000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "fd00::1");
  EXPECT_EQ(v6->ToString(), "[fd00::1]:7000");
  StatusOr<RedisAddress> u = RedisAddress::Parse("unix:/run/redis.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->unix_path, "/run/redis.sock");
  for (const char* bad : {"", "redis", ":6379", "host:", "host:0", "host:65536", "host:12x",
                          "unix:", "unix:relative.sock"}) {
    EXPECT_FALSE(RedisAddress::Parse(bad).ok()) << bad;
  }
}

TEST_F(LeaseStoreTest, ARecordIsTakenRenewedByItsHolderAndRefusedToAnother) {
  RedisLeaseStore store = Store();
  StatusOr<HoldResult> first = store.Hold("hosts", "h0", "mine", "mine", 5000);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->outcome, Outcome::kAcquired);
  StatusOr<HoldResult> again = store.Hold("hosts", "h0", "mine", "mine", 5000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, Outcome::kRenewed);
  StatusOr<HoldResult> other = store.Hold("hosts", "h0", "theirs", "theirs", 5000);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->outcome, Outcome::kHeldByOther);
  EXPECT_EQ(other->holder_value, "mine");
  EXPECT_GT(other->holder_remaining_ms, 0);
  EXPECT_LE(other->holder_remaining_ms, 5000);
}

TEST_F(LeaseStoreTest, ARecordThatIsNotRenewedExpiresAndLeavesTheListing) {
  RedisLeaseStore store = Store();
  ASSERT_TRUE(store.Hold("hosts", "short", "a", "a", 200).ok());
  ASSERT_TRUE(store.Hold("hosts", "long", "b", "b", 60000).ok());
  StatusOr<std::vector<LeasedRecord>> both = store.List("hosts");
  ASSERT_TRUE(both.ok());
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[0].name, "long");  // in name order
  EXPECT_EQ((*both)[1].name, "short");
  EXPECT_EQ((*both)[1].value, "a");
  std::this_thread::sleep_for(milliseconds(400));
  StatusOr<std::vector<LeasedRecord>> left = store.List("hosts");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].name, "long");
  // The expired name is free for anyone.
  StatusOr<HoldResult> taken = store.Hold("hosts", "short", "c", "c", 1000);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->outcome, Outcome::kAcquired);
}

TEST_F(LeaseStoreTest, TheHolderMayChangeTheValueAsItRenews) {
  RedisLeaseStore store = Store();
  ASSERT_EQ(store.Hold("hosts", "h0", "run-1", "v1", 5000)->outcome, Outcome::kAcquired);
  ASSERT_EQ(store.Hold("hosts", "h0", "run-1", "v2", 5000)->outcome, Outcome::kRenewed);
  EXPECT_EQ((*store.List("hosts"))[0].value, "v2");
  StatusOr<HoldResult> other = store.Hold("hosts", "h0", "run-2", "v3", 5000);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->outcome, Outcome::kHeldByOther);
  EXPECT_EQ(other->holder_value, "v2");
  EXPECT_EQ((*store.List("hosts"))[0].value, "v2");
}

TEST_F(LeaseStoreTest, ReleaseDeletesOnlyTheCallersOwnRecord) {
  RedisLeaseStore store = Store();
  ASSERT_TRUE(store.Hold("hosts", "h0", "mine", "mine", 60000).ok());
  ASSERT_TRUE(store.Release("hosts", "h0", "not mine").ok());
  ASSERT_EQ(store.List("hosts")->size(), 1u);
  ASSERT_TRUE(store.Release("hosts", "h0", "mine").ok());
  EXPECT_TRUE(store.List("hosts")->empty());
}

TEST_F(LeaseStoreTest, GroupsAndPrefixesDoNotSeeEachOther) {
  RedisLeaseStore store = Store();
  RedisLeaseStore other_cluster(*RedisAddress::Parse(redis_.address()), "u/", milliseconds(500));
  ASSERT_TRUE(store.Hold("hosts", "h0", "a", "a", 60000).ok());
  ASSERT_TRUE(store.Hold("other", "h1", "b", "b", 60000).ok());
  EXPECT_EQ(store.List("hosts")->size(), 1u);
  EXPECT_TRUE(other_cluster.List("hosts")->empty());
  EXPECT_EQ(other_cluster.Hold("hosts", "h0", "c", "c", 1000)->outcome, Outcome::kAcquired);
}

TEST_F(LeaseStoreTest, AStoreThatIsGoneIsAnIoErrorAndTheNextCallReconnects) {
  RedisLeaseStore store = Store();
  ASSERT_TRUE(store.Hold("hosts", "h0", "a", "a", 60000).ok());
  redis_.Kill();
  StatusOr<HoldResult> lost = store.Hold("hosts", "h0", "a", "a", 60000);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), StatusCode::kIoError) << lost.status().ToString();
  EXPECT_FALSE(store.List("hosts").ok());
  ASSERT_TRUE(redis_.Start()) << redis_.error();
  // A restarted store is empty: the record is taken anew.
  StatusOr<HoldResult> back = store.Hold("hosts", "h0", "a", "a", 60000);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->outcome, Outcome::kAcquired);
}

TEST_F(LeaseStoreTest, WhatOthersWroteIntoTheStoreIsReadAsDataNotTrusted) {
  RedisLeaseStore store = Store();
  ASSERT_TRUE(store.Hold("hosts", "h0", "a", "a", 60000).ok());
  // A name in the set whose key is not a record (a hash): listed with an
  // empty value, for the caller to discard, and nothing else is lost; its
  // name cannot be held, and nothing fails.
  redis_.Cli("SADD t/hosts weird");
  redis_.Cli("SET t/hosts/weird v");
  StatusOr<std::vector<LeasedRecord>> listed = store.List("hosts");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[1].name, "weird");
  EXPECT_EQ((*listed)[1].value, "");
  StatusOr<HoldResult> taken = store.Hold("hosts", "weird", "me", "v", 1000);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->outcome, Outcome::kHeldByOther);
  ASSERT_TRUE(store.Release("hosts", "weird", "me").ok());
  redis_.Cli("DEL t/hosts/weird");
  // A binary value with NULs and newlines comes back byte for byte.
  const std::string binary("x\0y\r\nz", 6);
  ASSERT_TRUE(store.Hold("hosts", "bin", "bin-holder", binary, 60000).ok());
  listed = store.List("hosts");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].value, binary);
}

}  // namespace
}  // namespace hz::cluster
