// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "harmonaize": a c10d ProcessGroup whose
// collectives the provider executes through the device.
//
// Ranks agree on a communicator uid through torch's own Store (TCPStore,
// FileStore, ...), then join it on their process's device. Every operation
// returns at once with a Work whose future completes when the device does;
// failures (a rank that died, the device's timeout, a mismatch) complete it
// with an exception on every rank, and Work.wait(timeout) aborts the
// communicator when its own deadline passes, so no rank waits forever.
//
// Tensors in the device's registered memory (see allocator.h) go to the
// device in place; others are staged through registered blocks that are
// reused (small ones travel inside the request).
#ifndef HZ_GUEST_PYTHON_C10D_PROCESS_GROUP_H_
#define HZ_GUEST_PYTHON_C10D_PROCESS_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm_engine.h"
#include "device_context.h"

namespace hz::c10d {

class OpIo;

class ProcessGroupHz : public ::c10d::ProcessGroup {
 public:
  using Work = ::c10d::Work;
  using WorkPtr = c10::intrusive_ptr<Work>;
  using Tensors = std::vector<at::Tensor>;
  using TensorLists = std::vector<std::vector<at::Tensor>>;

  // Blocks until every rank has joined (or the timeout passes).
  ProcessGroupHz(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                 std::chrono::milliseconds timeout, std::shared_ptr<py::DeviceContext> ctx);
  ~ProcessGroupHz() override;

  const std::string getBackendName() const override { return "harmonaize"; }

  WorkPtr broadcast(Tensors& tensors, const ::c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const ::c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const ::c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const ::c10d::ReduceOptions& opts) override;
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const ::c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const ::c10d::AllgatherOptions& opts) override;
  WorkPtr gather(TensorLists& outputs, Tensors& inputs, const ::c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, TensorLists& inputs,
                  const ::c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const ::c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const ::c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const ::c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const ::c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst, int tag) override;
  WorkPtr recv(Tensors& tensors, int src, int tag) override;
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  WorkPtr barrier(const ::c10d::BarrierOptions& opts) override;

  // Aborts the communicator on every rank (pending and later operations fail).
  void Abort();

 private:
  // Posts an operation and returns its Work, completed with `outputs`.
  WorkPtr Launch(::c10d::OpType type, const char* name, Tensors outputs,
                 const std::shared_ptr<OpIo>& io, std::chrono::milliseconds timeout,
                 std::vector<RequestFn> requests);
  // Sends and receives of one operation, each (pointer, bytes, peer).
  struct Transfer {
    const void* send;
    void* recv;
    size_t bytes;
    int peer;
  };
  WorkPtr Exchange(::c10d::OpType type, const char* name, Tensors outputs,
                   const std::shared_ptr<OpIo>& io, std::chrono::milliseconds timeout,
                   std::vector<Transfer> transfers);

  std::shared_ptr<py::DeviceContext> ctx_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<CommEngine> engine_;
};

}  // namespace hz::c10d

#endif  // HZ_GUEST_PYTHON_C10D_PROCESS_GROUP_H_
