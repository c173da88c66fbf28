// Who something belongs to: a tenant, named as the operator created it
// (hzctl tenant create). Every engine interface takes a TenantId.
//
// Why the name and not a number: the name is the identity every part of the
// service already keeps and the one that survives restarts. The operator
// speaks in names, the service's state file and the scheduler's state record
// names, and the event bus keeps one directory per name. An engine that wants
// something else keeps its own numbering behind its interface (the checkpoint
// engine's numbered directories, for instance), so that numbering never
// leaks into the callers.
//
// Why a type and not a std::string: tenant names travel next to other names
// (VM sockets, event bindings, PCI addresses, libvirt domains), and a
// distinct type keeps them from being swapped. The service validates names
// when a tenant is created; this type only carries one.
#ifndef HZ_COMMON_TENANT_ID_H_
#define HZ_COMMON_TENANT_ID_H_

#include <compare>
#include <iosfwd>
#include <string>
#include <utility>

namespace hz {

class TenantId {
 public:
  TenantId() = default;  // no tenant
  explicit TenantId(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  bool empty() const { return name_.empty(); }

  friend bool operator==(const TenantId&, const TenantId&) = default;
  friend std::strong_ordering operator<=>(const TenantId&, const TenantId&) = default;

 private:
  std::string name_;
};

// For test failure messages and logs: the name.
std::ostream& operator<<(std::ostream& os, const TenantId& tenant);

}  // namespace hz

#endif  // HZ_COMMON_TENANT_ID_H_
