// A connection thread's loop (hz/service/connection_loop.h): it sleeps as
// soon as it has nothing to do, unless a handler asked it to keep polling,
// and then it serves what comes next without sleeping, and goes back to
// sleep by itself once the window has passed with nothing to do.
#include "hz/service/connection_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace hz::service {
namespace {

using std::chrono::microseconds;

// Until pred holds; false after a bound far above anything expected.
bool WaitFor(const std::function<bool()>& pred) {
  for (int i = 0; i < 20000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

class ConnectionLoopTest : public ::testing::Test {
 protected:
  void Run(microseconds base) {
    thread_ = std::thread([this, base] { RunConnectionLoop(io_, base, &stats_); });
    ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 1; }));
  }
  // Runs fn on the loop and waits until it has run.
  void OnLoop(std::function<void()> fn) {
    std::atomic<bool> ran{false};
    boost::asio::post(io_, [&] {
      fn();
      ran = true;
    });
    ASSERT_TRUE(WaitFor([&] { return ran.load(); }));
  }
  void TearDown() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  ConnectionLoopStats stats_;
  std::thread thread_;
};

TEST_F(ConnectionLoopTest, WithoutAWindowTheThreadSleepsRightAfterItsWork) {
  KeepPolling(std::chrono::seconds(60));  // off a loop: no effect on any
  Run(microseconds(0));
  OnLoop([] {});
  ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 2; }));
  OnLoop([] {});
  ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 3; }));
  EXPECT_EQ(stats_.idle_polls.load(), 0u);
}

TEST_F(ConnectionLoopTest, AHandlerThatAsksToKeepPollingHasTheNextWorkServedWithoutASleep) {
  Run(microseconds(0));
  // Far longer than the test: the loop is stopped, it does not run out.
  OnLoop([] { KeepPolling(std::chrono::seconds(60)); });
  ASSERT_TRUE(WaitFor([&] { return stats_.idle_polls.load() > 0; }));
  OnLoop([] {});
  OnLoop([] {});
  EXPECT_EQ(stats_.sleeps.load(), 1u);
}

TEST_F(ConnectionLoopTest, TheWindowEndsByItselfOnceNothingComes) {
  Run(microseconds(0));
  OnLoop([] { KeepPolling(std::chrono::milliseconds(1)); });
  ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 2; }));
  const uint64_t polls = stats_.idle_polls.load();
  EXPECT_GT(polls, 0u);
  // Asleep: nothing is polled any more.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stats_.idle_polls.load(), polls);
  // The next burst starts without the last one's window.
  OnLoop([] {});
  ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 3; }));
  EXPECT_EQ(stats_.idle_polls.load(), polls);
}

TEST_F(ConnectionLoopTest, TheBaseWindowAppliesToEveryBurst) {
  Run(microseconds(1000));
  OnLoop([] {});
  ASSERT_TRUE(WaitFor([&] { return stats_.sleeps.load() == 2; }));
  EXPECT_GT(stats_.idle_polls.load(), 0u);
}

}  // namespace
}  // namespace hz::service
