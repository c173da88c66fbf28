#include "hz/scheduler/domain_attacher.h"

#include <libvirt/libvirt.h>

#include <cstdlib>
#include <optional>

namespace hz::scheduler {

using hz::libvirt::LastError;

namespace {

// The hostdev's <source> address; the guest-side <address> has a type.
std::string SourceAddress(const std::string& bdf) {
  return "<address domain='0x" + bdf.substr(0, 4) + "' bus='0x" + bdf.substr(5, 2) + "' slot='0x" +
         bdf.substr(8, 2) + "' function='0x" + bdf.substr(11, 1) + "'/>";
}

// The live definition, or nullopt when libvirt cannot give it.
std::optional<std::string> LiveXml(virDomainPtr dom) {
  char* xml = virDomainGetXMLDesc(dom, 0);
  if (!xml) return std::nullopt;
  std::string out(xml);
  free(xml);
  return out;
}

}  // namespace

Status HostdevXml(const std::string& bdf, bool managed, std::string* xml) {
  if (!IsBdf(bdf)) return Status::InvalidArgument("not a PCI address: " + bdf.substr(0, 32));
  *xml = std::string("<hostdev mode='subsystem' type='pci' managed='") + (managed ? "yes" : "no") +
         "'>\n"
         "  <source>\n"
         "    " +
         SourceAddress(bdf) +
         "\n"
         "  </source>\n"
         "</hostdev>\n";
  return Status::Ok();
}

bool HasHostdev(const std::string& domain_xml, const std::string& bdf) {
  if (!IsBdf(bdf)) return false;
  const std::string address = SourceAddress(bdf);
  for (size_t at = domain_xml.find("<hostdev "); at != std::string::npos;
       at = domain_xml.find("<hostdev ", at + 1)) {
    const size_t end = domain_xml.find("</hostdev>", at);
    if (end == std::string::npos) return false;
    const size_t found = domain_xml.find(address, at);
    if (found != std::string::npos && found < end) return true;
  }
  return false;
}

Status LibvirtAttacher::Open(const std::string& uri, bool managed,
                             std::unique_ptr<LibvirtAttacher>* out,
                             std::chrono::milliseconds detach_wait) {
  std::unique_ptr<hz::libvirt::Connection> conn;
  Status s = hz::libvirt::Connection::Open(uri, &conn);
  if (!s.ok()) return s;
  out->reset(new LibvirtAttacher(std::move(conn), managed, detach_wait));
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
  std::unique_lock<std::mutex> lock(mu_);
  virDomainPtr dom =
      virDomainLookupByName(static_cast<virConnectPtr>(conn_->get()), domain.c_str());
  if (!dom) return Status::NotFound("no libvirt domain '" + domain + "': " + LastError());
  int active = virDomainIsActive(dom);
  unsigned int flags = active == 1 ? VIR_DOMAIN_AFFECT_LIVE : VIR_DOMAIN_AFFECT_CONFIG;
  int rc = attach ? virDomainAttachDeviceFlags(dom, xml.c_str(), flags)
                  : virDomainDetachDeviceFlags(dom, xml.c_str(), flags);
  std::string err = rc < 0 ? LastError() : std::string();
  Status result = rc < 0
                      ? Status::IoError(std::string(attach ? "attach of " : "detach of ") + bdf +
                                        (attach ? " to " : " from ") + domain + " failed: " + err)
                      : Status::Ok();
  if (result.ok() && !attach && active == 1) {
    // The wait takes mu_ only to look, so that the other VMs' attaches and
    // detaches go on while this guest takes its time.
    lock.unlock();
    result = WaitForRemoval(dom, domain, bdf);
    lock.lock();
  }
  virDomainFree(dom);
  return result;
}

Status LibvirtAttacher::WaitForRemoval(void* domain_ptr, const std::string& domain,
                                       const std::string& bdf) {
  auto dom = static_cast<virDomainPtr>(domain_ptr);
  const auto deadline = std::chrono::steady_clock::now() + detach_wait_;
  for (;;) {
    std::optional<std::string> xml;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A domain that stopped (or a transient one that is gone) let go of it.
      if (virDomainIsActive(dom) != 1) return Status::Ok();
      xml = LiveXml(dom);
      if (!xml) return Status::IoError("detach of " + bdf + " from " + domain + ": " + LastError());
    }
    if (!HasHostdev(*xml, bdf)) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::TimedOut("detach of " + bdf + " from " + domain + ": the guest has not " +
                              "released it after " + std::to_string(detach_wait_.count() / 1000) +
                              " s (it stays attached)");
    }
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_changed_.wait_for(lock, std::chrono::milliseconds(100),
                               [this] { return stop_waiting_; })) {
      return Status::Aborted("detach of " + bdf + " from " + domain +
                             ": the service stopped before the guest released it (it may still "
                             "hold it)");
    }
  }
}

void LibvirtAttacher::StopWaiting() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  stop_waiting_ = true;
  stop_changed_.notify_all();
}

}  // namespace hz::scheduler
