// The profiler names the stage that limits a pipeline and writes a Chrome trace of its spans.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "pipeline/profiler.hpp"
#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

TEST_CASE("the profiler reports the slow stage as the bottleneck and writes a Chrome trace", "[pipeline][profiler]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(200)
                .map([](element e) -> expected<element> { return e; }, 1, true, "cheap")
                .batch(1)
                .map([](element e) -> expected<element> {
                  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(800);
                  volatile uint64_t x = 0;
                  while (std::chrono::steady_clock::now() < until) x = x + 1;
                  return e;
                }, 1, true, "slow");
  auto it = ds.iterate(rt);
  profiler prof{it};
  std::size_t n = 0;
  for (auto& e : it) n += static_cast<std::size_t>(e.find("value")->dim(0));
  CHECK(n == 200);
  const auto report = prof.report();
  CHECK(report.bottleneck == "slow");
  const auto text = report.to_string();
  CHECK_THAT(text, Catch::Contains("bottleneck: 'slow'") && Catch::Contains("cheap") && Catch::Contains("waiting"));
  const auto path = std::filesystem::temp_directory_path() / ("af_profile_" + std::to_string(::getpid()) + ".json");
  REQUIRE(prof.write_chrome_trace(path.string()).has_value());
  std::ifstream in(path);
  const std::string json{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::filesystem::remove(path);
  CHECK_THAT(json, Catch::Contains("\"traceEvents\"") && Catch::Contains("\"stage\":\"slow\""));
}
