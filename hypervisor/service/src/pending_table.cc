#include "hz/service/pending_table.h"

namespace hz::service {

void PendingTable::Add(const FamilyHandler* owner, const vdev::Queue& queue, const Request& req,
                       std::shared_ptr<PendingRequest> p) {
  p->id = next_id_++;
  p->owner = owner;
  p->chain = *req.chain;
  p->req = req;
  p->req.chain = &p->chain;
  p->queue = queue.index();
  p->queue_gen = queues_.gen(queue.index());
  requests_.emplace(p->id, std::move(p));
  Counted();
}

std::shared_ptr<PendingRequest> PendingTable::Take(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  std::shared_ptr<PendingRequest> p = std::move(it->second);
  requests_.erase(it);
  Counted();
  return p;
}

void PendingTable::Finish(const PendingRequest& p, const Reply& reply,
                          std::span<const uint8_t> result) {
  counters_.Count(p.opcode(), reply.status(), p.req.taken);
  if (reply.ok() && p.bytes != 0) counters_.AddBytes(p.opcode(), p.bytes);
  vdev::Queue* queue = queues_.Live(p.queue, p.queue_gen);
  if (queue == nullptr) return;  // the request's ring is gone
  uint32_t result_len = reply.result_len();
  if (reply.ok() && !result.empty() && WriteResult(p.req, result.data(), result.size())) {
    result_len = static_cast<uint32_t>(result.size());
  }
  uint32_t used =
      WriteStatus(p.chain, reply.status(), result_len, p.req.hdr.request_id, reply.detail());
  queue->Complete(p.chain, used);
  queue->Flush();
}

void PendingTable::Return(const PendingRequest& p) {
  if (vdev::Queue* queue = queues_.Live(p.queue, p.queue_gen)) queue->Return(p.chain);
}

void PendingTable::FinishAll(const FamilyHandler* owner, const Reply& reply,
                             const std::function<bool(const PendingRequest&)>& match) {
  std::vector<std::shared_ptr<PendingRequest>> done;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second->owner == owner && (!match || match(*it->second))) {
      done.push_back(std::move(it->second));
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
  Counted();
  for (const auto& p : done) Finish(*p, reply);
}

void PendingTable::ForgetAll(const FamilyHandler* owner) {
  std::erase_if(requests_, [owner](const auto& entry) { return entry.second->owner == owner; });
  Counted();
}

size_t PendingTable::Count(const FamilyHandler* owner, uint16_t opcode) const {
  size_t n = 0;
  for (const auto& [id, p] : requests_) n += p->owner == owner && p->opcode() == opcode;
  return n;
}

}  // namespace hz::service
