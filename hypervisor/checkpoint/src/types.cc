#include "hz/checkpoint/types.h"

#include "hz/checkpoint/engine.h"

namespace hz::checkpoint {

const char* StatusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInvalid:
      return "invalid";
    case Status::kNotFound:
      return "not-found";
    case Status::kExists:
      return "exists";
    case Status::kBusy:
      return "busy";
    case Status::kState:
      return "state";
    case Status::kLimit:
      return "limit";
    case Status::kAgain:
      return "again";
    case Status::kTimedOut:
      return "timed-out";
    case Status::kIo:
      return "io";
    case Status::kCorrupt:
      return "corrupt";
    case Status::kShutdown:
      return "shutdown";
    case Status::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

uint32_t ToWireStatus(Status s) {
  switch (s) {
    case Status::kOk:
      return HZ_S_OK;
    case Status::kInvalid:
      return HZ_S_EINVAL;
    case Status::kNotFound:
      return HZ_S_ENOENT;
    case Status::kExists:
      return HZ_S_EEXIST;
    case Status::kBusy:
      return HZ_S_EBUSY;
    case Status::kState:
      return HZ_S_ESTATE;
    case Status::kLimit:
      return HZ_S_ELIMIT;
    case Status::kAgain:
      return HZ_S_EAGAIN;
    case Status::kTimedOut:
      return HZ_S_ETIMEDOUT;
    case Status::kIo:
      return HZ_S_EIO;
    case Status::kCorrupt:
      return HZ_S_ECORRUPT;
    case Status::kShutdown:
      return HZ_S_ESHUTDOWN;
    case Status::kCancelled:
      return HZ_S_EABORTED;
  }
  return HZ_S_EIO;
}

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
  }
  return "unknown";
}

}  // namespace hz::checkpoint
