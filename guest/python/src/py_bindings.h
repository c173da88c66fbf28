// SPDX-License-Identifier: Apache-2.0
// The pieces of the harmonaize._native module, one function per family, so
// that each file stays small. The Python package (harmonaize/*.py) wraps
// these in its public, documented API.
#ifndef HZ_GUEST_PYTHON_SRC_PY_BINDINGS_H_
#define HZ_GUEST_PYTHON_SRC_PY_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <memory>

#include "device_context.h"

namespace hz::py {

using DeviceClass = pybind11::class_<DeviceContext, std::shared_ptr<DeviceContext>>;

// _Device: open, info, registered buffers, topology, hints, uids, the pool.
DeviceClass BindDevice(pybind11::module_& m);
// _Device methods: subscribe, event fd, next event, ack.
void BindEvents(DeviceClass& device);
// _Device methods: checkpoint policy, save, restore, list, delete.
void BindCheckpoints(DeviceClass& device);
// _Communicator: a raw communicator over registered buffers (tests, benchmarks).
void BindCommunicator(pybind11::module_& m);

}  // namespace hz::py

#endif  // HZ_GUEST_PYTHON_SRC_PY_BINDINGS_H_
