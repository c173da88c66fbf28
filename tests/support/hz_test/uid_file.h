// Handing a communicator uid from one test process to the others through a
// file: rank 0 writes it (hex, renamed into place so that no reader sees half
// of it), the other ranks wait for it.
#ifndef HZ_TEST_UID_FILE_H_
#define HZ_TEST_UID_FILE_H_

#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "harmonaize/hz.h"

namespace hz::testing {

inline bool WriteUidFile(const std::string& path, const hz_uid_t& uid) {
  char hex[2 * HZ_UID_BYTES + 1];
  for (int i = 0; i < HZ_UID_BYTES; ++i) std::snprintf(hex + 2 * i, 3, "%02x", uid.bytes[i]);
  const std::string tmp = path + ".tmp";
  if (!(std::ofstream(tmp) << hex)) return false;
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// Waits up to `limit` for the file; false when it did not appear, or does
// not hold a uid.
inline bool ReadUidFile(const std::string& path, std::chrono::milliseconds limit, hz_uid_t* uid) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string hex;
  while (!(std::ifstream(path) >> hex) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (hex.size() != 2 * HZ_UID_BYTES) return false;
  for (int i = 0; i < HZ_UID_BYTES; ++i) {
    const char* p = hex.data() + 2 * i;
    if (std::from_chars(p, p + 2, uid->bytes[i], 16).ptr != p + 2) return false;
  }
  return true;
}

}  // namespace hz::testing

#endif  // HZ_TEST_UID_FILE_H_
