// SPDX-License-Identifier: Apache-2.0
// _Device and _Buffer: the device itself, its registered memory, topology,
// hints and communicator uids.
#include <cstring>
#include <string>

#include "py_bindings.h"
#include "py_errors.h"

namespace py = pybind11;

namespace hz::py {
namespace {

constexpr const char* kCapsuleName = "harmonaize.DeviceContext";

// Registered memory from the device's pool, readable and writable through
// the buffer protocol (memoryview, numpy, torch.frombuffer).
class Buffer {
 public:
  Buffer(std::shared_ptr<DeviceContext> ctx, size_t len) : ctx_(std::move(ctx)), len_(len) {
    if (len == 0) throw CallError(HZ_EINVAL, "allocate registered memory");
    ptr_ = ctx_->pool().Allocate(len);
    if (ptr_ == nullptr) throw CallError(HZ_ENOMEM, "allocate registered memory");
  }
  ~Buffer() { ctx_->pool().Release(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* ptr() const { return ptr_; }
  size_t size() const { return len_; }

 private:
  std::shared_ptr<DeviceContext> ctx_;
  void* ptr_ = nullptr;
  size_t len_;
};

::py::dict Info(const DeviceContext& c) {
  hz_device_info i;
  Check(hz_device_get_info(c.get(), &i), "device info");
  ::py::dict d;
  d["transport"] = std::string(i.transport);
  d["path"] = std::string(i.path);
  d["version"] = ::py::make_tuple(i.version_major, i.version_minor);
  d["num_request_queues"] = i.num_request_queues;
  d["features"] = i.features;
  d["session_id"] = i.session_id;
  d["max_regions"] = i.max_regions;
  d["max_comm_ranks"] = i.max_comm_ranks;
  return d;
}

::py::dict Topology(const DeviceContext& c) {
  hz_topology* t = nullptr;
  {
    ::py::gil_scoped_release nogil;
    Check(hz_topology_get(c.get(), &t), "topology");
  }
  ::py::dict d;
  d["version"] = t->header.version;
  d["num_hosts"] = t->header.num_hosts;
  d["cross_group_bw"] = t->header.cross_group_bw;
  d["cross_host_bw"] = t->header.cross_host_bw;
  ::py::list groups, devices;
  for (unsigned i = 0; i < t->header.num_groups; ++i) {
    const hz_topo_group& g = t->groups[i];
    groups.append(::py::dict(::py::arg("group") = g.group, ::py::arg("gpus") = g.gpus,
                             ::py::arg("nics") = g.nics, ::py::arg("intra_bw") = g.intra_bw,
                             ::py::arg("host") = g.host));
  }
  for (unsigned i = 0; i < t->header.num_devices; ++i) {
    const hz_topo_device& v = t->devices[i];
    devices.append(::py::dict(::py::arg("index") = v.index, ::py::arg("kind") = v.kind,
                              ::py::arg("group") = v.group));
  }
  hz_topology_free(t);
  d["groups"] = groups;
  d["devices"] = devices;
  return d;
}

::py::bytes NewUid(const DeviceContext& c) {
  hz_uid_t uid;
  {
    ::py::gil_scoped_release nogil;
    Check(hz_comm_get_uid(c.get(), &uid), "communicator uid");
  }
  return ::py::bytes(reinterpret_cast<const char*>(uid.bytes), sizeof(uid.bytes));
}

uint32_t HintDeclare(const DeviceContext& c, uint32_t min_batch, uint32_t max_batch,
                     uint32_t step) {
  uint32_t suggested = 0;
  ::py::gil_scoped_release nogil;
  Check(hz_hint_declare(c.get(), min_batch, max_batch, step, &suggested), "batch-size hint");
  return suggested;
}

uint64_t EnergySlack(const DeviceContext& c, uint32_t slowdown_pct, uint64_t duration_s) {
  uint64_t expires_s = 0;
  ::py::gil_scoped_release nogil;
  Check(hz_energy_slack(c.get(), slowdown_pct, duration_s, &expires_s), "energy slack");
  return expires_s;
}

::py::dict PoolStatsDict(DeviceContext& c) {
  const hz::py::PoolStats s = c.pool().Stats();
  ::py::dict d;
  d["blocks"] = s.blocks;
  d["live_bytes"] = s.live_bytes;
  d["cached_bytes"] = s.cached_bytes;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["refusals"] = s.refusals;
  return d;
}

// The shared context for the torch backend module, which must use this very
// connection (one front-end per device socket).
::py::capsule Capsule(const std::shared_ptr<DeviceContext>& c) {
  auto* held = new std::shared_ptr<DeviceContext>(c);
  return ::py::capsule(held, kCapsuleName, [](PyObject* o) {
    delete static_cast<std::shared_ptr<DeviceContext>*>(PyCapsule_GetPointer(o, kCapsuleName));
  });
}

void BindBuffer(::py::module_& m) {
  ::py::class_<Buffer>(m, "_Buffer", ::py::buffer_protocol())
      .def_property_readonly("address",
                             [](const Buffer& b) { return reinterpret_cast<uintptr_t>(b.ptr()); })
      .def("__len__", &Buffer::size)
      .def_buffer([](Buffer& b) {
        return ::py::buffer_info(b.ptr(), 1, ::py::format_descriptor<uint8_t>::format(), 1,
                                 {static_cast<::py::ssize_t>(b.size())}, {1});
      });
}

}  // namespace

DeviceClass BindDevice(::py::module_& m) {
  BindBuffer(m);
  DeviceClass d(m, "_Device");
  d.def(::py::init([](const std::string& spec) {
          try {
            return DeviceContext::Open(spec);
          } catch (const hz::Error& e) {
            throw CallError(e.code(), "open device '" + (spec.empty() ? "(default)" : spec) + "'");
          }
        }),
        ::py::arg("spec"), ::py::call_guard<::py::gil_scoped_release>())
      .def_property_readonly("spec", &DeviceContext::spec)
      .def("info", &Info)
      .def("topology", &Topology)
      .def("new_uid", &NewUid)
      .def("hint_declare", &HintDeclare)
      .def("energy_slack", &EnergySlack)
      .def("alloc",
           [](const std::shared_ptr<DeviceContext>& c, size_t len) {
             ::py::gil_scoped_release nogil;
             return std::make_unique<Buffer>(c, len);
           })
      .def("is_registered",
           [](const DeviceContext& c, uintptr_t addr, size_t len) {
             return c.IsRegistered(reinterpret_cast<const void*>(addr), len);
           })
      .def("pool_stats", &PoolStatsDict)
      .def("pool_trim",
           [](DeviceContext& c) {
             ::py::gil_scoped_release nogil;
             return c.pool().Trim();
           })
      .def("set_pool_cache", [](DeviceContext& c, size_t bytes) { c.pool().set_max_cached(bytes); })
      .def("capsule", &Capsule);
  return d;
}

}  // namespace hz::py
