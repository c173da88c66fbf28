#include "hz/cluster/membership.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace hz::cluster {

namespace {

constexpr const char kHostsGroup[] = "hosts";

constexpr size_t kInstanceDigits = 16;

std::string RandomInstance() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) | rd();
  char buf[kInstanceDigits + 1];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The data address and attributes in another host's record; false when the
// record is not one a harmonaized wrote (the store is shared, so its
// contents are input).
bool ReadRecord(const std::string& value, HostInfo* host, std::string* instance) {
  if (value.size() > kMaxRecordBytes) return false;
  nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object()) return false;
  auto it = j.find("data_address");
  auto id = j.find("instance");
  if (it == j.end() || !it->is_string() || id == j.end() || !id->is_string()) return false;
  host->data_address = it->get<std::string>();
  *instance = id->get<std::string>();
  auto attributes = j.find("attributes");
  if (attributes != j.end() && !attributes->is_object()) return false;
  if (attributes != j.end()) host->attributes = std::move(*attributes);
  return host->data_address.size() <= 255;
}

}  // namespace

bool IsInstanceId(const std::string& id) {
  return id.size() == kInstanceDigits && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kJoining:
      return "joining";
    case MemberState::kMember:
      return "member";
    case MemberState::kStoreUnreachable:
      return "store_unreachable";
    case MemberState::kIsolated:
      return "isolated";
    case MemberState::kNameTaken:
      return "name_taken";
    case MemberState::kStopped:
      return "stopped";
  }
  return "unknown";
}

Membership::Membership(std::unique_ptr<LeaseStore> store, MembershipOptions options,
                       Listener listener)
    : store_(std::move(store)),
      options_(std::move(options)),
      listener_(std::move(listener)),
      instance_(options_.instance.empty() ? RandomInstance() : options_.instance),
      started_unix_ms_(UnixMs()) {
  view_.store = store_->Describe();
}

Membership::~Membership() {
  Stop(false);
}

std::string Membership::RecordValue() const {
  nlohmann::json record{{"data_address", options_.data_address},
                        {"instance", instance_},
                        {"started_ms", started_unix_ms_}};
  nlohmann::json attributes = options_.attributes ? options_.attributes() : nlohmann::json();
  if (!attributes.is_object() || attributes.empty()) return record.dump();
  record["attributes"] = std::move(attributes);
  std::string value = record.dump();
  if (value.size() <= kMaxRecordBytes) return value;
  spdlog::warn("event=cluster_attributes_too_large host={} bytes={} limit={}", options_.host_name,
               value.size(), kMaxRecordBytes);
  record.erase("attributes");
  return record.dump();
}

Status Membership::Start() {
  if (!IsInstanceId(instance_)) {
    return Status::InvalidArgument("the cluster instance id is not 16 lower-case hex digits");
  }
  const auto give_up = Clock::now() + std::chrono::milliseconds(options_.lease_ms + round_ms());
  for (;;) {
    StatusOr<HoldResult> held =
        store_->Hold(kHostsGroup, options_.host_name, instance_, RecordValue(), options_.lease_ms);
    if (!held.ok()) break;  // unreachable: the thread keeps trying
    if (held->outcome != HoldResult::Outcome::kHeldByOther) break;
    if (Clock::now() >= give_up) {
      HostInfo holder;
      std::string instance;
      ReadRecord(held->holder_value, &holder, &instance);
      return Status::Exists("host name " + options_.host_name +
                            " is held by another live harmonaized (data address " +
                            holder.data_address +
                            "): each host of a cluster needs its own [cluster] host_name");
    }
    // Perhaps this host's previous run, which crashed: its lease runs out.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::clamp<int64_t>(held->holder_remaining_ms, 10, round_ms())));
  }
  Round();
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void Membership::Stop(bool release) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (release) {
    if (Status s = store_->Release(kHostsGroup, options_.host_name, instance_); !s.ok()) {
      spdlog::warn("event=cluster_leave_failed host={} error=\"{}\"", options_.host_name,
                   s.ToString());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  view_.state = MemberState::kStopped;
}

void Membership::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(round_ms()));
    if (stop_) break;
    lock.unlock();
    Round();
    lock.lock();
  }
}

void Membership::Round() {
  const Clock::time_point now = Clock::now();
  if (Status s = Renew(now); !s.ok()) return Failed(s, now);
  StatusOr<std::vector<LeasedRecord>> records = store_->List(kHostsGroup);
  if (!records.ok()) return Failed(records.status(), now);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_contact_ = now;
    ++view_.rounds;
  }
  Refresh(std::move(*records));
}

Status Membership::Renew(Clock::time_point now) {
  StatusOr<HoldResult> held =
      store_->Hold(kHostsGroup, options_.host_name, instance_, RecordValue(), options_.lease_ms);
  if (!held.ok()) return held.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (held->outcome == HoldResult::Outcome::kHeldByOther) {
    if (view_.state != MemberState::kNameTaken) {
      spdlog::error("event=cluster_name_taken host={} holder=\"{}\"", options_.host_name,
                    held->holder_value);
    }
    view_.state = MemberState::kNameTaken;
    view_.detail = "another host holds the name " + options_.host_name;
    last_contact_ = now;
    return Status::Ok();
  }
  if (view_.state != MemberState::kMember) {
    spdlog::info("event=cluster_joined host={} store={} lease_ms={}", options_.host_name,
                 view_.store, options_.lease_ms);
  }
  view_.state = MemberState::kMember;
  view_.detail.clear();
  return Status::Ok();
}

void Membership::Refresh(std::vector<LeasedRecord> records) {
  std::vector<HostInfo> hosts;
  uint64_t malformed = 0;
  for (LeasedRecord& r : records) {
    HostInfo h;
    h.name = r.name;
    h.lease_remaining_ms = r.remaining_ms;
    std::string instance;
    if (!ReadRecord(r.value, &h, &instance)) {
      ++malformed;
      continue;
    }
    h.self = r.name == options_.host_name && instance == instance_;
    hosts.push_back(std::move(h));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    view_.malformed_records += malformed;
  }
  SetHosts(std::move(hosts), "its lease ended: it stopped, or it was cut off from the store");
}

void Membership::Failed(const Status& why, Clock::time_point now) {
  bool isolated = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++view_.failed_rounds;
    view_.detail = why.ToString();
    isolated =
        !last_contact_ || now - *last_contact_ >= std::chrono::milliseconds(options_.lease_ms);
    const MemberState next = isolated ? MemberState::kIsolated : MemberState::kStoreUnreachable;
    if (view_.state != next) {
      spdlog::warn("event=cluster_store_unreachable host={} state={} error=\"{}\"",
                   options_.host_name, MemberStateName(next), view_.detail);
    }
    view_.state = next;
  }
  // Every other host has dropped this one by now; it drops them in turn, so
  // that nothing goes on depending on hosts it cannot see.
  if (isolated) SetHosts({}, "this host lost the cluster store for a whole lease");
}

void Membership::SetHosts(std::vector<HostInfo> hosts, const std::string& why_left) {
  std::vector<MembershipChange> changes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    using Kind = MembershipChange::Kind;
    std::map<std::string, const HostInfo*> before, after;
    for (const HostInfo& h : view_.hosts) before[h.name] = &h;
    for (const HostInfo& h : hosts) after[h.name] = &h;
    for (const auto& [name, h] : before) {
      if (after.count(name) == 0 && name != options_.host_name) {
        changes.push_back({Kind::kLeft, name, why_left});
        ++view_.hosts_left;
      }
    }
    for (const auto& [name, h] : after) {
      if (name == options_.host_name) continue;
      auto was = before.find(name);
      if (was == before.end()) {
        changes.push_back({Kind::kJoined, name, {}});
        ++view_.hosts_joined;
      } else if (was->second->attributes != h->attributes) {
        changes.push_back({Kind::kAttributes, name, {}});
      }
    }
    view_.hosts = std::move(hosts);
  }
  for (const MembershipChange& c : changes) {
    if (c.kind == MembershipChange::Kind::kJoined) {
      spdlog::info("event=cluster_host_joined host={} peer={}", options_.host_name, c.host);
    } else if (c.kind == MembershipChange::Kind::kLeft) {
      spdlog::warn("event=cluster_host_left host={} peer={} why=\"{}\"", options_.host_name, c.host,
                   c.why);
    }
    if (listener_) listener_(c);
  }
}

MembershipView Membership::View() const {
  std::lock_guard<std::mutex> lock(mu_);
  MembershipView v = view_;
  if (last_contact_) {
    v.ms_since_contact =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *last_contact_)
            .count();
  }
  return v;
}

}  // namespace hz::cluster
