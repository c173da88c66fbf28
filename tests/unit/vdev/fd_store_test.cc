// vdev's fd store (fd_store.h) against a service manager that speaks the
// documented sd_notify protocol (hz_test/service_manager.h): descriptors
// stored and removed by name, and handed back to the next process.
#include "vdev/fd_store.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "hz_test/service_manager.h"

namespace vdev {
namespace {

using hz::testing::FakeServiceManager;

std::string TempPath(const char* what) {
  return "/tmp/vdev-fdstore-" + std::to_string(getpid()) + "-" + what;
}

// A memfd holding text, to recognise it after it went round the store.
UniqueFd MemfdWith(const std::string& text) {
  UniqueFd fd(memfd_create("vdev-test", MFD_CLOEXEC));
  EXPECT_EQ(write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  return fd;
}

std::string ContentOf(int fd) {
  char buf[64];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

class FdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(manager_.bound());
    setenv("NOTIFY_SOCKET", manager_.path().c_str(), 1);
  }
  void TearDown() override { unsetenv("NOTIFY_SOCKET"); }

  FakeServiceManager manager_{TempPath("notify")};
};

TEST_F(FdStoreTest, DescriptorsAreStoredAndRemovedByName) {
  std::shared_ptr<FdStore> store = SystemdFdStore();
  ASSERT_NE(store, nullptr);
  UniqueFd a = MemfdWith("journal"), b = MemfdWith("memory");
  EXPECT_EQ(store->Store("vdev-1-journal", a.get()), "");
  EXPECT_EQ(store->Store("vdev-1-mem0", b.get()), "");
  manager_.Drain();
  ASSERT_EQ(manager_.store().size(), 2u);
  EXPECT_EQ(manager_.store()[0].first, "vdev-1-journal");
  // The manager holds the same open file, not a copy of its bytes.
  EXPECT_EQ(write(a.get(), "J", 1), 1);
  EXPECT_EQ(ContentOf(manager_.store()[0].second), "journalJ");
  // Polling would drop a socket whose peer hung up; the owner removes.
  EXPECT_TRUE(FakeServiceManager::HasLine(manager_.received()[0], "FDPOLL=0"));

  store->Remove("vdev-1-mem0");
  manager_.Drain();
  EXPECT_EQ(manager_.Stored("vdev-1-mem0"), 0u);
  EXPECT_EQ(manager_.Stored("vdev-1-journal"), 1u);
}

TEST_F(FdStoreTest, NamesSystemdRefusesAreRefusedHere) {
  std::shared_ptr<FdStore> store = SystemdFdStore();
  UniqueFd a = MemfdWith("x");
  EXPECT_NE(store->Store("", a.get()), "");
  EXPECT_NE(store->Store("a:b", a.get()), "");
  EXPECT_NE(store->Store("new\nline", a.get()), "");
  EXPECT_NE(store->Store(std::string(256, 'n'), a.get()), "");
  EXPECT_EQ(store->Store(std::string(255, 'n'), a.get()), "");
  manager_.Drain();
  EXPECT_EQ(manager_.store().size(), 1u);
}

TEST_F(FdStoreTest, WithoutAServiceManagerThereIsNoStore) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(SystemdFdStore(), nullptr);
}

TEST_F(FdStoreTest, TheNextProcessGetsTheStoreBackByName) {
  std::shared_ptr<FdStore> store = SystemdFdStore();
  UniqueFd a = MemfdWith("journal"), b = MemfdWith("memory");
  ASSERT_EQ(store->Store("vdev-1-journal", a.get()), "");
  ASSERT_EQ(store->Store("vdev-1-mem0", b.get()), "");
  manager_.Drain();

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    manager_.PrepareChild();
    std::map<std::string, UniqueFd> fds = TakeStoredFds();
    int bad = 0;
    if (fds.size() != 2) bad |= 1;
    if (ContentOf(fds["vdev-1-journal"].get()) != "journal") bad |= 2;
    if (ContentOf(fds["vdev-1-mem0"].get()) != "memory") bad |= 4;
    // Taken once: children of this process do not get them too.
    if (getenv("LISTEN_FDS") != nullptr || !TakeStoredFds().empty()) bad |= 8;
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 count, 2/4 contents, 8 taken twice";
}

TEST_F(FdStoreTest, AnotherProcessesDescriptorsAreNotTaken) {
  // LISTEN_PID names another process: the descriptors are not this one's.
  setenv("LISTEN_FDS", "1", 1);
  setenv("LISTEN_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_TRUE(TakeStoredFds().empty());
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_PID");
}

}  // namespace
}  // namespace vdev
