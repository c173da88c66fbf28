// The device in a domain definition: what AddDevice puts in, RemoveDevice
// takes exactly that out again, and bad definitions and records are refused.
#include "hz/libvirt/domain_device.h"

#include <gtest/gtest.h>

#include <string>

namespace hz::libvirt {
namespace {

// A definition as `virsh dumpxml --inactive` gives it, with memory settings
// and command-line arguments of its own that must survive.
std::string Domain(const std::string& memory_backing = "", const std::string& extra = "") {
  return "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
         "  <name>tenant-vm0</name>\n"
         "  <memory unit='KiB'>4194304</memory>\n" +
         memory_backing +
         "  <vcpu>2</vcpu>\n"
         "  <os><type arch='x86_64' machine='q35'>hvm</type></os>\n"
         "  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>\n" +
         extra + "</domain>\n";
}

DomainDevice Device() {
  DomainDevice d;
  d.tenant = "acme";
  d.socket = "/run/harmonaize/tenant-vm0.sock";
  d.shape = {4, 256};
  return d;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) n++;
  return n;
}

TEST(DomainDevice, AddingPutsTheDeviceSharedMemoryAndTheRecordIn) {
  DomainDevice added;
  StatusOr<std::string> xml = AddDevice(Domain(), Device(), &added);
  ASSERT_TRUE(xml.ok()) << xml.status().ToString();
  EXPECT_NE(xml->find("<source type=\"memfd\"/>"), std::string::npos) << *xml;
  EXPECT_NE(xml->find("<access mode=\"shared\"/>"), std::string::npos);
  EXPECT_NE(xml->find("socket,id=harmonaize0,path=/run/harmonaize/tenant-vm0.sock"),
            std::string::npos);
  // Control and event queues before the four request queues; the config
  // space is struct hz_config. JSON, so that QEMU creates it after libvirt's
  // own devices (their addresses are libvirt's).
  EXPECT_NE(xml->find("{&quot;driver&quot;:&quot;vhost-user-test-device-pci&quot;,"
                      "&quot;chardev&quot;:&quot;harmonaize0&quot;,&quot;virtio-id&quot;:21,"
                      "&quot;num_vqs&quot;:6,&quot;vq_size&quot;:256,&quot;config_size&quot;:64}"),
            std::string::npos)
      << *xml;
  EXPECT_TRUE(added.added_memfd_source);
  EXPECT_TRUE(added.added_shared_access);
  StatusOr<DomainDevice> found = FindDevice(*xml);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->tenant, "acme");
  EXPECT_EQ(found->socket, "/run/harmonaize/tenant-vm0.sock");
  EXPECT_EQ(found->shape.request_queues, 4u);
  EXPECT_EQ(found->shape.queue_size, 256u);
  EXPECT_EQ(AddDevice(*xml, Device()).status().code(), StatusCode::kExists);
}

// libvirt hot-plugs hostdevs into an i440fx machine's root bus, lowest free
// slot first, and does not know the slot QEMU gave this device: there the
// device sits in the root bus's last slot. On q35 QEMU's choice stays.
TEST(DomainDevice, OnI440fxTheDeviceKeepsClearOfHotpluggedHostdevs) {
  const std::string q35 = Domain();
  for (const char* machine : {"pc", "pc-i440fx-11.1"}) {
    std::string pc = q35;
    pc.replace(pc.find("machine='q35'"), 13, std::string("machine='") + machine + "'");
    StatusOr<std::string> xml = AddDevice(pc, Device());
    ASSERT_TRUE(xml.ok()) << xml.status().ToString();
    EXPECT_NE(xml->find("&quot;config_size&quot;:64,&quot;bus&quot;:&quot;pci.0&quot;,"
                        "&quot;addr&quot;:&quot;0x1f&quot;}"),
              std::string::npos)
        << machine << ": " << *xml;
    StatusOr<std::string> back = RemoveDevice(*xml);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->find("harmonaize0"), std::string::npos);
  }
  for (const char* machine : {"q35", "pc-q35-11.1"}) {
    std::string other = q35;
    other.replace(other.find("machine='q35'"), 13, std::string("machine='") + machine + "'");
    StatusOr<std::string> xml = AddDevice(other, Device());
    ASSERT_TRUE(xml.ok()) << xml.status().ToString();
    EXPECT_EQ(xml->find("addr"), std::string::npos) << machine << ": " << *xml;
  }
}

TEST(DomainDevice, RemovingTakesOutWhatAddingPutInAndNothingElse) {
  const std::string own_backing = "  <memoryBacking><hugepages/></memoryBacking>\n";
  const std::string own_args =
      "  <qemu:commandline><qemu:arg value='-icount'/><qemu:arg value='shift=0'/>"
      "</qemu:commandline>\n";
  StatusOr<std::string> with = AddDevice(Domain(own_backing, own_args), Device());
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  DomainDevice removed;
  StatusOr<std::string> without = RemoveDevice(*with, &removed);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(removed.tenant, "acme");
  EXPECT_EQ(without->find("harmonaize"), std::string::npos) << *without;
  EXPECT_EQ(without->find("memfd"), std::string::npos);
  EXPECT_EQ(without->find("shared"), std::string::npos);
  EXPECT_NE(without->find("<hugepages/>"), std::string::npos);
  EXPECT_NE(without->find("value=\"-icount\""), std::string::npos);
  EXPECT_NE(without->find("value=\"shift=0\""), std::string::npos);
  EXPECT_EQ(Count(*without, "-chardev"), 0u);
  EXPECT_EQ(Count(*without, "-device"), 0u);
  EXPECT_EQ(FindDevice(*without).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(RemoveDevice(*without).status().code(), StatusCode::kNotFound);
}

// Versions before the JSON form wrote the device as key=value: removing it
// from such a definition still takes out exactly what was added.
TEST(DomainDevice, RemovingTakesOutTheKeyValueFormOfEarlierVersions) {
  StatusOr<std::string> with = AddDevice(Domain(), Device());
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  const size_t from = with->find("{&quot;driver&quot;");
  const size_t to = with->find('"', from);
  ASSERT_NE(from, std::string::npos);
  std::string old = *with;
  old.replace(from, to - from,
              "vhost-user-test-device-pci,chardev=harmonaize0,virtio-id=21,num_vqs=6,"
              "vq_size=256,config_size=64");
  StatusOr<std::string> without = RemoveDevice(old);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(without->find("harmonaize"), std::string::npos) << *without;
  EXPECT_EQ(Count(*without, "-device"), 0u);
}

TEST(DomainDevice, MemoryThatIsSharedAlreadyStaysWhenTheDeviceGoes) {
  const std::string shared =
      "  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>\n";
  DomainDevice added;
  StatusOr<std::string> with = AddDevice(Domain(shared), Device(), &added);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_FALSE(added.added_memfd_source);
  EXPECT_FALSE(added.added_shared_access);
  EXPECT_EQ(Count(*with, "type=\"memfd\""), 1u);
  StatusOr<std::string> without = RemoveDevice(*with);
  ASSERT_TRUE(without.ok());
  EXPECT_NE(without->find("memfd"), std::string::npos);
  EXPECT_NE(without->find("shared"), std::string::npos);
}

TEST(DomainDevice, MemoryTheBackEndCannotMapIsRefusedUnchanged) {
  for (const char* backing : {"<memoryBacking><source type='file'/></memoryBacking>",
                              "<memoryBacking><source type='anonymous'/></memoryBacking>",
                              "<memoryBacking><access mode='private'/></memoryBacking>"}) {
    StatusOr<std::string> xml = AddDevice(Domain(std::string("  ") + backing + "\n"), Device());
    EXPECT_EQ(xml.status().code(), StatusCode::kInvalidArgument) << backing;
  }
}

TEST(DomainDevice, ADomainWithoutTheQemuNamespaceGetsIt) {
  const std::string plain =
      "<domain type='kvm'><name>v</name><memory>1048576</memory>"
      "<os><type>hvm</type></os></domain>";
  StatusOr<std::string> xml = AddDevice(plain, Device());
  ASSERT_TRUE(xml.ok()) << xml.status().ToString();
  EXPECT_NE(xml->find("xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\""),
            std::string::npos);
  EXPECT_TRUE(FindDevice(*xml).ok());
}

TEST(DomainDevice, BadDevicesAreRefused) {
  DomainDevice d = Device();
  d.socket = "relative.sock";
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
  d = Device();
  d.socket = "/run/a,server=on.sock";  // would add a QEMU option
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
  d = Device();
  d.socket = "/" + std::string(120, 's');
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
  d = Device();
  d.tenant.clear();
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
  d = Device();
  d.shape.queue_size = 100;
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
  d = Device();
  d.shape.request_queues = 65;
  EXPECT_EQ(AddDevice(Domain(), d).status().code(), StatusCode::kInvalidArgument);
}

TEST(DomainDevice, BadDefinitionsAndRecordsAreClearErrors) {
  EXPECT_EQ(FindDevice("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FindDevice("<domain><name>").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FindDevice("<network/>").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(FindDevice(std::string(kMaxDomainXmlBytes + 1, ' ')).status().code(),
            StatusCode::kInvalidArgument);
  // An entity is never expanded into the record.
  const std::string entity =
      "<!DOCTYPE domain [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>"
      "<domain><metadata><hz:device xmlns:hz='https://harmonaize.dev/xmlns/libvirt-domain/1' "
      "tenant='&e;' socket='/run/x.sock' request-queues='4' queue-size='256'/></metadata>"
      "</domain>";
  StatusOr<DomainDevice> d = FindDevice(entity);
  if (d.ok()) {
    EXPECT_EQ(d->tenant.find("root:"), std::string::npos);
  }
  // A record that is not one the service wrote.
  for (const char* attrs : {"tenant='' socket='/run/x.sock' request-queues='4' queue-size='256'",
                            "tenant='t' socket='/run/x.sock' request-queues='x' queue-size='256'",
                            "tenant='t' socket='/run/x.sock' request-queues='4'",
                            "tenant='t' socket='x.sock' request-queues='4' queue-size='256'"}) {
    const std::string xml = std::string("<domain><metadata><hz:device ") +
                            "xmlns:hz='https://harmonaize.dev/xmlns/libvirt-domain/1' " + attrs +
                            "/></metadata></domain>";
    EXPECT_EQ(FindDevice(xml).status().code(), StatusCode::kInvalidArgument) << attrs;
  }
  // Elements of the same name in another namespace are not the record.
  EXPECT_EQ(
      FindDevice("<domain><metadata><device tenant='t'/></metadata></domain>").status().code(),
      StatusCode::kNotFound);
}

}  // namespace
}  // namespace hz::libvirt
