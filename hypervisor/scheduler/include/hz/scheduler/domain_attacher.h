// Attaching passthrough devices to tenant VMs. DomainAttacher is what the
// scheduler calls; LibvirtAttacher does it through the libvirt C API with
//   <hostdev mode='subsystem' type='pci' managed='no'>
// (managed='no': the scheduler itself binds vfio-pci, see vfio.h), or with
// managed='yes' when libvirt is to bind the device to vfio-pci at attach and
// give it back to its driver at detach ([scheduler] hostdev_managed).
#ifndef HZ_SCHEDULER_DOMAIN_ATTACHER_H_
#define HZ_SCHEDULER_DOMAIN_ATTACHER_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "hz/libvirt/connection.h"
#include "hz/scheduler/inventory.h"

namespace hz::scheduler {

// The <hostdev> element for a PCI function; kInvalidArgument for a bad bdf.
Status HostdevXml(const std::string& bdf, bool managed, std::string* xml);

// Whether a domain's XML still holds the hostdev of `bdf` (its source
// address as libvirt and HostdevXml write it).
bool HasHostdev(const std::string& domain_xml, const std::string& bdf);

// How long a detach from a running domain waits for the guest to let go.
inline constexpr std::chrono::milliseconds kDefaultDetachWait{60000};

class DomainAttacher {
 public:
  virtual ~DomainAttacher() = default;
  virtual Status Attach(const std::string& domain, const std::string& bdf) = 0;
  virtual Status Detach(const std::string& domain, const std::string& bdf) = 0;
  // The service is stopping: a detach waiting for its guest to let go, now
  // or later, returns at once with kAborted, as if detach_wait had passed
  // (the device may still be the guest's). Any thread.
  virtual void StopWaiting() {}
};

class LibvirtAttacher : public DomainAttacher {
 public:
  // Opens a libvirt connection ("qemu:///system"; tests use "test:///default").
  static Status Open(const std::string& uri, bool managed, std::unique_ptr<LibvirtAttacher>* out,
                     std::chrono::milliseconds detach_wait = kDefaultDetachWait);

  // virDomainAttachDeviceFlags / virDomainDetachDeviceFlags, on the live
  // domain when it runs, else on its persistent definition. A live detach
  // returns once the device has left the domain: QEMU only asks the guest
  // to eject it, and libvirt returns success after waiting 5 s whether or
  // not the guest did, while the device must not be unbound from vfio-pci
  // or handed out before QEMU lets go of it. kTimedOut when the guest does
  // not eject it within detach_wait (the device is still the guest's).
  Status Attach(const std::string& domain, const std::string& bdf) override;
  Status Detach(const std::string& domain, const std::string& bdf) override;
  void StopWaiting() override;

  // The connection, for callers that need more of libvirt.
  hz::libvirt::Connection* connection() const { return conn_.get(); }

 private:
  LibvirtAttacher(std::unique_ptr<hz::libvirt::Connection> conn, bool managed,
                  std::chrono::milliseconds detach_wait)
      : conn_(std::move(conn)), managed_(managed), detach_wait_(detach_wait) {}
  Status Change(const std::string& domain, const std::string& bdf, bool attach);
  // Until the live domain `dom` (a virDomainPtr) no longer holds bdf. Called
  // without mu_, which it takes only for each look at the domain.
  Status WaitForRemoval(void* dom, const std::string& domain, const std::string& bdf);

  std::mutex mu_;  // one libvirt call sequence at a time, never held over a wait
  std::unique_ptr<hz::libvirt::Connection> conn_;
  const bool managed_;
  const std::chrono::milliseconds detach_wait_;
  // StopWaiting(): waits end. Between two looks at a domain, WaitForRemoval
  // sleeps on stop_changed_.
  std::mutex stop_mu_;
  std::condition_variable stop_changed_;
  bool stop_waiting_ = false;
};

}  // namespace hz::scheduler

#endif  // HZ_SCHEDULER_DOMAIN_ATTACHER_H_
