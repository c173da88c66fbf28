// Counts of the global operator new and delete calls made by the process, for
// tests that check an operation's cost does not grow with its input. Linking
// alloc_counter.cc replaces the global operators: only in a binary of its own.
#ifndef HZ_TESTS_UNIT_SERVICE_ALLOC_COUNTER_H_
#define HZ_TESTS_UNIT_SERVICE_ALLOC_COUNTER_H_

#include <cstdint>

namespace hz::testing {

uint64_t Allocations();
uint64_t Frees();

}  // namespace hz::testing

#endif  // HZ_TESTS_UNIT_SERVICE_ALLOC_COUNTER_H_
