// The front-end's Status: an ok value carries nothing, an error keeps its
// code and reason through copies and moves.
#include "vdev/frontend/status.h"

#include <utility>

#include <gtest/gtest.h>

namespace vdev::frontend {
namespace {

TEST(FrontendStatus, OkHasNoCodeAndNoMessage) {
  Status s = Status::Ok();
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(FrontendStatus, AnErrorNamesItsCodeAndReason) {
  Status s = Status::Timeout("no completion");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kTimeout);
  EXPECT_EQ(s.message(), "no completion");
  EXPECT_EQ(s.ToString(), "timeout: no completion");
  EXPECT_EQ(Status::NoSpace("").ToString(), "no space");
}

TEST(FrontendStatus, CopiesAreIndependentAndMovesTransfer) {
  Status error = Status::ProtocolError("bad used entry");
  Status copy = error;
  error = Status::Ok();
  EXPECT_TRUE(error.ok());
  EXPECT_EQ(copy.code(), Status::Code::kProtocolError);
  EXPECT_EQ(copy.message(), "bad used entry");

  Status assigned;
  assigned = copy;
  const Status& same = assigned;
  assigned = same;  // self-assignment keeps the value
  EXPECT_EQ(assigned.ToString(), "protocol error: bad used entry");

  Status moved = std::move(copy);
  EXPECT_EQ(moved.code(), Status::Code::kProtocolError);
  EXPECT_EQ(moved.message(), "bad used entry");
}

}  // namespace
}  // namespace vdev::frontend
