// One connection to libvirtd, shared by what edits domains: the scheduler's
// hostdev attach (hz/scheduler/domain_attacher.h) and the device's
// definitions (domain_definitions.h). libvirt's own error printing is off;
// failures come back as Status with libvirt's message.
#ifndef HZ_LIBVIRT_CONNECTION_H_
#define HZ_LIBVIRT_CONNECTION_H_

#include <memory>
#include <string>

#include "hz/common/status.h"

namespace hz::libvirt {

class Connection {
 public:
  // "qemu:///system"; tests use "test:///default", or a daemon's socket
  // with "qemu:///system?socket=PATH".
  static Status Open(const std::string& uri, std::unique_ptr<Connection>* out);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The virConnectPtr; void* keeps libvirt.h out of this header.
  void* get() const { return conn_; }
  const std::string& uri() const { return uri_; }
  // False once libvirtd closed the connection (a restart): open a new one.
  bool Alive() const;

 private:
  Connection(void* conn, std::string uri) : conn_(conn), uri_(std::move(uri)) {}
  void* conn_;
  std::string uri_;
};

// libvirt's message for the calling thread's last failure.
std::string LastError();

}  // namespace hz::libvirt

#endif  // HZ_LIBVIRT_CONNECTION_H_
