// SPDX-License-Identifier: Apache-2.0
// harmonaize._c10d: creates the "harmonaize" process group for
// torch.distributed (harmonaize/distributed.py registers it), and installs
// the registered-memory allocator.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "allocator.h"
#include "errors.h"
#include "process_group.h"

namespace py = pybind11;

namespace {

constexpr const char* kCapsuleName = "harmonaize.DeviceContext";

// The Python package's device context, from harmonaize._native's capsule:
// the backend must use the process's one connection.
std::shared_ptr<hz::py::DeviceContext> Context(const py::capsule& capsule) {
  auto* held = static_cast<std::shared_ptr<hz::py::DeviceContext>*>(
      PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  if (held == nullptr) throw py::error_already_set();
  return *held;
}

c10::intrusive_ptr<::c10d::ProcessGroup> Create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                int rank, int size,
                                                std::chrono::duration<float> timeout,
                                                const py::capsule& device) {
  std::shared_ptr<hz::py::DeviceContext> ctx = Context(device);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  py::gil_scoped_release nogil;  // the store and the join block until every rank arrives
  return c10::make_intrusive<hz::c10d::ProcessGroupHz>(store, rank, size, ms, std::move(ctx));
}

hz::c10d::ProcessGroupHz& Cast(const c10::intrusive_ptr<::c10d::ProcessGroup>& pg) {
  auto* hz = dynamic_cast<hz::c10d::ProcessGroupHz*>(pg.get());
  if (hz == nullptr) throw py::type_error("not a harmonaize process group");
  return *hz;
}

// Errors of the backend become harmonaize.errors classes (RuntimeError
// subclasses). Registered globally: they are thrown from torch's own
// bindings (ProcessGroup.allreduce, Work.wait), which share pybind11's
// internals with this module.
void TranslateErrors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hz::c10d::CollectiveError& e) {
      py::object exc =
          py::module_::import("harmonaize.errors").attr("error_for")(e.code(), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "The torch.distributed backend; use harmonaize.distributed instead.";
  TranslateErrors();
  m.def("create_process_group", &Create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::arg("device"));
  m.def("abort", [](const c10::intrusive_ptr<::c10d::ProcessGroup>& pg) { Cast(pg).Abort(); });
  m.def(
      "install_allocator",
      [](const py::capsule& device, size_t min_bytes) {
        return hz::c10d::InstallAllocator(Context(device), min_bytes);
      },
      py::arg("device"), py::arg("min_bytes") = hz::c10d::kDefaultMinAllocatorBytes);
  m.def("uninstall_allocator", &hz::c10d::UninstallAllocator);
  m.def("allocator_installed", &hz::c10d::AllocatorInstalled);
}
