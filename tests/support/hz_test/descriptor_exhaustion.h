// Test support: the process running out of file descriptors, on purpose.
#ifndef HZ_TEST_DESCRIPTOR_EXHAUSTION_H_
#define HZ_TEST_DESCRIPTOR_EXHAUSTION_H_

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

namespace hz::testing {

// Uses up every descriptor the process may open (under a lowered soft limit)
// until destroyed.
class DescriptorExhaustion {
 public:
  // Low enough to fill quickly, high enough for what the test already holds.
  static constexpr rlim_t kLowLimit = 256;

  DescriptorExhaustion() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit low = saved_;
    low.rlim_cur = kLowLimit;
    setrlimit(RLIMIT_NOFILE, &low);
    for (;;) {
      int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      held_.push_back(fd);
    }
  }
  ~DescriptorExhaustion() {
    for (int fd : held_) ::close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  DescriptorExhaustion(const DescriptorExhaustion&) = delete;
  DescriptorExhaustion& operator=(const DescriptorExhaustion&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> held_;
};

}  // namespace hz::testing

#endif  // HZ_TEST_DESCRIPTOR_EXHAUSTION_H_
