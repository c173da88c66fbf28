// Helpers the experiment's tests share.
#ifndef HZ_TESTS_UNIT_EXPERIMENT_COHORT_UTIL_H_
#define HZ_TESTS_UNIT_EXPERIMENT_COHORT_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hz/experiment/cohort.h"

namespace hz::experiment::testing {

// The mechanisms of the cohort named `cohort` (none, and a test failure, if
// there is no such cohort).
inline Mechanisms MechanismsOf(const std::string& cohort) {
  std::vector<Cohort> c;
  EXPECT_TRUE(SelectCohorts({cohort}, &c)) << cohort;
  return c.empty() ? Mechanisms{} : c[0].mechanisms;
}

}  // namespace hz::experiment::testing

#endif  // HZ_TESTS_UNIT_EXPERIMENT_COHORT_UTIL_H_
