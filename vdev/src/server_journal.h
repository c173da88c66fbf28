// A server's crash journal: what the process started after this one crashed
// needs to serve the server's socket and its front-end on, kept where the
// crash cannot take it (crash_recovery.h says how it is used).
//
// It is one memfd, kept in the fd store like every descriptor it names:
//   - a header, then two slots for the server's record (a one-server
//     snapshot, session_snapshot.h, whose descriptor indices name entries of
//     a list of fd-store names written before it). A record is written into
//     the slot not in use and the header switched to it last, so a crash
//     while writing leaves the previous record whole;
//   - one in-flight journal per ring (ring_journal.h), which the rings write
//     as they take and complete chains.
// The descriptors a record names go into the store under names of their
// own (vdev-fd-TOKEN-N, the token random per process) when first named, and
// are removed when a record no longer names them; kcmp(2) tells whether a
// descriptor is one already stored (eventfds share one inode, so the inode
// cannot).
//
// Thread-safe: the server writes from its io_context, a connection from its
// strand.
#ifndef VDEV_SRC_SERVER_JOURNAL_H_
#define VDEV_SRC_SERVER_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vdev/fd_store.h"
#include "vdev/ring_journal.h"
#include "vdev/session_snapshot.h"

namespace vdev {

// The rings one journal has room for; a device with more is not journaled.
inline constexpr uint16_t kJournalMaxQueues = 64;
// The name prefix of journals in the fd store.
inline constexpr char kJournalNamePrefix[] = "vdev-journal-";

// The raw descriptors a record names, in order (FdIndex for the journal:
// nothing is duplicated until it goes into the store).
class RecordFds final : public FdIndex {
 public:
  int Add(int fd) override;
  const std::vector<int>& fds() const { return fds_; }

 private:
  std::vector<int> fds_;
};

class ServerJournal {
 public:
  // A new journal, put in the store. nullptr with *error when it cannot be.
  static std::unique_ptr<ServerJournal> Create(std::shared_ptr<FdStore> store, Error* error);
  // A journal a crashed process left (name and memfd from the store): reads
  // its record into *record and the names of the descriptors it indexes
  // into *names. nullptr with *error when it is not a journal or its record
  // does not decode.
  static std::unique_ptr<ServerJournal> Open(std::shared_ptr<FdStore> store, std::string name,
                                             UniqueFd memfd, ServerRecord* record,
                                             std::vector<std::string>* names, Error* error);
  ~ServerJournal();
  ServerJournal(const ServerJournal&) = delete;
  ServerJournal& operator=(const ServerJournal&) = delete;

  // After Open: the descriptor stored under names[i] is fd (a copy is kept
  // to recognise it when a later record names it again).
  void Adopt(const std::string& name, int fd);
  // Writes record, whose indices are positions in fds; stores descriptors
  // not stored yet and removes those no longer named.
  Error Write(const ServerRecord& record, const RecordFds& fds);
  // Writes the record of the server at path listening on listener (-1:
  // none) with the connection `connection` describes (empty: none).
  using DescribeConnection = std::function<void(ConnectionRecord*, FdIndex*)>;
  Error WriteServer(const std::string& path, int listener, const DescribeConnection& connection);
  // Ring i's in-flight journal (i < kJournalMaxQueues).
  RingJournal* ring(uint16_t i);
  // Removes everything from the store, and writes nothing more: the server
  // stopped for good, or a successor took it over (it keeps its own).
  void Discard();

 private:
  struct Entry {
    std::string name;
    UniqueFd copy;  // to compare with kcmp
  };
  ServerJournal(std::shared_ptr<FdStore> store, std::string name, UniqueFd memfd, uint8_t* base);
  // The stored name of fd, storing it first when it is new; empty on error.
  std::string NameOf(int fd, std::vector<Entry>* kept, Error* error);

  const std::shared_ptr<FdStore> store_;
  const std::string name_;
  UniqueFd memfd_;
  uint8_t* base_;
  std::mutex mu_;
  std::vector<Entry> entries_;  // guarded by mu_
  bool discarded_ = false;      // guarded by mu_: Write does nothing more
};

}  // namespace vdev

#endif  // VDEV_SRC_SERVER_JOURNAL_H_
