// PostBatch: posts held while a batch is open on the posting thread, then
// handed to each io_context as one handler that runs them in order.
#include "vdev/post_batch.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace vdev {
namespace {

TEST(PostBatch, PostsWaitForTheBatchAndReachEachContextAsOneHandler) {
  boost::asio::io_context a, b;
  std::vector<int> ran_a, ran_b;
  {
    PostBatch batch;
    EXPECT_TRUE(PostBatch::Open());
    PostBatch::Post(a, [&] { ran_a.push_back(1); });
    PostBatch::Post(b, [&] { ran_b.push_back(10); });
    PostBatch::Post(a, [&] { ran_a.push_back(2); });
    EXPECT_EQ(a.poll(), 0u);  // nothing posted yet
    EXPECT_EQ(b.poll(), 0u);
    a.restart();
    b.restart();
  }
  EXPECT_FALSE(PostBatch::Open());
  EXPECT_EQ(a.poll(), 1u);  // one handler: one wake-up of a's thread
  EXPECT_EQ(b.poll(), 1u);
  EXPECT_EQ(ran_a, (std::vector<int>{1, 2}));
  EXPECT_EQ(ran_b, (std::vector<int>{10}));
}

TEST(PostBatch, WithoutABatchEachPostIsAHandlerOfItsOwn) {
  boost::asio::io_context io;
  int ran = 0;
  PostBatch::Post(io, [&] { ++ran; });
  PostBatch::Post(io, [&] { ++ran; });
  EXPECT_EQ(io.poll(), 2u);
  EXPECT_EQ(ran, 2);
}

TEST(PostBatch, AnInnerBatchJoinsTheOuterOne) {
  boost::asio::io_context io;
  int ran = 0;
  {
    PostBatch outer;
    {
      PostBatch inner;
      PostBatch::Post(io, [&] { ++ran; });
    }
    EXPECT_EQ(io.poll(), 0u);  // the inner batch's end posted nothing
    io.restart();
    PostBatch::Post(io, [&] { ++ran; });
  }
  EXPECT_EQ(io.poll(), 1u);
  EXPECT_EQ(ran, 2);
}

TEST(PostBatch, ABatchHoldsOnlyItsOwnThreadsPosts) {
  boost::asio::io_context io;
  int ran = 0;
  PostBatch batch;
  std::thread other([&] {
    EXPECT_FALSE(PostBatch::Open());
    PostBatch::Post(io, [&] { ++ran; });
  });
  other.join();
  EXPECT_EQ(io.poll(), 1u);  // posted at once, the batch still open here
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace vdev
