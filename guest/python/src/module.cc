// SPDX-License-Identifier: Apache-2.0
// harmonaize._native: libharmonaize for Python.
//
// Why pybind11 and not cffi: the package is more than a thin veneer over C
// calls. It keeps one shared device context per process (with a pool of
// registered memory whose lifetime follows Python objects and tensors),
// hands that context to the torch.distributed backend, a C++ extension that
// must be built against libtorch and pybind11 anyway, and turns error codes
// into a Python exception hierarchy. pybind11 does all of that in C++ with
// RAII and no hand-written reference counting, from Debian's pybind11-dev;
// cffi would need a second binding layer for the shared C++ state and a
// separate mechanism for the backend.
#include <pybind11/pybind11.h>

#include "py_bindings.h"
#include "py_errors.h"

namespace py = pybind11;

namespace {

void AddConstants(py::module_& m) {
  py::dict c;
#define HZ_CONSTANT(name) c[#name] = static_cast<long long>(name)
  HZ_CONSTANT(HZ_INT8);
  HZ_CONSTANT(HZ_UINT8);
  HZ_CONSTANT(HZ_INT32);
  HZ_CONSTANT(HZ_UINT32);
  HZ_CONSTANT(HZ_INT64);
  HZ_CONSTANT(HZ_UINT64);
  HZ_CONSTANT(HZ_FP16);
  HZ_CONSTANT(HZ_FP32);
  HZ_CONSTANT(HZ_FP64);
  HZ_CONSTANT(HZ_BF16);
  HZ_CONSTANT(HZ_SUM);
  HZ_CONSTANT(HZ_PROD);
  HZ_CONSTANT(HZ_MAX);
  HZ_CONSTANT(HZ_MIN);
  HZ_CONSTANT(HZ_AVG);
  HZ_CONSTANT(HZ_SEQ_CURSOR);
  HZ_CONSTANT(HZ_ACK_F_APPROVE);
  HZ_CONSTANT(HZ_EVENT_F_APPROVABLE);
  HZ_CONSTANT(HZ_EVENT_F_REPLAY);
  HZ_CONSTANT(HZ_CKPT_F_AUTO_SAVE_ON_NOTICE);
  HZ_CONSTANT(HZ_TIER_HOST_MEMORY);
  HZ_CONSTANT(HZ_TIER_LOCAL_DISK);
  HZ_CONSTANT(HZ_CKPT_STAGED);
  HZ_CONSTANT(HZ_CKPT_DURABLE);
  HZ_CONSTANT(HZ_TOPIC_ALL);
#undef HZ_CONSTANT
  c["HZ_STEP_LATEST"] = HZ_STEP_LATEST;
  m.attr("CONSTANTS") = c;
}

void AddErrorCodes(py::module_& m) {
  py::dict codes;
  for (int code : {HZ_EINVAL,   HZ_ENOTSUP,   HZ_EPERM,      HZ_ENOENT,    HZ_EEXIST,  HZ_ELIMIT,
                   HZ_EAGAIN,   HZ_ETIMEDOUT, HZ_EABORTED,   HZ_EMISMATCH, HZ_EFAULT,  HZ_EIO,
                   HZ_ECORRUPT, HZ_ESHUTDOWN, HZ_EVERSION,   HZ_ETOOSMALL, HZ_EBUSY,   HZ_ESTATE,
                   HZ_EQUEUE,   HZ_ENODEV,    HZ_ETRANSPORT, HZ_ENOMEM,    HZ_EPENDING}) {
    codes[py::int_(code)] = hz_strerror(code);
  }
  m.attr("ERROR_CODES") = codes;
  m.def("strerror", &hz_strerror, py::arg("code"));
  m.def("raise_error",
        [](int code, const std::string& operation) { hz::py::Check(code, operation.c_str()); });
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "libharmonaize bindings; use the harmonaize package instead.";
  hz::py::RegisterErrorTranslator();
  AddConstants(m);
  AddErrorCodes(m);
  hz::py::DeviceClass device = hz::py::BindDevice(m);
  hz::py::BindEvents(device);
  hz::py::BindCheckpoints(device);
  hz::py::BindCommunicator(m);
}
