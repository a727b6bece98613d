// The profiler names the stage that limits a pipeline and writes a Chrome trace of its spans.

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "pipeline/profiler.hpp"
#include "pipeline_test_util.hpp"
#include "../support/cpu_burn.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

TEST_CASE("the profiler reports the slow stage as the bottleneck and writes a Chrome trace", "[pipeline][profiler]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(200)
                .map([](element e) -> expected<element> { return e; }, 1, true, "cheap")
                .batch(1)
                .map([](element e) -> expected<element> {
                  af::testing::burn_cpu(std::chrono::microseconds(800));
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

TEST_CASE("an interleave's children show as one profile row that holds their work", "[pipeline][profiler]") {
  runtime rt{test_runtime_options()};
  // The slow map runs inside each child (inline in its source), not in a stage of its own.
  auto ds = dataset::range(4).interleave([](const element& which) -> expected<dataset> {
    const int64_t base = which.find("value")->item<int64_t>() * 50;
    return dataset::range(base, base + 50).map([](element e) -> expected<element> {
      af::testing::burn_cpu(std::chrono::microseconds(400));
      return e;
    });
  }, 2);
  auto it = ds.iterate(rt);
  profiler prof{it};
  std::size_t n = 0;
  for (auto& e : it) n += e.find("value") ? 1 : 0;
  REQUIRE(n == 200);
  const auto report = prof.report();
  CHECK(report.bottleneck == "interleave/children");
  const auto children = std::find_if(report.stages.begin(), report.stages.end(),
                                     [](const stage_profile& s) { return s.name == "interleave/children"; });
  REQUIRE(children != report.stages.end());
  CHECK(children->parallelism == 2);
  CHECK(children->busy > 0);
  CHECK(children->elements_per_s > 0);
  const auto own = std::next(children);  // the interleave's own routing row follows its children
  REQUIRE(own != report.stages.end());
  CHECK(own->name == "interleave");
  CHECK(own->busy < children->busy);
  // Every child counted its elements into the one row: none are held once the stream has ended.
  const auto last = it.counters();
  const auto host = std::find_if(last.begin(), last.end(), [](const stage_counters& c) { return !c.inner.empty(); });
  REQUIRE(host != last.end());
  CHECK(host->inner.front().items_out == 200);
  CHECK(host->inner.front().buffered == 0);
  CHECK(host->inner.front().busy_ns >= 200 * 400'000);  // every child's 0.4 ms per element is in the row
}
