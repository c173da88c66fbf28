// NotifyEventFd and DrainEventFd: notifications never block the back-end,
// whatever the front-end did to the eventfd it shares with it.
#include "notify_fd.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

#include "test_util.h"

namespace vdev {
namespace {

using testing::Drain;
using testing::kEventFdMax;

TEST(NotifyEventFd, IncrementsANonBlockingCounter) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kSent);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kSent);
  EXPECT_EQ(Drain(fd), 2u);
  close(fd);
}

TEST(NotifyEventFd, AFullCounterIsAlreadyANotification) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, &kEventFdMax, sizeof(kEventFdMax)), 8);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kPending);
  EXPECT_EQ(Drain(fd), kEventFdMax);  // unchanged, and still readable
  close(fd);
}

// In blocking mode a write to this counter would never return; a test that
// regresses hangs here, so ctest's timeout reports it.
TEST(NotifyEventFd, RefusesAnFdMadeBlockingAgain) {
  const int fd = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, &kEventFdMax, sizeof(kEventFdMax)), 8);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kRefused);
  // Refused even with room in the counter: the front-end took back
  // O_NONBLOCK, so the next write could block.
  EXPECT_EQ(Drain(fd), kEventFdMax);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kRefused);
  close(fd);
}

TEST(NotifyEventFd, RefusesAClosedFd) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(NotifyEventFd(fd), NotifyResult::kRefused);
}

TEST(DrainEventFd, EmptiesTheCounter) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  const uint64_t three = 3;
  ASSERT_EQ(write(fd, &three, sizeof(three)), 8);
  EXPECT_TRUE(DrainEventFd(fd));
  uint64_t v = 0;
  EXPECT_EQ(read(fd, &v, sizeof(v)), -1);  // empty now
  close(fd);
}

// The front-end emptied the counter and cleared O_NONBLOCK between the
// back-end's readiness event and its read: a plain read() would wait forever.
// A regression hangs here, so ctest's timeout reports it.
TEST(DrainEventFd, NeverWaitsOnAnEmptyBlockingCounter) {
  const int fd = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  // Read without waiting (preadv2 with RWF_NOWAIT, which eventfds have had
  // since Linux 5.12).
  EXPECT_TRUE(DrainEventFd(fd));
  close(fd);
}

}  // namespace
}  // namespace vdev
