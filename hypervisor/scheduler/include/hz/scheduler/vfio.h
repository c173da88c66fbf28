// Binding passthrough devices to vfio-pci through sysfs, with IOMMU-group
// viability checks. Works on any sysfs-shaped root, so tests run it on
// fixture trees whose attribute files are plain files that record writes.
//
// Bind, per device not yet on vfio-pci:
//   <dev>/driver_override  <- "vfio-pci"
//   <dev>/driver/unbind    <- bdf      (when bound to another driver)
//   bus/pci/drivers_probe  <- bdf
// Unbind, per device and per function Bind took along with it (hands it
// back to its host driver):
//   <dev>/driver_override  <- ""       (clears the override)
//   <dev>/driver/unbind    <- bdf
//   bus/pci/drivers_probe  <- bdf
#ifndef HZ_SCHEDULER_VFIO_H_
#define HZ_SCHEDULER_VFIO_H_

#include <set>
#include <string>
#include <vector>

#include "hz/scheduler/inventory.h"

namespace hz::scheduler {

struct SysfsWrite {
  std::string path;  // relative to the sysfs root
  std::string value;
};

struct GroupMember {
  std::string bdf;
  std::string driver;  // empty when unbound
  bool bridge = false;
};

class VfioBinder {
 public:
  explicit VfioBinder(std::string sysfs_root) : root_(std::move(sysfs_root)) {}

  // The functions of the device's IOMMU group (including itself).
  Status GroupMembers(const std::string& bdf, std::vector<GroupMember>* out) const;

  // A group is viable for passthrough when every function in it is a bridge,
  // unbound, or bound to vfio-pci or pci-stub. The device itself and the
  // functions in `binding_now` count as bound to vfio-pci (they are about to be).
  Status CheckViable(const std::string& bdf, const std::set<std::string>& binding_now = {}) const;

  // Binds `bdfs` to vfio-pci. With whole_group, the other non-bridge functions
  // of their groups (a GPU's audio function) are bound too; without it they
  // must already be viable. Every check runs before the first write.
  Status Bind(const std::vector<std::string>& bdfs, bool whole_group);

  // Hands devices on vfio-pci back to their host drivers, with the other
  // functions of their groups that Bind took along (those whose
  // driver_override is vfio-pci).
  Status Unbind(const std::vector<std::string>& bdfs);

  // Every write made so far, in order.
  const std::vector<SysfsWrite>& journal() const { return journal_; }

 private:
  Status Write(const std::string& rel, const std::string& value);
  Status Driver(const std::string& bdf, std::string* driver) const;
  // The function's driver_override ("(null)" when none is set).
  Status Override(const std::string& bdf, std::string* value) const;

  std::string root_;
  std::vector<SysfsWrite> journal_;
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_VFIO_H_
