// Communicators: the process-wide device, unique ids, creation and teardown.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nccl_internal.h"

namespace hz::nccl {
namespace {

// ncclUniqueId layout: magic, format version, then the device's 32-byte uid;
// the rest is zero.
constexpr uint32_t kIdMagic = 0x4e435a48;  // "HZCN"
constexpr uint32_t kIdVersion = 1;
constexpr size_t kIdUidOffset = 8;
static_assert(kIdUidOffset + sizeof(hz_uid_t) <= NCCL_UNIQUE_ID_BYTES);

std::mutex device_mu;
hz_device_t* device = nullptr;

ncclResult_t UidFromId(const ncclUniqueId& id, hz_uid_t* uid) {
  uint32_t magic = 0, version = 0;
  std::memcpy(&magic, id.internal, 4);
  std::memcpy(&version, id.internal + 4, 4);
  if (magic != kIdMagic || version != kIdVersion)
    return Fail(ncclInvalidArgument,
                "ncclUniqueId was not produced by this library's ncclGetUniqueId");
  std::memcpy(uid, id.internal + kIdUidOffset, sizeof(*uid));
  return ncclSuccess;
}

}  // namespace

ncclComm* NewComm(hz_comm_t* hc, int nranks, int rank) {
  auto* c = new ncclComm;
  c->hz = hc;
  c->nranks = nranks;
  c->rank = rank;
  c->cuda_device = CurrentCudaDevice();
  return c;
}

// One rank joins: blocks until all nranks ranks joined (or the device's timeout).
ncclResult_t JoinRank(ncclComm_t* out, int nranks, const hz_uid_t& uid, int rank,
                      const char* what) {
  LogVersionOnce();
  hz_device_t* dev = Device();
  if (dev == nullptr) return ncclSystemError;
  hz_comm_t* hc = nullptr;
  int err = hz_comm_init(dev, &uid, static_cast<uint32_t>(nranks), static_cast<uint32_t>(rank),
                         nullptr, &hc);
  if (err != HZ_OK) return FromHz(err, (std::string(what) + ": hz_comm_init").c_str());
  *out = NewComm(hc, nranks, rank);
  Log(Level::kInfo, "%s: comm %p rank %d nranks %d - Init COMPLETE", what, static_cast<void*>(*out),
      rank, nranks);
  return ncclSuccess;
}

hz_device_t* Device() {
  std::lock_guard<std::mutex> lock(device_mu);
  if (device != nullptr) return device;
  int err = hz_open(nullptr, &device);
  if (err != HZ_OK) {
    device = nullptr;
    const char* spec = std::getenv("HZ_DEVICE");
    Fail(ncclSystemError, std::string("cannot open the HarmonAIze device (") +
                              (spec ? std::string("HZ_DEVICE=") + spec : "first /dev/harmonaizeN") +
                              "): " + hz_strerror(err));
  }
  // Kept open for the life of the process: communicators may outlive any owner.
  return device;
}

}  // namespace hz::nccl

using hz::nccl::Fail;
using hz::nccl::FromHz;
using hz::nccl::Level;
using hz::nccl::Log;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return Fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  hz_device_t* dev = hz::nccl::Device();
  if (dev == nullptr) return ncclSystemError;
  hz_uid_t uid;
  int err = hz_comm_get_uid(dev, &uid);
  if (err != HZ_OK) return FromHz(err, "ncclGetUniqueId: hz_comm_get_uid");
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, &hz::nccl::kIdMagic, 4);
  std::memcpy(id->internal + 4, &hz::nccl::kIdVersion, 4);
  std::memcpy(id->internal + hz::nccl::kIdUidOffset, &uid, sizeof(uid));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1)
    return Fail(ncclInvalidArgument,
                "ncclCommInitRank: nranks " + std::to_string(nranks) + " must be at least 1");
  if (rank < 0 || rank >= nranks)
    return Fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) +
                                         " is outside [0, " + std::to_string(nranks) + ")");
  hz_uid_t uid;
  if (ncclResult_t r = hz::nccl::UidFromId(commId, &uid); r != ncclSuccess) return r;
  return hz::nccl::JoinRank(comm, nranks, uid, rank, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* /*config*/) {
  return ncclCommInitRank(comm, nranks, commId, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* /*devlist*/) {
  if (comms == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
  if (ndev < 1)
    return Fail(ncclInvalidArgument,
                "ncclCommInitAll: ndev " + std::to_string(ndev) + " must be at least 1");
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  hz_uid_t uid;
  if (ncclResult_t r = hz::nccl::UidFromId(id, &uid); r != ncclSuccess) return r;
  // hz_comm_init blocks until every rank joined, so each rank joins on its own thread.
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::string> messages(ndev);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    comms[i] = nullptr;
    threads.emplace_back([&, i] {
      results[i] = hz::nccl::JoinRank(&comms[i], ndev, uid, i, "ncclCommInitAll");
      messages[i] = hz::nccl::LastError();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < ndev; ++i) {
    if (results[i] == ncclSuccess) continue;
    for (int j = 0; j < ndev; ++j) {
      if (comms[j] != nullptr) ncclCommAbort(comms[j]);
      comms[j] = nullptr;
    }
    return Fail(results[i], messages[i]);
  }
  return ncclSuccess;
}

// The device ends a communicator for every rank when one rank destroys it,
// so ranks meet at a barrier first: a rank that finished early must not cut
// off peers still exchanging data among themselves (NCCL programs commonly
// destroy right after their last operation).
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  if (comm->revoked.load())
    return Fail(ncclInvalidUsage, "ncclCommFinalize: the communicator was revoked");
  if (comm->finalized) return ncclSuccess;
  comm->finalized = true;
  if (ncclResult_t sticky = static_cast<ncclResult_t>(comm->async_error.load());
      sticky != ncclSuccess)
    return Fail(sticky, "ncclCommFinalize: the communicator already failed");
  return FromHz(hz_barrier(comm->hz), "ncclCommFinalize: hz_barrier", comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  // A failure here still lets the destroy go ahead; a revoked communicator
  // has no barrier left to meet at.
  if (!comm->revoked.load()) ncclCommFinalize(comm);
  int err = hz_comm_destroy(comm->hz);
  delete comm;
  return FromHz(err, "ncclCommDestroy: hz_comm_destroy");
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  int err = hz_comm_abort(comm->hz);
  delete comm;
  return FromHz(err, "ncclCommAbort: hz_comm_abort");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  *asyncError = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
  if (comm->cuda_device < 0)
    return Fail(ncclInvalidUsage,
                "ncclCommCuDevice: the communicator has no CUDA device (no GPU was usable when "
                "it was created; HarmonAIze computes on host memory)");
  *device = comm->cuda_device;
  return ncclSuccess;
}

// Every call returns only once its operations completed, so no operation of
// this rank is in flight: revoking only has to refuse what comes next.
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommRevoke: comm is NULL");
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return Fail(ncclInvalidArgument,
                "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0), not " +
                    std::to_string(revokeFlags));
  comm->revoked.store(true);
  Log(Level::kInfo, "ncclCommRevoke: comm %p rank %d revoked", static_cast<void*>(comm),
      comm->rank);
  return ncclSuccess;
}

// Every rank is given the same ids, so the first one names the communicator;
// the others only spread NCCL's bootstrap load, which the device does not have.
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* /*config*/) {
  if (nId < 1 || commIds == nullptr)
    return Fail(ncclInvalidArgument, "ncclCommInitRankScalable: nId " + std::to_string(nId) +
                                         " must be at least 1 with commIds not NULL");
  return ncclCommInitRank(newcomm, nranks, commIds[0], myrank);
}

}  // extern "C"

HZ_NCCL_ALIAS(ncclGetVersion)
HZ_NCCL_ALIAS(ncclGetUniqueId)
HZ_NCCL_ALIAS(ncclCommInitRank)
HZ_NCCL_ALIAS(ncclCommInitRankConfig)
HZ_NCCL_ALIAS(ncclCommInitAll)
HZ_NCCL_ALIAS(ncclCommInitRankScalable)
HZ_NCCL_ALIAS(ncclCommFinalize)
HZ_NCCL_ALIAS(ncclCommDestroy)
HZ_NCCL_ALIAS(ncclCommAbort)
HZ_NCCL_ALIAS(ncclCommRevoke)
HZ_NCCL_ALIAS(ncclCommGetAsyncError)
HZ_NCCL_ALIAS(ncclCommCount)
HZ_NCCL_ALIAS(ncclCommCuDevice)
HZ_NCCL_ALIAS(ncclCommUserRank)
