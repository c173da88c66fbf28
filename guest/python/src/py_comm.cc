// SPDX-License-Identifier: Apache-2.0
// _Communicator: hz_comm_* over raw addresses, with no framework in between.
// The torch backend does not use it; tests use it as a reference and the
// PyTorch benchmark times it as the raw hz_allreduce the backend is judged
// against.
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "py_bindings.h"
#include "py_errors.h"

namespace py = pybind11;

namespace hz::py {
namespace {

class Communicator {
 public:
  Communicator(std::shared_ptr<DeviceContext> ctx, const std::string& uid, uint32_t nranks,
               uint32_t rank, uint32_t timeout_ms)
      : ctx_(std::move(ctx)) {
    hz_uid_t u;
    if (uid.size() != sizeof(u.bytes)) throw CallError(HZ_EINVAL, "communicator uid");
    std::memcpy(u.bytes, uid.data(), sizeof(u.bytes));
    hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
    cfg.timeout_ms = timeout_ms;
    ::py::gil_scoped_release nogil;
    Check(hz_comm_init(ctx_->get(), &u, nranks, rank, &cfg, &comm_), "join communicator");
  }
  ~Communicator() { Destroy(); }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  void Destroy() {
    if (comm_ != nullptr) hz_comm_destroy(std::exchange(comm_, nullptr));
  }
  hz_comm_t* get() const {
    if (comm_ == nullptr) throw CallError(HZ_ESTATE, "communicator already destroyed");
    return comm_;
  }

 private:
  std::shared_ptr<DeviceContext> ctx_;
  hz_comm_t* comm_ = nullptr;
};

void AllReduce(const Communicator& c, uintptr_t send, uintptr_t recv, size_t count, int dtype,
               int op) {
  hz_comm_t* comm = c.get();
  ::py::gil_scoped_release nogil;
  Check(hz_allreduce(comm, reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv),
                     count, static_cast<hz_dtype>(dtype), static_cast<hz_redop>(op)),
        "all-reduce");
}

}  // namespace

void BindCommunicator(::py::module_& m) {
  ::py::class_<Communicator>(m, "_Communicator")
      .def(::py::init<std::shared_ptr<DeviceContext>, const std::string&, uint32_t, uint32_t,
                      uint32_t>(),
           ::py::arg("device"), ::py::arg("uid"), ::py::arg("nranks"), ::py::arg("rank"),
           ::py::arg("timeout_ms"))
      .def_property_readonly("rank", [](const Communicator& c) { return hz_comm_rank(c.get()); })
      .def_property_readonly("size", [](const Communicator& c) { return hz_comm_size(c.get()); })
      .def("allreduce", &AllReduce, ::py::arg("send"), ::py::arg("recv"), ::py::arg("count"),
           ::py::arg("dtype"), ::py::arg("op"))
      .def("barrier",
           [](const Communicator& c) {
             hz_comm_t* comm = c.get();
             ::py::gil_scoped_release nogil;
             Check(hz_barrier(comm), "barrier");
           })
      .def("destroy", &Communicator::Destroy, ::py::call_guard<::py::gil_scoped_release>());
}

}  // namespace hz::py
