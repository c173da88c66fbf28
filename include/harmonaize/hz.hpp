// SPDX-License-Identifier: Apache-2.0
// Thin C++ wrappers over hz.h: RAII ownership of devices, communicators and
// registered memory, and errors as hz::Error exceptions.
#ifndef HARMONAIZE_HZ_HPP_
#define HARMONAIZE_HZ_HPP_

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "harmonaize/hz.h"

namespace hz {

class Error : public std::runtime_error {
 public:
  explicit Error(int code) : std::runtime_error(hz_strerror(code)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

inline void Check(int rc) {
  if (rc != HZ_OK) throw Error(rc);
}

class Device {
 public:
  explicit Device(const char* spec = nullptr) { Check(hz_open(spec, &dev_)); }
  ~Device() { hz_close(dev_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  hz_device_t* get() const { return dev_; }

  hz_device_info Info() const {
    hz_device_info i;
    Check(hz_device_get_info(dev_, &i));
    return i;
  }
  hz_uid_t NewUid() const {
    hz_uid_t u;
    Check(hz_comm_get_uid(dev_, &u));
    return u;
  }

 private:
  hz_device_t* dev_ = nullptr;
};

// Registered memory from hz_mem_alloc, freed on destruction.
template <typename T>
class Buffer {
 public:
  Buffer(Device& dev, size_t count) : dev_(dev.get()), count_(count) {
    void* p = nullptr;
    Check(hz_mem_alloc(dev_, count * sizeof(T), &p));
    data_ = static_cast<T*>(p);
  }
  ~Buffer() { hz_mem_free(dev_, data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* data() const { return data_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return data_[i]; }

 private:
  hz_device_t* dev_;
  T* data_ = nullptr;
  size_t count_;
};

class Comm {
 public:
  Comm(Device& dev, const hz_uid_t& uid, uint32_t nranks, uint32_t rank,
       const hz_comm_config* cfg = nullptr) {
    Check(hz_comm_init(dev.get(), &uid, nranks, rank, cfg, &comm_));
  }
  ~Comm() {
    if (comm_) hz_comm_destroy(comm_);
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  hz_comm_t* get() const { return comm_; }
  int rank() const { return hz_comm_rank(comm_); }
  int size() const { return hz_comm_size(comm_); }
  void Abort() { hz_comm_abort(std::exchange(comm_, nullptr)); }
  void AllReduce(const void* send, void* recv, size_t count, hz_dtype dt, hz_redop op) {
    Check(hz_allreduce(comm_, send, recv, count, dt, op));
  }
  void Barrier() { Check(hz_barrier(comm_)); }

 private:
  hz_comm_t* comm_ = nullptr;
};

}  // namespace hz

#endif  // HARMONAIZE_HZ_HPP_
