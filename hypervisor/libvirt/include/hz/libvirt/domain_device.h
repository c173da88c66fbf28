// The HarmonAIze device in a libvirt domain definition, as XML text in and
// out. No libvirt connection here: domain_definitions.h reads and writes the
// definitions, and the libvirt hook reads the XML libvirt hands it.
//
// libvirt has no element for QEMU's generic vhost-user device, so the device
// is QEMU command-line passthrough:
//
//   <qemu:commandline>
//     <qemu:arg value='-chardev'/>
//     <qemu:arg value='socket,id=harmonaize0,path=SOCKET'/>
//     <qemu:arg value='-device'/>
//     <qemu:arg value='vhost-user-test-device-pci,chardev=harmonaize0,virtio-id=21,...'/>
//   </qemu:commandline>
//
// libvirt keeps those arguments but does not model them (the domain is
// tainted "custom-argv"), and guest RAM must be a shared memfd
// (<memoryBacking><source type='memfd'/><access mode='shared'/>) so the
// back-end can map it. What was added is recorded in the domain's own
// <metadata>, under kMetadataNamespace:
//
//   <hz:device xmlns:hz='...' tenant='T' socket='SOCKET' request-queues='4'
//              queue-size='256' added-memfd-source='yes' added-shared-access='yes'/>
//
// so that removing the device takes exactly what adding it put there, and
// the hook knows the tenant and the socket from the XML alone.
//
// Definitions are untrusted input: a parse failure, a size over
// kMaxDomainXmlBytes or a malformed record is a clear error. Entities are
// not expanded and nothing is fetched from the network.
#ifndef HZ_LIBVIRT_DOMAIN_DEVICE_H_
#define HZ_LIBVIRT_DOMAIN_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::libvirt {

inline constexpr char kMetadataNamespace[] = "https://harmonaize.dev/xmlns/libvirt-domain/1";
inline constexpr char kQemuNamespace[] = "http://libvirt.org/schemas/domain/qemu/1.0";
// The QEMU chardev id of the device's socket; one device per domain.
inline constexpr char kChardevId[] = "harmonaize0";
inline constexpr size_t kMaxDomainXmlBytes = 16u << 20;

struct DeviceShape {
  uint32_t request_queues = 4;  // besides the control and event queues
  uint32_t queue_size = 256;    // descriptors per queue
};

struct DomainDevice {
  std::string tenant;
  std::string socket;  // absolute path of the back-end's socket, as QEMU opens it
  DeviceShape shape;
  // Which parts of <memoryBacking> adding the device put there.
  bool added_memfd_source = false;
  bool added_shared_access = false;
};

// The checks AddDevice applies to a device: a tenant, an absolute socket
// path that fits a sockaddr_un and that QEMU's option syntax can carry (no
// comma), and a queue shape within the protocol's limits.
Status ValidateDevice(const DomainDevice& device);

// The definition with the device added, and shared memfd memory unless it
// has that already. *added (optional) gets the record written, with what was
// added to <memoryBacking>. kExists when the definition carries the device
// already; kInvalidArgument when its memory cannot be shared with the
// back-end (a file or anonymous source, or private access).
StatusOr<std::string> AddDevice(std::string_view domain_xml, const DomainDevice& device,
                                DomainDevice* added = nullptr);

// The definition without what AddDevice added; *removed (optional) gets the
// record. kNotFound when the definition does not carry the device.
StatusOr<std::string> RemoveDevice(std::string_view domain_xml, DomainDevice* removed = nullptr);

// The device a definition carries, from its metadata; kNotFound when none.
StatusOr<DomainDevice> FindDevice(std::string_view domain_xml);

}  // namespace hz::libvirt

#endif  // HZ_LIBVIRT_DOMAIN_DEVICE_H_
