#include "hz/service/region_table.h"

#include <algorithm>
#include <cstdint>

#include "vdev/memory_map.h"

namespace hz::service {

uint32_t RegionTable::Register(const vdev::MemoryMapPtr& memory, uint32_t flags, uint64_t total_len,
                               const std::vector<hz_extent>& extents, uint32_t* id,
                               uint32_t* detail) {
  Prepared p = Prepare(limits_, memory, flags, total_len, extents, index_, NextId());
  uint32_t status = HZ_S_OK;
  Commit(p, &status, detail);  // cannot be stale: nothing ran in between
  if (status == HZ_S_OK) *id = p.region->id;
  return status;
}

RegionTable::Prepared RegionTable::Prepare(const DeviceLimits& limits,
                                           const vdev::MemoryMapPtr& memory, uint32_t flags,
                                           uint64_t total_len,
                                           const std::vector<hz_extent>& extents,
                                           std::shared_ptr<const ExtentIndex> base, uint32_t id) {
  Prepared p;
  p.base = std::move(base);
  auto fail = [&p](uint32_t status, uint32_t detail = 0) {
    p.status = status;
    p.detail = detail;
    return std::move(p);
  };
  // The checks run in the order SPEC §7.2.1 lists them.
  if ((flags & ~(HZ_REGION_F_READ | HZ_REGION_F_WRITE)) != 0) return fail(HZ_S_ENOTSUP);
  if (flags == 0) return fail(HZ_S_EINVAL);
  if (extents.empty()) return fail(HZ_S_EINVAL);
  if (extents.size() > limits.max_extents) return fail(HZ_S_ELIMIT);

  uint64_t sum = 0;
  for (size_t i = 0; i < extents.size(); ++i) {
    const hz_extent& e = extents[i];
    if (e.len == 0 || e.gpa > UINT64_MAX - e.len)
      return fail(HZ_S_EINVAL, static_cast<uint32_t>(i));
  }
  for (const hz_extent& e : extents) {
    if (e.len > UINT64_MAX - sum) return fail(HZ_S_EINVAL);
    sum += e.len;
  }
  if (sum != total_len) return fail(HZ_S_EINVAL);
  if (total_len > limits.max_region_bytes) return fail(HZ_S_ELIMIT);

  if (memory == nullptr) return fail(HZ_S_EFAULT);
  auto region = std::make_shared<Region>();
  region->host.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    if (!memory->TranslateGpa(extents[i].gpa, extents[i].len, &region->host)) {
      return fail(HZ_S_EFAULT, static_cast<uint32_t>(i));
    }
  }

  std::vector<IndexedExtent> sorted = SortByGpa(extents);
  uint32_t detail = 0;
  if (uint32_t st = CheckOverlaps(sorted, *p.base, &detail); st != HZ_S_OK) return fail(st, detail);

  region->id = id;
  region->flags = flags;
  region->total_len = total_len;
  region->num_extents = static_cast<uint32_t>(extents.size());
  region->extents = extents;
  region->memory = memory;
  uint64_t off = 0;
  region->starts.reserve(region->host.size());
  for (const vdev::Segment& s : region->host) {
    region->starts.push_back(off);
    off += s.len;
  }
  p.region = std::move(region);
  p.merged = Merge(*p.base, sorted, id);
  return p;
}

uint32_t RegionTable::NextId() {
  // Ids count up and skip the reserved values and live ids, so a stale id
  // from an unregistered region is not silently reused soon.
  while (next_id_ == HZ_REGION_NONE || next_id_ == HZ_REGION_INLINE || regions_.count(next_id_)) {
    next_id_++;
  }
  return next_id_++;
}

bool RegionTable::Commit(Prepared& p, uint32_t* status, uint32_t* detail) {
  if (p.base != index_) return false;
  *detail = p.detail;
  *status = p.status;
  if (p.status != HZ_S_OK) return true;
  *detail = 0;
  const Region& r = *p.region;
  if (regions_.size() >= limits_.max_regions) {
    *status = HZ_S_ELIMIT;
    return true;
  }
  // The index holds every extent of this VM's regions (their gpas differ).
  if (p.merged->size() > limits_.max_device_extents) {
    *status = HZ_S_ELIMIT;
    return true;
  }
  *status = tenant_->ReserveRegion(r.total_len, r.num_extents);
  if (*status != HZ_S_OK) return true;
  index_ = std::move(p.merged);
  bytes_ += r.total_len;
  regions_.emplace(r.id, p.region);
  return true;
}

std::vector<RegionTable::IndexedExtent> RegionTable::SortByGpa(
    const std::vector<hz_extent>& extents) {
  std::vector<IndexedExtent> sorted;
  sorted.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    sorted.push_back({extents[i].gpa, extents[i].gpa + extents[i].len, uint32_t(i)});
  }
  // Guests usually list their extents in gpa order: no sort then.
  auto by_gpa = [](const IndexedExtent& a, const IndexedExtent& b) { return a.gpa < b.gpa; };
  if (!std::is_sorted(sorted.begin(), sorted.end(), by_gpa)) {
    std::sort(sorted.begin(), sorted.end(), by_gpa);
  }
  return sorted;
}

uint32_t RegionTable::CheckOverlaps(const std::vector<IndexedExtent>& sorted,
                                    const ExtentIndex& base, uint32_t* detail) {
  // Overlaps among the new extents: compare neighbours in gpa order.
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].gpa < sorted[i - 1].end) {
      *detail = std::max(sorted[i].index, sorted[i - 1].index);  // the later extent
      return HZ_S_EINVAL;
    }
  }
  // Overlaps with regions already registered by this VM: one pass over
  // both lists in gpa order. base is disjoint, so its ends ascend too.
  auto it = base.begin();
  for (const IndexedExtent& e : sorted) {
    while (it != base.end() && it->end <= e.gpa) ++it;
    if (it == base.end()) break;
    if (it->gpa < e.end) {
      *detail = e.index;
      return HZ_S_EINVAL;
    }
  }
  return HZ_S_OK;
}

std::shared_ptr<const RegionTable::ExtentIndex> RegionTable::Merge(
    const ExtentIndex& base, const std::vector<IndexedExtent>& sorted, uint32_t region) {
  auto merged = std::make_shared<ExtentIndex>();
  merged->reserve(base.size() + sorted.size());
  auto it = base.begin();
  for (const IndexedExtent& e : sorted) {
    for (; it != base.end() && it->gpa < e.gpa; ++it) merged->push_back(*it);
    merged->push_back({e.gpa, e.end, region});
  }
  merged->insert(merged->end(), it, base.end());
  return merged;
}

uint32_t RegionTable::Unregister(uint32_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return HZ_S_ENOENT;
  if (it->second->pins.load() != 0) return HZ_S_EBUSY;
  auto rest = std::make_shared<ExtentIndex>();
  rest->reserve(index_->size() - it->second->num_extents);
  for (const Extent& e : *index_) {
    if (e.region != id) rest->push_back(e);
  }
  index_ = std::move(rest);
  bytes_ -= it->second->total_len;
  tenant_->ReleaseRegion(it->second->total_len, it->second->num_extents);
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
  for (const auto& [id, r] : regions_) tenant_->ReleaseRegion(r->total_len, r->num_extents);
  regions_.clear();
  index_ = std::make_shared<ExtentIndex>();
  bytes_ = 0;
}

}  // namespace hz::service
