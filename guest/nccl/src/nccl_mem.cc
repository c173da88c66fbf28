// Memory: ncclMemAlloc hands out the device's registered host memory, and
// buffer/window registration registers with the device where the transport
// allows it. Registration is a performance hint in NCCL too: a buffer the
// transport cannot register still works in every operation (staged).
#include <string>

#include "nccl_internal.h"

namespace hz::nccl {
namespace {

// What ncclCommRegister and ncclCommWindowRegister hand back.
struct Registration {
  ncclComm* comm = nullptr;
  void* buff = nullptr;
  bool registered = false;  // false: the transport refused, operations stage it
};

// Registers buff with the device. A refusal that only means "not on this
// transport" (virtio-user registers only its arena) or "already registered"
// (ncclMemAlloc memory) keeps an unregistered handle; other failures fail.
ncclResult_t Register(const char* what, ncclComm* comm, void* buff, size_t size,
                      Registration** out) {
  if (comm == nullptr || buff == nullptr || size == 0 || out == nullptr)
    return Fail(ncclInvalidArgument,
                std::string(what) + ": comm, buff or handle is NULL, or size 0");
  hz_device_t* dev = Device();
  if (dev == nullptr) return ncclSystemError;
  auto* reg = new Registration{comm, buff, false};
  int err = hz_mem_register(dev, buff, size);
  if (err == HZ_OK) {
    reg->registered = true;
  } else if (err == HZ_EEXIST || err == HZ_EINVAL || err == HZ_EFAULT || err == HZ_ENOTSUP) {
    Log(Level::kInfo, "%s: %p (%zu bytes) stays unregistered: %s; operations stage it", what, buff,
        size, hz_strerror(err));
  } else {
    delete reg;
    return FromHz(err, (std::string(what) + ": hz_mem_register").c_str());
  }
  *out = reg;
  return ncclSuccess;
}

ncclResult_t Deregister(const char* what, ncclComm* comm, Registration* reg) {
  if (comm == nullptr || reg == nullptr)
    return Fail(ncclInvalidArgument, std::string(what) + ": comm or handle is NULL");
  if (reg->comm != comm)
    return Fail(ncclInvalidArgument,
                std::string(what) + ": the handle was registered on another communicator");
  int err = reg->registered ? hz_mem_unregister(Device(), reg->buff) : HZ_OK;
  delete reg;
  return FromHz(err, (std::string(what) + ": hz_mem_unregister").c_str());
}

}  // namespace
}  // namespace hz::nccl

using hz::nccl::Fail;
using hz::nccl::FromHz;
using hz::nccl::Registration;

extern "C" {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr || size == 0)
    return Fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL or size is 0");
  hz_device_t* dev = hz::nccl::Device();
  if (dev == nullptr) return ncclSystemError;
  return FromHz(hz_mem_alloc(dev, size, ptr), "ncclMemAlloc: hz_mem_alloc");
}

ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;  // as free(NULL)
  hz_device_t* dev = hz::nccl::Device();
  if (dev == nullptr) return ncclSystemError;
  return FromHz(hz_mem_free(dev, ptr), "ncclMemFree: hz_mem_free (not from ncclMemAlloc?)");
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  Registration* reg = nullptr;
  ncclResult_t r =
      hz::nccl::Register("ncclCommRegister", comm, buff, size, handle ? &reg : nullptr);
  if (r == ncclSuccess) *handle = reg;
  return r;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return hz::nccl::Deregister("ncclCommDeregister", comm, static_cast<Registration*>(handle));
}

// Windows exist for NCCL's device-side API and symmetric kernels, neither of
// which the device has; collectives on a window's buffer work as on any other.
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC)
    return Fail(ncclInvalidArgument,
                "ncclCommWindowRegister: unknown winFlags " + std::to_string(winFlags));
  Registration* reg = nullptr;
  ncclResult_t r =
      hz::nccl::Register("ncclCommWindowRegister", comm, buff, size, win ? &reg : nullptr);
  if (r == ncclSuccess) *win = reinterpret_cast<ncclWindow_t>(reg);
  return r;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return hz::nccl::Deregister("ncclCommWindowDeregister", comm,
                              reinterpret_cast<Registration*>(win));
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclMemAlloc)
HZ_NCCL_ALIAS(ncclMemFree)
HZ_NCCL_ALIAS(ncclCommRegister)
HZ_NCCL_ALIAS(ncclCommDeregister)
HZ_NCCL_ALIAS(ncclCommWindowRegister)
HZ_NCCL_ALIAS(ncclCommWindowDeregister)
