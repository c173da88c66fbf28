#include "hz/service/maintenance_plan.h"

#include <algorithm>
#include <iterator>

namespace hz::service {

using json = nlohmann::json;

namespace {

// The one table of state names, for the file and the operator.
constexpr struct {
  MaintenanceState state;
  const char* name;
} kStateNames[] = {
    {MaintenanceState::kScheduled, "scheduled"},
    {MaintenanceState::kStarted, "started"},
    {MaintenanceState::kCompleted, "completed"},
    {MaintenanceState::kCancelled, "cancelled"},
};

bool StateOf(const std::string& name, MaintenanceState* state) {
  for (const auto& s : kStateNames) {
    if (name == s.name) {
      *state = s.state;
      return true;
    }
  }
  return false;
}

json ToldJson(const Maintenance::Told& t) {
  return {{"tenant", t.tenant},
          {"seq", t.seq},
          {"approved_s", t.approved_s},
          {"checkpoints", t.checkpoints}};
}

json MaintenanceJson(const Maintenance& m) {
  json told = json::array();
  for (const Maintenance::Told& t : m.told) told.push_back(ToldJson(t));
  return {{"id", m.id},
          {"host", m.host},
          {"vms", m.vms},
          {"at_s", m.at_s},
          {"duration_s", m.duration_s},
          {"state", MaintenanceStateName(m.state)},
          {"scheduled_s", m.scheduled_s},
          {"started_s", m.started_s},
          {"ended_s", m.ended_s},
          {"started_early", m.started_early},
          {"told", told},
          {"hook", m.hook}};
}

Maintenance MaintenanceFrom(const json& j) {
  Maintenance m;
  m.id = j.at("id").get<uint64_t>();
  m.host = j.at("host").get<std::string>();
  m.vms = j.at("vms").get<std::vector<std::string>>();
  m.at_s = j.at("at_s").get<uint64_t>();
  m.duration_s = j.at("duration_s").get<uint64_t>();
  if (!StateOf(j.at("state").get<std::string>(), &m.state)) {
    throw std::invalid_argument("unknown state " + j.at("state").dump());
  }
  m.scheduled_s = j.at("scheduled_s").get<uint64_t>();
  m.started_s = j.at("started_s").get<uint64_t>();
  m.ended_s = j.at("ended_s").get<uint64_t>();
  m.started_early = j.at("started_early").get<bool>();
  for (const json& t : j.at("told")) {
    m.told.push_back({t.at("tenant").get<std::string>(), t.at("seq").get<uint64_t>(),
                      t.at("approved_s").get<uint64_t>(), t.at("checkpoints").get<uint32_t>()});
  }
  m.hook = j.at("hook").get<std::string>();
  return m;
}

}  // namespace

const char* MaintenanceStateName(MaintenanceState state) {
  for (const auto& s : kStateNames) {
    if (s.state == state) return s.name;
  }
  return "unknown";
}

bool Maintenance::AllApproved() const {
  return std::all_of(told.begin(), told.end(), [](const Told& t) { return t.approved_s != 0; });
}

Maintenance::Told* Maintenance::FindTold(const std::string& tenant) {
  for (Told& t : told) {
    if (t.tenant == tenant) return &t;
  }
  return nullptr;
}

Maintenance& MaintenancePlan::Add(std::string host, std::vector<std::string> vms, uint64_t at_s,
                                  uint64_t duration_s, uint64_t now_s) {
  Maintenance m;
  m.id = next_id_++;
  m.host = std::move(host);
  m.vms = std::move(vms);
  m.at_s = at_s;
  m.duration_s = duration_s;
  m.scheduled_s = now_s;
  all_.push_back(std::move(m));
  return all_.back();
}

Maintenance* MaintenancePlan::Find(uint64_t id) {
  for (Maintenance& m : all_) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

Maintenance* MaintenancePlan::Approve(const std::string& tenant, uint64_t seq, uint64_t now_s) {
  for (Maintenance& m : all_) {
    if (m.state != MaintenanceState::kScheduled) continue;
    Maintenance::Told* t = m.FindTold(tenant);
    if (t == nullptr || t->seq != seq) continue;
    if (t->approved_s == 0) t->approved_s = std::max<uint64_t>(now_s, 1);
    return &m;
  }
  return nullptr;
}

void MaintenancePlan::NoteCheckpoint(const std::string& tenant) {
  for (Maintenance& m : all_) {
    if (!m.Open()) continue;
    if (Maintenance::Told* t = m.FindTold(tenant)) ++t->checkpoints;
  }
}

std::vector<uint64_t> MaintenancePlan::Due(uint64_t now_s) const {
  std::vector<uint64_t> due;
  for (const Maintenance& m : all_) {
    if (m.state != MaintenanceState::kScheduled) continue;
    if (now_s >= m.at_s || m.AllApproved()) due.push_back(m.id);
  }
  return due;
}

bool MaintenancePlan::UnderWay(const std::string& host) const {
  return std::any_of(all_.begin(), all_.end(), [&](const Maintenance& m) {
    return m.state == MaintenanceState::kStarted && m.host == host;
  });
}

json MaintenancePlan::ToJson() const {
  json all = json::array();
  for (const Maintenance& m : all_) all.push_back(MaintenanceJson(m));
  return {{"version", 1}, {"next_id", next_id_}, {"maintenances", all}};
}

StatusOr<MaintenancePlan> MaintenancePlan::FromJson(const std::string& text) {
  MaintenancePlan plan;
  try {
    const json j = json::parse(text);
    if (j.at("version").get<int>() != 1) {
      return Status::Corruption("unknown version " + j.at("version").dump());
    }
    plan.next_id_ = j.at("next_id").get<uint64_t>();
    for (const json& m : j.at("maintenances")) {
      plan.all_.push_back(MaintenanceFrom(m));
      if (plan.all_.back().id >= plan.next_id_) return Status::Corruption("an id beyond next_id");
    }
  } catch (const std::exception& e) {
    return Status::Corruption(e.what());
  }
  return plan;
}

}  // namespace hz::service
