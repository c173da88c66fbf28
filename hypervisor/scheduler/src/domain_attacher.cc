#include "hz/scheduler/domain_attacher.h"

#include <libvirt/libvirt.h>

namespace hz::scheduler {

using hz::libvirt::LastError;

Status HostdevXml(const std::string& bdf, bool managed, std::string* xml) {
  if (!IsBdf(bdf)) return Status::InvalidArgument("not a PCI address: " + bdf.substr(0, 32));
  *xml = std::string("<hostdev mode='subsystem' type='pci' managed='") + (managed ? "yes" : "no") +
         "'>\n"
         "  <source>\n"
         "    <address domain='0x" +
         bdf.substr(0, 4) + "' bus='0x" + bdf.substr(5, 2) + "' slot='0x" + bdf.substr(8, 2) +
         "' function='0x" + bdf.substr(11, 1) +
         "'/>\n"
         "  </source>\n"
         "</hostdev>\n";
  return Status::Ok();
}

Status LibvirtAttacher::Open(const std::string& uri, bool managed,
                             std::unique_ptr<LibvirtAttacher>* out) {
  std::unique_ptr<hz::libvirt::Connection> conn;
  Status s = hz::libvirt::Connection::Open(uri, &conn);
  if (!s.ok()) return s;
  out->reset(new LibvirtAttacher(std::move(conn), managed));
  return Status::Ok();
}

Status LibvirtAttacher::Attach(const std::string& domain, const std::string& bdf) {
  return Change(domain, bdf, true);
}

Status LibvirtAttacher::Detach(const std::string& domain, const std::string& bdf) {
  return Change(domain, bdf, false);
}

Status LibvirtAttacher::Change(const std::string& domain, const std::string& bdf, bool attach) {
  std::string xml;
  Status s = HostdevXml(bdf, managed_, &xml);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  virDomainPtr dom =
      virDomainLookupByName(static_cast<virConnectPtr>(conn_->get()), domain.c_str());
  if (!dom) return Status::NotFound("no libvirt domain '" + domain + "': " + LastError());
  int active = virDomainIsActive(dom);
  unsigned int flags = active == 1 ? VIR_DOMAIN_AFFECT_LIVE : VIR_DOMAIN_AFFECT_CONFIG;
  int rc = attach ? virDomainAttachDeviceFlags(dom, xml.c_str(), flags)
                  : virDomainDetachDeviceFlags(dom, xml.c_str(), flags);
  std::string err = rc < 0 ? LastError() : std::string();
  virDomainFree(dom);
  if (rc < 0) {
    return Status::IoError(std::string(attach ? "attach of " : "detach of ") + bdf +
                           (attach ? " to " : " from ") + domain + " failed: " + err);
  }
  return Status::Ok();
}

}  // namespace hz::scheduler
