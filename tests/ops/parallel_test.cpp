#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "ops/parallel.hpp"

TEST_CASE("parallel_for covers every index exactly once for any size and budget", "[cpu][parallel]") {
  const int saved = af::thread_budget();
  for (int budget : {1, 2, 4}) {
    af::set_thread_budget(budget);
    for (int64_t n : {0, 1, 7, 1000, 100003}) {
      for (int64_t grain : {1, 64, 100000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        af::parallel_for(n, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) REQUIRE(h.load() == 1);
      }
    }
  }
  af::set_thread_budget(saved);
}

TEST_CASE("parallel_for called from several threads at once and nested does not deadlock", "[cpu][parallel]") {
  const int saved = af::thread_budget();
  af::set_thread_budget(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        af::parallel_for(64, 1, [&](int64_t b, int64_t e) {
          af::parallel_for(e - b, 1, [&](int64_t ib, int64_t ie) { total += ie - ib; });
        });
    });
  for (auto& t : callers) t.join();
  CHECK(total.load() == 4 * 50 * 64);
  af::set_thread_budget(saved);
}
