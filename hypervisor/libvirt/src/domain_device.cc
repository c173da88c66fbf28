#include "hz/libvirt/domain_device.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <memory>
#include <optional>
#include <vector>

#include "protocol/harmonaize.h"

namespace hz::libvirt {

namespace {

// libxml2 speaks unsigned char; the definitions are UTF-8 text.
const xmlChar* X(const char* s) {
  return reinterpret_cast<const xmlChar*>(s);
}

struct DocFree {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};
using Doc = std::unique_ptr<xmlDoc, DocFree>;

// libxml2 reports parse errors through a global handler; they become the
// Status of the call instead of lines on stderr.
void QuietErrors(void*, const char*, ...) {}

StatusOr<Doc> Parse(std::string_view xml) {
  if (xml.size() > kMaxDomainXmlBytes) {
    return Status::InvalidArgument("domain definition is larger than 16 MiB");
  }
  xmlSetGenericErrorFunc(nullptr, QuietErrors);
  // XML_PARSE_NONET: no external fetches. Without XML_PARSE_NOENT, entities
  // stay references and are never expanded.
  Doc doc(xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "domain.xml", nullptr,
                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (!doc) {
    const xmlError* err = xmlGetLastError();
    std::string why = err && err->message ? err->message : "not XML";
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::InvalidArgument("domain definition is not well-formed XML: " + why);
  }
  xmlNode* root = xmlDocGetRootElement(doc.get());
  if (!root || !xmlStrEqual(root->name, X("domain")) || root->ns != nullptr) {
    return Status::InvalidArgument("not a libvirt domain definition (no <domain> root)");
  }
  return doc;
}

std::string Serialize(xmlDoc* doc) {
  xmlChar* buf = nullptr;
  int size = 0;
  xmlDocDumpFormatMemory(doc, &buf, &size, /*format=*/1);
  std::string out(reinterpret_cast<const char*>(buf), static_cast<size_t>(size));
  xmlFree(buf);
  return out;
}

bool HasNamespace(const xmlNode* n, const char* href) {
  return href ? n->ns && xmlStrEqual(n->ns->href, X(href)) : n->ns == nullptr;
}

// The element children of parent named `name` in namespace `href` (nullptr:
// no namespace).
std::vector<xmlNode*> Children(xmlNode* parent, const char* name, const char* href = nullptr) {
  std::vector<xmlNode*> out;
  for (xmlNode* n = parent->children; n; n = n->next) {
    if (n->type == XML_ELEMENT_NODE && xmlStrEqual(n->name, X(name)) && HasNamespace(n, href)) {
      out.push_back(n);
    }
  }
  return out;
}

xmlNode* Child(xmlNode* parent, const char* name, const char* href = nullptr) {
  std::vector<xmlNode*> all = Children(parent, name, href);
  return all.empty() ? nullptr : all.front();
}

std::optional<std::string> Attr(const xmlNode* n, const char* name) {
  xmlChar* v = xmlGetNoNsProp(n, X(name));
  if (!v) return std::nullopt;
  std::string out(reinterpret_cast<const char*>(v));
  xmlFree(v);
  return out;
}

bool HasElementChildren(const xmlNode* n) {
  for (const xmlNode* c = n->children; c; c = c->next) {
    if (c->type == XML_ELEMENT_NODE) return true;
  }
  return false;
}

// Unlinks n, and its parent too when n was the parent's last element.
void RemoveNode(xmlNode* n, bool drop_empty_parent) {
  xmlNode* parent = n->parent;
  xmlUnlinkNode(n);
  xmlFreeNode(n);
  if (drop_empty_parent && parent && !HasElementChildren(parent)) {
    xmlUnlinkNode(parent);
    xmlFreeNode(parent);
  }
}

xmlNode* ChildOrNew(xmlNode* parent, const char* name, xmlNs* ns = nullptr) {
  const char* href = ns ? reinterpret_cast<const char*>(ns->href) : nullptr;
  if (xmlNode* n = Child(parent, name, href)) return n;
  return xmlNewChild(parent, ns, X(name), nullptr);
}

std::string ChardevArg(const std::string& socket) {
  return std::string("socket,id=") + kChardevId + ",path=" + socket;
}

// libvirt does not know this device (it comes through <qemu:commandline>),
// so QEMU puts it into the first free slot, which libvirt still counts as
// free. Two consequences:
// - QEMU creates the devices given as key=value before those given as JSON,
//   whatever their order, and libvirt gives its own as JSON with fixed
//   addresses: in key=value form this device would take the slot of the
//   first of them (on q35, the first pcie-root-port's), and the domain would
//   not start. In JSON form it comes after them, into a slot left free.
// - On an i440fx machine libvirt hot-plugs PCI devices (the scheduler's
//   hostdevs) straight into the root bus, lowest free slot first, and QEMU
//   would refuse the hostdev ("slot 2 function 0 not available"): there the
//   device takes the root bus's last slot. On q35 libvirt hot-plugs into
//   pcie-root-ports, never into pcie.0, and QEMU's choice is safe.
constexpr char kI440fxPlacement[] = R"(,"bus":"pci.0","addr":"0x1f")";

bool IsI440fx(xmlNode* root) {
  xmlNode* os = Child(root, "os");
  xmlNode* type = os ? Child(os, "type") : nullptr;
  const std::string machine = type ? Attr(type, "machine").value_or("") : "";
  return machine == "pc" || (machine.rfind("pc-", 0) == 0 && machine.rfind("pc-q35", 0) != 0);
}

// The device as QEMU's JSON -device (protocol/SPEC.md §2.2).
std::string DeviceArg(const DeviceShape& shape, bool i440fx) {
  return std::string(R"({"driver":"vhost-user-test-device-pci","chardev":")") + kChardevId +
         R"(","virtio-id":)" + std::to_string(HZ_VIRTIO_ID) + R"(,"num_vqs":)" +
         std::to_string(HZ_VQ_REQUEST_BASE + shape.request_queues) + R"(,"vq_size":)" +
         std::to_string(shape.queue_size) + R"(,"config_size":)" +
         std::to_string(sizeof(struct hz_config)) + (i440fx ? kI440fxPlacement : "") + "}";
}

// Whether a QEMU argument belongs to the device: its chardev or the device
// that names it, in JSON or (as versions before JSON wrote it) key=value.
bool IsDeviceArg(const std::string& value) {
  const std::string chardev = std::string("socket,id=") + kChardevId + ",";
  if (value.rfind(chardev, 0) == 0) return true;
  if (value.rfind(R"({"driver":"vhost-user-)", 0) == 0) {
    return value.find(std::string(R"("chardev":")") + kChardevId + "\"") != std::string::npos;
  }
  const std::string device = std::string("chardev=") + kChardevId;
  if (value.rfind("vhost-user-", 0) != 0) return false;
  for (size_t pos = value.find(device); pos != std::string::npos;
       pos = value.find(device, pos + 1)) {
    const size_t end = pos + device.size();
    if (value[pos - 1] == ',' && (end == value.size() || value[end] == ',')) return true;
  }
  return false;
}

// The <hz:device> record in <metadata>, or nullptr.
xmlNode* Record(xmlNode* root) {
  xmlNode* metadata = Child(root, "metadata");
  return metadata ? Child(metadata, "device", kMetadataNamespace) : nullptr;
}

StatusOr<uint32_t> UIntAttr(const xmlNode* n, const char* name) {
  std::optional<std::string> v = Attr(n, name);
  if (!v || v->empty() || v->size() > 9 ||
      v->find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(std::string("harmonaize record: bad ") + name);
  }
  return static_cast<uint32_t>(std::stoul(*v));
}

StatusOr<DomainDevice> ReadRecord(const xmlNode* record) {
  DomainDevice d;
  d.tenant = Attr(record, "tenant").value_or("");
  d.socket = Attr(record, "socket").value_or("");
  StatusOr<uint32_t> queues = UIntAttr(record, "request-queues");
  if (!queues.ok()) return queues.status();
  StatusOr<uint32_t> size = UIntAttr(record, "queue-size");
  if (!size.ok()) return size.status();
  d.shape.request_queues = *queues;
  d.shape.queue_size = *size;
  d.added_memfd_source = Attr(record, "added-memfd-source").value_or("") == "yes";
  d.added_shared_access = Attr(record, "added-shared-access").value_or("") == "yes";
  Status s = ValidateDevice(d);
  if (!s.ok()) return Status::InvalidArgument("harmonaize record: " + s.message());
  return d;
}

// Makes <memoryBacking> share a memfd with the back-end; records in *d what
// it added.
Status ShareMemory(xmlNode* root, DomainDevice* d) {
  xmlNode* backing = ChildOrNew(root, "memoryBacking");
  xmlNode* source = Child(backing, "source");
  if (!source) {
    xmlNewProp(xmlNewChild(backing, nullptr, X("source"), nullptr), X("type"), X("memfd"));
    d->added_memfd_source = true;
  } else if (Attr(source, "type").value_or("") != "memfd") {
    return Status::InvalidArgument(
        "the domain's memory has <source type='" + Attr(source, "type").value_or("") +
        "'>; the harmonaize back-end maps guest RAM from a shared memfd (type='memfd')");
  }
  xmlNode* access = Child(backing, "access");
  if (!access) {
    xmlNewProp(xmlNewChild(backing, nullptr, X("access"), nullptr), X("mode"), X("shared"));
    d->added_shared_access = true;
  } else if (Attr(access, "mode").value_or("") != "shared") {
    return Status::InvalidArgument("the domain's memory has <access mode='" +
                                   Attr(access, "mode").value_or("") +
                                   "'>; the harmonaize back-end needs mode='shared'");
  }
  return Status::Ok();
}

void UnshareMemory(xmlNode* root, const DomainDevice& d) {
  xmlNode* backing = Child(root, "memoryBacking");
  if (!backing) return;
  xmlNode* source = Child(backing, "source");
  if (d.added_memfd_source && source && Attr(source, "type").value_or("") == "memfd") {
    RemoveNode(source, false);
  }
  xmlNode* access = Child(backing, "access");
  if (d.added_shared_access && access && Attr(access, "mode").value_or("") == "shared") {
    RemoveNode(access, false);
  }
  if (!HasElementChildren(backing)) RemoveNode(backing, false);
}

void AddArgs(xmlNode* root, const DomainDevice& d) {
  xmlNs* qemu = xmlSearchNsByHref(root->doc, root, X(kQemuNamespace));
  if (!qemu) qemu = xmlNewNs(root, X(kQemuNamespace), X("qemu"));
  xmlNode* cmdline = ChildOrNew(root, "commandline", qemu);
  for (const std::string& value : {std::string("-chardev"), ChardevArg(d.socket),
                                   std::string("-device"), DeviceArg(d.shape, IsI440fx(root))}) {
    xmlNewProp(xmlNewChild(cmdline, qemu, X("arg"), nullptr), X("value"), X(value.c_str()));
  }
}

// Removes the device's arguments and the option names before them.
void RemoveArgs(xmlNode* root) {
  for (xmlNode* cmdline : Children(root, "commandline", kQemuNamespace)) {
    std::vector<xmlNode*> args = Children(cmdline, "arg", kQemuNamespace);
    std::vector<xmlNode*> doomed;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!IsDeviceArg(Attr(args[i], "value").value_or(""))) continue;
      doomed.push_back(args[i]);
      const std::string option = i > 0 ? Attr(args[i - 1], "value").value_or("") : "";
      if (option == "-chardev" || option == "-device") doomed.push_back(args[i - 1]);
    }
    for (xmlNode* n : doomed) RemoveNode(n, false);
    if (!HasElementChildren(cmdline)) RemoveNode(cmdline, false);
  }
}

void WriteRecord(xmlNode* root, const DomainDevice& d) {
  xmlNode* metadata = ChildOrNew(root, "metadata");
  xmlNode* record = xmlNewChild(metadata, nullptr, X("device"), nullptr);
  xmlSetNs(record, xmlNewNs(record, X(kMetadataNamespace), X("hz")));
  xmlNewProp(record, X("tenant"), X(d.tenant.c_str()));
  xmlNewProp(record, X("socket"), X(d.socket.c_str()));
  xmlNewProp(record, X("request-queues"), X(std::to_string(d.shape.request_queues).c_str()));
  xmlNewProp(record, X("queue-size"), X(std::to_string(d.shape.queue_size).c_str()));
  xmlNewProp(record, X("added-memfd-source"), X(d.added_memfd_source ? "yes" : "no"));
  xmlNewProp(record, X("added-shared-access"), X(d.added_shared_access ? "yes" : "no"));
}

}  // namespace

Status ValidateDevice(const DomainDevice& d) {
  if (d.tenant.empty() || d.tenant.size() > 256) {
    return Status::InvalidArgument("a tenant name of 1 to 256 bytes is needed");
  }
  if (d.socket.empty() || d.socket[0] != '/') {
    return Status::InvalidArgument("the socket path must be absolute (QEMU opens it)");
  }
  if (d.socket.size() > 107) return Status::InvalidArgument("socket path is longer than 107 bytes");
  if (d.socket.find(',') != std::string::npos) {
    return Status::InvalidArgument("the socket path must not hold a comma (QEMU's option syntax)");
  }
  if (d.shape.request_queues < 1 || d.shape.request_queues > HZ_MAX_REQUEST_QUEUES) {
    return Status::InvalidArgument("request queues must be 1 to " +
                                   std::to_string(HZ_MAX_REQUEST_QUEUES));
  }
  const uint32_t size = d.shape.queue_size;
  if (size < 2 || size > 32768 || (size & (size - 1)) != 0) {
    return Status::InvalidArgument("the queue size must be a power of two from 2 to 32768");
  }
  return Status::Ok();
}

StatusOr<std::string> AddDevice(std::string_view domain_xml, const DomainDevice& device,
                                DomainDevice* added) {
  Status s = ValidateDevice(device);
  if (!s.ok()) return s;
  StatusOr<Doc> doc = Parse(domain_xml);
  if (!doc.ok()) return doc.status();
  xmlNode* root = xmlDocGetRootElement(doc->get());
  if (Record(root)) return Status::Exists("the domain has the harmonaize device already");
  DomainDevice d = device;
  d.added_memfd_source = false;
  d.added_shared_access = false;
  s = ShareMemory(root, &d);
  if (!s.ok()) return s;
  AddArgs(root, d);
  WriteRecord(root, d);
  if (added) *added = d;
  return Serialize(doc->get());
}

StatusOr<std::string> RemoveDevice(std::string_view domain_xml, DomainDevice* removed) {
  StatusOr<Doc> doc = Parse(domain_xml);
  if (!doc.ok()) return doc.status();
  xmlNode* root = xmlDocGetRootElement(doc->get());
  xmlNode* record = Record(root);
  if (!record) return Status::NotFound("the domain has no harmonaize device");
  StatusOr<DomainDevice> d = ReadRecord(record);
  if (!d.ok()) return d.status();
  RemoveNode(record, /*drop_empty_parent=*/true);
  RemoveArgs(root);
  UnshareMemory(root, *d);
  if (removed) *removed = *d;
  return Serialize(doc->get());
}

StatusOr<DomainDevice> FindDevice(std::string_view domain_xml) {
  StatusOr<Doc> doc = Parse(domain_xml);
  if (!doc.ok()) return doc.status();
  xmlNode* record = Record(xmlDocGetRootElement(doc->get()));
  if (!record) return Status::NotFound("the domain has no harmonaize device");
  return ReadRecord(record);
}

}  // namespace hz::libvirt
