#include "hz/checkpoint/types.h"

#include "hz/checkpoint/engine.h"

namespace hz::checkpoint {

const char* EventKindName(EventKind k) {
  switch (k) {
    case EventKind::kDurable:
      return "durable";
    case EventKind::kFailed:
      return "failed";
    case EventKind::kJitSaved:
      return "jit-saved";
    case EventKind::kJitFailed:
      return "jit-failed";
  }
  return "unknown";
}

const char* DecisionKindName(Decision::Kind k) {
  switch (k) {
    case Decision::Kind::kPlaceMemory:
      return "place-memory";
    case Decision::Kind::kPlaceDisk:
      return "place-disk";
    case Decision::Kind::kSpillToDisk:
      return "spill-to-disk";
    case Decision::Kind::kStagger:
      return "stagger";
    case Decision::Kind::kBackpressure:
      return "backpressure";
    case Decision::Kind::kRejectAgain:
      return "reject-again";
    case Decision::Kind::kEvict:
      return "evict";
    case Decision::Kind::kJit:
      return "jit";
    case Decision::Kind::kRecoveredCleanup:
      return "recovered-cleanup";
    case Decision::Kind::kKeepAfterFailure:
      return "keep-after-failure";
    case Decision::Kind::kReplicaDurable:
      return "replica-durable";
    case Decision::Kind::kReplicaFailed:
      return "replica-failed";
    case Decision::Kind::kReplicaStored:
      return "replica-stored";
    case Decision::Kind::kReplicaRefused:
      return "replica-refused";
  }
  return "unknown";
}

}  // namespace hz::checkpoint
