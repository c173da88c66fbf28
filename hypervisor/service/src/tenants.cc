#include "hz/service/tenants.h"

#include "spdlog/fmt/fmt.h"

namespace hz::service {

namespace {

// Whether `more` fits beside `used` under `limit`; written as a subtraction
// so that no sum can wrap.
bool Fits(uint64_t used, uint64_t more, uint64_t limit) {
  return used <= limit && more <= limit - used;
}

}  // namespace

uint32_t Tenant::ReserveRegion(uint64_t bytes, uint64_t extents) {
  std::lock_guard<std::mutex> lock(mu_);
  if (usage_.regions >= spec_.limits.max_regions) return HZ_S_ELIMIT;
  if (!Fits(usage_.region_bytes, bytes, spec_.limits.max_region_bytes)) return HZ_S_ELIMIT;
  // Every extent costs the service memory, however few bytes it covers.
  if (!Fits(usage_.extents, extents, spec_.limits.max_extents)) return HZ_S_ELIMIT;
  usage_.regions++;
  usage_.region_bytes += bytes;
  usage_.extents += extents;
  return HZ_S_OK;
}

void Tenant::ReleaseRegion(uint64_t bytes, uint64_t extents) {
  std::lock_guard<std::mutex> lock(mu_);
  if (usage_.regions > 0) usage_.regions--;
  usage_.region_bytes -= std::min(bytes, usage_.region_bytes);
  usage_.extents -= std::min(extents, usage_.extents);
}

Tenant::Usage Tenant::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

bool TenantRegistry::ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (i == 0 && !alnum) return false;
    if (!alnum && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

Status TenantRegistry::Create(const TenantSpec& spec) {
  if (!ValidName(spec.name)) {
    return Status::InvalidArgument(
        "invalid tenant name (1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or "
        "digit)");
  }
  if (spec.weight < 1 || spec.weight > 1000) {
    return Status::InvalidArgument("weight must be in 1..1000");
  }
  if (spec.priority >= HZ_PRIO_MAX) {
    return Status::InvalidArgument("priority must be low, normal or high");
  }
  if ((spec.features & ~kEveryFeature) != 0) return Status::InvalidArgument("unknown feature bits");
  std::lock_guard<std::mutex> lock(mu_);
  if (tenants_.count(spec.name) != 0) {
    return Status::Exists(fmt::format("tenant {} already exists", spec.name));
  }
  tenants_.emplace(spec.name, std::make_shared<Tenant>(spec));
  return Status::Ok();
}

Status TenantRegistry::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tenants_.erase(name) == 0) return Status::NotFound(fmt::format("no tenant {}", name));
  return Status::Ok();
}

std::shared_ptr<Tenant> TenantRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Tenant>> TenantRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Tenant>> out;
  for (const auto& [k, v] : tenants_) out.push_back(v);
  return out;
}

}  // namespace hz::service
