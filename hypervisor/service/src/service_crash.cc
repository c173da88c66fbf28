// harmonaized surviving its own crash (SPEC.md §2.10), on vdev's crash
// recovery (vdev/crash_recovery.h). With [service] fd_store, the service
// keeps in the systemd unit's fd store what a process started after a crash
// needs: the state directory's lock, the control and metrics listeners, and
// for every VM socket its listener, connection, guest memory, eventfds and a
// journal of the session (vdev's, with the device's durable state in it).
// systemd restarts the service and hands the store back; the new process
// loads the state directory as at any start, serves every session on from
// its journal, and tells the tenants.
#include <sys/stat.h>

#include <spdlog/spdlog.h>

#include "control_server.h"
#include "hz/service/service.h"
#include "metrics_server.h"

namespace hz::service {

namespace {

// The service's own descriptors in the store.
constexpr char kLockName[] = "harmonaized-lock";
constexpr char kControlName[] = "harmonaized-control";
constexpr char kMetricsName[] = "harmonaized-metrics";

}  // namespace

hz::Status Service::OpenFdStore() {
  if (!config_.fd_store) return hz::Status::Ok();
  fd_store_ = vdev::SystemdFdStore();
  if (fd_store_ == nullptr) {
    return hz::Status::InvalidArgument(
        "fd_store needs systemd's fd store, and no service manager is listening (NOTIFY_SOCKET)");
  }
  // A live upgrade's successor is handed everything by its predecessor.
  if (takeover_ != nullptr) return hz::Status::Ok();
  std::map<std::string, vdev::UniqueFd> stored = vdev::TakeStoredFds();
  if (stored.empty()) return hz::Status::Ok();
  spdlog::warn("event=crash_recovery stored_descriptors={}", stored.size());
  recovery_ = std::make_unique<vdev::CrashRecovery>(fd_store_, std::move(stored));
  return hz::Status::Ok();
}

hz::Status Service::AdoptStoredLockAndListeners() {
  vdev::UniqueFd lock = recovery_->Take(kLockName);
  // The store holds the lock of this state directory, still locked: the
  // crashed process's lock stays held while the store keeps it.
  struct stat held, here;
  const std::string lock_path = config_.state_dir + "/harmonaized.lock";
  if (!lock.valid() || fstat(lock.get(), &held) != 0 || stat(lock_path.c_str(), &here) != 0 ||
      held.st_dev != here.st_dev || held.st_ino != here.st_ino) {
    // Not this directory's: start as after a clean stop.
    recovery_->Take(kControlName);
    recovery_->Take(kMetricsName);
    const std::string dir = config_.state_dir;
    recovery_.reset();
    spdlog::warn("event=crash_recovery_skipped reason=\"the store holds no lock of {}\"", dir);
    return LockStateDir();
  }
  state_lock_fd_ = lock.release();
  handed_control_ = recovery_->Take(kControlName);
  handed_metrics_ = recovery_->Take(kMetricsName);
  return hz::Status::Ok();
}

void Service::StoreLockAndListeners() {
  if (fd_store_ == nullptr) return;
  const std::pair<const char*, int> own[] = {
      {kLockName, state_lock_fd_},
      {kControlName, control_->listener()},
      {kMetricsName, metrics_server_ ? metrics_server_->listener() : -1}};
  for (const auto& [name, fd] : own) {
    fd_store_->Remove(name);  // one of each, also after an upgrade
    if (fd < 0) continue;
    if (std::string e = fd_store_->Store(name, fd); !e.empty()) {
      spdlog::error("event=fd_store_failed name={} error=\"{}\"", name, e);
    }
  }
}

void Service::ForgetStoredLockAndListeners() {
  if (fd_store_ == nullptr) return;
  for (const char* name : {kLockName, kControlName, kMetricsName}) fd_store_->Remove(name);
}

}  // namespace hz::service
