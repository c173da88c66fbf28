// SPDX-License-Identifier: Apache-2.0
#include "py_errors.h"

#include "harmonaize/hz.hpp"

namespace py = pybind11;

namespace hz::py {

CallError::CallError(int code, const std::string& operation)
    : std::runtime_error(operation + ": " + hz_strerror(code)),
      code_(code),
      operation_(operation) {}

void Check(int rc, const char* operation) {
  if (rc != HZ_OK) throw CallError(rc, operation);
}

void RaisePython(int code, const std::string& message) {
  // The hierarchy is plain Python (harmonaize/errors.py), so it carries
  // docstrings and can be caught without importing the native module.
  ::py::object exc = ::py::module_::import("harmonaize.errors").attr("error_for")(code, message);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

void RegisterErrorTranslator() {
  ::py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CallError& e) {
      RaisePython(e.code(), e.what());
    } catch (const hz::Error& e) {
      RaisePython(e.code(), e.what());
    }
  });
}

}  // namespace hz::py
