// Memory stays bounded by the stages' slots when the consumer is slower than the pipeline.

#include <chrono>
#include <thread>

#include "ops/allocator.hpp"
#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

TEST_CASE("a slow consumer holds the allocator peak to the slots, not the dataset", "[pipeline][memory]") {
  runtime rt{test_runtime_options()};
  constexpr int64_t count = 3000;
  constexpr int64_t floats = 16 * 1024;  // 64 KiB per element: 192 MiB in all
  auto ds = dataset::range(count)
                .map([](element e) -> expected<element> {
                  auto big = tensor::full({floats}, static_cast<double>(e.find("value")->item<int64_t>()), dtype::f32);
                  if (!big) return big.error_value();
                  e.set("payload", std::move(*big));
                  return e;
                }, 2)
                .filter([](const element&) -> expected<bool> { return true; })
                .prefetch(8);
  cpu_allocator()->reset_peak();
  auto it = ds.iterate(rt);
  int64_t seen = 0;
  for (auto& e : it) {
    CHECK(e.find("payload")->data<float>()[floats - 1] == static_cast<float>(seen));
    ++seen;
    if (seen % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a slow consumer
  }
  REQUIRE(it.status().code == errc::none);
  CHECK(seen == count);
  const std::size_t peak = cpu_allocator()->stats().peak_bytes_in_use;
  const std::size_t element_bytes = floats * sizeof(float);
  INFO("allocator peak " << peak << " bytes = " << peak / element_bytes << " elements");
  // map (128 slots) + filter (64) + prefetch (8) + reader (4) + a few in the hands of workers.
  CHECK(peak <= 224 * element_bytes);
  CHECK(peak < static_cast<std::size_t>(count) * element_bytes / 10);
}
