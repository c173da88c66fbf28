// SPDX-License-Identifier: Apache-2.0
// libharmonaize errors as Python exceptions: every hz_err code raises its own
// class of harmonaize.errors (a RuntimeError subclass hierarchy), with the
// operation that failed in the message.
#ifndef HZ_GUEST_PYTHON_SRC_PY_ERRORS_H_
#define HZ_GUEST_PYTHON_SRC_PY_ERRORS_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace hz::py {

// A failed hz_* call: its code and what was being done.
class CallError : public std::runtime_error {
 public:
  CallError(int code, const std::string& operation);
  int code() const { return code_; }
  const std::string& operation() const { return operation_; }

 private:
  int code_;
  std::string operation_;
};

// Throws CallError unless rc is HZ_OK.
void Check(int rc, const char* operation);

// Sets the Python error for code: harmonaize.errors.error_for(code, message).
void RaisePython(int code, const std::string& message);

// Translates CallError and hz::Error raised by this module's functions.
void RegisterErrorTranslator();

}  // namespace hz::py

#endif  // HZ_GUEST_PYTHON_SRC_PY_ERRORS_H_
