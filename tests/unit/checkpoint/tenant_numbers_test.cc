// The checkpoint engine's tenant numbers (tenant_numbers.h): the table the
// service used to keep in checkpoints/tenants.json, same file, same format.
#include "tenant_numbers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "hz/common/file.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::TempDir;

TEST(CheckpointTenantNumbers, AnExistingTableLoadsAndNewNumbersGoAboveEveryDirectory) {
  TempDir dir("numbers");
  std::ofstream(dir.path() + "/tenants.json") << R"({"acme":2,"bad":0,"worse":"x"})"
                                              << "\n";
  TenantNumbers numbers;
  ASSERT_TRUE(numbers.Load(dir.path(), /*highest_on_disk=*/5).ok());
  EXPECT_EQ(numbers.Find(TenantId("acme")), 2u);
  EXPECT_FALSE(numbers.Find(TenantId("bad")).has_value());
  EXPECT_EQ(numbers.Name(2), TenantId("acme"));
  EXPECT_TRUE(numbers.Name(5).empty());  // a directory no tenant owns
  // Directory 5 has no owner in the table; a new tenant never inherits it.
  StatusOr<TenantNo> beta = numbers.FindOrAssign(TenantId("beta"));
  ASSERT_TRUE(beta.ok());
  EXPECT_EQ(*beta, 6u);
  EXPECT_EQ(*numbers.FindOrAssign(TenantId("acme")), 2u);
  EXPECT_EQ(numbers.FindOrAssign(TenantId()).status().code(), StatusCode::kInvalidArgument);

  TenantNumbers again;
  ASSERT_TRUE(again.Load(dir.path(), 0).ok());
  EXPECT_EQ(again.Find(TenantId("beta")), 6u);
  EXPECT_EQ(again.Find(TenantId("acme")), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/tenants.json.tmp"));
}

TEST(CheckpointTenantNumbers, AMissingOrUnreadableTableStartsEmpty) {
  TempDir dir("numbers-empty");
  TenantNumbers numbers;
  ASSERT_TRUE(numbers.Load(dir.path(), 0).ok());
  EXPECT_EQ(*numbers.FindOrAssign(TenantId("first")), 1u);
  EXPECT_EQ(*ReadFile(dir.path() + "/tenants.json"), "{\"first\":1}\n");
  std::ofstream(dir.path() + "/tenants.json") << "not json";
  TenantNumbers unreadable;
  ASSERT_TRUE(unreadable.Load(dir.path(), 1).ok());
  EXPECT_EQ(*unreadable.FindOrAssign(TenantId("second")), 2u);
}

}  // namespace
}  // namespace hz::checkpoint
