// Linked into every test executable: notes whether the running test case has recorded a failed
// assertion, so that AF_SKIP (skip.hpp) cannot turn a failure into a skip.

#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <atomic>

#include "skip.hpp"

namespace af::testing {

namespace {

std::atomic<bool> failed_in_this_case{false};

class skip_guard final : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    failed_in_this_case = false;
    TestEventListenerBase::testCaseStarting(info);
  }
  bool assertionEnded(const Catch::AssertionStats& stats) override {
    if (!stats.assertionResult.isOk()) failed_in_this_case = true;
    return TestEventListenerBase::assertionEnded(stats);
  }
};

}  // namespace

bool test_case_has_failed() noexcept { return failed_in_this_case.load(); }

}  // namespace af::testing

using af_testing_skip_guard = af::testing::skip_guard;  // the macro pastes the name into an identifier
CATCH_REGISTER_LISTENER(af_testing_skip_guard)
