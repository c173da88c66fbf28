#include "hz/scheduler/inventory.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "sysfs_util.h"

namespace hz::scheduler {

namespace fs = std::filesystem;

namespace {

constexpr uint16_t kVendorNvidia = 0x10de;
constexpr uint16_t kVendorAmd = 0x1002;

// "32.0 GT/s PCIe" or "8 GT/s" -> 32.0 / 8; "Unknown" -> 0 (the kernel's
// text for a link it cannot read).
Status ParseLinkSpeed(const std::string& text, const std::string& path, double* out) {
  if (text == "Unknown" || text.empty()) {
    *out = 0;
    return Status::Ok();
  }
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  std::string rest = end ? std::string(end) : std::string();
  if (end == text.c_str() || !(v > 0 && v < 1000) || rest.rfind(" GT/s", 0) != 0) {
    return Status::InvalidArgument("malformed link speed '" + text.substr(0, 32) + "' in " + path);
  }
  *out = v;
  return Status::Ok();
}

// Reads an optional attribute: missing is fine (*present = false), a file
// that exists but cannot be read is an error.
Status ReadOptional(const std::string& path, std::string* out, bool* present) {
  *present = sysfs::Exists(path);
  if (!*present) return Status::Ok();
  return sysfs::ReadAttr(path, out);
}

// PCIe port types (PCI Express Capabilities register, bits 7:4).
constexpr int kPortUnknown = -1;  // config space unreadable that far
constexpr int kNotPcie = -2;      // no PCIe capability: a conventional PCI function
constexpr int kPortUpstream = 5;

// The port type of a function from its config space (<dev>/config): the
// kernel shows the first 64 bytes to everyone and the capabilities to root.
int PortType(const std::string& dev_dir) {
  std::ifstream in(dev_dir + "/config", std::ios::binary);
  if (!in) return kPortUnknown;
  unsigned char cfg[256] = {};
  in.read(reinterpret_cast<char*>(cfg), sizeof(cfg));
  const size_t size = static_cast<size_t>(in.gcount());
  if (size < 64) return kPortUnknown;
  if (!(cfg[0x06] & 0x10)) return kNotPcie;  // no capability list
  size_t off = cfg[0x34] & 0xfc;
  for (int hops = 0; off >= 0x40 && hops < 48; ++hops) {
    if (off + 4 > size) return kPortUnknown;
    if (cfg[off] == 0x10) return (cfg[off + 2] >> 4) & 0xf;
    off = cfg[off + 1] & 0xfc;
  }
  return kNotPcie;
}

// Fills pcie_path and switch_bdf from the device's real location under
// <root>/devices/pciDDDD:BB/...
Status ResolvePciePath(const std::string& devices_dir, const std::string& link, Device* dev) {
  std::string real;
  Status s = sysfs::ResolveLink(link, &real);
  if (!s.ok()) return s;
  std::string prefix = devices_dir + "/";
  if (real.compare(0, prefix.size(), prefix) != 0) {
    return Status::InvalidArgument(link + " resolves to " + real + ", outside " + devices_dir);
  }
  std::vector<std::string> parts;
  std::string rest = real.substr(prefix.size());
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t slash = rest.find('/', pos);
    if (slash == std::string::npos) slash = rest.size();
    parts.push_back(rest.substr(pos, slash - pos));
    pos = slash + 1;
  }
  if (parts.size() < 2 || parts[0].rfind("pci", 0) != 0) {
    return Status::InvalidArgument(link + " resolves to " + real +
                                   ", not below a host bridge devices/pciDDDD:BB");
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!IsBdf(parts[i])) {
      return Status::InvalidArgument(link + " resolves through '" + parts[i] +
                                     "', which is not a PCI address");
    }
  }
  if (parts.back() != dev->bdf) {
    return Status::InvalidArgument(link + " resolves to " + real + ", another device");
  }
  dev->pcie_path.assign(parts.begin() + 1, parts.end() - 1);
  // sysfs has no port-type attribute; the bridges' config space has. The
  // nearest switch is the deepest upstream port on the path (a PCIe-to-PCI
  // bridge below a downstream port is not one).
  std::string dir = devices_dir + "/" + parts[0];
  bool known = true;
  std::string upstream;
  for (const std::string& bridge : dev->pcie_path) {
    dir += "/" + bridge;
    const int type = PortType(dir);
    if (type == kPortUnknown) known = false;
    if (type == kPortUpstream) upstream = bridge;
  }
  if (known) {
    dev->switch_bdf = upstream;
  } else if (dev->pcie_path.size() >= 3) {
    // Without port types: a switch shows as an upstream port and a downstream
    // port below a root port, [root port, upstream, downstream]; the nearest
    // switch is the hop two levels above the device.
    dev->switch_bdf = dev->pcie_path[dev->pcie_path.size() - 2];
  }
  return Status::Ok();
}

Status ReadDevice(const std::string& root, const std::string& bdf, const KindOverrides& kinds,
                  bool* candidate, Device* dev) {
  *candidate = false;
  const std::string dir = root + "/bus/pci/devices/" + bdf;
  std::string text;
  uint64_t v = 0;
  Status s = sysfs::ReadAttr(dir + "/class", &text);
  if (!s.ok()) return s;
  if (!(s = sysfs::ParseHex(text, dir + "/class", 0xffffff, &v)).ok()) return s;
  dev->pci_class = static_cast<uint32_t>(v);
  if (!(s = sysfs::ReadAttr(dir + "/vendor", &text)).ok()) return s;
  if (!(s = sysfs::ParseHex(text, dir + "/vendor", 0xffff, &v)).ok()) return s;
  dev->vendor = static_cast<uint16_t>(v);
  // Virtio functions (Red Hat, 0x1af4) are paravirtual devices of a host that
  // is itself a VM (its own network), never hardware to hand to a tenant.
  if (dev->vendor == 0x1af4) return Status::Ok();
  if (!(s = sysfs::ReadAttr(dir + "/device", &text)).ok()) return s;
  if (!(s = sysfs::ParseHex(text, dir + "/device", 0xffff, &v)).ok()) return s;
  dev->device_id = static_cast<uint16_t>(v);
  auto named = kinds.find((uint32_t{dev->vendor} << 16) | dev->device_id);
  if (named != kinds.end()) {
    dev->kind = named->second;
  } else if (IsGpu(dev->vendor, dev->pci_class)) {
    dev->kind = DeviceKind::kGpu;
  } else if (IsNic(dev->pci_class)) {
    dev->kind = DeviceKind::kNic;
  } else {
    return Status::Ok();
  }
  *candidate = true;
  dev->bdf = bdf;

  bool present = false;
  int64_t n = 0;
  if (!(s = ReadOptional(dir + "/numa_node", &text, &present)).ok()) return s;
  if (present) {
    if (!(s = sysfs::ParseInt(text, dir + "/numa_node", -1, 4095, &n)).ok()) return s;
    dev->numa_node = static_cast<int>(n);
  }
  if (!(s = ReadOptional(dir + "/current_link_speed", &text, &present)).ok()) return s;
  if (present && !(s = ParseLinkSpeed(text, dir + "/current_link_speed", &dev->link_gts)).ok()) {
    return s;
  }
  if (!(s = ReadOptional(dir + "/current_link_width", &text, &present)).ok()) return s;
  if (present) {
    if (!(s = sysfs::ParseInt(text, dir + "/current_link_width", 0, 64, &n)).ok()) return s;
    dev->link_width = static_cast<uint32_t>(n);
  }
  std::string target;
  if (sysfs::Exists(dir + "/iommu_group")) {
    if (!(s = sysfs::ResolveLink(dir + "/iommu_group", &target)).ok()) return s;
    if (!(s = sysfs::ParseInt(sysfs::BaseName(target), dir + "/iommu_group", 0, 1 << 30, &n))
             .ok()) {
      return s;
    }
    dev->iommu_group = static_cast<int>(n);
  }
  if (sysfs::Exists(dir + "/driver")) {
    if (!(s = sysfs::ResolveLink(dir + "/driver", &target)).ok()) return s;
    dev->driver = sysfs::BaseName(target);
  }
  std::error_code ec;
  fs::path devices = fs::canonical(root + "/devices", ec);
  if (ec) return Status::NotFound("cannot resolve " + root + "/devices: " + ec.message());
  return ResolvePciePath(devices.string(), dir, dev);
}

Status BdfIndex(const HostInventory& inv, const std::string& bdf, const std::string& what,
                int* index) {
  *index = inv.Find(bdf);
  if (*index < 0) {
    return Status::InvalidArgument(what + ": '" + bdf.substr(0, 32) +
                                   "' is not a discovered GPU or NIC");
  }
  return Status::Ok();
}

}  // namespace

const char* KindName(DeviceKind kind) {
  return kind == DeviceKind::kGpu ? "gpu" : "nic";
}

int HostInventory::Find(const std::string& bdf) const {
  auto it = std::lower_bound(devices.begin(), devices.end(), bdf,
                             [](const Device& d, const std::string& b) { return d.bdf < b; });
  if (it == devices.end() || it->bdf != bdf) return -1;
  return static_cast<int>(it - devices.begin());
}

size_t HostInventory::Count(DeviceKind kind) const {
  return static_cast<size_t>(std::count_if(devices.begin(), devices.end(),
                                           [kind](const Device& d) { return d.kind == kind; }));
}

bool IsBdf(const std::string& s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  if (s[11] < '0' || s[11] > '7') return false;
  // Device numbers go up to 0x1f.
  return s[8] <= '1';
}

bool IsGpu(uint16_t vendor, uint32_t pci_class) {
  uint32_t cls = pci_class >> 8;
  return (vendor == kVendorNvidia || vendor == kVendorAmd) && (cls == 0x0300 || cls == 0x0302);
}

bool IsNic(uint32_t pci_class) {
  uint32_t cls = pci_class >> 8;
  return cls == 0x0200 || cls == 0x0207;
}

Status DiscoverPci(const std::string& sysfs_root, HostInventory* out) {
  return DiscoverPci(sysfs_root, KindOverrides{}, out);
}

Status DiscoverPci(const std::string& sysfs_root, const KindOverrides& kinds, HostInventory* out) {
  HostInventory inv;
  const std::string dir = sysfs_root + "/bus/pci/devices";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound("cannot list " + dir + ": " + ec.message());
  std::vector<std::string> names;
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (!IsBdf(name)) {
      return Status::InvalidArgument("unexpected entry " + dir + "/" + name.substr(0, 64) +
                                     " (not a PCI address)");
    }
    Device dev;
    bool candidate = false;
    Status s = ReadDevice(sysfs_root, name, kinds, &candidate, &dev);
    if (!s.ok()) return s;
    if (candidate) inv.devices.push_back(std::move(dev));
  }
  *out = std::move(inv);
  return Status::Ok();
}

namespace {

// The [kinds] table of a parsed provider file.
Status KindsOf(const toml::table& table, const std::string& what, KindOverrides* out) {
  KindOverrides kinds;
  if (auto* t = table["kinds"].as_table()) {
    for (const auto& [key, value] : *t) {
      const std::string id(key.str());
      uint64_t vendor = 0, device = 0;
      if (id.size() != 9 || id[4] != ':' ||
          id.find_first_not_of("0123456789abcdef:") != std::string::npos ||
          !sysfs::ParseHex(id.substr(0, 4), what, 0xffff, &vendor).ok() ||
          !sysfs::ParseHex(id.substr(5), what, 0xffff, &device).ok()) {
        return Status::InvalidArgument(what + ": [kinds] key '" + id.substr(0, 32) +
                                       "' is not a PCI id vvvv:dddd (lower-case hex)");
      }
      auto kind = value.value<std::string>();
      if (!kind || (*kind != "gpu" && *kind != "nic")) {
        return Status::InvalidArgument(what + ": kind of " + id + " must be \"gpu\" or \"nic\"");
      }
      kinds[static_cast<uint32_t>((vendor << 16) | device)] =
          *kind == "gpu" ? DeviceKind::kGpu : DeviceKind::kNic;
    }
  } else if (table.contains("kinds")) {
    return Status::InvalidArgument(what + ": kinds must be a table");
  }
  *out = std::move(kinds);
  return Status::Ok();
}

Status ParseProvider(const std::string& text, const std::string& what, toml::table* table) {
  try {
    *table = toml::parse(text, what);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(what + ": " + std::string(e.description()));
  }
  return Status::Ok();
}

}  // namespace

Status ReadProviderKinds(const std::string& text, const std::string& what, KindOverrides* out) {
  toml::table table;
  Status s = ParseProvider(text, what, &table);
  return s.ok() ? KindsOf(table, what, out) : s;
}

Status ApplyProviderText(const std::string& text, const std::string& what,
                         HostInventory* inventory) {
  toml::table table;
  Status s = ParseProvider(text, what, &table);
  if (!s.ok()) return s;
  HostInventory inv = *inventory;
  KindOverrides kinds;  // checked here; applied at discovery (LoadHostInventory)
  if (!(s = KindsOf(table, what, &kinds)).ok()) return s;
  if (auto node = table["host"]) {
    auto name = node.value<std::string>();
    if (!name || name->empty()) return Status::InvalidArgument(what + ": host must be a string");
    inv.name = *name;
  }
  // Rails and serials first, keyed by bdf, so exclusion can drop devices last.
  if (auto* rails = table["rails"].as_table()) {
    for (const auto& [key, value] : *rails) {
      int index = -1;
      if (!(s = BdfIndex(inv, std::string(key.str()), what + " [rails]", &index)).ok()) return s;
      auto rail = value.value<int64_t>();
      if (!rail || *rail < 0 || *rail > 1023) {
        return Status::InvalidArgument(what + ": rail of " + std::string(key.str()) +
                                       " must be an integer in 0..1023");
      }
      inv.devices[index].rail = static_cast<int>(*rail);
    }
  } else if (table.contains("rails")) {
    return Status::InvalidArgument(what + ": rails must be a table");
  }
  if (auto* serials = table["serials"].as_table()) {
    for (const auto& [key, value] : *serials) {
      int index = -1;
      if (!(s = BdfIndex(inv, std::string(key.str()), what + " [serials]", &index)).ok()) {
        return s;
      }
      auto serial = value.value<std::string>();
      if (!serial) return Status::InvalidArgument(what + ": serial must be a string");
      inv.devices[index].serial = *serial;
    }
  } else if (table.contains("serials")) {
    return Status::InvalidArgument(what + ": serials must be a table");
  }
  std::vector<std::vector<std::string>> islands;
  if (auto* arr = table["nvlink_islands"].as_array()) {
    for (const auto& island : *arr) {
      const auto* members = island.as_array();
      if (!members) return Status::InvalidArgument(what + ": each NVLink island is a list");
      std::vector<std::string> bdfs;
      for (const auto& m : *members) {
        auto bdf = m.value<std::string>();
        if (!bdf) return Status::InvalidArgument(what + ": island members are strings");
        bdfs.push_back(*bdf);
      }
      if (bdfs.size() < 2) {
        return Status::InvalidArgument(what + ": an NVLink island needs two or more GPUs");
      }
      islands.push_back(std::move(bdfs));
    }
  } else if (table.contains("nvlink_islands")) {
    return Status::InvalidArgument(what + ": nvlink_islands must be a list of lists");
  }
  std::set<std::string> excluded;
  if (auto* arr = table["exclude"].as_array()) {
    for (const auto& e : *arr) {
      auto bdf = e.value<std::string>();
      if (!bdf) return Status::InvalidArgument(what + ": exclude entries are strings");
      int index = -1;
      if (!(s = BdfIndex(inv, *bdf, what + " exclude", &index)).ok()) return s;
      excluded.insert(*bdf);
    }
  } else if (table.contains("exclude")) {
    return Status::InvalidArgument(what + ": exclude must be a list");
  }
  std::erase_if(inv.devices, [&](const Device& d) { return excluded.count(d.bdf) != 0; });
  for (Device& d : inv.devices) d.island = -1;
  inv.islands.clear();
  for (const auto& bdfs : islands) {
    std::vector<int> members;
    for (const std::string& bdf : bdfs) {
      int index = -1;
      if (!(s = BdfIndex(inv, bdf, what + " nvlink_islands", &index)).ok()) return s;
      Device& d = inv.devices[index];
      if (d.kind != DeviceKind::kGpu) {
        return Status::InvalidArgument(what + ": " + bdf + " in an NVLink island is not a GPU");
      }
      if (d.island >= 0) {
        return Status::InvalidArgument(what + ": " + bdf + " is in two NVLink islands");
      }
      d.island = static_cast<int>(inv.islands.size());
      members.push_back(index);
    }
    std::sort(members.begin(), members.end());
    inv.islands.push_back(std::move(members));
  }
  *inventory = std::move(inv);
  return Status::Ok();
}

namespace {

Status ReadProviderFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read provider inventory " + path);
  text->clear();
  char buf[8192];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text->append(buf, static_cast<size_t>(in.gcount()));
    if (text->size() > (1u << 20)) return Status::InvalidArgument(path + ": file too large");
  }
  return Status::Ok();
}

}  // namespace

Status ApplyProviderFile(const std::string& path, HostInventory* inventory) {
  std::string text;
  Status s = ReadProviderFile(path, &text);
  if (!s.ok()) return s;
  return ApplyProviderText(text, path, inventory);
}

Status LoadHostInventory(const std::string& sysfs_root, const std::string& provider_file,
                         HostInventory* out) {
  std::string text;
  KindOverrides kinds;
  Status s;
  if (!provider_file.empty()) {
    if (!(s = ReadProviderFile(provider_file, &text)).ok()) return s;
    if (!(s = ReadProviderKinds(text, provider_file, &kinds)).ok()) return s;
  }
  HostInventory inv;
  if (!(s = DiscoverPci(sysfs_root, kinds, &inv)).ok()) return s;
  if (!provider_file.empty() && !(s = ApplyProviderText(text, provider_file, &inv)).ok()) return s;
  *out = std::move(inv);
  return Status::Ok();
}

}  // namespace hz::scheduler
