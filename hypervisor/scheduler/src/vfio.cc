#include "hz/scheduler/vfio.h"

#include <algorithm>
#include <filesystem>

#include "sysfs_util.h"

namespace hz::scheduler {

namespace fs = std::filesystem;

namespace {

bool ViableDriver(const std::string& driver) {
  return driver.empty() || driver == "vfio-pci" || driver == "pci-stub";
}

}  // namespace

Status VfioBinder::Driver(const std::string& bdf, std::string* driver) const {
  const std::string link = root_ + "/bus/pci/devices/" + bdf + "/driver";
  driver->clear();
  if (!sysfs::Exists(link)) return Status::Ok();
  std::string target;
  Status s = sysfs::ResolveLink(link, &target);
  if (!s.ok()) return s;
  *driver = sysfs::BaseName(target);
  return Status::Ok();
}

Status VfioBinder::GroupMembers(const std::string& bdf, std::vector<GroupMember>* out) const {
  out->clear();
  if (!IsBdf(bdf)) return Status::InvalidArgument("not a PCI address: " + bdf.substr(0, 32));
  const std::string dev = root_ + "/bus/pci/devices/" + bdf;
  if (!sysfs::Exists(dev)) return Status::NotFound("no device " + dev);
  const std::string link = dev + "/iommu_group";
  if (!sysfs::Exists(link)) {
    return Status::State(link + " is missing: the IOMMU is off, passthrough is impossible");
  }
  std::string group;
  Status s = sysfs::ResolveLink(link, &group);
  if (!s.ok()) return s;
  std::error_code ec;
  fs::directory_iterator it(group + "/devices", ec);
  if (ec) return Status::NotFound("cannot list " + group + "/devices: " + ec.message());
  std::vector<std::string> names;
  for (const auto& e : it) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (!IsBdf(name)) {
      return Status::InvalidArgument("unexpected entry " + group + "/devices/" +
                                     name.substr(0, 64));
    }
    GroupMember m;
    m.bdf = name;
    std::string text;
    uint64_t cls = 0;
    const std::string path = root_ + "/bus/pci/devices/" + name + "/class";
    if (!(s = sysfs::ReadAttr(path, &text)).ok()) return s;
    if (!(s = sysfs::ParseHex(text, path, 0xffffff, &cls)).ok()) return s;
    m.bridge = (cls >> 8) == 0x0604;
    if (!(s = Driver(name, &m.driver)).ok()) return s;
    out->push_back(std::move(m));
  }
  if (std::none_of(out->begin(), out->end(), [&](const GroupMember& m) { return m.bdf == bdf; })) {
    return Status::InvalidArgument(group + " does not list " + bdf);
  }
  return Status::Ok();
}

Status VfioBinder::CheckViable(const std::string& bdf,
                               const std::set<std::string>& binding_now) const {
  std::vector<GroupMember> members;
  Status s = GroupMembers(bdf, &members);
  if (!s.ok()) return s;
  for (const GroupMember& m : members) {
    if (m.bridge || m.bdf == bdf || binding_now.count(m.bdf) || ViableDriver(m.driver)) continue;
    return Status::State("IOMMU group of " + bdf + " is not viable: " + m.bdf + " is bound to " +
                         m.driver);
  }
  return Status::Ok();
}

Status VfioBinder::Write(const std::string& rel, const std::string& value) {
  Status s = sysfs::WriteAttr(root_ + "/" + rel, value);
  if (s.ok()) journal_.push_back({rel, value});
  return s;
}

Status VfioBinder::Bind(const std::vector<std::string>& bdfs, bool whole_group) {
  // Plan first: which functions to bind, all checks done before any write.
  std::set<std::string> binding(bdfs.begin(), bdfs.end());
  std::vector<std::string> order;
  for (const std::string& bdf : bdfs) {
    std::vector<GroupMember> members;
    Status s = GroupMembers(bdf, &members);
    if (!s.ok()) return s;
    for (const GroupMember& m : members) {
      if (m.bridge) continue;
      if (m.bdf == bdf || (whole_group && !binding.count(m.bdf) && m.driver != "vfio-pci")) {
        binding.insert(m.bdf);
        if (std::find(order.begin(), order.end(), m.bdf) == order.end()) order.push_back(m.bdf);
      }
    }
  }
  for (const std::string& bdf : bdfs) {
    Status s = CheckViable(bdf, binding);
    if (!s.ok()) return s;
  }
  for (const std::string& bdf : order) {
    std::string driver;
    Status s = Driver(bdf, &driver);
    if (!s.ok()) return s;
    if (driver == "vfio-pci") continue;
    const std::string dev = "bus/pci/devices/" + bdf;
    if (!(s = Write(dev + "/driver_override", "vfio-pci")).ok()) return s;
    if (!driver.empty() && !(s = Write(dev + "/driver/unbind", bdf)).ok()) return s;
    if (!(s = Write("bus/pci/drivers_probe", bdf)).ok()) return s;
  }
  return Status::Ok();
}

Status VfioBinder::Override(const std::string& bdf, std::string* value) const {
  std::string text;
  Status s = sysfs::ReadAttr(root_ + "/bus/pci/devices/" + bdf + "/driver_override", &text);
  if (!s.ok()) return s;
  // The kernel shows one line; a fixture's file keeps every write, the last
  // one current.
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t nl = text.rfind('\n');
  *value = nl == std::string::npos ? text : text.substr(nl + 1);
  return Status::Ok();
}

Status VfioBinder::Unbind(const std::vector<std::string>& bdfs) {
  for (const std::string& bdf : bdfs) {
    if (!IsBdf(bdf)) return Status::InvalidArgument("not a PCI address: " + bdf.substr(0, 32));
    if (!sysfs::Exists(root_ + "/bus/pci/devices/" + bdf)) {
      return Status::NotFound("no device " + root_ + "/bus/pci/devices/" + bdf);
    }
  }
  // What Bind took along with them: the other functions of their groups
  // whose override it set (a GPU's audio function).
  std::vector<std::string> order = bdfs;
  for (const std::string& bdf : bdfs) {
    std::vector<GroupMember> members;
    Status s = GroupMembers(bdf, &members);
    if (!s.ok()) return s;
    for (const GroupMember& m : members) {
      if (m.bridge || std::find(order.begin(), order.end(), m.bdf) != order.end()) continue;
      std::string override_value;
      if (!(s = Override(m.bdf, &override_value)).ok()) return s;
      if (override_value == "vfio-pci") order.push_back(m.bdf);
    }
  }
  for (const std::string& bdf : order) {
    std::string driver;
    Status s = Driver(bdf, &driver);
    if (!s.ok()) return s;
    const std::string dev = "bus/pci/devices/" + bdf;
    if (!(s = Write(dev + "/driver_override", "")).ok()) return s;
    if (driver == "vfio-pci" && !(s = Write(dev + "/driver/unbind", bdf)).ok()) return s;
    if (!(s = Write("bus/pci/drivers_probe", bdf)).ok()) return s;
  }
  return Status::Ok();
}

}  // namespace hz::scheduler
