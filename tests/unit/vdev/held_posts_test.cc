// HeldPosts: what a handler of a one-thread io_context posts back to it is
// run as the handler's scope ends, ahead of the io_context's queue; what
// that work posts in turn goes through the queue.
#include "held_posts.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/post.hpp>

namespace vdev {
namespace {

// Holds fn when it can, posts it to io otherwise.
void PostOrHold(boost::asio::io_context& io, std::function<void()> fn) {
  if (HeldPosts::Holding(io)) {
    HeldPosts::Hold(std::move(fn));
  } else {
    boost::asio::post(io, std::move(fn));
  }
}

TEST(HeldPosts, AHandlersPostsRunAsItsScopeEndsBeforeTheQueue) {
  boost::asio::io_context io;
  std::vector<std::string> ran;
  boost::asio::post(io, [&] {
    {
      HeldPosts scope;
      boost::asio::post(io, [&] { ran.push_back("queued"); });
      PostOrHold(io, [&] { ran.push_back("held 1"); });
      PostOrHold(io, [&] { ran.push_back("held 2"); });
      EXPECT_TRUE(ran.empty());  // nothing runs before the scope ends
    }
    ran.push_back("after the scope");
  });
  EXPECT_EQ(io.poll(), 2u);
  EXPECT_EQ(ran, (std::vector<std::string>{"held 1", "held 2", "after the scope", "queued"}));
}

TEST(HeldPosts, NothingIsHeldOutsideAScope) {
  boost::asio::io_context io;
  bool held = true;
  boost::asio::post(io, [&] { held = HeldPosts::Holding(io); });
  io.poll();
  EXPECT_FALSE(held);
}

TEST(HeldPosts, NothingIsHeldForAnIoContextThisThreadIsNotRunning) {
  boost::asio::io_context io, other;
  bool held = true;
  boost::asio::post(io, [&] {
    HeldPosts scope;
    held = HeldPosts::Holding(other);
  });
  io.poll();
  EXPECT_FALSE(held);
}

TEST(HeldPosts, AnotherThreadsPostsAreNotHeld) {
  boost::asio::io_context io;
  bool held = true;
  boost::asio::post(io, [&] {
    HeldPosts scope;
    std::thread t([&] { held = HeldPosts::Holding(io); });
    t.join();
  });
  io.poll();
  EXPECT_FALSE(held);
}

TEST(HeldPosts, AnInnerScopeJoinsTheOuterOne) {
  boost::asio::io_context io;
  std::vector<std::string> ran;
  boost::asio::post(io, [&] {
    HeldPosts outer;
    {
      HeldPosts inner;
      PostOrHold(io, [&] { ran.push_back("held"); });
    }
    EXPECT_TRUE(ran.empty());  // the inner scope's end ran nothing
  });
  io.poll();
  EXPECT_EQ(ran, (std::vector<std::string>{"held"}));
}

TEST(HeldPosts, WhatHeldWorkPostsGoesThroughTheQueue) {
  // A chain of held work that posts more (a turn granting the next) would
  // otherwise keep the thread from everything else.
  boost::asio::io_context io;
  std::vector<std::string> ran;
  boost::asio::post(io, [&] {
    HeldPosts scope;
    PostOrHold(io, [&] {
      ran.push_back("held");
      HeldPosts nested;  // as a held completion's own handler opens one
      PostOrHold(io, [&] { ran.push_back("posted by held work"); });
    });
    boost::asio::post(io, [&] { ran.push_back("queued"); });
  });
  EXPECT_EQ(io.poll(), 3u);
  EXPECT_EQ(ran, (std::vector<std::string>{"held", "queued", "posted by held work"}));
}

}  // namespace
}  // namespace vdev
