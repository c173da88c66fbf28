// The engine's small state files (tenants.json, each stream's policy.json)
// when they cannot be read at start: nothing a tenant saved is dropped or
// handed to another tenant, and the unreadable file is kept as it is.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hz/checkpoint/engine.h"
#include "hz/common/file.h"
#include "test_util.h"

namespace hz::checkpoint {
namespace {

using testing::MakeState;
using testing::Pattern;
using testing::SmallConfig;
using testing::Spans;
using testing::TempDir;
using testing::Tenant;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

class CheckpointStateFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("state-files");
    Open();
  }
  void Open() {
    eng_.reset();
    Status err;
    eng_ = testing::OpenEngine(SmallConfig(dir_->path()), &err);
    ASSERT_TRUE(eng_) << err;
  }
  void SaveSteps(const TenantId& t, StreamId stream, std::initializer_list<uint64_t> steps) {
    for (uint64_t step : steps) {
      auto st = MakeState({4096}, step);
      auto sp = Spans(st);
      SaveResult r;
      ASSERT_EQ(eng_->Save({t, stream, step, sp, Pattern(8, step)}, &r).code(), StatusCode::kOk);
      ASSERT_EQ(eng_->WaitDurable(t, stream, step, 30s).code(), StatusCode::kOk);
    }
  }
  std::vector<uint64_t> Steps(const TenantId& t, StreamId stream) {
    std::vector<ListEntry> e;
    bool more = false;
    Status s = eng_->List(t, stream, 0, 100, &e, &more);
    std::vector<uint64_t> out;
    if (!s.ok()) return out;
    for (const ListEntry& x : e) out.push_back(x.step);
    return out;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Engine> eng_;
};

// A policy that cannot be read says nothing about how many checkpoints to
// keep: recovery keeps all of them instead of applying the default of one.
TEST_F(CheckpointStateFiles, AnUnreadablePolicyKeepsEveryCheckpointAndTheFile) {
  Policy p;
  p.retention = 3;
  ASSERT_TRUE(eng_->SetPolicy(Tenant(1), 1, p).ok());
  SaveSteps(Tenant(1), 1, {1, 2, 3});
  eng_.reset();
  const std::string policy = testing::TenantDir(dir_->path(), Tenant(1)) + "/1/policy.json";
  ASSERT_TRUE(fs::exists(policy));
  std::ofstream(policy, std::ios::trunc) << "{\"retention\":";
  Open();
  EXPECT_EQ(Steps(Tenant(1), 1), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(*ReadFile(policy), "{\"retention\":");
}

// The tenant table is the only link from a tenant to its checkpoints: an
// engine whose table is unreadable does not open (and says which file), so
// no tenant is given a number that names another tenant's directory.
TEST_F(CheckpointStateFiles, AnUnreadableTenantTableStopsTheEngine) {
  ASSERT_TRUE(eng_->SetPolicy(Tenant(1), 1, Policy{}).ok());
  SaveSteps(Tenant(1), 1, {1});
  eng_.reset();
  const std::string table = dir_->path() + "/tenants.json";
  std::ofstream(table, std::ios::trunc).flush();
  std::unique_ptr<Engine> engine;
  Status s = Engine::Open(SmallConfig(dir_->path()), &engine);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s;
  EXPECT_NE(s.message().find(table), std::string::npos) << s;
  EXPECT_EQ(*ReadFile(table), "");
}

// tenant.remove: a tenant created later under the same name starts with no
// checkpoints, and the old number (directory) is never given to anyone.
TEST_F(CheckpointStateFiles, AForgottenTenantsNameStartsEmpty) {
  ASSERT_TRUE(eng_->SetPolicy(Tenant(1), 1, Policy{}).ok());
  SaveSteps(Tenant(1), 1, {4});
  const std::string old_dir = testing::TenantDir(dir_->path(), Tenant(1));
  ASSERT_TRUE(eng_->ForgetTenant(Tenant(1)).ok());
  EXPECT_FALSE(eng_->HasTenant(Tenant(1)));
  EXPECT_FALSE(fs::exists(old_dir));
  ASSERT_TRUE(eng_->SetPolicy(Tenant(1), 1, Policy{}).ok());
  EXPECT_TRUE(Steps(Tenant(1), 1).empty());
  EXPECT_NE(testing::TenantDir(dir_->path(), Tenant(1)), old_dir);
  Open();
  EXPECT_TRUE(Steps(Tenant(1), 1).empty());
}

}  // namespace
}  // namespace hz::checkpoint
