#include "hz/events/health_monitor.h"

#include <cctype>
#include <sstream>

#include "hz/common/file.h"
#include "hz/events/event_log.h"

namespace hz::events {

Status ParseAerCounters(const std::string& text, const std::string& what, AerCounters* out) {
  *out = AerCounters{};
  bool have_total = false;
  uint64_t sum = 0;
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return Status::Corruption(what + " line " + std::to_string(line_no) + ": " + why);
    };
    size_t space = line.find(' ');
    if (space == std::string::npos || space == 0) return bad("expected '<name> <count>'");
    std::string name = line.substr(0, space);
    std::string number = line.substr(space + 1);
    for (char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
        return bad("bad counter name");
      }
    }
    if (number.empty()) return bad("missing count");
    uint64_t value = 0;
    for (char c : number) {
      if (c < '0' || c > '9') return bad("count is not a decimal number");
      uint64_t digit = static_cast<uint64_t>(c - '0');
      if (value > (UINT64_MAX - digit) / 10) return bad("count overflows");
      value = value * 10 + digit;
    }
    if (!out->counters.emplace(name, value).second) return bad("duplicate counter " + name);
    if (name.rfind("TOTAL_ERR_", 0) == 0) {
      have_total = true;
      out->total = value;
    } else {
      sum = sum + value < sum ? UINT64_MAX : sum + value;
    }
  }
  if (out->counters.empty()) return Status::Corruption(what + ": no counters");
  if (!have_total) out->total = sum;
  return Status::Ok();
}

bool ValidBdf(const std::string& bdf) {
  // dddd:bb:dd.f
  if (bdf.size() != 12 || bdf[4] != ':' || bdf[7] != ':' || bdf[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    char c = bdf[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return bdf[11] <= '7';
}

Status ReadDeviceHealth(const std::string& sysfs_root, const std::string& bdf, DeviceHealth* out) {
  if (!ValidBdf(bdf)) return Status::InvalidArgument("bad PCI address '" + bdf + "'");
  std::string dir = sysfs_root + "/bus/pci/devices/" + bdf + "/";
  struct {
    const char* file;
    uint64_t* total;
  } files[] = {{"aer_dev_correctable", &out->correctable},
               {"aer_dev_nonfatal", &out->nonfatal},
               {"aer_dev_fatal", &out->fatal}};
  for (const auto& f : files) {
    std::string path = dir + f.file;
    StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    AerCounters counters;
    Status s = ParseAerCounters(*text, path, &counters);
    if (!s.ok()) return s;
    *f.total = counters.total;
  }
  return Status::Ok();
}

Status HealthMonitor::Assign(const TenantId& tenant, const std::string& bdf,
                             uint32_t device_index) {
  if (!ValidName(tenant.name())) return Status::InvalidArgument("bad tenant name");
  if (devices_.count(bdf) != 0) return Status::State(bdf + " is already assigned");
  Assigned a;
  a.tenant = tenant;
  a.index = device_index;
  Status s = ReadDeviceHealth(root_, bdf, &a.last);
  if (!s.ok()) return s;
  devices_[bdf] = a;
  return Status::Ok();
}

Status HealthMonitor::Unassign(const std::string& bdf) {
  if (devices_.erase(bdf) == 0) return Status::NotFound(bdf + " is not assigned");
  return Status::Ok();
}

Status HealthMonitor::Poll() {
  Status first;
  for (auto& [bdf, dev] : devices_) {
    DeviceHealth now;
    Status s = ReadDeviceHealth(root_, bdf, &now);
    if (!s.ok()) {
      if (first.ok()) first = s;
      continue;
    }
    // Counters only grow; a smaller value means the device was reset, which
    // starts a new baseline rather than a failure.
    bool fatal = now.fatal > dev.last.fatal;
    bool nonfatal = now.nonfatal > dev.last.nonfatal;
    if (fatal || nonfatal) {
      FailureKind kind = fatal ? kFailureDeviceFailed : kFailureDeviceDegraded;
      uint64_t errors = fatal ? now.fatal - dev.last.fatal : now.nonfatal - dev.last.nonfatal;
      s = sink_->Publish(dev.tenant, MakeFailure(kind, dev.index, errors), nullptr);
      if (!s.ok()) {
        // Keep the old baseline so the next poll retries the event.
        if (first.ok()) first = s;
        continue;
      }
      if (listener_) listener_(dev.tenant, dev.index, kind);
    }
    dev.last = now;
  }
  return first;
}

}  // namespace hz::events
