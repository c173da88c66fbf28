#include "hz/common/tenant_id.h"

#include <ostream>

namespace hz {

std::ostream& operator<<(std::ostream& os, const TenantId& tenant) {
  return os << tenant.name();
}

}  // namespace hz
