// Communicators made from communicators: ncclCommSplit and ncclCommShrink.
// Both agree on a fresh device uid over the parent and then join it with
// hz_comm_init, exactly as ncclCommInitRank does.
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "nccl_internal.h"

namespace hz::nccl {
namespace {

// One rank's part of a split, exchanged with every rank of the parent.
struct SplitEntry {
  int32_t color;
  int32_t key;
  int32_t have_uid;  // 0: this rank could not get a uid (the split fails everywhere)
  int32_t reserved;
  hz_uid_t uid;
};

// The shrink leader's message to each remaining rank.
struct ShrinkMessage {
  int32_t have_uid;
  int32_t reserved;
  hz_uid_t uid;
};

ncclResult_t Exchange(ncclComm* comm, const SplitEntry& mine, std::vector<SplitEntry>* all) {
  all->assign(comm->nranks, SplitEntry{});
  int err = hz_allgather(comm->hz, &mine, all->data(), sizeof(SplitEntry), HZ_UINT8);
  return FromHz(err, "ncclCommSplit: hz_allgather over the parent", comm);
}

// Every rank checks every rank's arguments, so all of them return the same result.
ncclResult_t CheckEntries(const std::vector<SplitEntry>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].color < 0 && all[r].color != NCCL_SPLIT_NOCOLOR)
      return Fail(ncclInvalidArgument, "ncclCommSplit: rank " + std::to_string(r) +
                                           " passed color " + std::to_string(all[r].color) +
                                           " (must be >= 0 or NCCL_SPLIT_NOCOLOR)");
    if (all[r].color >= 0 && all[r].have_uid == 0)
      return Fail(ncclSystemError, "ncclCommSplit: rank " + std::to_string(r) +
                                       " could not get a communicator uid from its device");
  }
  return ncclSuccess;
}

// Parent ranks of color, ordered by key and then by parent rank.
std::vector<int> Members(const std::vector<SplitEntry>& all, int color) {
  std::vector<int> members;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].color == color) members.push_back(static_cast<int>(r));
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  return members;
}

ncclResult_t CheckShrinkArgs(ncclComm* comm, const int* excl, int count, int flags,
                             std::vector<bool>* excluded) {
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
    return Fail(ncclInvalidArgument,
                "ncclCommShrink: unknown shrinkFlags " + std::to_string(flags));
  if (count < 0 || (count > 0 && excl == nullptr))
    return Fail(ncclInvalidArgument, "ncclCommShrink: invalid excludeRanksList/excludeRanksCount");
  excluded->assign(comm->nranks, false);
  for (int i = 0; i < count; ++i) {
    if (excl[i] < 0 || excl[i] >= comm->nranks)
      return Fail(ncclInvalidArgument, "ncclCommShrink: excluded rank " + std::to_string(excl[i]) +
                                           " is outside [0, " + std::to_string(comm->nranks) + ")");
    (*excluded)[excl[i]] = true;
  }
  if ((*excluded)[comm->rank])
    return Fail(
        ncclInvalidArgument,
        "ncclCommShrink: this rank is in excludeRanksList; only the remaining ranks call it");
  if (ncclResult_t sticky = static_cast<ncclResult_t>(comm->async_error.load());
      sticky != ncclSuccess)
    return Fail(ncclInvalidUsage,
                "ncclCommShrink: the parent communicator failed, and the HarmonAIze device ends a "
                "failed communicator for every rank; create a new one with ncclCommInitRank");
  return ncclSuccess;
}

// The lowest remaining rank gets a uid and sends it to the other remaining
// ranks (point-to-point, so excluded ranks take no part).
ncclResult_t ShareShrinkUid(ncclComm* comm, const std::vector<int>& members, hz_uid_t* uid) {
  ShrinkMessage msg{};
  const int leader = members.front();
  if (comm->rank == leader) {
    int err = hz_comm_get_uid(Device(), &msg.uid);
    msg.have_uid = err == HZ_OK;
    for (size_t i = 1; i < members.size(); ++i) {
      int e = hz_send(comm->hz, &msg, sizeof(msg), HZ_UINT8, static_cast<uint32_t>(members[i]));
      if (e != HZ_OK) return FromHz(e, "ncclCommShrink: hz_send over the parent", comm);
    }
    if (err != HZ_OK) return FromHz(err, "ncclCommShrink: hz_comm_get_uid");
  } else {
    int e = hz_recv(comm->hz, &msg, sizeof(msg), HZ_UINT8, static_cast<uint32_t>(leader));
    if (e != HZ_OK) return FromHz(e, "ncclCommShrink: hz_recv over the parent", comm);
    if (msg.have_uid == 0)
      return Fail(ncclSystemError, "ncclCommShrink: rank " + std::to_string(leader) +
                                       " could not get a communicator uid from its device");
  }
  *uid = msg.uid;
  return ncclSuccess;
}

}  // namespace
}  // namespace hz::nccl

using hz::nccl::Fail;

extern "C" {

// config may be NULL (inherit) or any valid config: communicators here have
// no settings to inherit or apply.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* /*config*/) {
  if (comm == nullptr || newcomm == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommSplit: comm or newcomm is NULL");
  *newcomm = nullptr;
  if (ncclResult_t r = hz::nccl::CheckUsable(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  hz::nccl::SplitEntry mine{color, key, 0, 0, {}};
  if (color >= 0) {
    hz_device_t* dev = hz::nccl::Device();
    mine.have_uid = dev != nullptr && hz_comm_get_uid(dev, &mine.uid) == HZ_OK;
  }
  std::vector<hz::nccl::SplitEntry> all;
  if (ncclResult_t r = hz::nccl::Exchange(comm, mine, &all); r != ncclSuccess) return r;
  if (ncclResult_t r = hz::nccl::CheckEntries(all); r != ncclSuccess) return r;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<int> members = hz::nccl::Members(all, color);
  const int newrank =
      static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  hz::nccl::Log(hz::nccl::Level::kInfo,
                "ncclCommSplit: comm %p rank %d color %d key %d -> rank %d of %zu",
                static_cast<void*>(comm), comm->rank, color, key, newrank, members.size());
  return hz::nccl::JoinRank(newcomm, static_cast<int>(members.size()), all[members.front()].uid,
                            newrank, "ncclCommSplit");
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* /*config*/, int shrinkFlags) {
  if (comm == nullptr || newcomm == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommShrink: comm or newcomm is NULL");
  *newcomm = nullptr;
  std::vector<bool> excluded;
  if (ncclResult_t r = hz::nccl::CheckShrinkArgs(comm, excludeRanksList, excludeRanksCount,
                                                 shrinkFlags, &excluded);
      r != ncclSuccess)
    return r;
  std::vector<int> members;
  for (int r = 0; r < comm->nranks; ++r)
    if (!excluded[r]) members.push_back(r);
  hz_uid_t uid;
  if (ncclResult_t r = hz::nccl::ShareShrinkUid(comm, members, &uid); r != ncclSuccess) return r;
  const int newrank =
      static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  return hz::nccl::JoinRank(newcomm, static_cast<int>(members.size()), uid, newrank,
                            "ncclCommShrink");
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclCommSplit)
HZ_NCCL_ALIAS(ncclCommShrink)
