// What the service hands its successor in a live upgrade besides its
// servers and descriptors: vdev's Snapshot::application_state, a JSON
// object. It comes over a socket, so the successor reads it as input.
#ifndef HZ_SERVICE_UPGRADE_STATE_H_
#define HZ_SERVICE_UPGRADE_STATE_H_

#include <string>

#include "hz/common/status_or.h"

namespace hz::service {

struct UpgradeState {
  // The holder id of this host's record in the cluster store; empty outside
  // a cluster. The successor renews that lease as its own, so the other
  // hosts never see the host leave (an expired record would abort every
  // communicator across hosts that spans it).
  std::string cluster_instance;
};

// "" for a state with nothing in it, as an earlier release wrote.
std::string EncodeUpgradeState(const UpgradeState& state);
// kInvalidArgument, saying what, for anything but what EncodeUpgradeState
// writes; unknown keys are ignored (a later release may add some).
StatusOr<UpgradeState> ParseUpgradeState(const std::string& text);

}  // namespace hz::service

#endif  // HZ_SERVICE_UPGRADE_STATE_H_
