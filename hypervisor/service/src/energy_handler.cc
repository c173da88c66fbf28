#include "hz/service/energy_handler.h"

#include "hz/service/device_state.h"
#include "hz/service/wire_status.h"

namespace hz::service {

Reply EnergyHandler::Handle(const Request& req) {
  if (!ctx_.session.Granted(HZ_F_ENERGY)) return Reply::Error(HZ_S_ENOTSUP);
  if (req.hdr.opcode != HZ_OP_ENERGY_SLACK) return Reply::Error(HZ_S_ENOTSUP);
  hz_energy_slack_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.flags != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (req.result_capacity < sizeof(hz_energy_slack_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_energy_slack_result));
  }
  hz_energy_slack_result r{};
  Status st = backend_->DeclareSlack(tenant_.id(), a, &r);
  if (!st.ok()) return Reply::Error(ToWireStatus(st));
  WriteResult(req, &r, sizeof(r));
  return Reply::Ok(sizeof(r));
}

}  // namespace hz::service
