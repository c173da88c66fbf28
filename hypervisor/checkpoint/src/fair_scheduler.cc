#include "fair_scheduler.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hz::checkpoint {

FairScheduler::FairScheduler(uint64_t bandwidth_bytes_per_s, uint64_t quantum_bytes,
                             uint64_t burst_bytes)
    : bandwidth_(bandwidth_bytes_per_s),
      quantum_(std::max<uint64_t>(quantum_bytes, 1)),
      burst_(static_cast<double>(burst_bytes)) {}

void FairScheduler::SetWeight(TenantNo tenant, uint32_t weight) {
  state_[tenant].weight = std::max<uint32_t>(weight, 1);
}

uint64_t FairScheduler::charged(TenantNo tenant) const {
  auto it = state_.find(tenant);
  return it == state_.end() ? 0 : it->second.charged;
}

void FairScheduler::Refill(uint64_t now_us, std::span<const Candidate> ready) {
  uint64_t elapsed = have_time_ && now_us > last_us_ ? now_us - last_us_ : 0;
  last_us_ = std::max(last_us_, now_us);
  have_time_ = true;
  if (bandwidth_ == 0) return;
  uint64_t weights = 0;
  for (const Candidate& c : ready) weights += state_[c.tenant].weight;
  for (const Candidate& c : ready) {
    State& s = state_[c.tenant];
    if (s.fresh) {
      s.tokens = burst_;
      s.fresh = false;
      continue;
    }
    double rate = static_cast<double>(bandwidth_) * s.weight / static_cast<double>(weights);
    s.tokens = std::min(burst_, s.tokens + rate * static_cast<double>(elapsed) / 1e6);
  }
}

std::optional<TenantNo> FairScheduler::Pick(uint64_t now_us, std::span<const Candidate> ready,
                                            uint64_t* retry_us) {
  *retry_us = now_us;
  if (ready.empty()) {
    current_.reset();
    return std::nullopt;
  }
  Refill(now_us, ready);
  // Tenants without work lose their deficit (classic DRR): idleness earns no credit.
  for (auto& [id, s] : state_) {
    bool has_work = std::any_of(ready.begin(), ready.end(),
                                [id = id](const Candidate& c) { return c.tenant == id; });
    if (!has_work) s.deficit = 0;
  }
  auto has_tokens = [&](TenantNo t) { return bandwidth_ == 0 || state_[t].tokens >= 0; };

  // Visit order: ready tenants sorted by id, starting at the current turn.
  std::vector<Candidate> order(ready.begin(), ready.end());
  std::sort(order.begin(), order.end(),
            [](const Candidate& a, const Candidate& b) { return a.tenant < b.tenant; });
  size_t start = 0;
  bool current_ready = false;
  if (current_) {
    auto it = std::lower_bound(order.begin(), order.end(), *current_,
                               [](const Candidate& c, TenantNo t) { return c.tenant < t; });
    if (it != order.end() && it->tenant == *current_) current_ready = true;
    start = static_cast<size_t>(it - order.begin()) % order.size();
  }
  // At most a few rounds: each visit adds a quantum, so a tenant whose chunk
  // is larger than one quantum is served within head/quantum rounds.
  size_t visits = 0;
  const size_t max_visits = order.size() * 64;
  size_t i = start;
  bool first = true;
  while (visits++ < max_visits) {
    const Candidate& c = order[i];
    State& s = state_[c.tenant];
    if (!(first && current_ready)) s.deficit += static_cast<int64_t>(quantum_ * s.weight);
    first = false;
    if (has_tokens(c.tenant) && s.deficit >= static_cast<int64_t>(c.head_bytes)) {
      s.deficit -= static_cast<int64_t>(c.head_bytes);
      s.charged += c.head_bytes;
      if (bandwidth_ != 0) s.tokens -= static_cast<double>(c.head_bytes);
      current_ = c.tenant;
      return c.tenant;
    }
    if (!has_tokens(c.tenant))
      s.deficit = std::min<int64_t>(s.deficit, static_cast<int64_t>(quantum_ * s.weight));
    i = (i + 1) % order.size();
    bool anyone_has_tokens = std::any_of(order.begin(), order.end(),
                                         [&](const Candidate& o) { return has_tokens(o.tenant); });
    if (!anyone_has_tokens) break;
  }
  // Everyone is out of tokens: report when the first one refills.
  uint64_t weights = 0;
  for (const Candidate& c : order) weights += state_[c.tenant].weight;
  double best = -1;
  for (const Candidate& c : order) {
    const State& s = state_[c.tenant];
    double rate = static_cast<double>(bandwidth_) * s.weight / static_cast<double>(weights);
    double wait_s = rate > 0 ? (-s.tokens) / rate : 1.0;
    if (best < 0 || wait_s < best) best = wait_s;
  }
  current_.reset();
  *retry_us = now_us + static_cast<uint64_t>(std::ceil(std::max(best, 0.0) * 1e6)) + 1;
  return std::nullopt;
}

}  // namespace hz::checkpoint
