// SPDX-License-Identifier: Apache-2.0
// _Device methods for provider-executed checkpoints. Slices are (address,
// length) pairs that the Python layer takes from objects it keeps alive for
// the call; every slice must lie in registered memory (the provider reads
// and writes it after the call returns to the device).
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "py_bindings.h"
#include "py_errors.h"

namespace py = pybind11;

namespace hz::py {
namespace {

using Slices = std::vector<std::pair<uintptr_t, size_t>>;

std::vector<hz_buf> ToBufs(const Slices& slices) {
  std::vector<hz_buf> bufs;
  bufs.reserve(slices.size());
  for (const auto& [addr, len] : slices) bufs.push_back({reinterpret_cast<void*>(addr), len});
  return bufs;
}

::py::dict InfoDict(const hz_ckpt_info& i) {
  ::py::dict d;
  d["step"] = i.step;
  d["bytes"] = i.bytes;
  d["time_s"] = i.time_s;
  d["state"] = i.state;
  d["tier"] = i.tier;
  d["stall_us"] = i.stall_us;
  return d;
}

void SetPolicy(const DeviceContext& c, uint32_t stream, uint32_t flags, uint32_t retention,
               uint32_t tier, uint32_t stall_budget_ms, uint32_t rpo_s) {
  const hz_ckpt_policy p{flags, retention, tier, stall_budget_ms, rpo_s};
  ::py::gil_scoped_release nogil;
  Check(hz_ckpt_set_policy(c.get(), stream, &p), "checkpoint policy");
}

::py::dict Save(const DeviceContext& c, uint32_t stream, uint64_t step, const Slices& slices,
                const std::string& meta) {
  const std::vector<hz_buf> bufs = ToBufs(slices);
  hz_ckpt_info info{};
  {
    ::py::gil_scoped_release nogil;
    Check(hz_ckpt_save(c.get(), stream, step, bufs.data(), bufs.size(), meta.data(), meta.size(),
                       &info),
          "checkpoint save");
  }
  return InfoDict(info);
}

// (info, metadata); no slices is a probe that reads only the metadata.
::py::tuple Restore(const DeviceContext& c, uint32_t stream, uint64_t step, const Slices& slices,
                    size_t meta_capacity) {
  const std::vector<hz_buf> bufs = ToBufs(slices);
  std::string meta(meta_capacity, '\0');
  size_t meta_len = meta.size();
  hz_ckpt_info info{};
  {
    ::py::gil_scoped_release nogil;
    Check(hz_ckpt_restore(c.get(), stream, step, bufs.data(), bufs.size(), meta.data(), &meta_len,
                          &info),
          "checkpoint restore");
  }
  meta.resize(meta_len);
  return ::py::make_tuple(InfoDict(info), ::py::bytes(meta));
}

::py::list List(const DeviceContext& c, uint32_t stream, size_t max_entries) {
  std::vector<hz_ckpt_info> entries(max_entries);
  size_t n = 0;
  {
    ::py::gil_scoped_release nogil;
    Check(hz_ckpt_list(c.get(), stream, entries.data(), entries.size(), &n), "checkpoint list");
  }
  ::py::list out;
  for (size_t i = 0; i < n; ++i) out.append(InfoDict(entries[i]));
  return out;
}

}  // namespace

void BindCheckpoints(DeviceClass& d) {
  d.def("ckpt_set_policy", &SetPolicy, ::py::arg("stream"), ::py::arg("flags"),
        ::py::arg("retention"), ::py::arg("tier"), ::py::arg("stall_budget_ms"), ::py::arg("rpo_s"))
      .def("ckpt_save", &Save, ::py::arg("stream"), ::py::arg("step"), ::py::arg("slices"),
           ::py::arg("meta"))
      .def("ckpt_restore", &Restore, ::py::arg("stream"), ::py::arg("step"), ::py::arg("slices"),
           ::py::arg("meta_capacity"))
      .def("ckpt_list", &List, ::py::arg("stream"), ::py::arg("max_entries"))
      .def(
          "ckpt_delete",
          [](const DeviceContext& c, uint32_t stream, uint64_t step) {
            Check(hz_ckpt_delete(c.get(), stream, step), "checkpoint delete");
          },
          ::py::arg("stream"), ::py::arg("step"), ::py::call_guard<::py::gil_scoped_release>());
}

}  // namespace hz::py
