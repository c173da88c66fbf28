// Session's part in a live upgrade (session_snapshot.h): freezing, writing
// the session down, and rebuilding it in the successor.
#include <algorithm>

#include "notify_fd.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "vdev/session.h"

namespace vdev {

void Session::Freeze() {
  if (frozen_ || disconnected_) return;
  frozen_ = true;
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    QueueState& s = queues_[i];
    if (s.watching) {
      host_->UnwatchKick(i);
      s.watching = false;
    }
    s.turn_wanted = false;
    // Asked to kick again, for Thaw; a successor re-reads the avail ring.
    if (s.polled_awhile) EndPollingAwhile(i, /*serve=*/false);
  }
  // A turn granted later finds nothing to run and ends at once.
  wanting_turns_.clear();
  UpdatePolling();
  // Chains the device keeps (event buffers, requests waiting for peers) come
  // back now or through later posts.
  for (QueueState& s : queues_) {
    if (s.delivered) device_->OnQueueFreezing(*s.q);
  }
}

void Session::Thaw() {
  if (!frozen_ || disconnected_) return;
  frozen_ = false;
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    QueueState& s = queues_[i];
    if (s.started && s.kick.valid() && !s.watching) {
      host_->WatchKick(i, s.kick.get());
      s.watching = true;
    }
  }
  UpdatePolling();
  // Kicks that came while frozen were not watched for.
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].delivered && queues_[i].q->HasAvailable()) Kick(i);
  }
}

bool Session::Quiescent() const {
  if (StopPending()) return false;
  return std::all_of(queues_.begin(), queues_.end(), [](const QueueState& s) {
    return s.q->in_flight() == s.q->returned().size();
  });
}

Error Session::Export(SessionRecord* out, SnapshotFds* fds) {
  if (!frozen_ || !Quiescent()) return "the session is not frozen and quiescent";
  // Completions still batched become visible in guest memory, where the
  // successor reads the used index.
  for (QueueState& s : queues_) {
    if (s.q->started()) s.q->Flush();
  }
  SessionRecord r;
  DescribeRings(&r, fds);
  if (!device_->SaveState(&r.device_state)) return "the device could not save its state";
  if (fds->failed()) return "out of descriptors";
  *out = std::move(r);
  return {};
}

void Session::Describe(SessionRecord* out, FdIndex* fds) const {
  DescribeRings(out, fds);
  out->device_state = device_->DurableState();
}

void Session::DescribeRings(SessionRecord* out, FdIndex* fds) const {
  SessionRecord r;
  r.acked_features = acked_features_;
  r.features_set = features_set_;
  r.acked_protocol = acked_protocol_;
  r.status = status_;
  r.ever_started = ever_started_;
  r.backend_channel = fds->Add(backend_fd_.get());
  if (memory_) {
    for (const auto& region : memory_->regions()) {
      r.regions.push_back({region->guest_phys_addr, region->size, region->userspace_addr,
                           region->mmap_offset, fds->Add(region->fd)});
    }
  }
  for (const QueueState& s : queues_) {
    QueueRecord q;
    q.size = s.q->size();
    q.has_addresses = s.q->has_addresses();
    q.desc_addr = s.q->desc_addr();
    q.avail_addr = s.q->avail_addr();
    q.used_addr = s.q->used_addr();
    q.last_avail = s.q->last_avail();
    q.returned.assign(s.q->returned().begin(), s.q->returned().end());
    q.started = s.started;
    q.enabled = s.enabled;
    q.nofd_kick = s.nofd_kick;
    q.kick = fds->Add(s.kick.get());
    q.call = fds->Add(s.call.get());
    q.err = fds->Add(s.err.get());
    r.queues.push_back(q);
  }
  *out = std::move(r);
}

void Session::SetRingJournals(const std::vector<RingJournal*>& rings) {
  for (size_t i = 0; i < queues_.size() && i < rings.size(); ++i) {
    queues_[i].q->set_journal(rings[i]);
  }
}

Error Session::RestoreMemory(const SessionRecord& record, std::vector<UniqueFd>& fds) {
  if (record.regions.empty()) return {};
  if (record.regions.size() > options_.max_mem_slots) {
    return fmt::format("{} memory regions, more than {} slots", record.regions.size(),
                       options_.max_mem_slots);
  }
  std::vector<std::shared_ptr<MappedRegion>> regions;
  for (const RegionRecord& rr : record.regions) {
    vu::MemRegion desc{rr.guest_phys_addr, rr.size, rr.userspace_addr, rr.mmap_offset};
    Error e;
    auto region = MapGuestRegion(desc, fds[rr.fd].release(), options_.max_region_bytes, &e,
                                 options_.require_sealed_memory);
    if (region == nullptr) return "region: " + e;
    regions.push_back(std::move(region));
  }
  return InstallMemory(std::move(regions));
}

Error Session::RestoreQueue(uint16_t i, const QueueRecord& r, std::vector<UniqueFd>& fds,
                            bool recover) {
  QueueState& s = queues_[i];
  if (r.size != 0) {
    if (!SplitQueue::ValidSize(r.size) || r.size > device_->MaxQueueSize()) {
      return fmt::format("queue {}: size {} invalid", i, r.size);
    }
    s.q->set_size(r.size);
  }
  if (r.has_addresses) s.q->set_addresses(r.desc_addr, r.avail_addr, r.used_addr);
  if (!recover) s.q->set_last_avail(r.last_avail);
  auto take = [&](int index, UniqueFd* into) -> Error {
    if (index == kNoFd) return {};
    UniqueFd fd = std::move(fds[index]);
    if (!IsEventFd(fd.get())) return fmt::format("queue {}: a descriptor is not an eventfd", i);
    SetNonBlocking(fd.get());
    *into = std::move(fd);
    return {};
  };
  for (auto [index, into] : {std::pair{r.call, &s.call}, {r.err, &s.err}, {r.kick, &s.kick}}) {
    if (Error e = take(index, into); !e.empty()) return e;
  }
  s.q->set_call_fd(s.call.get());
  s.q->set_err_fd(s.err.get());
  s.nofd_kick = r.kick == kNoFd && r.nofd_kick;
  if (r.started && !s.kick.valid() && !s.nofd_kick) {
    return fmt::format("queue {}: started without a kick", i);
  }
  if (s.nofd_kick && !options_.allow_nofd_kick && !Polled(i)) {
    return fmt::format("queue {} would need polling, which is not allowed", i);
  }
  s.enabled = r.enabled;
  if (!r.started) return {};
  if (Error e = StartRestoredQueue(i, r, recover); !e.empty()) return e;
  s.started = true;
  if (s.kick.valid()) {
    host_->WatchKick(i, s.kick.get());
    s.watching = true;
  }
  // Delivers the queue to the device, which serves what the driver made
  // available while no process did.
  Reconcile(i);
  return {};
}

Error Session::StartRestoredQueue(uint16_t i, const QueueRecord& r, bool recover) {
  SplitQueue& q = *queues_[i].q;
  Error error;
  if (recover) return q.Recover(memory_, &error) ? Error() : error;
  if (!q.Start(memory_, &error)) return error;
  if (!q.AdoptReturned(r.returned)) return fmt::format("queue {}: bad returned heads", i);
  return {};
}

Error Session::Restore(const SessionRecord& record, std::vector<UniqueFd>& fds, bool recover) {
  if (record.queues.size() != queues_.size()) {
    return fmt::format("the snapshot has {} queues, this device {}", record.queues.size(),
                       queues_.size());
  }
  if (record.acked_features & ~OfferedFeatures()) {
    return fmt::format("negotiated features {:#x} are not all offered now ({:#x})",
                       record.acked_features, OfferedFeatures());
  }
  if (record.acked_protocol & ~OfferedProtocolFeatures()) {
    return fmt::format("negotiated protocol features {:#x} are not all offered now ({:#x})",
                       record.acked_protocol, OfferedProtocolFeatures());
  }
  acked_features_ = record.acked_features;
  features_set_ = record.features_set;
  acked_protocol_ = record.acked_protocol;
  status_ = record.status;
  ever_started_ = record.ever_started;
  if (features_set_) {
    for (QueueState& s : queues_) {
      s.q->set_features(acked_features_ & vu::kFRingEventIdx,
                        acked_features_ & vu::kFRingIndirectDesc);
    }
    device_->OnFeatures(acked_features_);
  }
  if (record.backend_channel != kNoFd) backend_fd_ = std::move(fds[record.backend_channel]);
  if (Error e = RestoreMemory(record, fds); !e.empty()) return e;
  if (!(recover ? device_->RecoverState(record.device_state)
                : device_->RestoreState(record.device_state))) {
    return "the device refused its saved state";
  }
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    if (Error e = RestoreQueue(i, record.queues[i], fds, recover); !e.empty()) return e;
  }
  return {};
}

void Session::Abandon() {
  if (disconnected_) return;
  disconnected_ = true;
  frozen_ = false;
  pending_stop_ = -1;
  turns_.reset();
  wanting_turns_.clear();
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    QueueState& s = queues_[i];
    if (s.watching) {
      host_->UnwatchKick(i);
      s.watching = false;
    }
    s.kick.reset();
    s.call.reset();
    s.err.reset();
    s.q->set_call_fd(-1);
    s.q->set_err_fd(-1);
    s.started = false;
    s.delivered = false;
    // Stop() forgets the ring without writing to it; Flush would.
    s.q->Stop();
  }
  if (polling_) {
    polling_ = false;
    host_->SetPolling(false);
  }
  device_->OnHandedOver();
}

}  // namespace vdev
