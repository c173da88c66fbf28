// SPDX-License-Identifier: Apache-2.0
// Errors of the torch.distributed backend: which operation failed on which
// rank, the device's code, and what it means for the job. Raised to Python
// as the harmonaize.errors class of the code (a RuntimeError).
#ifndef HZ_GUEST_PYTHON_C10D_ERRORS_H_
#define HZ_GUEST_PYTHON_C10D_ERRORS_H_

#include <stdexcept>
#include <string>

namespace hz::c10d {

class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(int code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// "harmonaize allreduce failed on rank 1 of 3: <strerror> (HZ_EABORTED): <what it means>".
std::string Describe(int code, const std::string& operation, int rank, int size);

// Throws CollectiveError(code, Describe(...)).
[[noreturn]] void Fail(int code, const std::string& operation, int rank, int size);

}  // namespace hz::c10d

#endif  // HZ_GUEST_PYTHON_C10D_ERRORS_H_
