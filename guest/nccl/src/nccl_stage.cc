// Staging of CUDA device buffers through registered host memory.
//
// Built with HZ_NCCL_WITH_CUDA when CMake found a CUDA toolkit. The device
// computes on host memory, so a device pointer's contents are copied to a
// registered host block on the caller's stream, the operation runs on the
// block, and results are copied back on the same stream. Host pointers pass
// through untouched (the caller's stream is synchronized first, so that work
// already queued on it has produced them).
#include "nccl_op.h"

#ifdef HZ_NCCL_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

namespace hz::nccl {
namespace {

// False without a driver or a GPU: then every pointer is a host pointer.
bool CudaUsable() {
  static const bool usable = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error
      return false;
    }
    return n > 0;
  }();
  return usable;
}

bool IsDevicePointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

ncclResult_t CudaFail(Op& op, cudaError_t e, const char* what) {
  StageDrop(op);
  return Fail(ncclUnhandledCudaError,
              std::string(op.name) + ": " + what + ": " + cudaGetErrorString(e));
}

}  // namespace

int CurrentCudaDevice() {
  if (!CudaUsable()) return -1;
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

bool ReadScalar(const void* p, void* out, size_t bytes) {
  if (!CudaUsable() || !IsDevicePointer(p)) {
    std::memcpy(out, p, bytes);
    return true;
  }
  if (cudaMemcpy(out, p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

ncclResult_t StageIn(Op& op) {
  if (!CudaUsable()) return ncclSuccess;
  bool dev_send = op.send_bytes > 0 && IsDevicePointer(op.send);
  bool dev_recv = op.recv_bytes > 0 && IsDevicePointer(op.recv);
  if (!dev_send && !dev_recv) {
    cudaError_t e = cudaStreamSynchronize(op.stream);
    return e == cudaSuccess ? ncclSuccess : CudaFail(op, e, "cudaStreamSynchronize");
  }
  size_t bytes = (dev_send ? op.send_bytes : 0) + (dev_recv ? op.recv_bytes : 0);
  hz_device_t* dev = Device();
  if (dev == nullptr) return ncclSystemError;
  void* block = nullptr;
  if (int err = hz_mem_alloc(dev, bytes, &block); err != HZ_OK)
    return FromHz(err, "staging device memory: hz_mem_alloc");
  op.host_block = block;
  auto* host = static_cast<char*>(block);
  if (dev_send) {
    op.user_send = op.send;
    cudaError_t e =
        cudaMemcpyAsync(host, op.send, op.send_bytes, cudaMemcpyDeviceToHost, op.stream);
    if (e != cudaSuccess) return CudaFail(op, e, "cudaMemcpyAsync (device to host)");
    op.send = host;
    host += op.send_bytes;
  }
  if (dev_recv) {
    op.user_recv = op.recv;
    op.recv = host;
  }
  cudaError_t e = cudaStreamSynchronize(op.stream);
  return e == cudaSuccess ? ncclSuccess : CudaFail(op, e, "cudaStreamSynchronize");
}

ncclResult_t StageOut(Op& op) {
  if (op.host_block == nullptr) return ncclSuccess;
  if (op.user_recv != nullptr) {
    cudaError_t e =
        cudaMemcpyAsync(op.user_recv, op.recv, op.recv_bytes, cudaMemcpyHostToDevice, op.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(op.stream);
    if (e != cudaSuccess) return CudaFail(op, e, "cudaMemcpyAsync (host to device)");
  }
  StageDrop(op);
  return ncclSuccess;
}

void StageDrop(Op& op) {
  if (op.host_block == nullptr) return;
  hz_mem_free(Device(), op.host_block);
  op.host_block = nullptr;
  if (op.user_send != nullptr) op.send = op.user_send;
  if (op.user_recv != nullptr) op.recv = op.user_recv;
  op.user_send = nullptr;
  op.user_recv = nullptr;
}

}  // namespace hz::nccl

#else  // !HZ_NCCL_WITH_CUDA

#include <cstring>

namespace hz::nccl {

int CurrentCudaDevice() {
  return -1;
}
bool ReadScalar(const void* p, void* out, size_t bytes) {
  std::memcpy(out, p, bytes);
  return true;
}

ncclResult_t StageIn(Op&) {
  return ncclSuccess;
}
ncclResult_t StageOut(Op&) {
  return ncclSuccess;
}
void StageDrop(Op&) {}

}  // namespace hz::nccl

#endif  // HZ_NCCL_WITH_CUDA
