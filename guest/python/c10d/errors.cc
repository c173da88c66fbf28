// SPDX-License-Identifier: Apache-2.0
#include "errors.h"

#include "harmonaize/hz.h"

namespace hz::c10d {
namespace {

const char* Name(int code) {
  switch (code) {
    case HZ_EINVAL:
      return "HZ_EINVAL";
    case HZ_ENOTSUP:
      return "HZ_ENOTSUP";
    case HZ_EPERM:
      return "HZ_EPERM";
    case HZ_ENOENT:
      return "HZ_ENOENT";
    case HZ_EEXIST:
      return "HZ_EEXIST";
    case HZ_ELIMIT:
      return "HZ_ELIMIT";
    case HZ_EAGAIN:
      return "HZ_EAGAIN";
    case HZ_ETIMEDOUT:
      return "HZ_ETIMEDOUT";
    case HZ_EABORTED:
      return "HZ_EABORTED";
    case HZ_EMISMATCH:
      return "HZ_EMISMATCH";
    case HZ_EFAULT:
      return "HZ_EFAULT";
    case HZ_EIO:
      return "HZ_EIO";
    case HZ_ECORRUPT:
      return "HZ_ECORRUPT";
    case HZ_ESHUTDOWN:
      return "HZ_ESHUTDOWN";
    case HZ_EVERSION:
      return "HZ_EVERSION";
    case HZ_ETOOSMALL:
      return "HZ_ETOOSMALL";
    case HZ_EBUSY:
      return "HZ_EBUSY";
    case HZ_ESTATE:
      return "HZ_ESTATE";
    case HZ_EQUEUE:
      return "HZ_EQUEUE";
    case HZ_ENODEV:
      return "HZ_ENODEV";
    case HZ_ETRANSPORT:
      return "HZ_ETRANSPORT";
    case HZ_ENOMEM:
      return "HZ_ENOMEM";
    case HZ_EPENDING:
      return "HZ_EPENDING";
    default:
      return "hz_err";
  }
}

// What the code means for a job, in its own words.
const char* Meaning(int code) {
  switch (code) {
    case HZ_ETIMEDOUT:
      return "not every rank called this collective within the process group's timeout; the "
             "communicator is aborted on every rank";
    case HZ_EABORTED:
      return "the communicator was aborted: a rank's process or device went away, a rank timed "
             "out, or a rank aborted it; this process group cannot run further collectives";
    case HZ_EMISMATCH:
      return "the ranks called different collectives, counts, dtypes, reduce ops or roots at "
             "this point of their programs";
    case HZ_ENODEV:
    case HZ_ETRANSPORT:
      return "the connection to the device was lost (harmonaized stopped, or the device was "
             "reset)";
    case HZ_ESHUTDOWN:
      return "the host service is shutting down";
    case HZ_ENOMEM:
    case HZ_ELIMIT:
      return "the device has no registered memory or regions left for this buffer";
    default:
      return nullptr;
  }
}

}  // namespace

std::string Describe(int code, const std::string& operation, int rank, int size) {
  std::string s = "harmonaize " + operation + " failed on rank " + std::to_string(rank) + " of " +
                  std::to_string(size) + ": " + hz_strerror(code) + " (" + Name(code) + ")";
  if (const char* m = Meaning(code)) s += std::string(": ") + m;
  return s;
}

void Fail(int code, const std::string& operation, int rank, int size) {
  throw CollectiveError(code, Describe(code, operation, rank, size));
}

}  // namespace hz::c10d
