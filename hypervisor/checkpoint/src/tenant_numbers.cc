#include "tenant_numbers.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>

#include "hz/common/file.h"

namespace hz::checkpoint {

Status TenantNumbers::Load(const std::string& root, TenantNo highest_on_disk) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = root + "/tenants.json";
  highest_ = highest_on_disk;
  // Refusing is the only safe answer to a table that cannot be read: without
  // it a tenant would be given a new, empty number and its checkpoints would
  // belong to nobody. The file is left as it is, for the operator.
  auto bad = [&](const std::string& why) {
    return Status::Corruption(path_ + ": " + why +
                              "; checkpoints cannot be matched to tenants (the file is kept as "
                              "it is: repair it, or move the checkpoint directory aside)");
  };
  // A temporary file is only ever renamed whole onto the table, so one that
  // is still there is from a write that a crash cut short: never the table.
  ::unlink((path_ + ".tmp").c_str());
  StatusOr<std::string> text = ReadFile(path_);
  if (!text.ok() && text.status().IsNotFound()) {
    // Numbers are saved before a directory is named after them: numbered
    // directories without the table mean that it was lost.
    if (highest_on_disk != 0) return bad("missing, but numbered tenant directories exist");
    return Status::Ok();
  }
  if (!text.ok()) return bad(text.status().ToString());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  for (const auto& [name, number] : j.items()) {
    if (name.empty() || !number.is_number_unsigned() || number.get<uint64_t>() == 0) {
      return bad("entry \"" + name + "\" is not a tenant with a positive number");
    }
    const TenantNo n = number.get<uint64_t>();
    if (names_.count(n) != 0) return bad("number " + std::to_string(n) + " is given twice");
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

Status TenantNumbers::Forget(const TenantId& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = numbers_.find(tenant);
  if (it == numbers_.end()) return Status::Ok();
  const TenantNo n = it->second;
  numbers_.erase(it);
  Status s = SaveLocked();
  if (!s.ok()) {
    numbers_[tenant] = n;
    return s;
  }
  // The number stays out of use (highest_ only grows), so the directory
  // never passes to anyone; Name(n) no longer names the tenant.
  names_.erase(n);
  return Status::Ok();
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
