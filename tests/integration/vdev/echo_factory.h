// The echo device (vdev::EchoDevice) as every vdev integration test and
// benchmark configures it.
#ifndef TESTS_INTEGRATION_VDEV_ECHO_FACTORY_H_
#define TESTS_INTEGRATION_VDEV_ECHO_FACTORY_H_

#include <memory>
#include <string>

#include "vdev/device.h"
#include "vdev/echo_device.h"

namespace vdev::testing {

constexpr uint16_t kEchoQueues = 4;
constexpr uint32_t kEchoConfigSize = 64;

inline EchoDevice::Options EchoOptions() {
  EchoDevice::Options o;
  o.queues = kEchoQueues;
  o.config_size = kEchoConfigSize;
  return o;
}

inline DeviceFactory MakeEchoFactory() {
  return [](const std::string&) { return std::make_unique<EchoDevice>(EchoOptions()); };
}

}  // namespace vdev::testing

#endif  // TESTS_INTEGRATION_VDEV_ECHO_FACTORY_H_
