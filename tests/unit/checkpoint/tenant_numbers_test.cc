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
  std::ofstream(dir.path() + "/tenants.json") << R"({"acme":2})"
                                              << "\n";
  TenantNumbers numbers;
  ASSERT_TRUE(numbers.Load(dir.path(), /*highest_on_disk=*/5).ok());
  EXPECT_EQ(numbers.Find(TenantId("acme")), 2u);
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

TEST(CheckpointTenantNumbers, AMissingTableStartsEmpty) {
  TempDir dir("numbers-empty");
  TenantNumbers numbers;
  ASSERT_TRUE(numbers.Load(dir.path(), 0).ok());
  EXPECT_EQ(*numbers.FindOrAssign(TenantId("first")), 1u);
  EXPECT_EQ(*ReadFile(dir.path() + "/tenants.json"), "{\"first\":1}\n");
}

// A crash in the middle of the first write of the table leaves only its
// temporary file: nothing was ever numbered, and nothing is left behind.
TEST(CheckpointTenantNumbers, ATemporaryFileACrashLeftIsRemoved) {
  TempDir dir("numbers-tmp");
  ASSERT_TRUE(WriteFileAtomic(dir.path() + "/tenants.json.tmp.keep", "{\"a\":", false).ok());
  std::filesystem::rename(dir.path() + "/tenants.json.tmp.keep", dir.path() + "/tenants.json.tmp");
  TenantNumbers numbers;
  ASSERT_TRUE(numbers.Load(dir.path(), 0).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/tenants.json.tmp"));
  EXPECT_EQ(*numbers.FindOrAssign(TenantId("first")), 1u);
}

// The table is the only link from a tenant to its checkpoints. Starting
// without it would give the tenant a new, empty number and leave its
// checkpoints to nobody; reading around a bad entry could do the same. So an
// unreadable table is refused, named, and left as it is for the operator.
TEST(CheckpointTenantNumbers, AnUnreadableTableIsRefusedAndKept) {
  for (const char* bad :
       {"", "not json", "[1]", R"({"acme":0})", R"({"acme":"x"})", R"({"acme":1,"beta":1})"}) {
    TempDir dir("numbers-bad");
    const std::string path = dir.path() + "/tenants.json";
    std::ofstream(path) << bad;
    TenantNumbers numbers;
    Status s = numbers.Load(dir.path(), 1);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    EXPECT_EQ(*ReadFile(path), bad);
  }
}

// Numbers are saved before a directory is named after them, so numbered
// directories without a table mean the table was lost: refused too.
TEST(CheckpointTenantNumbers, AMissingTableWithNumberedDirectoriesIsRefused) {
  TempDir dir("numbers-lost");
  TenantNumbers numbers;
  Status s = numbers.Load(dir.path(), /*highest_on_disk=*/3);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(dir.path() + "/tenants.json"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/tenants.json"));
}

}  // namespace
}  // namespace hz::checkpoint
