// Bounded spinning, for the few places where a thread waits a short while
// for another rather than sleep (a wake-up costs tens of microseconds on a
// virtual host).
#ifndef HZ_COMMON_SPIN_H_
#define HZ_COMMON_SPIN_H_

#include <chrono>

namespace hz {

// Tells the CPU this is a spin loop: the sibling hyperthread gets the core's
// resources, and leaving the loop costs no memory-order mis-speculation.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins while busy() holds, until `deadline`; true if busy() stopped
// holding first. The clock is read every 64 passes only: a read (vDSO, tens
// of nanoseconds) costs more than a pass.
template <typename Busy>
bool SpinWhile(Busy busy, std::chrono::steady_clock::time_point deadline) {
  for (unsigned spins = 1; busy(); ++spins) {
    if (spins % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return false;
    CpuRelax();
  }
  return true;
}

}  // namespace hz

#endif  // HZ_COMMON_SPIN_H_
