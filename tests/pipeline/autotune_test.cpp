// The autotuner grows a CPU-bound map's parallelism within the budget and deepens prefetch.

#include <chrono>

#include "pipeline/iterator.hpp"
#include "pipeline_test_util.hpp"
#include "../support/cpu_burn.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

// Burns `micros` of CPU (not sleep: the scheduler must see real work).
expected<element> burn(element e, int64_t micros) {
  af::testing::burn_cpu(std::chrono::microseconds(micros));
  return e;
}

}  // namespace

TEST_CASE("autotune gives a busy map more workers, up to the CPU budget, and keeps the order",
          "[pipeline][autotune]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(600).map([](element e) { return burn(std::move(e), 1000); }, autotune).prefetch(autotune);
  auto it = ds.iterate(rt, {.cpu_budget = 2, .period_ms = 20});
  std::vector<element> seen;
  uint64_t most_workers = 0;
  for (auto& e : it) {
    seen.push_back(e);
    for (const auto& c : it.counters()) most_workers = std::max(most_workers, c.parallelism);
  }
  REQUIRE(it.status().code == errc::none);
  CHECK(values(seen) == iota(0, 600));
  CHECK(most_workers == 2);  // grew from 1; the budget stops it at 2
}

TEST_CASE("explicit numbers are left alone: no tuner runs", "[pipeline][autotune]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(300).map([](element e) { return burn(std::move(e), 500); }, 1).prefetch(2);
  auto it = ds.iterate(rt, {.period_ms = 10});
  uint64_t most_workers = 0;
  for (auto& e : it) {
    (void)e;
    for (const auto& c : it.counters()) most_workers = std::max(most_workers, c.parallelism);
  }
  CHECK(most_workers == 1);
}

TEST_CASE("autotune deepens prefetch when the consumer waits", "[pipeline][autotune]") {
  runtime rt{test_runtime_options()};
  // A bursty producer: every 20th element is slow, so a deeper buffer smooths the consumer's waits.
  auto ds = dataset::range(400)
                .map([](element e) {
                  return burn(std::move(e), e.find("value")->item<int64_t>() % 20 == 0 ? 3000 : 50);
                })
                .prefetch(autotune);
  auto it = ds.iterate(rt, {.period_ms = 10});
  uint64_t deepest = 0;
  for (auto& e : it) {
    (void)e;
    const auto c = it.counters();
    deepest = std::max(deepest, c[c.size() - 2].slots);  // the prefetch stage, before the reader
  }
  CHECK(deepest > 2);
}
