// What the per-VM device needs from the checkpoint engine (SPEC §7.5). The
// service runs it on hz::checkpoint::Engine (Engines::checkpoints()); tests
// substitute their own. Every method may be called from any thread. Save,
// Restore and List may wait for staging memory or the disk, so the device
// calls Save and Restore only from work it hands to RunAsync.
#ifndef HZ_SERVICE_CKPT_BACKEND_H_
#define HZ_SERVICE_CKPT_BACKEND_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hz/checkpoint/engine.h"
#include "hz/checkpoint/types.h"
#include "hz/common/status.h"
#include "hz/common/tenant_id.h"

namespace hz::service {

class CkptBackend {
 public:
  virtual ~CkptBackend() = default;

  // Same contracts as hz::checkpoint::Engine (see engine.h).
  virtual Status SetPolicy(const TenantId& tenant, checkpoint::StreamId stream,
                           const checkpoint::Policy& policy) = 0;
  virtual Status Save(const checkpoint::SaveRequest& req, checkpoint::SaveResult* result) = 0;
  virtual Status Restore(const checkpoint::RestoreRequest& req,
                         checkpoint::RestoreResult* result) = 0;
  virtual Status List(const TenantId& tenant, checkpoint::StreamId stream,
                      uint64_t start_after_step, uint32_t max_entries,
                      std::vector<checkpoint::ListEntry>* entries, bool* more) = 0;
  virtual Status Delete(const TenantId& tenant, checkpoint::StreamId stream, uint64_t step) = 0;
  virtual Status DeclareQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                                checkpoint::IoSpan word,
                                std::span<const checkpoint::IoSpan> slices) = 0;
  virtual Status CancelQuiesce(const TenantId& tenant, checkpoint::StreamId stream) = 0;

  // A (tenant, stream) quiescence registration belongs to one session at a
  // time (SPEC §7.5.7): Claim returns false while another owner holds it.
  // vm names the owner's VM, so a notice about some VMs saves only theirs.
  virtual bool ClaimQuiesce(const TenantId& tenant, checkpoint::StreamId stream, const void* owner,
                            const std::string& vm) = 0;
  virtual void ReleaseQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                              const void* owner) = 0;

  // Runs fn exactly once on an engine thread, each tenant's work in
  // submission order, tenants in turn; a fn still queued when the engine
  // stops runs during its destruction.
  virtual void RunAsync(const TenantId& tenant, std::function<void()> fn) = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CKPT_BACKEND_H_
