// Hostdev attach/detach through the libvirt C API against the in-process test
// driver, and the generated XML checked by libvirt's own validators.
#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hz/scheduler/domain_attacher.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

using testing::TempDir;

const char* kBdfs[] = {"0000:1a:00.0", "0000:1c:00.0", "0000:bb:00.0"};

std::string DomainXml(const std::string& name, const std::string& hostdevs) {
  return "<domain type='test'>\n  <name>" + name +
         "</name>\n  <memory unit='MiB'>256</memory>\n  <vcpu>1</vcpu>\n"
         "  <os><type arch='x86_64'>hvm</type></os>\n  <devices>\n" +
         hostdevs + "  </devices>\n</domain>\n";
}

std::string AllHostdevs() {
  std::string out;
  for (const char* b : kBdfs) {
    std::string xml;
    EXPECT_TRUE(HostdevXml(b, false, &xml).ok());
    out += xml;
  }
  return out;
}

TEST(SchedulerLibvirt, HostdevXmlShape) {
  std::string xml;
  ASSERT_TRUE(HostdevXml("0000:bb:1f.7", false, &xml).ok());
  EXPECT_NE(xml.find("<hostdev mode='subsystem' type='pci' managed='no'>"), std::string::npos);
  EXPECT_NE(xml.find("<address domain='0x0000' bus='0xbb' slot='0x1f' function='0x7'/>"),
            std::string::npos);
  EXPECT_EQ(HostdevXml("0000:bb:1f.7'/><x", false, &xml).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HostdevXml("", true, &xml).code(), StatusCode::kInvalidArgument);
  // [scheduler] hostdev_managed: libvirt binds and gives back the device.
  ASSERT_TRUE(HostdevXml("0000:bb:1f.7", true, &xml).ok());
  EXPECT_NE(xml.find("<hostdev mode='subsystem' type='pci' managed='yes'>"), std::string::npos);
}

TEST(SchedulerLibvirt, AttachAndDetachOnTheTestDriver) {
  std::unique_ptr<LibvirtAttacher> attacher;
  Status s = LibvirtAttacher::Open("test:///default", false, &attacher);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(attacher->Attach("no-such-domain", kBdfs[0]).code(), StatusCode::kNotFound);
  EXPECT_EQ(attacher->Attach("test", "garbage").code(), StatusCode::kInvalidArgument);

  auto conn = static_cast<virConnectPtr>(attacher->connection()->get());
  s = attacher->Attach("test", kBdfs[0]);
  if (s.ok()) {
    // A driver with hotplug: the live definition shows the device until
    // it is detached.
    virDomainPtr dom = virDomainLookupByName(conn, "test");
    ASSERT_NE(dom, nullptr);
    char* xml = virDomainGetXMLDesc(dom, 0);
    ASSERT_NE(xml, nullptr);
    EXPECT_NE(std::string(xml).find("bus='0x1a'"), std::string::npos);
    free(xml);
    ASSERT_TRUE(attacher->Detach("test", kBdfs[0]).ok());
    xml = virDomainGetXMLDesc(dom, 0);
    EXPECT_EQ(std::string(xml).find("bus='0x1a'"), std::string::npos);
    free(xml);
    virDomainFree(dom);
  } else {
    // libvirt 9.0's test driver has no device hotplug: the call reached
    // virDomainAttachDeviceFlags and the driver's refusal comes back as a
    // clear error rather than a crash or a silent success.
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_NE(s.message().find("virDomainAttachDeviceFlags"), std::string::npos) << s.ToString();
    Status d = attacher->Detach("test", kBdfs[0]);
    EXPECT_FALSE(d.ok());
    EXPECT_NE(d.message().find("virDomainDetachDeviceFlags"), std::string::npos) << d.ToString();
  }
}

// libvirt parses and validates the hostdevs in-process: a domain defined
// with them (VIR_DOMAIN_DEFINE_VALIDATE checks the RNG schema) keeps every
// address, and the same connection rejects a broken hostdev.
TEST(SchedulerLibvirt, TestDriverAcceptsTheHostdevXml) {
  std::unique_ptr<LibvirtAttacher> attacher;
  ASSERT_TRUE(LibvirtAttacher::Open("test:///default", false, &attacher).ok());
  auto conn = static_cast<virConnectPtr>(attacher->connection()->get());
  const std::string xml = DomainXml("tenant-vm", AllHostdevs());
  virDomainPtr dom = virDomainDefineXMLFlags(conn, xml.c_str(), VIR_DOMAIN_DEFINE_VALIDATE);
  ASSERT_NE(dom, nullptr) << virGetLastErrorMessage();
  char* back = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE);
  ASSERT_NE(back, nullptr);
  const std::string text = back;
  free(back);
  for (const char* bus : {"bus='0x1a'", "bus='0x1c'", "bus='0xbb'"}) {
    EXPECT_NE(text.find(bus), std::string::npos) << bus;
  }
  EXPECT_NE(text.find("managed='no'"), std::string::npos);
  virDomainUndefine(dom);
  virDomainFree(dom);
  const std::string broken =
      DomainXml("broken-vm",
                "<hostdev mode='subsystem' type='pci' managed='no'><source>"
                "<address domain='0x0000' bus='0xzz' slot='0x00' function='0x0'/>"
                "</source></hostdev>\n");
  virDomainPtr bad = virDomainDefineXMLFlags(conn, broken.c_str(), VIR_DOMAIN_DEFINE_VALIDATE);
  EXPECT_EQ(bad, nullptr);
  if (bad) virDomainFree(bad);
}

// A live detach waits until the device has left the domain: HasHostdev
// finds a hostdev by its source address in the XML libvirt writes back (the
// guest-side address, with its type, does not count).
TEST(SchedulerLibvirt, HasHostdevFindsTheSourceAddress) {
  std::unique_ptr<LibvirtAttacher> attacher;
  ASSERT_TRUE(LibvirtAttacher::Open("test:///default", false, &attacher).ok());
  auto conn = static_cast<virConnectPtr>(attacher->connection()->get());
  const std::string xml = DomainXml("tenant-vm", AllHostdevs());
  virDomainPtr dom = virDomainDefineXML(conn, xml.c_str());
  ASSERT_NE(dom, nullptr) << virGetLastErrorMessage();
  char* back = virDomainGetXMLDesc(dom, 0);
  ASSERT_NE(back, nullptr);
  const std::string text = back;
  free(back);
  virDomainUndefine(dom);
  virDomainFree(dom);
  for (const char* b : kBdfs) EXPECT_TRUE(HasHostdev(text, b)) << b;
  EXPECT_FALSE(HasHostdev(text, "0000:1a:00.1"));
  EXPECT_FALSE(HasHostdev(text, "0000:1b:00.0"));
  EXPECT_FALSE(HasHostdev(text, "garbage"));
  // The guest-side address of a hostdev is not its source.
  const std::string guest_side =
      "<hostdev mode='subsystem' type='pci' managed='no'><source>"
      "<address domain='0x0000' bus='0x21' slot='0x00' function='0x0'/></source>"
      "<address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/></hostdev>";
  EXPECT_TRUE(HasHostdev(guest_side, "0000:21:00.0"));
  EXPECT_FALSE(HasHostdev(guest_side, "0000:00:05.0"));
  // Nor is an address outside any hostdev (a disk's, say).
  EXPECT_FALSE(
      HasHostdev("<disk><address domain='0x0000' bus='0x21' slot='0x00' "
                 "function='0x0'/></disk>",
                 "0000:21:00.0"));
}

int Validate(const std::string& path) {
  const std::string cmd = "virt-xml-validate " + path + " domain >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// libvirt-clients' virt-xml-validate has no schema for a lone device, so it
// validates a whole domain holding the generated hostdevs.
TEST(SchedulerLibvirt, VirtXmlValidateAcceptsTheHostdevs) {
  if (std::system("command -v virt-xml-validate >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "virt-xml-validate (libvirt-clients) is not installed";
  }
  TempDir dir;
  const std::string good = dir.path() + "/domain.xml";
  std::ofstream(good) << DomainXml("tenant-vm", AllHostdevs());
  EXPECT_EQ(Validate(good), 0);
  // The validator really checks: an unknown hostdev mode fails.
  std::string bad_xml = DomainXml("tenant-vm", AllHostdevs());
  bad_xml.replace(bad_xml.find("mode='subsystem'"), 16, "mode='sideways'");
  const std::string bad = dir.path() + "/bad.xml";
  std::ofstream(bad) << bad_xml;
  EXPECT_NE(Validate(bad), 0);
}

}  // namespace
}  // namespace hz::scheduler
