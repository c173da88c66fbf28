// hz checkpoint list|save|restore|delete: a file's contents as a one-slice
// checkpoint, for a quick check of a stream.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <vector>

#include "cli.h"

namespace hz::cli {
namespace {

using DevicePtr = std::unique_ptr<hz_device_t, decltype(&hz_close)>;

// Registered memory for a slice (checkpoints read and write it in place).
class Registered {
 public:
  Registered(hz_device_t* dev, size_t bytes) : dev_(dev) {
    err_ = hz_mem_alloc(dev, bytes > 0 ? bytes : 1, &ptr_);
  }
  ~Registered() {
    if (err_ == HZ_OK) hz_mem_free(dev_, ptr_);
  }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;
  int err() const { return err_; }
  char* data() const { return static_cast<char*>(ptr_); }

 private:
  hz_device_t* dev_;
  void* ptr_ = nullptr;
  int err_ = HZ_OK;
};

nlohmann::json InfoJson(const hz_ckpt_info& i) {
  return {{"step", i.step},
          {"bytes", i.bytes},
          {"time_s", i.time_s},
          {"state", i.state == HZ_CKPT_DURABLE ? "durable" : "staged"},
          {"tier", i.tier}};
}

std::string InfoText(const hz_ckpt_info& i) {
  std::ostringstream h;
  h << "step " << i.step << ": " << i.bytes << " bytes, "
    << (i.state == HZ_CKPT_DURABLE ? "durable" : "staged") << ", tier " << i.tier << "\n";
  return h.str();
}

}  // namespace

int CheckpointList(const Options& o, uint32_t stream) {
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  std::vector<hz_ckpt_info> entries(256);
  size_t n = 0;
  if (int err = hz_ckpt_list(dev.get(), stream, entries.data(), entries.size(), &n); err != HZ_OK)
    return Error(o, "list checkpoints of stream " + std::to_string(stream), err);
  nlohmann::json j = nlohmann::json::array();
  std::string h;
  for (size_t i = 0; i < n && i < entries.size(); ++i) {
    j.push_back(InfoJson(entries[i]));
    h += InfoText(entries[i]);
  }
  if (n == 0) h = "no checkpoints in stream " + std::to_string(stream) + "\n";
  Print(o, {{"stream", stream}, {"checkpoints", j}}, h);
  return kOk;
}

int CheckpointDelete(const Options& o, uint32_t stream, uint64_t step) {
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  if (int err = hz_ckpt_delete(dev.get(), stream, step); err != HZ_OK) {
    return Error(o, "delete step " + std::to_string(step) + " of stream " + std::to_string(stream),
                 err);
  }
  Print(o, {{"stream", stream}, {"step", step}, {"deleted", true}},
        "deleted step " + std::to_string(step) + " of stream " + std::to_string(stream) + "\n");
  return kOk;
}

int CheckpointPolicy(const Options& o, uint32_t stream, const std::string& tier,
                     uint32_t retention) {
  hz_ckpt_policy p{};
  p.retention = retention;
  if (tier == "host_memory") {
    p.tier = HZ_TIER_HOST_MEMORY;
  } else if (tier == "local_disk") {
    p.tier = HZ_TIER_LOCAL_DISK;
  } else if (tier == "peer_host") {
    p.tier = HZ_TIER_PEER_HOST;
  } else {
    std::fprintf(stderr, "hz: --tier must be host_memory, local_disk or peer_host\n");
    return kUsage;
  }
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  if (int err = hz_ckpt_set_policy(dev.get(), stream, &p); err != HZ_OK)
    return Error(o, "set the policy of stream " + std::to_string(stream), err);
  Print(o, {{"stream", stream}, {"tier", tier}, {"retention", retention}},
        "stream " + std::to_string(stream) + ": tier " + tier + ", retention " +
            std::to_string(retention) + "\n");
  return kOk;
}

int CheckpointSave(const Options& o, uint32_t stream, uint64_t step, const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "hz: cannot read %s\n", file.c_str());
    return kUsage;
  }
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  Registered mem(dev.get(), data.size());
  if (mem.err() != HZ_OK) return Error(o, "registered memory for " + file, mem.err());
  std::copy(data.begin(), data.end(), mem.data());
  hz_buf slice{mem.data(), data.size()};
  hz_ckpt_info info{};
  int err = hz_ckpt_save(dev.get(), stream, step, &slice, 1, nullptr, 0, &info);
  if (err == HZ_ENOENT) {
    // A stream exists once it has a policy: create it with a minimal one.
    hz_ckpt_policy p{};
    p.retention = 2;
    p.tier = HZ_TIER_HOST_MEMORY;
    if (int perr = hz_ckpt_set_policy(dev.get(), stream, &p); perr != HZ_OK)
      return Error(o, "create stream " + std::to_string(stream), perr);
    err = hz_ckpt_save(dev.get(), stream, step, &slice, 1, nullptr, 0, &info);
  }
  if (err != HZ_OK) return Error(o, "save " + file, err);
  nlohmann::json j = InfoJson(info);
  j["stream"] = stream;
  j["stall_us"] = info.stall_us;
  Print(o, j, "saved " + file + " to stream " + std::to_string(stream) + ", " + InfoText(info));
  return kOk;
}

int CheckpointRestore(const Options& o, uint32_t stream, const std::string& step_arg,
                      const std::string& file) {
  uint64_t step = HZ_STEP_LATEST;
  if (step_arg != "latest") {
    try {
      size_t used = 0;
      step = std::stoull(step_arg, &used);
      if (used != step_arg.size()) throw std::invalid_argument(step_arg);
    } catch (const std::exception&) {
      std::fprintf(stderr, "hz: --step must be a number or 'latest'\n");
      return kUsage;
    }
  }
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  // The checkpoint's size comes from the listing.
  std::vector<hz_ckpt_info> entries(256);
  size_t n = 0;
  if (int err = hz_ckpt_list(dev.get(), stream, entries.data(), entries.size(), &n); err != HZ_OK)
    return Error(o, "list checkpoints of stream " + std::to_string(stream), err);
  const hz_ckpt_info* found = nullptr;
  for (size_t i = 0; i < n && i < entries.size(); ++i) {
    if (step == HZ_STEP_LATEST ? (!found || entries[i].step > found->step)
                               : entries[i].step == step)
      found = &entries[i];
  }
  if (found == nullptr) return Error(o, "restore from stream " + std::to_string(stream), HZ_ENOENT);
  Registered mem(dev.get(), found->bytes);
  if (mem.err() != HZ_OK) return Error(o, "registered memory for the restore", mem.err());
  hz_buf slice{mem.data(), found->bytes};
  hz_ckpt_info info{};
  size_t meta_len = 0;
  if (int err =
          hz_ckpt_restore(dev.get(), stream, found->step, &slice, 1, nullptr, &meta_len, &info);
      err != HZ_OK)
    return Error(o, "restore step " + std::to_string(found->step), err);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out.write(mem.data(), static_cast<std::streamsize>(found->bytes))) {
    std::fprintf(stderr, "hz: cannot write %s\n", file.c_str());
    return kFailed;
  }
  nlohmann::json j = InfoJson(info);
  j["stream"] = stream;
  j["file"] = file;
  Print(o, j,
        "restored stream " + std::to_string(stream) + " into " + file + ", " + InfoText(info));
  return kOk;
}

}  // namespace hz::cli
