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

#include <nlohmann/json_fwd.hpp>

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
  std::vector<hz_extent> extents;   // as registered, for a live upgrade
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
 private:
  // One extent of this VM's regions: [gpa, end).
  struct Extent {
    uint64_t gpa;
    uint64_t end;
    uint32_t region;
  };

 public:
  // Every registered extent of this VM, sorted by gpa, disjoint. Immutable
  // once built: a registration prepared off the connection thread checks
  // its extents against one and builds the next, which the connection
  // thread then installs by swapping a pointer.
  using ExtentIndex = std::vector<Extent>;

  // A REGION_REGISTER worked out by Prepare, waiting for Commit.
  struct Prepared {
    uint32_t status = HZ_S_OK;
    uint32_t detail = 0;  // the offending extent, where one is named
    std::shared_ptr<Region> region;
    std::shared_ptr<const ExtentIndex> base;    // the index it was checked against
    std::shared_ptr<const ExtentIndex> merged;  // base plus the region's extents
  };

  RegionTable(const DeviceLimits& limits, std::shared_ptr<Tenant> tenant)
      : limits_(limits), tenant_(std::move(tenant)) {}
  ~RegionTable() { Clear(); }
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // Registers extents (already read from the request), with the checks and
  // statuses of SPEC §7.2.1 in its order. Returns HZ_S_OK and *id; *detail is
  // the index of the offending extent where one is named. Prepare and
  // Commit in one go.
  uint32_t Register(const vdev::MemoryMapPtr& memory, uint32_t flags, uint64_t total_len,
                    const std::vector<hz_extent>& extents, uint32_t* id, uint32_t* detail);

  // A registration in two steps, so that the part that grows with the
  // number of extents runs off the connection thread that VMs share.
  //
  // The checks of SPEC §7.2.1 up to the overlaps, against base, and the
  // region and index that registering would make, as region id. Touches
  // nothing of a table: any thread.
  static Prepared Prepare(const DeviceLimits& limits, const vdev::MemoryMapPtr& memory,
                          uint32_t flags, uint64_t total_len, const std::vector<hz_extent>& extents,
                          std::shared_ptr<const ExtentIndex> base, uint32_t id);
  // The id the next registration gets, and the index to prepare it against.
  uint32_t NextId();
  std::shared_ptr<const ExtentIndex> index() const { return index_; }
  // The remaining checks (the limits, the tenant's quota) and, when they
  // pass, the region goes live. False, changing nothing, when the index
  // changed since p was prepared: prepare it again.
  bool Commit(Prepared& p, uint32_t* status, uint32_t* detail);

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

  // A live upgrade: the regions as the guest registered them, and the same
  // regions registered again, with the same ids, in the next process's map
  // of the same guest memory. Restore registers all or none; it goes
  // through the checks of Register, since its input comes from outside.
  void Save(nlohmann::json* out) const;
  Status Restore(const vdev::MemoryMapPtr& memory, const nlohmann::json& in);

  size_t count() const { return regions_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint32_t next_id() const { return next_id_; }

 private:
  // A new extent, with its index in the request.
  struct IndexedExtent {
    uint64_t gpa;
    uint64_t end;
    uint32_t index;
  };

  // The extents with their indexes, sorted by gpa.
  static std::vector<IndexedExtent> SortByGpa(const std::vector<hz_extent>& extents);
  // The new extents (sorted by gpa) overlap neither each other nor base;
  // *detail names the offending extent (the later one of a pair within the
  // request).
  static uint32_t CheckOverlaps(const std::vector<IndexedExtent>& sorted, const ExtentIndex& base,
                                uint32_t* detail);
  // base and the new extents of region, merged in gpa order.
  static std::shared_ptr<const ExtentIndex> Merge(const ExtentIndex& base,
                                                  const std::vector<IndexedExtent>& sorted,
                                                  uint32_t region);

  const DeviceLimits limits_;
  std::shared_ptr<Tenant> tenant_;
  std::map<uint32_t, std::shared_ptr<Region>> regions_;
  // A flat vector, so registering, unregistering and dropping a session
  // cost a pass over it and a few allocations, never one per extent.
  std::shared_ptr<const ExtentIndex> index_ = std::make_shared<ExtentIndex>();
  uint32_t next_id_ = 1;
  uint64_t bytes_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_REGION_TABLE_H_
