// Stored data that no longer verifies is reported, never restored.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hz/checkpoint/engine.h"
#include "hz_test/descriptor_exhaustion.h"
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

const std::vector<size_t> kSizes = {100000, 3, 70001};  // three chunks of 64 KiB + tail

class CheckpointCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("corrupt");
    Open();
    ASSERT_EQ(eng_->SetPolicy(Tenant(1), 1, Policy{}).code(), StatusCode::kOk);
    auto st = MakeState(kSizes, 8);
    auto sp = Spans(st);
    SaveResult r;
    ASSERT_EQ(eng_->Save({Tenant(1), 1, 3, sp, Pattern(10, 1)}, &r).code(), StatusCode::kOk);
    ASSERT_EQ(eng_->WaitDurable(Tenant(1), 1, 3, 30s).code(), StatusCode::kOk);
    step_dir_ = testing::StepDir(dir_->path(), Tenant(1), 1, 3);
  }
  void Open() {
    eng_.reset();
    Status err;
    eng_ = testing::OpenEngine(SmallConfig(dir_->path()), &err);
    ASSERT_TRUE(eng_) << err;
  }
  // Restores into a canary-filled destination; checks nothing was written on failure.
  Status RestoreChecked() {
    auto out = testing::ZeroState(kSizes);
    for (auto& b : out) std::fill(b.begin(), b.end(), 0xc3);
    auto sp = Spans(out);
    RestoreResult rr;
    Status st = eng_->Restore({Tenant(1), 1, 3, sp}, &rr);
    if (st.ok()) {
      EXPECT_EQ(out, MakeState(kSizes, 8));
    } else {
      for (auto& b : out) {
        for (uint8_t v : b) EXPECT_EQ(v, 0xc3) << "destination touched after " << st;
      }
    }
    return st;
  }
  void FlipByte(const std::string& path, off_t offset) {
    int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, offset), 1);
    b ^= 0x40;
    ASSERT_EQ(pwrite(fd, &b, 1, offset), 1);
    fsync(fd);
    close(fd);
  }
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Engine> eng_;
  std::string step_dir_;
};

TEST_F(CheckpointCorruption, IntactCheckpointRestores) {
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kOk);
}

// A step that cannot be read for lack of descriptors is not corrupt: it
// restores intact once descriptors are free again.
TEST_F(CheckpointCorruption, RunningOutOfDescriptorsIsNotCorruption) {
  Status st;
  {
    hz::testing::DescriptorExhaustion exhausted;
    st = RestoreChecked();
  }
  EXPECT_NE(st.code(), StatusCode::kCorruption) << st;
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kOk);
}

TEST_F(CheckpointCorruption, FlippedByteInAnyChunkIsCorrupt) {
  // One flip per chunk, each time on a fresh copy: first, middle and last chunk.
  for (off_t off : {off_t{5}, off_t{(64 << 10) + 777}, off_t{(2 << 16) + 100}}) {
    FlipByte(step_dir_ + "/data", off);
    EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption) << off;
    FlipByte(step_dir_ + "/data", off);  // undo
    EXPECT_EQ(RestoreChecked().code(), StatusCode::kOk);
  }
}

TEST_F(CheckpointCorruption, FlippedMetadataByteIsCorrupt) {
  uint64_t payload = 100000 + 3 + 70001;
  FlipByte(step_dir_ + "/data", static_cast<off_t>(payload + 4));
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption);
}

TEST_F(CheckpointCorruption, TruncatedDataIsCorrupt) {
  fs::resize_file(step_dir_ + "/data", 70000);
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption);
  fs::resize_file(step_dir_ + "/data", 0);
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption);
}

TEST_F(CheckpointCorruption, MissingDataIsNotFound) {
  fs::remove(step_dir_ + "/data");
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointCorruption, CorruptManifestIsDetectedLiveAndNotAdoptedOnRestart) {
  std::string path = step_dir_ + "/manifest.json";
  FlipByte(path, 40);
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption);
  Open();
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());  // never listed
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kNotFound);
  EXPECT_TRUE(fs::exists(path));  // kept for the operator
}

TEST_F(CheckpointCorruption, MissingManifestMeansNeverCommitted) {
  fs::remove(step_dir_ + "/manifest.json");
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kNotFound);
  Open();
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  EXPECT_FALSE(fs::exists(step_dir_));  // removed as an interrupted persist
}

// A persist that was flushed but whose final rename did not reach the disk
// leaves "<step>.tmp/" with data and manifest: start-up adopts it only when
// every chunk verifies.
TEST_F(CheckpointCorruption, FlushedPendingDirectoryIsAdoptedWhenItVerifies) {
  eng_.reset();
  fs::rename(step_dir_, step_dir_ + ".tmp");
  Open();
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].step, 3u);
  EXPECT_EQ(e[0].state, CkptState::kDurable);
  EXPECT_TRUE(fs::exists(step_dir_ + "/manifest.json"));
  EXPECT_FALSE(fs::exists(step_dir_ + ".tmp"));
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kOk);
}

TEST_F(CheckpointCorruption, PendingDirectoryWithABadChunkIsRemoved) {
  eng_.reset();
  fs::rename(step_dir_, step_dir_ + ".tmp");
  FlipByte(step_dir_ + ".tmp/data", (64 << 10) + 5);  // the second chunk
  Open();
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  EXPECT_FALSE(fs::exists(step_dir_ + ".tmp"));
  EXPECT_FALSE(fs::exists(step_dir_));
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointCorruption, PendingDirectoryWithTruncatedDataIsRemoved) {
  eng_.reset();
  fs::rename(step_dir_, step_dir_ + ".tmp");
  fs::resize_file(step_dir_ + ".tmp/data", 100000);
  Open();
  std::vector<ListEntry> e;
  bool more = false;
  ASSERT_EQ(eng_->List(Tenant(1), 1, 0, 10, &e, &more).code(), StatusCode::kOk);
  EXPECT_TRUE(e.empty());
  EXPECT_FALSE(fs::exists(step_dir_ + ".tmp"));
}

TEST_F(CheckpointCorruption, CorruptCountsInStats) {
  FlipByte(step_dir_ + "/data", 9);
  EXPECT_EQ(RestoreChecked().code(), StatusCode::kCorruption);
  Stats st = eng_->GetStats();
  ASSERT_EQ(st.tenants.size(), 1u);
  EXPECT_EQ(st.tenants[0].corrupt_restores, 1u);
}

}  // namespace
}  // namespace hz::checkpoint
