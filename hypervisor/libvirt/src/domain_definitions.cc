#include "hz/libvirt/domain_definitions.h"

#include <libvirt/libvirt.h>

#include <cstdlib>
#include <memory>

namespace hz::libvirt {

namespace {

struct DomainFree {
  void operator()(virDomain* dom) const { virDomainFree(dom); }
};
using Domain = std::unique_ptr<virDomain, DomainFree>;

}  // namespace

Status DomainDefinitions::Attach(const std::string& domain, const DomainDevice& device,
                                 DefinitionChange* out) {
  return Edit(domain, true, device, out);
}

Status DomainDefinitions::Detach(const std::string& domain, DefinitionChange* out) {
  return Edit(domain, false, DomainDevice{}, out);
}

Status DomainDefinitions::Edit(const std::string& domain, bool attach, const DomainDevice& device,
                               DefinitionChange* out) {
  std::lock_guard<std::mutex> lock(mu_);
  virConnectPtr conn = static_cast<virConnectPtr>(conn_->get());
  Domain dom(virDomainLookupByName(conn, domain.c_str()));
  if (!dom) return Status::NotFound("no libvirt domain '" + domain + "': " + LastError());
  if (virDomainIsPersistent(dom.get()) != 1) {
    return Status::State("domain '" + domain +
                         "' is transient: define it (virsh define) to give it the device");
  }
  char* raw = virDomainGetXMLDesc(dom.get(), VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
  if (!raw) return Status::IoError("cannot read domain '" + domain + "': " + LastError());
  std::string xml(raw);
  std::free(raw);
  StatusOr<std::string> edited =
      attach ? AddDevice(xml, device, &out->device) : RemoveDevice(xml, &out->device);
  if (!edited.ok())
    return Status(edited.status().code(), domain + ": " + edited.status().message());
  out->running = virDomainIsActive(dom.get()) == 1;
  Domain defined(virDomainDefineXMLFlags(conn, edited->c_str(), VIR_DOMAIN_DEFINE_VALIDATE));
  if (!defined) {
    return Status::IoError("libvirt refused the new definition of '" + domain +
                           "': " + LastError());
  }
  return Status::Ok();
}

}  // namespace hz::libvirt
