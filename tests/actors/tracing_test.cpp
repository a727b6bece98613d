// Span tracing: recording, the Chrome trace, and the per-stage report.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "actors/runtime.hpp"
#include "actors/stage.hpp"
#include "actors/tracing.hpp"

namespace {

af::element make_item(int64_t value) { return af::element{{"x", af::tensor::scalar<int64_t>(value)}}; }

af::transform_fn pass_after(std::chrono::microseconds work) {
  return [work](af::element e) -> af::expected<std::vector<af::element>> {
    if (work.count() > 0) std::this_thread::sleep_for(work);  // simulated slow stage
    return std::vector<af::element>{std::move(e)};
  };
}

}  // namespace

TEST_CASE("a traced pipeline writes a Chrome trace with every stage's spans and names the slowest "
          "stage as bottleneck", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  af::trace::start();
  int64_t next = 0;
  auto gen = [next]() mutable -> af::expected<std::optional<af::element>> {
    if (next == 30) return std::optional<af::element>{};
    return std::optional<af::element>{make_item(next++)};
  };
  auto p = af::pipeline::from_generator("source", gen, {.slots = 4})
               .transform("slow", pass_after(std::chrono::microseconds(5000)), {.slots = 2})
               .transform("fast", pass_after(std::chrono::microseconds(0)), {.slots = 2});
  std::vector<af::stage_counters> counters;
  {
    auto stream = af::iterate(rt, p, {.slots = 2, .name = "trainer"});
    std::size_t n = 0;
    for (auto& e : stream) {
      (void)e;
      ++n;
    }
    CHECK(n == 30);
    counters = stream.counters();
  }
  af::trace::stop();
  auto spans = af::trace::collect();
  CHECK(af::trace::dropped() == 0);

  auto doc = nlohmann::json::parse(af::trace::to_chrome_json(spans));
  REQUIRE(doc.contains("traceEvents"));
  const auto& events = doc["traceEvents"];
  REQUIRE(events.size() == spans.size());
  std::set<std::string> stages;
  std::set<std::string> categories;
  for (const auto& ev : events) {
    CHECK(ev["ph"] == "X");
    CHECK(ev["ts"].is_number());
    CHECK(ev["dur"].get<double>() >= 0);
    CHECK(ev["tid"].is_number());
    stages.insert(ev["args"]["stage"].get<std::string>());
    categories.insert(ev["cat"].get<std::string>());
  }
  for (const char* s : {"source", "slow", "fast", "trainer"}) CHECK(stages.count(s) == 1);
  CHECK(categories == std::set<std::string>{"busy", "waiting_for_input", "blocked_on_output"});

  auto report = af::trace::summarize(spans);
  CHECK(report.bottleneck == "slow");
  const auto text = report.to_string();
  CHECK(text.find("bottleneck: 'slow'") != std::string::npos);
  double slow_busy = 0;
  double others_busy = 0;
  for (const auto& a : report.actors) {
    CHECK(a.busy + a.waiting + a.blocked <= 1.01);
    if (a.actor == "slow") {
      slow_busy = a.busy;
      CHECK(a.items == 30);
    } else {
      others_busy = std::max(others_busy, a.busy);
    }
  }
  CHECK(slow_busy > others_busy);
  // The counters the stages keep for autotune agree: the slow stage did the most work.
  REQUIRE(counters.size() == 4);
  CHECK(counters[1].name == "slow");
  CHECK(counters[1].busy_ns > counters[2].busy_ns);
  CHECK(counters[1].items_out == 30);

  const std::string path = "actorflow_trace_test.json";
  REQUIRE(af::trace::write_chrome_trace(path, spans));
  std::ifstream in{path};
  CHECK(nlohmann::json::parse(in)["traceEvents"].size() == spans.size());
  std::remove(path.c_str());
}

TEST_CASE("a thread's span buffer is capped and counts what it drops", "[actors]") {
  af::trace::set_per_thread_capacity(10);
  af::trace::start();
  std::thread recorder{[] {
    const auto name = af::trace::intern("tick");
    const auto actor = af::trace::intern("capped");
    for (int i = 0; i < 25; ++i) af::trace::record(name, actor, af::trace::category::busy, i, i + 1);
  }};
  recorder.join();
  af::trace::stop();
  auto spans = af::trace::collect();
  af::trace::set_per_thread_capacity(std::size_t{1} << 16);
  CHECK(spans.size() == 10);
  CHECK(af::trace::dropped() == 15);
  CHECK(spans.front().actor == "capped");
}

TEST_CASE("nothing is recorded while tracing is off", "[actors]") {
  af::trace::start();
  af::trace::stop();
  af::trace::record(af::trace::intern("x"), af::trace::intern("y"), af::trace::category::busy, 0, 1);
  CHECK(af::trace::collect().empty());
}
