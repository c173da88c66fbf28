// HzDevice's part in a live upgrade (vdev/upgrade.h): what the session holds
// beyond its rings goes to the next process as one JSON document, one part
// per opcode family, and the families rebuild it there.
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "hz/service/hz_device.h"

namespace hz::service {

namespace {

// The format of the device's state; a next process refuses others, and vdev
// then closes the session (its VM loses the device, as with a restart).
constexpr uint64_t kDeviceStateFormat = 1;

}  // namespace

void HzDevice::OnQueueFreezing(vdev::Queue& queue) {
  for (const Family& family : families_) family.handler->OnQueueFreezing(queue);
  UpdateInfo();
}

bool HzDevice::SaveState(std::string* state) const {
  return WriteState(/*durable=*/false, state);
}

bool HzDevice::WriteState(bool durable, std::string* state) const {
  nlohmann::json j = {{"format", kDeviceStateFormat}};
  session_.Save(&j["session"]);
  for (const Family& family : families_) {
    nlohmann::json part = nlohmann::json::object();
    if (durable) {
      family.handler->SaveDurable(&part);
    } else if (Status st = family.handler->SaveState(&part); !st.ok()) {
      spdlog::warn("event=handover_refused vm={} family={} reason=\"{}\"", socket_path_,
                   family.name, st.message());
      return false;
    }
    j[family.name] = std::move(part);
  }
  *state = j.dump();
  return true;
}

bool HzDevice::RestoreState(std::string_view state) {
  auto refuse = [this](const std::string& part, const std::string& why) {
    spdlog::error("event=takeover_refused vm={} part={} reason=\"{}\"", socket_path_, part, why);
    Teardown(SessionEnd::kDisconnect);
    return false;
  };
  // A predecessor that kept no device state hands over rings only: the
  // guest finds no session and says HELLO again.
  if (state.empty()) return true;
  nlohmann::json j = nlohmann::json::parse(state, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return refuse("device", "not a JSON object");
  const auto format = j.find("format");
  if (format == j.end() || !format->is_number_unsigned() ||
      format->get<uint64_t>() != kDeviceStateFormat) {
    return refuse("device", "format " + (format == j.end() ? "missing" : format->dump()) +
                                ", this build reads " + std::to_string(kDeviceStateFormat));
  }
  if (Status st = session_.Restore(j.value("session", nlohmann::json()), OfferedFeatures());
      !st.ok()) {
    return refuse("session", st.message());
  }
  for (const Family& family : families_) {
    const auto part = j.find(family.name);
    if (part == j.end() || !part->is_object()) return refuse(family.name, "missing");
    if (Status st = family.handler->RestoreState(*part); !st.ok()) {
      return refuse(family.name, st.message());
    }
  }
  UpdateInfo();
  return true;
}

void FamilyHandler::SaveDurable(nlohmann::json* out) const {
  if (!SaveState(out).ok()) *out = nlohmann::json::object();
}

std::string HzDevice::DurableState() const {
  // Without a session there is nothing to go on with: the guest says HELLO.
  std::string state;
  if (session_.hello()) WriteState(/*durable=*/true, &state);
  return state;
}

void HzDevice::JournalIfChanged() {
  if (ctx_ == nullptr) return;
  // Cheap to compare, and different whenever DurableState would be.
  const auto [next_handle, comms] = coll_.handles();
  const events::DeliveryPosition p = events_.position();
  std::string now =
      fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {}", session_.hello(), session_.id(),
                  session_.features(), regions_.count(), regions_.bytes(), regions_.next_id(),
                  next_handle, comms, p.subscribed, p.topics, p.next, p.delivered,
                  session_.draining(), ckpt_.registrations_changed());
  if (now == journaled_) return;
  journaled_ = std::move(now);
  ctx_->StateChanged();
}

void HzDevice::OnHandedOver() {
  for (const Family& family : families_) family.handler->OnHandedOver();
}

}  // namespace hz::service
