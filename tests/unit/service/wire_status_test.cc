// The one mapping from an engine's Status to the wire (wire_status.h): what
// each engine outcome reads as in the guest.
#include "hz/service/wire_status.h"

#include <gtest/gtest.h>

namespace hz::service {
namespace {

TEST(ServiceWireStatus, EngineStatusesMapToWireCodes) {
  EXPECT_EQ(ToWireStatus(Status::Ok()), HZ_S_OK);
  EXPECT_EQ(ToWireStatus(Status::NotFound("x")), HZ_S_ENOENT);
  EXPECT_EQ(ToWireStatus(Status::InvalidArgument("x")), HZ_S_EINVAL);
  EXPECT_EQ(ToWireStatus(Status::Limit("x")), HZ_S_ELIMIT);
  EXPECT_EQ(ToWireStatus(Status::Corruption("x")), HZ_S_ECORRUPT);
  EXPECT_EQ(ToWireStatus(Status::NotSupported("x")), HZ_S_ENOTSUP);
  EXPECT_EQ(ToWireStatus(Status::Permission("x")), HZ_S_EPERM);
  EXPECT_EQ(ToWireStatus(Status::State("x")), HZ_S_ESTATE);
  // A checkpoint request cancelled because its session ended.
  EXPECT_EQ(ToWireStatus(Status::Aborted("cancelled")), static_cast<uint32_t>(HZ_S_EABORTED));
}

}  // namespace
}  // namespace hz::service
