// CollectiveHandler's part in a live upgrade: collectives that wait for
// peers go back to their rings, and each communicator handle goes to the
// next process with what its engine needs to re-form the communicator.

#include <nlohmann/json.hpp>

#include "command_args.h"
#include "hz/service/coll_handler.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

Status ParseUid(const json& in, coll::Uid* uid) {
  const auto it = in.find("uid");
  if (it == in.end() || !it->is_string() || !coll::ParseUidHex(it->get<std::string>(), uid)) {
    return Status::InvalidArgument("uid must be 64 lowercase hex digits");
  }
  return Status::Ok();
}

json MemberJson(uint64_t handle, bool low_latency, const SavedMember& saved) {
  const coll::MemberState& m = saved.engine;
  json j = {{"handle", handle},
            {"uid", coll::UidHex(m.uid)},
            {"nranks", m.nranks},
            {"rank", m.rank},
            {"deterministic", m.constraints.deterministic},
            {"allow_lossy", m.constraints.allow_lossy},
            {"priority_class", m.constraints.priority_class},
            {"max_threads", m.constraints.max_threads},
            {"timeout_ms", m.constraints.timeout_ms},
            {"next_seq", m.next_seq}};
  // Optional, so that the previous format reads as it did; a process that
  // does not know it rejoins the rank numbered in the whole communicator,
  // which fails (its other ranks never come) rather than runs on part of it.
  if (!saved.backend.is_null()) j["backend"] = saved.backend;
  if (low_latency) j["low_latency"] = true;  // optional likewise
  return j;
}

Status ParseMember(const json& in, const DeviceLimits& limits, SavedMember* saved) {
  coll::MemberState* m = &saved->engine;
  if (auto backend = in.find("backend"); backend != in.end()) {
    if (!backend->is_object()) return Status::InvalidArgument("backend must be an object");
    saved->backend = *backend;  // the backend checks it (Rejoin)
  }
  uint64_t nranks = 0, rank = 0, prio = 0, threads = 0, timeout = 0;
  Status st = ParseUid(in, &m->uid);
  if (st.ok()) st = GetUInt(in, "nranks", limits.max_comm_ranks, &nranks);
  if (st.ok()) st = GetUInt(in, "rank", kU32Max, &rank);
  if (st.ok()) st = GetBool(in, "deterministic", true, &m->constraints.deterministic);
  if (st.ok()) st = GetBool(in, "allow_lossy", false, &m->constraints.allow_lossy);
  if (st.ok()) st = GetUInt(in, "priority_class", coll::kPriorityCount - 1, &prio);
  if (st.ok()) st = GetUInt(in, "max_threads", kU16Max, &threads);
  if (st.ok()) st = GetUInt(in, "timeout_ms", kU32Max, &timeout);
  if (st.ok()) st = GetUInt(in, "next_seq", kU64Max, &m->next_seq);
  if (!st.ok()) return st;
  if (nranks == 0 || rank >= nranks)
    return Status::InvalidArgument("rank outside the communicator");
  m->nranks = static_cast<uint32_t>(nranks);
  m->rank = static_cast<uint32_t>(rank);
  m->constraints.priority_class = static_cast<uint16_t>(prio);
  m->constraints.max_threads = static_cast<uint16_t>(threads);
  m->constraints.timeout_ms = static_cast<uint32_t>(timeout);
  return Status::Ok();
}

}  // namespace

void CollectiveHandler::OnQueueFreezing(vdev::Queue& queue) {
  if (backend_ == nullptr || queue.index() < HZ_VQ_REQUEST_BASE) return;
  // The withdrawn collectives come back through OnOpDone, which returns
  // them to their rings. Later calls (one per data ring) find none left.
  for (auto& [handle, entry] : comms_) {
    if (entry.member != nullptr) backend_->Withdraw(entry.member);
  }
}

Status CollectiveHandler::SaveState(json* out) const {
  json comms = json::array();
  for (const auto& [handle, entry] : comms_) {
    if (entry.lost) {
      comms.push_back({{"handle", handle}, {"lost", true}});
      continue;
    }
    if (entry.member == nullptr) return Status::Busy("a communicator is still re-forming");
    SavedMember m;
    if (Status st = backend_->SaveMember(entry.member, &m); !st.ok()) {
      return Status(st.code(), "communicator handle " + std::to_string(handle) + ": " +
                                   std::string(st.message()));
    }
    comms.push_back(MemberJson(handle, entry.low_latency, m));
  }
  *out = {{"next_handle", next_handle_}, {"comms", std::move(comms)}};
  return Status::Ok();
}

void CollectiveHandler::OnHandedOver() {
  // The members still hold this process's side of each communicator (a
  // group across hosts, for one): it goes now, and EndSession, when the
  // connection closes, finds nothing left to leave.
  std::map<uint64_t, CommEntry> comms;
  comms.swap(comms_);
  for (auto& [handle, entry] : comms) {
    if (entry.member != nullptr) backend_->HandOver(entry.member);
  }
}

void CollectiveHandler::SaveDurable(json* out) const {
  json comms = json::array();
  for (const auto& [handle, entry] : comms_) comms.push_back({{"handle", handle}, {"lost", true}});
  *out = {{"next_handle", next_handle_}, {"comms", std::move(comms)}};
}

Status CollectiveHandler::RestoreState(const json& in) {
  uint64_t next_handle = 0;
  if (Status st = GetUInt(in, "next_handle", kU64Max, &next_handle); !st.ok()) return st;
  const auto list = in.find("comms");
  if (list == in.end() || !list->is_array() || list->size() > limits_.max_comms) {
    return Status::InvalidArgument("comms must be a list of at most " +
                                   std::to_string(limits_.max_comms));
  }
  if (!list->empty() && backend_ == nullptr) {
    return Status::NotSupported("this service has no collective engine");
  }
  std::vector<std::pair<uint64_t, SavedMember>> rejoin;
  std::map<uint64_t, CommEntry> comms;
  for (const json& c : *list) {
    uint64_t handle = 0;
    if (Status st = GetUInt(c, "handle", kU64Max, &handle); !st.ok()) return st;
    if (handle == 0 || handle >= next_handle || comms.count(handle) != 0) {
      return Status::InvalidArgument("communicator handle " + std::to_string(handle) +
                                     " cannot be used");
    }
    bool lost = false;
    if (Status st = GetBool(c, "lost", false, &lost); !st.ok()) return st;
    comms[handle].lost = lost;
    if (lost) continue;
    if (Status st = GetBool(c, "low_latency", false, &comms[handle].low_latency); !st.ok()) {
      return st;
    }
    SavedMember m;
    if (Status st = ParseMember(c, limits_, &m); !st.ok()) return st;
    rejoin.emplace_back(handle, m);
  }
  comms_ = std::move(comms);
  next_handle_ = next_handle;
  rejoining_ = rejoin.size();
  // Not a structured binding: clang 14 does not let a lambda capture one.
  for (const auto& entry : rejoin) {
    const uint64_t handle = entry.first;
    backend_->Rejoin(tenant_.id(), entry.second,
                     OnExecutor([this, handle](Status st, MemberPtr member) {
                       OnRejoined(handle, std::move(st), std::move(member));
                     }));
  }
  return Status::Ok();
}

void CollectiveHandler::OnRejoined(uint64_t handle, Status status, MemberPtr member) {
  auto it = comms_.find(handle);
  if (it == comms_.end() || it->second.member != nullptr || it->second.lost || rejoining_ == 0) {
    // The session ended while its communicators re-formed.
    if (member != nullptr) backend_->DestroyAsync(member);
    return;
  }
  if (status.ok() && member != nullptr) {
    it->second.member = std::move(member);
  } else {
    it->second.lost = true;
  }
  ctx_.info_changed();
  if (--rejoining_ == 0 && rejoined_) rejoined_();
}

}  // namespace hz::service
