#include "server_journal.h"

#include <linux/kcmp.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>

#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"

namespace vdev {
namespace {

constexpr uint32_t kMagic = 0x4a524456;  // "VDRJ"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kSlotBytes = 1 << 20;
constexpr size_t kRingStride = (kRingJournalBytes + 4095) & ~size_t{4095};
constexpr size_t kRingsOffset = kHeaderBytes + 2 * kSlotBytes;
constexpr size_t kJournalBytes = kRingsOffset + kJournalMaxQueues * kRingStride;

struct Header {
  uint32_t magic;
  uint32_t version;
  uint32_t active;  // the slot holding the record
  uint32_t reserved;
  uint64_t length[2];
};

// A random token per process, so that names never collide with a crashed
// predecessor's (which may have had the same pid).
const std::string& ProcessToken() {
  static const std::string token = [] {
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint64_t>(getpid()) << 32;
    return fmt::format("{:016x}", r);
  }();
  return token;
}

// True when a and b are the same open file; false when kcmp cannot tell
// (the descriptor is then stored again, which is only wasteful).
bool SameFile(int a, int b) {
  const pid_t self = getpid();
  return syscall(SYS_kcmp, self, self, KCMP_FILE, a, b) == 0;
}

uint8_t* MapJournal(int fd, Error* error) {
  void* p = mmap(nullptr, kJournalBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = fmt::format("cannot map the journal: {}", std::strerror(errno));
    return nullptr;
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

int RecordFds::Add(int fd) {
  if (fd < 0) return kNoFd;
  fds_.push_back(fd);
  return static_cast<int>(fds_.size() - 1);
}

ServerJournal::ServerJournal(std::shared_ptr<FdStore> store, std::string name, UniqueFd memfd,
                             uint8_t* base)
    : store_(std::move(store)), name_(std::move(name)), memfd_(std::move(memfd)), base_(base) {}

ServerJournal::~ServerJournal() {
  munmap(base_, kJournalBytes);
}

std::unique_ptr<ServerJournal> ServerJournal::Create(std::shared_ptr<FdStore> store, Error* error) {
  static std::atomic<uint64_t> serial{0};
  UniqueFd fd(memfd_create("vdev-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid() || ftruncate(fd.get(), kJournalBytes) != 0) {
    *error = fmt::format("cannot create a journal: {}", std::strerror(errno));
    return nullptr;
  }
  // Its size never changes, so a mapping of it never faults past its end.
  fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  uint8_t* base = MapJournal(fd.get(), error);
  if (base == nullptr) return nullptr;
  Header h{kMagic, kVersion, 0, 0, {0, 0}};
  std::memcpy(base, &h, sizeof(h));
  std::string name = fmt::format("{}{}-{}", kJournalNamePrefix, ProcessToken(), serial++);
  if (Error e = store->Store(name, fd.get()); !e.empty()) {
    munmap(base, kJournalBytes);
    *error = e;
    return nullptr;
  }
  return std::unique_ptr<ServerJournal>(
      new ServerJournal(std::move(store), std::move(name), std::move(fd), base));
}

std::unique_ptr<ServerJournal> ServerJournal::Open(std::shared_ptr<FdStore> store, std::string name,
                                                   UniqueFd memfd, ServerRecord* record,
                                                   std::vector<std::string>* names, Error* error) {
  struct stat st;
  if (fstat(memfd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != kJournalBytes) {
    *error = name + ": not a journal of this size";
    return nullptr;
  }
  uint8_t* base = MapJournal(memfd.get(), error);
  if (base == nullptr) return nullptr;
  std::unique_ptr<ServerJournal> journal(
      new ServerJournal(std::move(store), std::move(name), std::move(memfd), base));
  Header h;
  std::memcpy(&h, base, sizeof(h));
  if (h.magic != kMagic || h.version != kVersion || h.active > 1 ||
      h.length[h.active] < sizeof(uint32_t) || h.length[h.active] > kSlotBytes) {
    *error = journal->name_ + ": no journal header of version " + std::to_string(kVersion);
    return nullptr;
  }
  const char* slot = reinterpret_cast<const char*>(base + kHeaderBytes + h.active * kSlotBytes);
  uint32_t names_bytes;
  std::memcpy(&names_bytes, slot, sizeof(names_bytes));
  if (names_bytes > h.length[h.active] - sizeof(uint32_t)) {
    *error = journal->name_ + ": the record's names run past it";
    return nullptr;
  }
  std::string_view rest(slot + sizeof(uint32_t), h.length[h.active] - sizeof(uint32_t));
  std::string_view list = rest.substr(0, names_bytes);
  names->clear();
  for (size_t pos = 0; pos < list.size();) {
    const size_t end = std::min(list.find('\n', pos), list.size());
    names->emplace_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  Snapshot snapshot;
  if (Error e = DecodeSnapshot(rest.substr(names_bytes), names->size(), &snapshot); !e.empty()) {
    *error = journal->name_ + ": " + e;
    return nullptr;
  }
  if (snapshot.servers.size() != 1) {
    *error = journal->name_ + ": a journal holds one server";
    return nullptr;
  }
  *record = std::move(snapshot.servers[0]);
  return journal;
}

void ServerJournal::Adopt(const std::string& name, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back({name, UniqueFd(fcntl(fd, F_DUPFD_CLOEXEC, 0))});
}

std::string ServerJournal::NameOf(int fd, std::vector<Entry>* kept, Error* error) {
  for (auto* list : {kept, &entries_}) {
    for (auto it = list->begin(); it != list->end(); ++it) {
      if (!it->copy.valid() || !SameFile(it->copy.get(), fd)) continue;
      std::string name = it->name;
      if (list == &entries_) {
        kept->push_back(std::move(*it));
        entries_.erase(it);
      }
      return name;
    }
  }
  static std::atomic<uint64_t> serial{0};  // names are unique across journals
  Entry e{fmt::format("vdev-fd-{}-{}", ProcessToken(), serial++),
          UniqueFd(fcntl(fd, F_DUPFD_CLOEXEC, 0))};
  if (!e.copy.valid()) {
    *error = fmt::format("cannot copy a descriptor: {}", std::strerror(errno));
    return {};
  }
  if (Error stored = store_->Store(e.name, fd); !stored.empty()) {
    *error = stored;
    return {};
  }
  kept->push_back(std::move(e));
  return kept->back().name;
}

Error ServerJournal::Write(const ServerRecord& record, const RecordFds& fds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (discarded_) return {};
  std::vector<Entry> kept;
  std::string names;
  Error error;
  for (int fd : fds.fds()) {
    std::string name = NameOf(fd, &kept, &error);
    if (name.empty()) break;
    names += (names.empty() ? "" : "\n") + name;
  }
  // What no record names any more leaves the store; on error the entries
  // stay stored, since the record in use may still name them.
  if (!error.empty()) {
    for (Entry& e : kept) entries_.push_back(std::move(e));
    return error;
  }
  for (const Entry& e : entries_) store_->Remove(e.name);
  entries_ = std::move(kept);

  Snapshot snapshot;
  snapshot.servers.push_back(record);
  const std::string encoded = EncodeSnapshot(snapshot);
  const uint64_t length = sizeof(uint32_t) + names.size() + encoded.size();
  if (length > kSlotBytes) return fmt::format("a record of {} bytes does not fit", length);
  Header h;
  std::memcpy(&h, base_, sizeof(h));
  const uint32_t slot = h.active ^ 1;
  uint8_t* out = base_ + kHeaderBytes + slot * kSlotBytes;
  const auto names_bytes = static_cast<uint32_t>(names.size());
  std::memcpy(out, &names_bytes, sizeof(names_bytes));
  std::memcpy(out + sizeof(uint32_t), names.data(), names.size());
  std::memcpy(out + sizeof(uint32_t) + names.size(), encoded.data(), encoded.size());
  h.length[slot] = length;
  std::memcpy(base_, &h, sizeof(h));
  // The slot is whole before the header points at it.
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(reinterpret_cast<uint32_t*>(base_ + offsetof(Header, active)), slot,
                   __ATOMIC_RELEASE);
  return {};
}

Error ServerJournal::WriteServer(const std::string& path, int listener,
                                 const DescribeConnection& connection) {
  ServerRecord record;
  RecordFds fds;
  record.path = path;
  record.listener = fds.Add(listener);
  if (connection) {
    record.has_connection = true;
    connection(&record.connection, &fds);
  }
  return Write(record, fds);
}

RingJournal* ServerJournal::ring(uint16_t i) {
  return reinterpret_cast<RingJournal*>(base_ + kRingsOffset + i * kRingStride);
}

void ServerJournal::Discard() {
  std::lock_guard<std::mutex> lock(mu_);
  if (discarded_) return;
  discarded_ = true;
  for (const Entry& e : entries_) store_->Remove(e.name);
  entries_.clear();
  store_->Remove(name_);
}

}  // namespace vdev
