#include "tenant_log.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <nlohmann/json.hpp>

#include "hz/common/file.h"
#include "hz/events/coarse.h"

namespace hz::events {

namespace {

bool WantsTopic(uint64_t mask, uint16_t topic) {
  return topic < HZ_TOPIC_MAX && (mask & HZ_TOPIC_MASK(topic)) != 0;
}

}  // namespace

Status MakeDir(const std::string& dir, bool* created) {
  if (created != nullptr) *created = false;
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (created != nullptr) *created = true;
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  return Status::IoError("mkdir " + dir + ": " + std::strerror(errno));
}

Status TenantLog::Open() {
  bool created = false;
  Status s = MakeDir(dir_, &created);
  if (s.ok() && created && sync_) s = SyncDir(DirName(dir_));
  if (!s.ok()) return s;
  s = LoadState();
  if (!s.ok()) return s;

  std::vector<hz_event> loaded;
  RecoveryReport report;
  s = file_.Open(dir_ + "/events.log", sync_, &loaded, &report);
  if (report.damaged) return KeepDamagedLog(s);
  if (!s.ok()) return s;
  if (report.truncated_bytes > 0) {
    spdlog::warn("events: tenant {}: dropped {} bytes after {} records ({})", tenant_.name(),
                 report.truncated_bytes, report.records, report.reason);
  }
  size_t skip = loaded.size() > retention_ ? loaded.size() - retention_ : 0;
  events_.assign(loaded.begin() + static_cast<std::ptrdiff_t>(skip), loaded.end());
  if (!loaded.empty()) next_seq_ = std::max(next_seq_, loaded.back().seq + 1);
  // Sequence numbers never go backwards, even if the log file was lost.
  for (const auto& [name, sub] : subscribers_) {
    next_seq_ = std::max({next_seq_, sub->cursor + 1, sub->delivered + 1});
  }
  if (skip > 0) {
    s = file_.Rewrite(std::vector<hz_event>(events_.begin(), events_.end()));
    if (!s.ok()) return s;
  }
  uint64_t oldest = OldestLocked();
  std::erase_if(approved_, [oldest](uint64_t seq) { return seq < oldest; });
  return Status::Ok();
}

Status TenantLog::KeepDamagedLog(const Status& found) {
  log_damaged_ = true;
  const std::string log = dir_ + "/events.log";
  const std::string copy = log + ".corrupt-" + std::to_string(clock_());
  std::error_code ec;
  std::filesystem::copy_file(log, copy, std::filesystem::copy_options::skip_existing, ec);
  std::string kept = ec ? "no copy could be kept (" + ec.message() + ")" : "a copy is in " + copy;
  spdlog::error(
      "events: tenant {}: {}; {}; the tenant's events are refused until events.log is "
      "repaired or moved aside",
      tenant_.name(), found.message(), kept);
  return Status::Corruption(found.message() + "; " + kept);
}

Status TenantLog::LoadState() {
  std::string path = dir_ + "/state.json";
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().IsNotFound() ? Status::Ok() : text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) { return Status::Corruption(path + ": " + why); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto u64 = [](const nlohmann::json& v, uint64_t* out) {
    if (!v.is_number_unsigned()) return false;
    *out = v.get<uint64_t>();
    return true;
  };
  if (!j.contains("next_seq") || !u64(j["next_seq"], &next_seq_) || next_seq_ == 0) {
    return bad("missing or bad next_seq");
  }
  if (!j.contains("subscribers") || !j["subscribers"].is_object()) {
    return bad("missing subscribers");
  }
  for (const auto& [name, v] : j["subscribers"].items()) {
    auto sub = std::make_shared<SubscriberState>();
    sub->name = name;
    if (!ValidName(name) || !v.is_object() || !v.contains("cursor") || !v.contains("delivered") ||
        !u64(v["cursor"], &sub->cursor) || !u64(v["delivered"], &sub->delivered) ||
        sub->cursor > sub->delivered) {
      return bad("bad subscriber entry");
    }
    sub->saved_delivered = sub->delivered;
    subscribers_[name] = sub;
  }
  if (j.contains("approved")) {
    if (!j["approved"].is_array()) return bad("approved is not an array");
    for (const auto& v : j["approved"]) {
      uint64_t seq;
      if (!u64(v, &seq)) return bad("bad approved entry");
      approved_.insert(seq);
    }
  }
  return Status::Ok();
}

std::string TenantLog::StateJsonLocked(const std::deque<PendingAck>& batch) {
  std::map<const SubscriberState*, uint64_t> acked;
  std::set<uint64_t> approved = approved_;
  for (const PendingAck& a : batch) {
    if (!a.status.ok() || !a.needs_write) continue;
    acked[a.sub.get()] = std::max(acked[a.sub.get()], a.seq);
    if (a.approve) approved.insert(a.seq);
  }
  nlohmann::json j;
  j["version"] = 1;
  j["next_seq"] = next_seq_;
  j["subscribers"] = nlohmann::json::object();
  for (const auto& [name, sub] : subscribers_) {
    sub->writing_delivered = sub->delivered;
    const uint64_t cursor = std::max(sub->cursor, acked[sub.get()]);
    j["subscribers"][name] = {{"cursor", cursor}, {"delivered", sub->delivered}};
  }
  j["approved"] = nlohmann::json::array();
  for (uint64_t seq : approved) j["approved"].push_back(seq);
  return j.dump();
}

void TenantLog::ApplyWrittenLocked(const std::deque<PendingAck>& batch,
                                   std::vector<hz_event>* approved) {
  for (const auto& [name, sub] : subscribers_) sub->saved_delivered = sub->writing_delivered;
  for (const PendingAck& a : batch) {
    if (!a.status.ok() || !a.needs_write) continue;
    a.sub->cursor = std::max(a.sub->cursor, a.seq);
    if (a.approve && approved_.insert(a.seq).second) approved->push_back(a.approved);
  }
}

bool TenantLog::ScheduleWriteLocked() {
  if (write_queued_) return true;
  write_queued_ = true;
  if (writer_->Schedule([self = shared_from_this()] { return self->WriteStateOnce(); })) {
    return true;
  }
  write_queued_ = false;
  return false;
}

bool TenantLog::WriteStateOnce() {
  std::lock_guard<std::mutex> one_write(write_mu_);
  std::deque<PendingAck> batch;
  std::string contents;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(acks_);
    bool write = state_dirty_;
    for (const PendingAck& a : batch) write = write || (a.status.ok() && a.needs_write);
    state_dirty_ = false;
    if (write) contents = StateJsonLocked(batch);
  }
  Status written =
      contents.empty() ? Status::Ok() : write_state_(dir_ + "/state.json", contents, sync_);
  if (!written.ok()) {
    spdlog::warn("events: tenant {}: saving state failed: {}", tenant_.name(), written.ToString());
  }
  std::vector<hz_event> approved;
  bool more = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (written.ok() && !contents.empty()) ApplyWrittenLocked(batch, &approved);
    more = !acks_.empty() || state_dirty_;
    if (!more) {
      write_queued_ = false;
      written_.notify_all();
    }
  }
  for (const hz_event& ev : approved) {
    std::lock_guard<std::mutex> lock(approval_->mu);
    if (approval_->callback) approval_->callback(tenant_, ev);
  }
  for (PendingAck& a : batch) {
    a.done(!a.status.ok() ? a.status : a.needs_write ? written : Status::Ok());
  }
  // Only now may a later ack of these subscribers be answered at once: it
  // must not overtake their answers.
  std::lock_guard<std::mutex> lock(mu_);
  for (const PendingAck& a : batch) a.sub->acks_waiting--;
  return more;
}

void TenantLog::WaitWritten() {
  std::unique_lock<std::mutex> lock(mu_);
  written_.wait(lock, [this] { return !write_queued_; });
}

Status TenantLog::Publish(const EventSpec& spec, uint64_t* seq) {
  Status s = ValidateSpec(spec);
  if (!s.ok()) return s;
  std::vector<std::shared_ptr<SubscriberState>> wake;
  int sync_fd = -1;
  Status flushed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hz_event ev{};
    ev.seq = next_seq_;
    ev.topic = spec.topic;
    ev.kind = spec.kind;
    ev.flags = spec.flags;
    ev.time_s = RoundDownTime(clock_());
    ev.deadline_s = RoundDownTime(spec.deadline_s);
    std::memcpy(ev.payload, spec.payload.data(), HZ_EVENT_PAYLOAD_BYTES);
    // Written, not yet flushed: subscribers are woken before the flush so
    // that delivery never waits for the disk; the publisher's answer does.
    s = file_.Append(ev, &sync_fd, &flushed);
    if (!s.ok()) return s;
    ++next_seq_;
    events_.push_back(ev);
    while (events_.size() > retention_) events_.pop_front();
    uint64_t oldest = OldestLocked();
    while (!approved_.empty() && *approved_.begin() < oldest) approved_.erase(approved_.begin());
    // Keep the file within a bounded multiple of the retained window.
    if (file_.records() > 2 * retention_ + 64) {
      Status c = file_.Rewrite(std::vector<hz_event>(events_.begin(), events_.end()));
      if (!c.ok())
        spdlog::warn("events: tenant {}: compaction failed: {}", tenant_.name(), c.ToString());
    }
    for (const auto& [name, sub] : subscribers_) {
      if (!sub->connected || !sub->subscribed) continue;
      // A subscriber that fell behind is woken too: its LOST record is due.
      if (WantsTopic(sub->mask, ev.topic) || sub->pos < oldest) wake.push_back(sub);
    }
    if (seq != nullptr) *seq = ev.seq;
  }
  for (const auto& sub : wake) {
    std::lock_guard<std::mutex> lock(sub->notify_mu);
    if (sub->notify) sub->notify();
  }
  // The publisher learns of success only once the record is on disk
  // (FsyncPolicy::kAlways). A guest may see the event a moment earlier; the
  // only thing that could then lose it is a host power loss, which takes the
  // guest's memory with it.
  if (!flushed.ok()) return flushed;
  if (sync_fd >= 0) {
    int rc = ::fdatasync(sync_fd);
    int err = errno;
    ::close(sync_fd);
    if (rc != 0) {
      return Status::IoError(std::string("fdatasync ") + dir_ +
                             "/events.log: " + std::strerror(err));
    }
  }
  return Status::Ok();
}

Status TenantLog::Connect(const std::string& subscriber, std::shared_ptr<SubscriberState>* state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& sub = subscribers_[subscriber];
  if (!sub) {
    sub = std::make_shared<SubscriberState>();
    sub->name = subscriber;
  }
  if (sub->connected) {
    return Status::State("subscriber " + subscriber + " already has a live delivery");
  }
  sub->connected = true;
  sub->subscribed = false;
  sub->mask = 0;
  sub->pos = sub->cursor + 1;
  *state = sub;
  return Status::Ok();
}

void TenantLog::Disconnect(SubscriberState& state, bool save) {
  {
    std::lock_guard<std::mutex> lock(state.notify_mu);
    state.notify = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    state.connected = false;
    state.subscribed = false;
    if (!save || state.delivered == state.saved_delivered) return;
    state_dirty_ = true;
    if (ScheduleWriteLocked()) return;
  }
  // The bus is gone, and its writer with it: save the REPLAY marks here.
  WriteStateOnce();
}

Status TenantLog::Subscribe(SubscriberState& state, const hz_event_subscribe_args& args,
                            hz_event_subscribe_result* result) {
  const uint64_t allowed = HZ_TOPIC_ALL | HZ_TOPIC_MASK(HZ_TOPIC_LOST);
  if ((args.topics & ~allowed) != 0) return Status::NotSupported("unknown topic bits");
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t pos = args.from_seq == HZ_SEQ_CURSOR ? state.cursor + 1 : args.from_seq;
  if (pos > next_seq_) {
    return Status::InvalidArgument("from_seq " + std::to_string(args.from_seq) +
                                   " is beyond next_seq " + std::to_string(next_seq_));
  }
  state.mask = args.topics | HZ_TOPIC_MASK(HZ_TOPIC_LOST);
  state.pos = pos;
  state.subscribed = true;
  result->cursor = state.cursor;
  result->next_seq = next_seq_;
  result->oldest_seq = OldestLocked();
  return Status::Ok();
}

namespace {

// The device index an approvable event concerns (SPEC.md §8.3.2, §8.3.3).
uint32_t ApprovalIndex(const hz_event& ev) {
  uint32_t index = kAllDevices;
  size_t offset = ev.topic == HZ_TOPIC_MAINTENANCE ? offsetof(MaintenancePayload, device_index)
                                                   : offsetof(PreemptionPayload, device_index);
  std::memcpy(&index, ev.payload + offset, sizeof index);
  return index;
}

}  // namespace

// An approvable event can no longer be approved once its deadline passed or
// a later event of the same action says it started or was cancelled.
Status TenantLog::ApprovableLocked(const hz_event& ev) const {
  if (ev.deadline_s != 0 && clock_() >= ev.deadline_s) {
    return Status::State("the deadline of event " + std::to_string(ev.seq) + " passed");
  }
  auto it = std::upper_bound(events_.begin(), events_.end(), ev.seq,
                             [](uint64_t s, const hz_event& e) { return s < e.seq; });
  for (; it != events_.end(); ++it) {
    if (it->topic != ev.topic || ApprovalIndex(*it) != ApprovalIndex(ev)) continue;
    bool over = ev.topic == HZ_TOPIC_MAINTENANCE
                    ? it->kind == kMaintenanceStarted || it->kind == kMaintenanceCancelled ||
                          it->kind == kMaintenanceCompleted
                    : it->kind == kPreemptionStarted || it->kind == kPreemptionCancelled;
    if (over) {
      return Status::State("event " + std::to_string(ev.seq) + " already started or was cancelled");
    }
  }
  return Status::Ok();
}

const hz_event* TenantLog::FindLocked(uint64_t seq) const {
  auto it = std::lower_bound(events_.begin(), events_.end(), seq,
                             [](const hz_event& ev, uint64_t s) { return ev.seq < s; });
  if (it == events_.end() || it->seq != seq) return nullptr;
  return &*it;
}

bool TenantLog::NextLocked(SubscriberState& state, hz_event* out, bool consume) {
  if (!state.connected || !state.subscribed) return false;
  uint64_t oldest = OldestLocked();
  if (state.pos < oldest) {
    if (!consume) return true;
    LostPayload lost{};
    lost.first_seq = state.pos;
    lost.last_seq = oldest - 1;
    lost.lost = lost.last_seq - lost.first_seq + 1;
    *out = hz_event{};
    out->seq = lost.last_seq;  // acknowledging it acknowledges the lost range
    out->topic = HZ_TOPIC_LOST;
    out->kind = kLostEvents;
    out->flags = lost.last_seq <= state.delivered ? HZ_EVENT_F_REPLAY : 0;
    out->time_s = RoundDownTime(clock_());
    std::memcpy(out->payload, &lost, sizeof lost);
    state.delivered = std::max(state.delivered, lost.last_seq);
    state.pos = oldest;
    return true;
  }
  auto it = std::lower_bound(events_.begin(), events_.end(), state.pos,
                             [](const hz_event& ev, uint64_t s) { return ev.seq < s; });
  for (; it != events_.end(); ++it) {
    if (!WantsTopic(state.mask, it->topic)) {
      if (consume) state.pos = it->seq + 1;
      continue;
    }
    if (!consume) return true;
    *out = *it;
    if (it->seq <= state.delivered) out->flags |= HZ_EVENT_F_REPLAY;
    state.delivered = std::max(state.delivered, it->seq);
    state.pos = it->seq + 1;
    return true;
  }
  return false;
}

bool TenantLog::Next(SubscriberState& state, hz_event* out) {
  std::lock_guard<std::mutex> lock(mu_);
  return NextLocked(state, out, /*consume=*/true);
}

bool TenantLog::Pending(SubscriberState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  return NextLocked(state, nullptr, /*consume=*/false);
}

DeliveryPosition TenantLog::Position(const SubscriberState& state) const {
  std::lock_guard<std::mutex> lock(mu_);
  return {state.subscribed, state.mask, state.pos, state.delivered};
}

Status TenantLog::Resume(SubscriberState& state, const DeliveryPosition& position) {
  const uint64_t allowed = HZ_TOPIC_ALL | HZ_TOPIC_MASK(HZ_TOPIC_LOST);
  if ((position.topics & ~allowed) != 0) return Status::InvalidArgument("unknown topic bits");
  std::lock_guard<std::mutex> lock(mu_);
  if (position.next > next_seq_ || position.delivered >= next_seq_) {
    return Status::InvalidArgument("position " + std::to_string(position.next) + "/" +
                                   std::to_string(position.delivered) + " is beyond next_seq " +
                                   std::to_string(next_seq_));
  }
  state.subscribed = position.subscribed;
  state.mask = position.topics | HZ_TOPIC_MASK(HZ_TOPIC_LOST);
  state.pos = position.next;
  // The marks saved on disk may lag what the guest was given: acks name
  // what it was given.
  state.delivered = std::max(state.delivered, position.delivered);
  return Status::Ok();
}

Status TenantLog::CheckAckLocked(SubscriberState& state, const hz_event_ack_args& args,
                                 PendingAck* ack) {
  if (args.reserved != 0) return Status::NotSupported("reserved field is not zero");
  if ((args.flags & ~HZ_ACK_F_APPROVE) != 0) return Status::NotSupported("unknown ack flags");
  if (args.seq > state.delivered) {
    return Status::InvalidArgument("ack of seq " + std::to_string(args.seq) +
                                   " beyond the last delivered " + std::to_string(state.delivered));
  }
  ack->seq = args.seq;
  if ((args.flags & HZ_ACK_F_APPROVE) != 0) {
    const hz_event* ev = FindLocked(args.seq);
    if (ev == nullptr) {
      return Status::InvalidArgument("event " + std::to_string(args.seq) + " is not retained");
    }
    if ((ev->flags & HZ_EVENT_F_APPROVABLE) == 0) {
      return Status::InvalidArgument("event " + std::to_string(args.seq) + " is not approvable");
    }
    // Approving twice is harmless; an approval cannot be withdrawn.
    if (approved_.count(args.seq) == 0) {
      Status late = ApprovableLocked(*ev);
      if (!late.ok()) return late;
      ack->approve = true;
      ack->approved = *ev;
    }
  }
  ack->needs_write = args.seq > state.cursor || ack->approve;
  return Status::Ok();
}

void TenantLog::AckAsync(const std::shared_ptr<SubscriberState>& state,
                         const hz_event_ack_args& args, Delivery::AckDone done) {
  PendingAck ack;
  std::deque<PendingAck> refused;
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ack.status = CheckAckLocked(*state, args, &ack);
    // Nothing to write and nothing of this subscriber ahead of it.
    now = state->acks_waiting == 0 && (!ack.status.ok() || !ack.needs_write);
    if (!now) {
      ack.done = std::move(done);
      ack.sub = state;
      state->acks_waiting++;
      acks_.push_back(std::move(ack));
      // The bus is being destroyed: whatever is still queued will not be written.
      if (!ScheduleWriteLocked()) {
        refused.swap(acks_);
        for (const PendingAck& a : refused) a.sub->acks_waiting--;
      }
    }
  }
  if (now) done(ack.status);
  for (PendingAck& a : refused) a.done(Status::Shutdown("the event bus is stopping"));
}

void TenantLog::Summary(TenantSummary* summary) {
  std::lock_guard<std::mutex> lock(mu_);
  summary->next_seq = next_seq_;
  summary->oldest_seq = OldestLocked();
  summary->approvals = approved_.size();
  summary->bindings.clear();
  for (const auto& [name, sub] : subscribers_) {
    summary->bindings.push_back({name, sub->cursor, sub->delivered, sub->connected});
  }
  summary->approved.assign(approved_.begin(), approved_.end());
}

Status TenantLog::Get(uint64_t seq, hz_event* event) {
  std::lock_guard<std::mutex> lock(mu_);
  const hz_event* ev = FindLocked(seq);
  if (ev == nullptr) return Status::NotFound("event " + std::to_string(seq) + " not retained");
  *event = *ev;
  return Status::Ok();
}

}  // namespace hz::events
