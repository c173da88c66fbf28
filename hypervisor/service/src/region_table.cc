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
  region->host.reserve(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    if (!memory->TranslateGpa(extents[i].gpa, extents[i].len, &region->host)) {
      *detail = static_cast<uint32_t>(i);
      return HZ_S_EFAULT;
    }
  }

  SortByGpa(extents);
  if (uint32_t st = CheckOverlaps(sorted_, detail); st != HZ_S_OK) return st;

  if (regions_.size() >= limits_.max_regions) return HZ_S_ELIMIT;
  // extents_ holds every extent of this VM's regions (their gpas differ).
  if (extents_.size() + extents.size() > limits_.max_device_extents) return HZ_S_ELIMIT;
  region->flags = flags;
  region->total_len = total_len;
  region->num_extents = static_cast<uint32_t>(extents.size());
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
  AddExtents(sorted_, region->id);
  bytes_ += total_len;
  *id = region->id;
  regions_.emplace(region->id, std::move(region));
  return HZ_S_OK;
}

void RegionTable::SortByGpa(const std::vector<hz_extent>& extents) {
  sorted_.clear();
  for (size_t i = 0; i < extents.size(); ++i) {
    sorted_.push_back({extents[i].gpa, extents[i].gpa + extents[i].len, uint32_t(i)});
  }
  // Guests usually list their extents in gpa order: no sort then.
  auto by_gpa = [](const IndexedExtent& a, const IndexedExtent& b) { return a.gpa < b.gpa; };
  if (!std::is_sorted(sorted_.begin(), sorted_.end(), by_gpa)) {
    std::sort(sorted_.begin(), sorted_.end(), by_gpa);
  }
}

uint32_t RegionTable::CheckOverlaps(const std::vector<IndexedExtent>& sorted,
                                    uint32_t* detail) const {
  // Overlaps among the new extents: compare neighbours in gpa order.
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].gpa < sorted[i - 1].end) {
      *detail = std::max(sorted[i].index, sorted[i - 1].index);  // the later extent
      return HZ_S_EINVAL;
    }
  }
  // Overlaps with regions already registered by this VM: one pass over
  // both lists in gpa order. extents_ is disjoint, so its ends ascend too.
  auto it = extents_.begin();
  for (const IndexedExtent& e : sorted) {
    while (it != extents_.end() && it->end <= e.gpa) ++it;
    if (it == extents_.end()) break;
    if (it->gpa < e.end) {
      *detail = e.index;
      return HZ_S_EINVAL;
    }
  }
  return HZ_S_OK;
}

void RegionTable::AddExtents(const std::vector<IndexedExtent>& sorted, uint32_t region) {
  // Merged in place from the back, into storage the index keeps.
  size_t old = extents_.size(), add = sorted.size(), out = old + add;
  extents_.resize(out);
  while (add > 0) {
    if (old > 0 && extents_[old - 1].gpa > sorted[add - 1].gpa) {
      extents_[--out] = extents_[--old];
    } else {
      --add;
      extents_[--out] = {sorted[add].gpa, sorted[add].end, region};
    }
  }
}

uint32_t RegionTable::Unregister(uint32_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return HZ_S_ENOENT;
  if (it->second->pins.load() != 0) return HZ_S_EBUSY;
  std::erase_if(extents_, [id](const Extent& e) { return e.region == id; });
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
  extents_.clear();
  bytes_ = 0;
}

}  // namespace hz::service
