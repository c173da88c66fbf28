#include "hz/libvirt/connection.h"

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

namespace hz::libvirt {

namespace {

// libvirt prints every error to stderr unless told otherwise.
void SilentErrors(void*, virErrorPtr) {}

}  // namespace

std::string LastError() {
  const char* msg = virGetLastErrorMessage();
  return msg ? msg : "unknown libvirt error";
}

Status Connection::Open(const std::string& uri, std::unique_ptr<Connection>* out) {
  virSetErrorFunc(nullptr, SilentErrors);
  virConnectPtr conn = virConnectOpen(uri.c_str());
  if (!conn) return Status::IoError("cannot connect to libvirt at " + uri + ": " + LastError());
  virConnSetErrorFunc(conn, nullptr, SilentErrors);
  out->reset(new Connection(conn, uri));
  return Status::Ok();
}

bool Connection::Alive() const {
  return virConnectIsAlive(static_cast<virConnectPtr>(conn_)) == 1;
}

Connection::~Connection() {
  virConnectClose(static_cast<virConnectPtr>(conn_));
}

}  // namespace hz::libvirt
