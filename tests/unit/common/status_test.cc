// hz::Status, StatusOr and TenantId: what every engine's results rest on.
#include "hz/common/status.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"

namespace hz {
namespace {

TEST(CommonStatus, OkIsOneNullPointerWithNoMessage) {
  static_assert(sizeof(Status) == sizeof(void*));
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_TRUE(Status(StatusCode::kOk, "dropped").ok());
}

TEST(CommonStatus, FactoriesSetTheirCodeAndPredicatesReadIt) {
  Status s = Status::NotFound("no stream 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_FALSE(s.IsIoError());
  EXPECT_EQ(s.message(), "no stream 7");
  EXPECT_EQ(s.ToString(), "not found: no stream 7");
  EXPECT_TRUE(Status::Aborted().IsAborted());
  EXPECT_TRUE(Status::Aborted().message().empty());
  EXPECT_EQ(Status::IoError("disk").ToString(), "I/O error: disk");
  EXPECT_EQ(Status::Mismatch().code(), StatusCode::kMismatch);
}

TEST(CommonStatus, CopiesAreIndependentAndMovesLeaveOk) {
  Status a = Status::Corruption("crc");
  Status b = a;
  EXPECT_EQ(b.code(), StatusCode::kCorruption);
  EXPECT_EQ(b.message(), "crc");
  b = Status::Busy("in use");
  EXPECT_EQ(a.message(), "crc");
  Status c = std::move(b);
  EXPECT_TRUE(c.IsBusy());
  a = Status::Ok();
  EXPECT_TRUE(a.ok());
}

TEST(CommonStatus, EveryCodeHasADistinctName) {
  std::map<std::string, int> names;
  for (uint8_t c = 0; c < kStatusCodeCount; ++c) {
    names[StatusCodeName(static_cast<StatusCode>(c))]++;
  }
  EXPECT_EQ(names.size(), kStatusCodeCount);
  EXPECT_EQ(names.count("unknown"), 0u);
  std::ostringstream os;
  os << Status::Limit("quota") << " " << StatusCode::kTryAgain;
  EXPECT_EQ(os.str(), "limit: quota try again");
}

StatusOr<int> Half(int v) {
  if (v % 2 != 0) return Status::InvalidArgument("odd");
  return v / 2;
}

TEST(CommonStatusOr, HoldsAValueOrWhyNot) {
  StatusOr<int> h = Half(8);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, 4);
  StatusOr<int> odd = Half(3);
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<int>> p(std::make_unique<int>(5));
  std::unique_ptr<int> owned = std::move(p).value();
  EXPECT_EQ(*owned, 5);
}

TEST(CommonTenantId, ComparesAndPrintsByName) {
  TenantId a("acme"), b("beta");
  EXPECT_LT(a, b);
  EXPECT_EQ(a, TenantId("acme"));
  EXPECT_TRUE(TenantId().empty());
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), "acme");
}

}  // namespace
}  // namespace hz
