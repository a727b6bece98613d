#pragma once

// A test case whose prerequisite is missing says so and returns; ctest reports it as skipped, not
// passed (tests/CMakeLists.txt sets SKIP_REGULAR_EXPRESSION to the marker). Use it only for what a
// machine may lack by design (a GPU, an idle core): anything scripts/setup installs must fail
// instead when it is absent. A case that has already recorded a failed assertion is failed, not
// skipped: the marker is not printed then (support/skip_guard.cpp watches the assertions).

#include <iostream>

namespace af::testing {
/// Whether the running test case has recorded a failed assertion (support/skip_guard.cpp).
bool test_case_has_failed() noexcept;
}  // namespace af::testing

#define AF_SKIP(reason)                                                                                     \
  do {                                                                                                      \
    if (::af::testing::test_case_has_failed()) {                                                            \
      std::cout << "not skipped, since assertions above failed (would skip: " << reason << ")" << std::endl; \
      return;                                                                                               \
    }                                                                                                       \
    std::cout << "AF_SKIP: " << reason << std::endl;                                                        \
    return;                                                                                                 \
  } while (0)
