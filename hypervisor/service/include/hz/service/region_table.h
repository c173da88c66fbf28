// One VM's registered memory regions: guest-physical extent lists turned into
// host views once, at registration, so that each request only resolves
// (region, offset, length) slices against them.
#ifndef HZ_SERVICE_REGION_TABLE_H_
#define HZ_SERVICE_REGION_TABLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "hz/collectives/types.h"
#include "hz/service/config.h"
#include "hz/service/tenants.h"
#include "protocol/harmonaize.h"
#include "vdev/device.h"

namespace hz::service {

struct Region {
  uint32_t id = 0;
  uint32_t flags = 0;  // HZ_REGION_F_*
  uint64_t total_len = 0;
  uint32_t num_extents = 0;         // it was registered with
  std::vector<vdev::Segment> host;  // translation of the extents, in order
  std::vector<uint64_t> starts;     // region offset of each host segment
  vdev::MemoryMapPtr memory;        // keeps the mapping alive while in use
  std::atomic<uint32_t> pins{0};    // in-flight operations using the region
};

// Holds a region pinned while an operation uses it; unpins on destruction
// (from any thread).
class RegionPin {
 public:
  RegionPin() = default;
  explicit RegionPin(std::shared_ptr<Region> r) : region_(std::move(r)) { region_->pins++; }
  RegionPin(RegionPin&& o) noexcept = default;
  RegionPin& operator=(RegionPin&& o) noexcept {
    Reset();
    region_ = std::move(o.region_);
    return *this;
  }
  RegionPin(const RegionPin&) = delete;
  RegionPin& operator=(const RegionPin&) = delete;
  ~RegionPin() { Reset(); }
  void Reset() {
    if (region_) region_->pins--;
    region_.reset();
  }

 private:
  std::shared_ptr<Region> region_;
};

class RegionTable {
 public:
  RegionTable(const DeviceLimits& limits, std::shared_ptr<Tenant> tenant)
      : limits_(limits), tenant_(std::move(tenant)) {}
  ~RegionTable() { Clear(); }
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // Registers extents (already read from the request), with the checks and
  // statuses of SPEC §7.2.1 in its order. Returns HZ_S_OK and *id; *detail is
  // the index of the offending extent where one is named.
  uint32_t Register(const vdev::MemoryMapPtr& memory, uint32_t flags, uint64_t total_len,
                    const std::vector<hz_extent>& extents, uint32_t* id, uint32_t* detail);

  // HZ_S_OK, ENOENT, or EBUSY while an in-flight operation uses it.
  uint32_t Unregister(uint32_t id);

  // Resolves a slice of a registered region into host spans, appending to
  // *out, and pins the region in *pin. Checks (SPEC §7.2.3): reserved zero
  // (ENOTSUP), region known (ENOENT), range inside the region without
  // overflow (EFAULT), access allowed by the region's flags (EFAULT), then
  // slice.length == need (EINVAL). HZ_REGION_NONE/INLINE are the caller's.
  uint32_t Resolve(const hz_slice& slice, uint64_t need, uint32_t access, coll::IoVec* out,
                   RegionPin* pin) const;

  // Drops every region and returns their quota to the tenant.
  void Clear();

  size_t count() const { return regions_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  // One extent of this VM's regions: [gpa, end).
  struct Extent {
    uint64_t gpa;
    uint64_t end;
    uint32_t region;
  };
  // A new extent, with its index in the request.
  struct IndexedExtent {
    uint64_t gpa;
    uint64_t end;
    uint32_t index;
  };

  // sorted_ = the extents with their indexes, sorted by gpa.
  void SortByGpa(const std::vector<hz_extent>& extents);
  // The new extents (sorted by gpa) overlap neither each other nor this
  // VM's regions; *detail names the offending extent (the later one of a
  // pair within the request).
  uint32_t CheckOverlaps(const std::vector<IndexedExtent>& sorted, uint32_t* detail) const;
  void AddExtents(const std::vector<IndexedExtent>& sorted, uint32_t region);

  const DeviceLimits limits_;
  std::shared_ptr<Tenant> tenant_;
  std::map<uint32_t, std::shared_ptr<Region>> regions_;
  // Every registered extent of this VM, sorted by gpa, disjoint: a flat
  // vector, so registering, unregistering and dropping a session cost a
  // pass over it and a few allocations, never one per extent (all tenants'
  // requests share the connection thread). It and sorted_ keep their
  // storage (at most max_device_extents and max_extents entries), so a VM
  // that registers again and again does not fault in fresh pages each time.
  std::vector<Extent> extents_;
  std::vector<IndexedExtent> sorted_;  // a registration's extents, sorted
  uint32_t next_id_ = 1;
  uint64_t bytes_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_REGION_TABLE_H_
