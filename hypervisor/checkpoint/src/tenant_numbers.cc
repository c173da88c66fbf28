#include "tenant_numbers.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "hz/common/file.h"

namespace hz::checkpoint {

Status TenantNumbers::Load(const std::string& root, TenantNo highest_on_disk) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = root + "/tenants.json";
  highest_ = highest_on_disk;
  StatusOr<std::string> text = ReadFile(path_);
  if (!text.ok()) return text.status().IsNotFound() ? Status::Ok() : text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    // As before the table moved into the engine: start without it. New
    // numbers still go above every directory on disk.
    spdlog::warn("checkpoint: {} is not a JSON object; tenants start unnumbered", path_);
    return Status::Ok();
  }
  for (const auto& [name, number] : j.items()) {
    // Entries that cannot name a directory are skipped, as they always were.
    if (!number.is_number_unsigned() || number.get<uint64_t>() == 0) continue;
    const TenantNo n = number.get<uint64_t>();
    numbers_[TenantId(name)] = n;
    names_[n] = TenantId(name);
    highest_ = std::max(highest_, n);
  }
  return Status::Ok();
}

std::optional<TenantNo> TenantNumbers::Find(const TenantId& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = numbers_.find(tenant);
  if (it == numbers_.end()) return std::nullopt;
  return it->second;
}

StatusOr<TenantNo> TenantNumbers::FindOrAssign(const TenantId& tenant) {
  if (tenant.empty()) return Status::InvalidArgument("no tenant");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = numbers_.find(tenant);
  if (it != numbers_.end()) return it->second;
  const TenantNo n = highest_ + 1;
  numbers_[tenant] = n;
  names_[n] = tenant;
  Status s = SaveLocked();
  if (!s.ok()) {
    numbers_.erase(tenant);
    names_.erase(n);
    return s;
  }
  highest_ = n;
  return n;
}

TenantId TenantNumbers::Name(TenantNo number) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(number);
  return it == names_.end() ? TenantId() : it->second;
}

Status TenantNumbers::SaveLocked() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [tenant, number] : numbers_) j[tenant.name()] = number;
  return WriteFileAtomic(path_, j.dump() + "\n");
}

}  // namespace hz::checkpoint
