#include "vdev/crash_recovery.h"

#include <fcntl.h>

#include "server_journal.h"
#include "spdlog/spdlog.h"

namespace vdev {

struct CrashRecovery::Journal {
  std::shared_ptr<ServerJournal> journal;
  ServerRecord record;
  std::vector<std::string> names;  // the fd-store names the record indexes
  bool claimed = false;
};

CrashRecovery::CrashRecovery(std::shared_ptr<FdStore> store, std::map<std::string, UniqueFd> stored)
    : store_(std::move(store)), stored_(std::move(stored)) {
  for (auto it = stored_.begin(); it != stored_.end();) {
    if (it->first.rfind(kJournalNamePrefix, 0) != 0) {
      ++it;
      continue;
    }
    auto j = std::make_unique<Journal>();
    Error error;
    j->journal = ServerJournal::Open(store_, it->first, std::move(it->second), &j->record,
                                     &j->names, &error);
    if (j->journal == nullptr) {
      // Dropped from the store: nothing can use it.
      spdlog::error("vdev: crash recovery: {}", error);
      store_->Remove(it->first);
    } else {
      journals_.push_back(std::move(j));
    }
    it = stored_.erase(it);
  }
}

CrashRecovery::~CrashRecovery() = default;

UniqueFd CrashRecovery::Take(const std::string& name) {
  auto it = stored_.find(name);
  if (it == stored_.end()) return UniqueFd();
  UniqueFd fd = std::move(it->second);
  stored_.erase(it);
  return fd;
}

std::shared_ptr<std::vector<UniqueFd>> CrashRecovery::TakeNamed(Journal& j,
                                                                const std::string& path) {
  auto fds = std::make_shared<std::vector<UniqueFd>>();
  bool lost = false;
  std::map<std::string, int> taken;  // name -> its descriptor, taken already
  for (const std::string& name : j.names) {
    // One file named twice in a record (guest memory in two regions of one
    // memfd): each place takes a descriptor of its own.
    if (auto t = taken.find(name); t != taken.end()) {
      fds->emplace_back(fcntl(t->second, F_DUPFD_CLOEXEC, 0));
      continue;
    }
    auto it = stored_.find(name);
    if (it == stored_.end()) {
      spdlog::error("vdev[{}]: crash recovery: the store lost {}", path, name);
      fds->emplace_back();
      lost = true;
      continue;
    }
    j.journal->Adopt(name, it->second.get());
    taken[name] = it->second.get();
    fds->push_back(std::move(it->second));
    stored_.erase(it);
  }
  // Without all of its descriptors the session cannot go on; the
  // listener can (the front-end lost the device and may come again).
  if (lost && j.record.has_connection) {
    spdlog::error("vdev[{}]: crash recovery: the session is lost", path);
    j.record.has_connection = false;
  }
  return fds;
}

bool CrashRecovery::Serve(std::span<Server* const> servers, std::string* error) {
  for (Server* server : servers) {
    Journal* j = nullptr;
    for (auto& candidate : journals_) {
      if (!candidate->claimed && candidate->record.path == server->path()) j = candidate.get();
    }
    if (j == nullptr) {
      if (!server->Start(error)) return false;
      continue;
    }
    j->claimed = true;
    const std::string path = server->path();
    std::shared_ptr<std::vector<UniqueFd>> fds = TakeNamed(*j, path);
    auto done = [path](const Error& e) {
      if (e.empty()) {
        spdlog::info("vdev[{}]: recovered after a crash", path);
      } else {
        spdlog::error("vdev[{}]: the session could not be recovered: {}", path, e);
      }
    };
    const bool listener_lost = j->record.listener != kNoFd && !(*fds)[j->record.listener].valid();
    if (listener_lost) {
      j->journal->Discard();
      if (!server->Start(error)) return false;
      continue;
    }
    if (!server->Recover(j->record, fds, j->journal, done, error)) return false;
  }
  for (auto& j : journals_) {
    if (j->claimed) continue;
    spdlog::warn("vdev: crash recovery: no server serves {} any more; dropping its journal",
                 j->record.path);
    j->journal->Discard();
  }
  for (auto& [name, fd] : stored_) store_->Remove(name);
  stored_.clear();
  return true;
}

}  // namespace vdev
