// Adds the HarmonAIze device to a defined libvirt domain and takes it away,
// through the libvirt API: the persistent definition is read
// (virDomainGetXMLDesc, inactive and with its secrets, so nothing is lost
// when it is written back), edited by domain_device.h and defined again
// (virDomainDefineXMLFlags, checked against libvirt's schema).
//
// Only the persistent definition changes: a running domain gets (or loses)
// the device at its next start, because QEMU's generic device cannot be
// hot-plugged with shared memory that the running guest does not have.
// libvirt has no compare-and-swap for definitions: an edit made by someone
// else between the read and the write is lost, as with `virsh edit`.
#ifndef HZ_LIBVIRT_DOMAIN_DEFINITIONS_H_
#define HZ_LIBVIRT_DOMAIN_DEFINITIONS_H_

#include <mutex>
#include <string>

#include "hz/common/status.h"
#include "hz/libvirt/connection.h"
#include "hz/libvirt/domain_device.h"

namespace hz::libvirt {

struct DefinitionChange {
  DomainDevice device;   // as recorded in the definition
  bool running = false;  // the domain runs: the change comes with its next start
};

class DomainDefinitions {
 public:
  explicit DomainDefinitions(Connection* conn) : conn_(conn) {}

  // kNotFound for no such domain, kState for a transient one (it has no
  // definition to keep the device), and AddDevice's refusals.
  Status Attach(const std::string& domain, const DomainDevice& device, DefinitionChange* out);
  // kNotFound when the domain or its device is not there.
  Status Detach(const std::string& domain, DefinitionChange* out);

 private:
  Status Edit(const std::string& domain, bool attach, const DomainDevice& device,
              DefinitionChange* out);

  std::mutex mu_;  // one edit at a time through this connection
  Connection* conn_;
};

}  // namespace hz::libvirt

#endif  // HZ_LIBVIRT_DOMAIN_DEFINITIONS_H_
