#include "alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> g_allocations{0};
std::atomic<uint64_t> g_frees{0};
}  // namespace

namespace hz::testing {

uint64_t Allocations() {
  return g_allocations.load();
}

uint64_t Frees() {
  return g_frees.load();
}

}  // namespace hz::testing

void* operator new(std::size_t n) {
  g_allocations++;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

void operator delete(void* p) noexcept {
  if (p != nullptr) g_frees++;
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  if (p != nullptr) g_frees++;
  std::free(p);
}
