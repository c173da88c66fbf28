// Which number, that is which directory under the root, holds each tenant's
// checkpoints. Kept in <root>/tenants.json as {"<tenant>": <number>, ...},
// replaced atomically and durably before a new number names a directory: a
// tenant whose number were lost could otherwise be given another tenant's
// number, and see that tenant's checkpoints.
//
// Thread-safe.
#ifndef HZ_CHECKPOINT_TENANT_NUMBERS_H_
#define HZ_CHECKPOINT_TENANT_NUMBERS_H_

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "hz/checkpoint/types.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"

namespace hz::checkpoint {

class TenantNumbers {
 public:
  // Reads <root>/tenants.json (absent: no tenants yet). kCorruption, naming
  // the file, when it cannot be read, holds an entry that is not a tenant
  // with a positive number, gives a number twice, or is absent while
  // numbered directories exist; the file is left as it is. `highest_on_disk` is
  // the highest tenant number found among the root's directories: new
  // numbers go above it too, so a directory whose entry was lost is never
  // handed to another tenant.
  Status Load(const std::string& root, TenantNo highest_on_disk);

  std::optional<TenantNo> Find(const TenantId& tenant) const;
  // The tenant's number, a new one (saved first) if it has none.
  StatusOr<TenantNo> FindOrAssign(const TenantId& tenant);
  // Drops the tenant's entry (saved first). Its number is never given
  // again, so a tenant created later under the same name starts empty.
  Status Forget(const TenantId& tenant);
  // The tenant of a number; empty for a directory no tenant owns.
  TenantId Name(TenantNo number) const;

 private:
  Status SaveLocked() const;

  mutable std::mutex mu_;
  std::string path_;
  TenantNo highest_ = 0;
  std::map<TenantId, TenantNo> numbers_;
  std::map<TenantNo, TenantId> names_;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_TENANT_NUMBERS_H_
