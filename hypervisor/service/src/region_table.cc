#include "hz/service/region_table.h"

#include <algorithm>
#include <limits>

#include "vdev/memory_map.h"

namespace hz::service {

namespace {
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
}  // namespace

uint32_t RegionTable::Register(const vdev::MemoryMapPtr& memory, uint32_t flags, uint64_t total_len,
                               const std::vector<hz_extent>& extents, uint32_t* id,
                               uint32_t* detail) {
  *detail = 0;
  // The checks run in the order SPEC §7.2.1 lists them.
  if ((flags & ~(HZ_REGION_F_READ | HZ_REGION_F_WRITE)) != 0) return HZ_S_ENOTSUP;
  if (flags == 0) return HZ_S_EINVAL;
  if (extents.empty()) return HZ_S_EINVAL;
  if (extents.size() > limits_.max_extents) return HZ_S_ELIMIT;

  uint64_t sum = 0;
  for (size_t i = 0; i < extents.size(); ++i) {
    const hz_extent& e = extents[i];
    *detail = static_cast<uint32_t>(i);
    if (e.len == 0 || e.gpa > kU64Max - e.len) return HZ_S_EINVAL;
  }
  *detail = 0;
  for (const hz_extent& e : extents) {
    if (e.len > kU64Max - sum) return HZ_S_EINVAL;
    sum += e.len;
  }
  if (sum != total_len) return HZ_S_EINVAL;
  if (total_len > limits_.max_region_bytes) return HZ_S_ELIMIT;

  auto region = std::make_shared<Region>();
  if (memory == nullptr) return HZ_S_EFAULT;
  for (size_t i = 0; i < extents.size(); ++i) {
    if (!memory->TranslateGpa(extents[i].gpa, extents[i].len, &region->host)) {
      *detail = static_cast<uint32_t>(i);
      return HZ_S_EFAULT;
    }
  }

  if (uint32_t st = CheckOverlaps(extents, detail); st != HZ_S_OK) return st;

  if (regions_.size() >= limits_.max_regions) return HZ_S_ELIMIT;
  // extents_ holds every extent of this VM's regions (their gpas differ).
  if (extents_.size() + extents.size() > limits_.max_device_extents) return HZ_S_ELIMIT;
  region->flags = flags;
  region->total_len = total_len;
  region->extents = extents;
  region->memory = memory;
  uint64_t off = 0;
  region->starts.reserve(region->host.size());
  for (const vdev::Segment& s : region->host) {
    region->starts.push_back(off);
    off += s.len;
  }

  if (uint32_t st = tenant_->ReserveRegion(total_len, extents.size()); st != HZ_S_OK) return st;

  // Ids count up and skip the reserved values and live ids, so a stale id
  // from an unregistered region is not silently reused soon.
  while (next_id_ == HZ_REGION_NONE || next_id_ == HZ_REGION_INLINE || regions_.count(next_id_)) {
    next_id_++;
  }
  region->id = next_id_++;
  for (const hz_extent& e : extents) extents_[e.gpa] = {e.gpa + e.len, region->id};
  bytes_ += total_len;
  *id = region->id;
  regions_.emplace(region->id, std::move(region));
  return HZ_S_OK;
}

uint32_t RegionTable::CheckOverlaps(const std::vector<hz_extent>& extents, uint32_t* detail) const {
  // Overlaps among the new extents: sort a copy by gpa, compare neighbours.
  std::vector<std::pair<hz_extent, uint32_t>> sorted;
  sorted.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) sorted.push_back({extents[i], uint32_t(i)});
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first.gpa < b.first.gpa; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].first.gpa < sorted[i - 1].first.gpa + sorted[i - 1].first.len) {
      *detail = std::max(sorted[i].second, sorted[i - 1].second);  // the later extent
      return HZ_S_EINVAL;
    }
  }
  // Overlaps with regions already registered by this VM.
  for (const auto& [e, index] : sorted) {
    uint64_t end = e.gpa + e.len;
    auto it = extents_.lower_bound(e.gpa);
    if (it != extents_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.first > e.gpa) {
        *detail = index;
        return HZ_S_EINVAL;
      }
    }
    if (it != extents_.end() && it->first < end) {
      *detail = index;
      return HZ_S_EINVAL;
    }
  }
  return HZ_S_OK;
}

uint32_t RegionTable::Unregister(uint32_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return HZ_S_ENOENT;
  if (it->second->pins.load() != 0) return HZ_S_EBUSY;
  for (const hz_extent& e : it->second->extents) extents_.erase(e.gpa);
  bytes_ -= it->second->total_len;
  tenant_->ReleaseRegion(it->second->total_len, it->second->extents.size());
  regions_.erase(it);
  return HZ_S_OK;
}

uint32_t RegionTable::Resolve(const hz_slice& slice, uint64_t need, uint32_t access,
                              coll::IoVec* out, RegionPin* pin) const {
  // SPEC §7.2.3, in its order; the exact-length rule of collectives last.
  if (slice.reserved != 0) return HZ_S_ENOTSUP;
  auto it = regions_.find(slice.region_id);
  if (it == regions_.end()) return HZ_S_ENOENT;
  const Region& r = *it->second;
  if (slice.offset > r.total_len || slice.length > r.total_len - slice.offset) return HZ_S_EFAULT;
  if ((r.flags & access) != access) return HZ_S_EFAULT;
  if (slice.length != need) return HZ_S_EINVAL;
  if (need > 0) {
    // First host segment holding slice.offset.
    size_t i =
        std::upper_bound(r.starts.begin(), r.starts.end(), slice.offset) - r.starts.begin() - 1;
    uint64_t skip = slice.offset - r.starts[i];
    uint64_t left = need;
    for (; left > 0 && i < r.host.size(); ++i) {
      uint64_t n = std::min<uint64_t>(left, r.host[i].len - skip);
      out->push_back({r.host[i].data + skip, static_cast<size_t>(n)});
      left -= n;
      skip = 0;
    }
  }
  *pin = RegionPin(it->second);
  return HZ_S_OK;
}

void RegionTable::Clear() {
  for (const auto& [id, r] : regions_) tenant_->ReleaseRegion(r->total_len, r->extents.size());
  regions_.clear();
  extents_.clear();
  bytes_ = 0;
}

}  // namespace hz::service
