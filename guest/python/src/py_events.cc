// SPDX-License-Identifier: Apache-2.0
// _Device methods for the event queue. Blocking waits release the GIL, and
// the Python layer waits in short slices so that signals (Ctrl-C) are seen.
#include <string>

#include "py_bindings.h"
#include "py_errors.h"

namespace py = pybind11;

namespace hz::py {
namespace {

// (seq, topic, kind, flags, time_s, deadline_s, payload), or None on timeout.
::py::object NextEvent(const DeviceContext& c, int timeout_ms) {
  hz_event ev;
  int rc;
  {
    ::py::gil_scoped_release nogil;
    rc = hz_event_next(c.get(), &ev, timeout_ms);
  }
  if (rc == HZ_ETIMEDOUT) return ::py::none();
  Check(rc, "next event");
  return ::py::make_tuple(
      ev.seq, ev.topic, ev.kind, ev.flags, ev.time_s, ev.deadline_s,
      ::py::bytes(reinterpret_cast<const char*>(ev.payload), sizeof(ev.payload)));
}

}  // namespace

void BindEvents(DeviceClass& d) {
  d.def(
       "subscribe",
       [](const DeviceContext& c, uint64_t topics, uint64_t from_seq) {
         Check(hz_event_subscribe(c.get(), topics, from_seq), "subscribe to events");
       },
       ::py::arg("topics"), ::py::arg("from_seq"), ::py::call_guard<::py::gil_scoped_release>())
      .def("event_fd",
           [](const DeviceContext& c) {
             const int fd = hz_event_fd(c.get());
             if (fd < 0) Check(fd, "event file descriptor");
             return fd;
           })
      .def("next_event", &NextEvent, ::py::arg("timeout_ms"))
      .def(
          "ack",
          [](const DeviceContext& c, uint64_t seq, uint32_t flags) {
            Check(hz_event_ack(c.get(), seq, flags), "acknowledge event");
          },
          ::py::arg("seq"), ::py::arg("flags"), ::py::call_guard<::py::gil_scoped_release>());
}

}  // namespace hz::py
