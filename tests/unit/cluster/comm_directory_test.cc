// The communicator directory's re-formation announcements
// (hz/cluster/comm_directory.h), on a private redis-server.
#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "hz/cluster/comm_directory.h"
#include "redis_server.h"

namespace hz::cluster {
namespace {

using std::chrono::milliseconds;

class CommDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()) << redis_.error(); }
  std::unique_ptr<CommDirectory> Directory() {
    return std::make_unique<CommDirectory>(*RedisAddress::Parse(redis_.address()), "test/",
                                           milliseconds(1000));
  }
  test::RedisServer redis_;
};

TEST_F(CommDirectoryTest, AReformGenerationOnlyRisesAndExpires) {
  std::unique_ptr<CommDirectory> d = Directory();
  StatusOr<uint64_t> none = d->ReformGeneration("ab");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0u);
  // Two hosts upgraded one after the other: the later generation holds,
  // and an announcement that comes late does not take it back.
  EXPECT_EQ(*d->AnnounceReform("ab", 1, milliseconds(60000)), 1u);
  EXPECT_EQ(*d->AnnounceReform("ab", 2, milliseconds(60000)), 2u);
  EXPECT_EQ(*d->AnnounceReform("ab", 1, milliseconds(60000)), 2u);
  EXPECT_EQ(*d->ReformGeneration("ab"), 2u);
  EXPECT_EQ(*d->ReformGeneration("cd"), 0u) << "each communicator has its own";
  // Nothing outlives its lifetime in the store.
  EXPECT_EQ(*d->AnnounceReform("ef", 1, milliseconds(50)), 1u);
  const std::string ttl = redis_.Cli("PTTL test/reform/ef");
  EXPECT_LE(std::stol(ttl), 50) << ttl;
}

TEST_F(CommDirectoryTest, AMalformedGenerationInTheStoreIsAnError) {
  redis_.Cli("SET test/reform/ab not-a-number");
  std::unique_ptr<CommDirectory> d = Directory();
  EXPECT_EQ(d->ReformGeneration("ab").status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(d->AnnounceReform("ab", 3, milliseconds(1000)).ok());
}

}  // namespace
}  // namespace hz::cluster
