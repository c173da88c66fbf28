// Crash-safe small files: what the scheduler, the event bus, checkpoint
// policies and the service's state files are written with.
#include "hz/common/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace hz {
namespace {

namespace fs = std::filesystem;

class CommonFile : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::string(HZ_COMMON_TEST_DIR) + "/file-" + std::to_string(getpid()) + "-" +
           std::to_string(counter++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(CommonFile, WriteFileAtomicReplacesTheWholeFileAndLeavesNoTemporary) {
  const std::string path = dir_ + "/state.json";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second, longer").ok());
  StatusOr<std::string> text = ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "second, longer");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFileAtomic(path, "unsynced", /*sync=*/false, 0640).ok());
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(*ReadFile(path), "unsynced");
}

TEST_F(CommonFile, WriteFileAtomicIntoAMissingDirectoryFailsWithIoError) {
  Status s = WriteFileAtomic(dir_ + "/absent/state.json", "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("absent"), std::string::npos);
}

TEST_F(CommonFile, ReadFileSaysNotFoundAndRefusesLargeFiles) {
  EXPECT_EQ(ReadFile(dir_ + "/none").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/big", std::string(100, 'x')).ok());
  EXPECT_EQ(ReadFile(dir_ + "/big", 99).status().code(), StatusCode::kLimit);
  EXPECT_EQ(ReadFile(dir_ + "/big", 100)->size(), 100u);
  EXPECT_TRUE(SyncDir(dir_).ok());
  EXPECT_EQ(SyncDir(dir_ + "/none").code(), StatusCode::kIoError);
}

// flock locks belong to an open file: a second open of the same path, in
// this process or another, is refused until the first descriptor closes.
TEST_F(CommonFile, LockFileIsExclusiveAndNamesItsHolder) {
  const std::string path = dir_ + "/x.lock";
  StatusOr<int> first = LockFile(path);
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<int> second = LockFile(path);
  EXPECT_EQ(second.status().code(), StatusCode::kBusy);
  EXPECT_NE(second.status().message().find(path), std::string::npos);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status();
  close(*first);
  StatusOr<int> third = LockFile(path);
  ASSERT_TRUE(third.ok()) << third.status();
  close(*third);
}

TEST(CommonFileNames, DirNameOfRelativeRootedAndNestedPaths) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
}

}  // namespace
}  // namespace hz
