#include "test_util.h"

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

namespace hz::events::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/hz-events-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Status RecordingSink::Publish(const TenantId& tenant, const EventSpec& spec, uint64_t* seq) {
  Status s = ValidateSpec(spec);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back({tenant, spec});
  if (seq != nullptr) *seq = entries_.size();
  return Status::Ok();
}

std::vector<RecordingSink::Entry> RecordingSink::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::vector<RecordingSink::Entry> RecordingSink::Matching(uint16_t topic, uint16_t kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const Entry& e : entries_) {
    if (e.spec.topic == topic && e.spec.kind == kind) out.push_back(e);
  }
  return out;
}

void RecordingSink::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

}  // namespace hz::events::testing
