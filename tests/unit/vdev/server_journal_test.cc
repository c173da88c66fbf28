// A server's crash journal (vdev/src/server_journal.h): what it puts in the
// fd store and what a next process reads back.
#include "server_journal.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vdev {
namespace {

// An fd store in memory: what a service manager would hold.
class MemoryStore final : public FdStore {
 public:
  Error Store(std::string_view name, int fd) override {
    if (fail_next) {
      fail_next = false;
      return "the manager refused";
    }
    stored[std::string(name)].push_back(UniqueFd(dup(fd)));
    return {};
  }
  void Remove(std::string_view name) override { stored.erase(std::string(name)); }
  // The name a journal was stored under.
  std::string JournalName() const {
    for (const auto& [name, fds] : stored) {
      if (name.rfind(kJournalNamePrefix, 0) == 0) return name;
    }
    return {};
  }
  std::map<std::string, std::vector<UniqueFd>> stored;
  bool fail_next = false;
};

struct Reopened {
  std::unique_ptr<ServerJournal> journal;
  ServerRecord record;
  std::vector<std::string> names;
  Error error;
};

Reopened Reopen(const std::shared_ptr<MemoryStore>& store) {
  Reopened r;
  const std::string name = store->JournalName();
  UniqueFd copy(dup(store->stored.at(name).front().get()));
  r.journal = ServerJournal::Open(store, name, std::move(copy), &r.record, &r.names, &r.error);
  return r;
}

class ServerJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Error e;
    journal_ = ServerJournal::Create(store_, &e);
    ASSERT_NE(journal_, nullptr) << e;
  }
  // A record naming the listener and, with a connection, the socket and a
  // call eventfd.
  Error WriteWith(bool connection) {
    return journal_->WriteServer(
        "/run/vm0.sock", listener_.get(),
        !connection ? ServerJournal::DescribeConnection()
                    : [this](ConnectionRecord* r, FdIndex* fds) {
                        r->socket = fds->Add(socket_.get());
                        QueueRecord q;
                        q.call = fds->Add(call_.get());
                        r->session.queues.push_back(q);
                      });
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  std::unique_ptr<ServerJournal> journal_;
  UniqueFd listener_{eventfd(0, EFD_CLOEXEC)};
  UniqueFd socket_{eventfd(0, EFD_CLOEXEC)};
  UniqueFd call_{eventfd(0, EFD_CLOEXEC)};
};

TEST_F(ServerJournalTest, TheRecordAndWhatItNamesComeBack) {
  ASSERT_EQ(WriteWith(true), "");
  EXPECT_EQ(store_->stored.size(), 4u) << "the journal, the listener, the socket, the call fd";
  Reopened r = Reopen(store_);
  ASSERT_NE(r.journal, nullptr) << r.error;
  EXPECT_EQ(r.record.path, "/run/vm0.sock");
  ASSERT_TRUE(r.record.has_connection);
  ASSERT_EQ(r.names.size(), 3u);
  for (const std::string& name : r.names) EXPECT_EQ(store_->stored.count(name), 1u) << name;
  EXPECT_EQ(r.record.connection.session.queues.at(0).call, 2);
}

TEST_F(ServerJournalTest, ADescriptorAlreadyStoredIsNotStoredAgain) {
  ASSERT_EQ(WriteWith(true), "");
  std::set<std::string> before;
  for (const auto& [name, fds] : store_->stored) before.insert(name);
  ASSERT_EQ(WriteWith(true), "");
  ASSERT_EQ(store_->stored.size(), before.size());
  for (const std::string& name : before) {
    EXPECT_EQ(store_->stored.at(name).size(), 1u) << name << " stored twice";
  }
  // Two eventfds share an inode; only the open file tells them apart.
  call_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
  ASSERT_EQ(WriteWith(true), "");
  EXPECT_EQ(store_->stored.size(), before.size()) << "the old call fd left, the new one came";
  Reopened r = Reopen(store_);
  ASSERT_NE(r.journal, nullptr) << r.error;
  EXPECT_EQ(before.count(r.names.at(2)), 0u);
}

TEST_F(ServerJournalTest, WhatARecordNoLongerNamesLeavesTheStore) {
  ASSERT_EQ(WriteWith(true), "");
  ASSERT_EQ(WriteWith(false), "");
  EXPECT_EQ(store_->stored.size(), 2u) << "the journal and the listener";
  Reopened r = Reopen(store_);
  ASSERT_NE(r.journal, nullptr) << r.error;
  EXPECT_FALSE(r.record.has_connection);
}

TEST_F(ServerJournalTest, AFailedWriteLeavesThePreviousRecord) {
  ASSERT_EQ(WriteWith(false), "");
  store_->fail_next = true;
  EXPECT_NE(WriteWith(true), "");
  Reopened r = Reopen(store_);
  ASSERT_NE(r.journal, nullptr) << r.error;
  EXPECT_FALSE(r.record.has_connection);
  EXPECT_EQ(store_->stored.count(r.names.at(0)), 1u) << "the listener stays stored";
}

TEST_F(ServerJournalTest, DiscardEmptiesTheStoreAndWritesNothingMore) {
  ASSERT_EQ(WriteWith(true), "");
  journal_->Discard();
  EXPECT_TRUE(store_->stored.empty());
  EXPECT_EQ(WriteWith(true), "");
  EXPECT_TRUE(store_->stored.empty());
}

TEST_F(ServerJournalTest, WhatIsNotAJournalIsRefused) {
  ServerRecord record;
  std::vector<std::string> names;
  Error error;
  UniqueFd small(memfd_create("not-a-journal", MFD_CLOEXEC));
  ASSERT_EQ(ftruncate(small.get(), 4096), 0);
  EXPECT_EQ(ServerJournal::Open(store_, "x", std::move(small), &record, &names, &error), nullptr);
  EXPECT_NE(error, "");
  // The right size, but no header: a journal created and never written.
  ASSERT_EQ(WriteWith(false), "");
  const std::string name = store_->JournalName();
  const int fd = store_->stored.at(name).front().get();
  const uint32_t zero = 0;
  ASSERT_EQ(pwrite(fd, &zero, sizeof(zero), 0), static_cast<ssize_t>(sizeof(zero)));
  error.clear();
  EXPECT_EQ(ServerJournal::Open(store_, name, UniqueFd(dup(fd)), &record, &names, &error), nullptr);
  EXPECT_NE(error.find("no journal header"), std::string::npos) << error;
}

}  // namespace
}  // namespace vdev
