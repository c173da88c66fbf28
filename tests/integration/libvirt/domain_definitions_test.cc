// hzctl vm attach's edit of a defined domain, on libvirt's test driver:
// libvirt accepts the edited definition (checked against its schema), keeps
// the record, and the detach gives back the definition as it was.
#include "hz/libvirt/domain_definitions.h"

#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace hz::libvirt {
namespace {

constexpr char kDomain[] =
    "<domain type='test'>\n"
    "  <name>tenant-vm0</name>\n"
    "  <memory unit='MiB'>256</memory>\n"
    "  <vcpu>1</vcpu>\n"
    "  <os><type arch='x86_64'>hvm</type></os>\n"
    "</domain>\n";

std::string Inactive(Connection* conn, const char* name) {
  virDomainPtr dom = virDomainLookupByName(static_cast<virConnectPtr>(conn->get()), name);
  if (!dom) return "";
  char* xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE);
  std::string out = xml ? xml : "";
  std::free(xml);
  virDomainFree(dom);
  return out;
}

class DomainDefinitionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = Connection::Open("test:///default", &conn_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    virDomainPtr dom = virDomainDefineXML(static_cast<virConnectPtr>(conn_->get()), kDomain);
    ASSERT_NE(dom, nullptr) << virGetLastErrorMessage();
    virDomainFree(dom);
    defs_ = std::make_unique<DomainDefinitions>(conn_.get());
    device_.tenant = "acme";
    device_.socket = "/run/harmonaize/tenant-vm0.sock";
  }
  void TearDown() override {
    if (!conn_) return;
    virDomainPtr dom =
        virDomainLookupByName(static_cast<virConnectPtr>(conn_->get()), "tenant-vm0");
    if (dom) {
      virDomainUndefine(dom);
      virDomainFree(dom);
    }
  }

  std::unique_ptr<Connection> conn_;
  std::unique_ptr<DomainDefinitions> defs_;
  DomainDevice device_;
};

TEST_F(DomainDefinitionsTest, AttachDefinesTheDeviceAndDetachTakesItOut) {
  const std::string before = Inactive(conn_.get(), "tenant-vm0");
  DefinitionChange change;
  Status s = defs_->Attach("tenant-vm0", device_, &change);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(change.running);
  EXPECT_TRUE(change.device.added_memfd_source);
  // What libvirt keeps and hands to the hook: the record and shared memory.
  const std::string with = Inactive(conn_.get(), "tenant-vm0");
  StatusOr<DomainDevice> found = FindDevice(with);
  ASSERT_TRUE(found.ok()) << found.status().ToString() << "\n" << with;
  EXPECT_EQ(found->tenant, "acme");
  EXPECT_EQ(found->socket, device_.socket);
  EXPECT_NE(with.find("<source type='memfd'/>"), std::string::npos) << with;
  EXPECT_NE(with.find("<access mode='shared'/>"), std::string::npos);
  EXPECT_EQ(defs_->Attach("tenant-vm0", device_, &change).code(), StatusCode::kExists);

  s = defs_->Detach("tenant-vm0", &change);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(change.device.socket, device_.socket);
  EXPECT_EQ(Inactive(conn_.get(), "tenant-vm0"), before);
  EXPECT_EQ(defs_->Detach("tenant-vm0", &change).code(), StatusCode::kNotFound);
}

TEST_F(DomainDefinitionsTest, ARunningDomainIsToldItGetsTheDeviceAtItsNextStart) {
  virDomainPtr dom = virDomainLookupByName(static_cast<virConnectPtr>(conn_->get()), "tenant-vm0");
  ASSERT_EQ(virDomainCreate(dom), 0) << virGetLastErrorMessage();
  DefinitionChange change;
  Status s = defs_->Attach("tenant-vm0", device_, &change);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(change.running);
  // The live definition is not the one edited.
  char* live = virDomainGetXMLDesc(dom, 0);
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(std::string(live).find("harmonaize"), std::string::npos);
  std::free(live);
  EXPECT_TRUE(FindDevice(Inactive(conn_.get(), "tenant-vm0")).ok());
  virDomainDestroy(dom);
  virDomainFree(dom);
}

TEST_F(DomainDefinitionsTest, MissingTransientAndUnfitDomainsAreRefused) {
  DefinitionChange change;
  EXPECT_EQ(defs_->Attach("no-such-domain", device_, &change).code(), StatusCode::kNotFound);
  EXPECT_EQ(defs_->Detach("no-such-domain", &change).code(), StatusCode::kNotFound);
  const std::string transient =
      "<domain type='test'><name>transient-vm</name><memory unit='MiB'>64</memory>"
      "<os><type>hvm</type></os></domain>";
  virDomainPtr dom =
      virDomainCreateXML(static_cast<virConnectPtr>(conn_->get()), transient.c_str(), 0);
  ASSERT_NE(dom, nullptr) << virGetLastErrorMessage();
  EXPECT_EQ(defs_->Attach("transient-vm", device_, &change).code(), StatusCode::kState);
  virDomainDestroy(dom);
  virDomainFree(dom);
  DomainDevice bad = device_;
  bad.socket = "no/absolute";
  const std::string before = Inactive(conn_.get(), "tenant-vm0");
  EXPECT_EQ(defs_->Attach("tenant-vm0", bad, &change).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Inactive(conn_.get(), "tenant-vm0"), before);
}

}  // namespace
}  // namespace hz::libvirt
