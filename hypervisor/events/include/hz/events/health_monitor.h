// Device-health monitor: reads the PCIe AER counters of the devices assigned
// to tenants (aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal under
// <sysfs_root>/bus/pci/devices/<bdf>/) and publishes a FAILURE event naming
// only the tenant-visible device index when fatal or non-fatal counts grow.
#ifndef HZ_EVENTS_HEALTH_MONITOR_H_
#define HZ_EVENTS_HEALTH_MONITOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/events/event_spec.h"

namespace hz::events {

// One AER counter file: "<name> <count>" lines. total is the TOTAL_ERR_* line
// when present, else the sum of the others.
struct AerCounters {
  std::map<std::string, uint64_t> counters;
  uint64_t total = 0;
};

// Parses the text of one counter file; `what` names it in error messages.
Status ParseAerCounters(const std::string& text, const std::string& what, AerCounters* out);

// A PCI address "dddd:bb:dd.f" in lower-case hex.
bool ValidBdf(const std::string& bdf);

struct DeviceHealth {
  uint64_t correctable = 0;
  uint64_t nonfatal = 0;
  uint64_t fatal = 0;
};

// Reads the three files of one device.
Status ReadDeviceHealth(const std::string& sysfs_root, const std::string& bdf, DeviceHealth* out);

// Not thread-safe: the service assigns devices and polls from one thread.
class HealthMonitor {
 public:
  // Told about every failure published, for the scheduler's replacement offer.
  using FailureListener =
      std::function<void(const TenantId& tenant, uint32_t device_index, FailureKind kind)>;

  HealthMonitor(std::string sysfs_root, EventSink* sink)
      : root_(std::move(sysfs_root)), sink_(sink) {}

  // Assigns a device to a tenant under its tenant-visible index and reads its
  // baseline counters (errors before the assignment are not reported).
  Status Assign(const TenantId& tenant, const std::string& bdf, uint32_t device_index);
  Status Unassign(const std::string& bdf);
  void SetFailureListener(FailureListener listener) { listener_ = std::move(listener); }

  // Reads every assigned device once; publishes one FAILURE per device whose
  // fatal (kFailureDeviceFailed) or else non-fatal count grew. Devices that
  // cannot be read are reported in the returned status (the first error) and
  // keep their baseline; the others are still checked.
  Status Poll();

 private:
  struct Assigned {
    TenantId tenant;
    uint32_t index = 0;
    DeviceHealth last;
  };
  std::string root_;
  EventSink* sink_;
  FailureListener listener_;
  std::map<std::string, Assigned> devices_;  // by bdf
};

}  // namespace hz::events

#endif  // HZ_EVENTS_HEALTH_MONITOR_H_
