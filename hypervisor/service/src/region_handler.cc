#include "hz/service/region_handler.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/collectives/types.h"
#include "hz/service/device_link.h"
#include "hz/service/pending_table.h"

namespace hz::service {

// A registration waiting to be prepared: what the request said, read out
// of the ring at once.
struct RegionHandler::PendingRegister : PendingRequest {
  uint32_t flags = 0;
  uint64_t total_len = 0;
  std::vector<hz_extent> extents;
  vdev::MemoryMapPtr memory;
};

RegionHandler::RegionHandler(const HandlerContext& ctx, RegionTable& regions,
                             const DeviceLimits& limits, BackgroundExecutor background,
                             std::function<vdev::MemoryMapPtr()> memory)
    : ctx_(ctx),
      regions_(regions),
      limits_(limits),
      background_(std::move(background)),
      memory_(std::move(memory)) {}

Reply RegionHandler::Handle(const vdev::Queue& queue, const Request& req) {
  return req.hdr.opcode == HZ_OP_REGION_UNREGISTER ? Unregister(req) : Register(queue, req);
}

Reply RegionHandler::Unregister(const Request& req) {
  hz_region_unregister_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (a.reserved != 0) return Reply::Error(HZ_S_ENOTSUP);
  uint32_t st = regions_.Unregister(a.region_id);
  ctx_.info_changed();
  return Reply::WithStatus(st);
}

Reply RegionHandler::Register(const vdev::Queue& queue, const Request& req) {
  hz_region_register_args a;
  if (uint32_t st = ReadArgs(req, &a); st != HZ_S_OK) return Reply::Error(st);
  if (req.result_capacity < sizeof(hz_region_register_result)) {
    return Reply::Error(HZ_S_ETOOSMALL, sizeof(hz_region_register_result));
  }
  if ((a.flags & ~(HZ_REGION_F_READ | HZ_REGION_F_WRITE)) != 0) return Reply::Error(HZ_S_ENOTSUP);
  if (a.flags == 0 || a.num_extents == 0) return Reply::Error(HZ_S_EINVAL);
  if (a.num_extents > limits_.max_extents) return Reply::Error(HZ_S_ELIMIT);
  // The data segment is exactly the extent array.
  if (req.data_len != static_cast<uint64_t>(a.num_extents) * sizeof(hz_extent)) {
    return Reply::Error(HZ_S_EINVAL);
  }
  auto p = std::make_shared<PendingRegister>();
  p->flags = a.flags;
  p->total_len = a.total_len;
  p->extents.resize(a.num_extents);
  req.chain->Read(req.data_offset, p->extents.data(), req.data_len);
  if (memory_) p->memory = memory_();
  if (p->memory == nullptr) p->memory = req.chain->memory();
  if (!background_) {
    uint32_t id = 0, detail = 0;
    uint32_t st = regions_.Register(p->memory, p->flags, p->total_len, p->extents, &id, &detail);
    ctx_.info_changed();
    if (st != HZ_S_OK) return Reply::Error(st, detail);
    hz_region_register_result res{};
    res.region_id = id;
    WriteResult(req, &res, sizeof(res));
    return Reply::Ok(sizeof(res));
  }
  ctx_.pending.Add(this, queue, req, p);
  waiting_.push_back(p);
  StartNext();
  return Reply::Pending();
}

void RegionHandler::StartNext() {
  if (preparing_ || waiting_.empty()) return;
  preparing_ = true;
  // The job holds the request (and with it the memory map its extents are
  // translated in). It touches the handler only through the link, on the
  // executor, where a device gone meanwhile drops it.
  background_([this, link = ctx_.link, p = waiting_.front(), limits = limits_,
               base = regions_.index(), id = regions_.NextId()] {
    RegionTable::Prepared prepared =
        RegionTable::Prepare(limits, p->memory, p->flags, p->total_len, p->extents, base, id);
    DeviceLink::Post(link, [this, pid = p->id, prepared = std::move(prepared)] {
      OnPrepared(pid, prepared);  // a copy of a few pointers
    });
  });
}

void RegionHandler::OnPrepared(uint64_t pending_id, RegionTable::Prepared prepared) {
  preparing_ = false;
  if (waiting_.empty() || waiting_.front()->id != pending_id) {
    StartNext();  // the session ended meanwhile: nobody waits for this one
    return;
  }
  uint32_t status = HZ_S_OK, detail = 0;
  if (!regions_.Commit(prepared, &status, &detail)) {
    StartNext();  // a region went since: prepare it against what is left
    return;
  }
  waiting_.pop_front();
  ctx_.info_changed();
  if (std::shared_ptr<PendingRequest> p = ctx_.pending.Take(pending_id)) {
    if (status != HZ_S_OK) {
      ctx_.pending.Finish(*p, Reply::Error(status, detail));
    } else {
      hz_region_register_result res{};
      res.region_id = prepared.region->id;
      ctx_.pending.Finish(*p, Reply::Ok(sizeof(res)),
                          {reinterpret_cast<const uint8_t*>(&res), sizeof(res)});
    }
  }
  StartNext();
}

void RegionHandler::EndSession(SessionEnd end) {
  waiting_.clear();
  if (end == SessionEnd::kNewSession) {
    // SPEC §2.7.1: what had not finished is aborted by the session's end.
    ctx_.pending.FinishAll(
        this, Reply::Error(HZ_S_EABORTED, static_cast<uint32_t>(coll::AbortCause::kSessionEnded)));
  } else {
    ctx_.pending.ForgetAll(this);
  }
}

Status RegionHandler::SaveState(nlohmann::json* out) const {
  // Nothing is in flight when the state is taken, so no registration waits.
  regions_.Save(out);
  return Status::Ok();
}

Status RegionHandler::RestoreState(const nlohmann::json& in) {
  vdev::MemoryMapPtr memory = memory_ ? memory_() : nullptr;
  if (memory == nullptr) return Status::State("no guest memory to register regions in");
  return regions_.Restore(memory, in);
}

void RegionHandler::Drain() {
  waiting_.clear();
  ctx_.pending.FinishAll(this, Reply::Error(HZ_S_ESHUTDOWN));
}

}  // namespace hz::service
