// CKPT_POLICY, CKPT_SAVE, CKPT_RESTORE, CKPT_LIST, CKPT_DELETE and
// CKPT_QUIESCE (SPEC §7.5) of one device, on a CkptBackend. Slices resolve
// to host spans through the session's region table, as for collectives. A
// slice whose region spans several host extents is staged through a bounce
// buffer, so each guest slice is one slice of the checkpoint whatever the
// VM's layout.
//
// CKPT_SAVE and CKPT_RESTORE are validated and resolved on the connection's
// executor, then run on a checkpoint-engine thread (RunAsync): a save's copy
// into staging, its wait for staging memory and a restore's disk reads never
// hold up the other VMs this executor serves. The answer comes back through
// the executor, like a collective's, and the regions stay pinned until then.
// When the session ends, EndSession cancels them and waits until none
// touches guest memory any more; a SAVE answers when its bytes are in
// staging (SPEC §7.5.2).
#ifndef HZ_SERVICE_CKPT_HANDLER_H_
#define HZ_SERVICE_CKPT_HANDLER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "hz/service/ckpt_backend.h"
#include "hz/service/config.h"
#include "hz/service/family_handler.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "vdev/device.h"

namespace hz::service {

struct CkptOp;
struct CkptSpans;

class CheckpointHandler : public FamilyHandler {
 public:
  CheckpointHandler(CkptBackend* backend, const HandlerContext& ctx, const RegionTable& regions,
                    const DeviceLimits& limits, const Tenant& tenant);
  ~CheckpointHandler() override;

  uint64_t Features() const override;
  // Drops the session's quiescence registrations and stops every CKPT_SAVE
  // and CKPT_RESTORE in flight from touching guest memory before it returns.
  void EndSession(SessionEnd end) override;
  // Nothing to do: the requests in flight watch the service's draining flag
  // and answer HZ_S_ESHUTDOWN themselves.
  void Drain() override {}
  // Checkpoints in flight finish before the state is taken; each quiescence
  // registration goes over as the guest declared it and is declared again
  // on the restored regions (ckpt_handler_state.cc).
  Status SaveState(nlohmann::json* out) const override;
  Status RestoreState(const nlohmann::json& in) override;
  // Changes whenever a registration is declared, replaced or dropped: what
  // a crash journal must follow.
  uint64_t registrations_changed() const { return registrations_changed_; }

  Reply Handle(const vdev::Queue& queue, const Request& req);

 private:
  // A CKPT_QUIESCE registration of this session: it holds its regions.
  struct QuiesceReg {
    TenantId tenant;
    hz_slice word;  // as the guest declared them
    std::vector<hz_slice> slices;
    std::vector<RegionPin> pins;
  };

  Reply SetPolicy(const vdev::Queue& queue, const Request& req, const TenantId& tid);
  // start: when the request reached the handler; a save reports its stall from there.
  Reply Save(const vdev::Queue& queue, const Request& req, const TenantId& tid,
             std::chrono::steady_clock::time_point start);
  Reply Restore(const vdev::Queue& queue, const Request& req, const TenantId& tid);
  Reply List(const Request& req, const TenantId& tid);
  Reply Delete(const vdev::Queue& queue, const Request& req, const TenantId& tid);
  Reply Quiesce(const Request& req, const TenantId& tid);
  // Resolves and declares (or replaces) stream's registration: an HZ_S_
  // status, with *detail naming the offending slice (slices.size(): the word).
  uint32_t Register(const TenantId& tid, uint32_t stream, const hz_slice& word,
                    std::vector<hz_slice> slices, uint32_t* detail);
  // Resolves slices for reading (save) or writing (restore); *detail names
  // the offending slice.
  uint32_t ResolveSlices(const std::vector<hz_slice>& slices, bool write, CkptSpans* out,
                         uint32_t* detail) const;
  // Hands op to an engine thread; it is answered through OnOpDone.
  Reply Start(const vdev::Queue& queue, const Request& req, std::shared_ptr<CkptOp> op);
  void OnOpDone(CkptOp& op);
  // Cancels every op in flight and waits for those running.
  void StopOps();
  void DropQuiesce(uint32_t stream);

  CkptBackend* const backend_;  // null: checkpoints are not offered
  const HandlerContext ctx_;
  const RegionTable& regions_;
  const DeviceLimits& limits_;
  const Tenant& tenant_;
  std::map<uint32_t, QuiesceReg> quiesce_;  // stream -> registration
  uint64_t registrations_changed_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CKPT_HANDLER_H_
