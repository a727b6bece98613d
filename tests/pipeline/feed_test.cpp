// A dataset feeding an actor (data::feed): every element reaches the handler on the consuming
// actor in order, a stop or an error ends the feed and cancels upstream, the pipeline never holds
// more than its slots while the handler is slow, and a feed continues from a saved position.

#include <atomic>
#include <stdexcept>
#include <thread>

#include "../support/eventually.hpp"
#include "pipeline/feed.hpp"
#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

int64_t value_of(const element& e) { return e.find("value")->to_vector<int64_t>()[0]; }

// range(0, n) through a generator that counts what it produced.
dataset counted_numbers(int64_t n, std::shared_ptr<std::atomic<int64_t>> produced) {
  return dataset::from_generator("numbers", [n, produced] {
    return generator_fn{[n, produced, i = int64_t{0}]() mutable -> expected<std::optional<element>> {
      if (i >= n) return std::optional<element>{};
      produced->fetch_add(1);
      return std::optional<element>{element{{"value", tensor::scalar<int64_t>(i++)}}};
    }};
  });
}

}  // namespace

TEST_CASE("a feed hands every element in order to its handler on an actor, not on the caller's thread", "[feed]") {
  runtime rt{test_runtime_options()};
  const auto caller = std::this_thread::get_id();
  std::vector<int64_t> seen;
  bool on_caller_thread = false;
  auto fed = feed(rt, dataset::range(1000).map([](element e) -> expected<element> { return e; }),
                  [&](element&& e) -> expected<feed_verdict> {
                    on_caller_thread = on_caller_thread || std::this_thread::get_id() == caller;
                    seen.push_back(value_of(e));
                    return feed_verdict::more;
                  });
  REQUIRE(fed.has_value());
  CHECK_FALSE(fed->status);
  CHECK(fed->handled == 1000);
  CHECK(seen == iota(0, 1000));
  CHECK_FALSE(on_caller_thread);
}

TEST_CASE("a handler's stop ends the feed cleanly and cancels an endless pipeline", "[feed]") {
  runtime rt{test_runtime_options()};
  int64_t calls = 0;
  auto fed = feed(rt, dataset::range(10).repeat(), [&](element&&) -> expected<feed_verdict> {
    return ++calls == 25 ? feed_verdict::stop : feed_verdict::more;
  });
  REQUIRE(fed.has_value());
  CHECK_FALSE(fed->status);
  CHECK(fed->handled == 25);
  CHECK(calls == 25);
}

TEST_CASE("a handler's error or exception ends the feed with it; a pipeline's error is told apart", "[feed]") {
  runtime rt{test_runtime_options()};
  auto failing = feed(rt, dataset::range(100), [](element&& e) -> expected<feed_verdict> {
    if (value_of(e) == 7) return make_error(errc::invalid_argument, "step 7 refused the batch");
    return feed_verdict::more;
  });
  REQUIRE(failing.has_value());
  CHECK(failing->status.code == errc::invalid_argument);
  CHECK(failing->status.message == "step 7 refused the batch");
  CHECK(failing->handler_failed);
  CHECK(failing->handled == 8);

  auto throwing = feed(rt, dataset::range(100), [](element&&) -> expected<feed_verdict> {
    throw std::runtime_error("kaboom");
  }, {.name = "replica"});
  REQUIRE(throwing.has_value());
  CHECK(throwing->status.message == "replica threw: kaboom");
  CHECK(throwing->handler_failed);

  auto bad_map = dataset::range(100).map([](element e) -> expected<element> {
    if (value_of(e) == 42) return make_error(errc::out_of_range, "no 42 here");
    return e;
  }, 1, true, "check");
  int64_t before_failure = 0;
  auto upstream = feed(rt, bad_map, [&](element&&) -> expected<feed_verdict> {
    ++before_failure;
    return feed_verdict::more;
  });
  REQUIRE(upstream.has_value());
  CHECK(upstream->status.code == errc::out_of_range);
  CHECK(upstream->status.message.find("no 42 here") != std::string::npos);
  CHECK_FALSE(upstream->handler_failed);
  CHECK(before_failure == 42);  // nothing accepted before the failure is lost
}

TEST_CASE("while the handler is slow the pipeline holds no more than its slots and the feed's", "[feed]") {
  runtime rt{test_runtime_options()};
  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  const auto ds = counted_numbers(100000, produced).map([](element e) -> expected<element> { return e; });
  const feed_options options{.name = "slow", .slots = 3};
  // Stage slots, the feed's mailbox and the element in the handler's hands.
  const int64_t bound = static_cast<int64_t>(ds.to_pipeline(rt).total_slots() + options.slots + 1);
  int64_t handled = 0, worst = 0;
  bool filled = false;
  auto fed = feed(rt, ds, [&](element&&) -> expected<feed_verdict> {
    if (handled == 0)  // the pipeline fills up while the first element is in the handler
      filled = af::testing::eventually([&] { return produced->load() >= bound - 1; }, std::chrono::seconds(10));
    worst = std::max(worst, produced->load() - handled);
    return ++handled == 2000 ? feed_verdict::stop : feed_verdict::more;
  }, options);
  REQUIRE(fed.has_value());
  CHECK_FALSE(fed->status);
  CHECK(filled);
  CHECK(worst <= bound);
  CHECK(produced->load() < 2000 + bound);  // cancelled, not drained
}

TEST_CASE("a feed continues from an iterator's saved position; another pipeline's position is refused", "[feed]") {
  runtime rt{test_runtime_options()};
  const auto ds = dataset::range(200).shuffle(50, 9).batch(4);
  auto it = ds.iterate(rt);
  for (int i = 0; i < 13; ++i) REQUIRE(it.next().has_value());
  const auto saved = it.save();
  std::vector<element> rest;
  for (auto& e : it) rest.push_back(e);

  std::vector<int64_t> fed_values;
  auto fed = feed(rt, ds, [&](element&& e) -> expected<feed_verdict> {
    for (auto v : e.find("value")->to_vector<int64_t>()) fed_values.push_back(v);
    return feed_verdict::more;
  }, {.from = saved});
  REQUIRE(fed.has_value());
  CHECK_FALSE(fed->status);
  CHECK(fed_values == values(rest));

  auto other = feed(rt, dataset::range(200).batch(4), [](element&&) -> expected<feed_verdict> { return feed_verdict::more; },
                    {.from = saved});
  REQUIRE_FALSE(other.has_value());
  CHECK(other.error_value().message.find("belongs to another pipeline") != std::string::npos);
}

TEST_CASE("autotuned stages are tuned while they feed an actor", "[feed]") {
  runtime rt{test_runtime_options()};
  // A map busy all the time: the tuner gives it workers while the consumer waits.
  const auto ds = dataset::range(400).map([](element e) -> expected<element> {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return e;
  }, autotune).prefetch(autotune);
  std::vector<int64_t> seen;
  auto fed = feed(rt, ds, [&](element&& e) -> expected<feed_verdict> {
    seen.push_back(value_of(e));
    return feed_verdict::more;
  }, {.tuning = {.cpu_budget = 4, .period_ms = 20}});
  REQUIRE(fed.has_value());
  CHECK_FALSE(fed->status);
  CHECK(seen == iota(0, 400));  // deterministic by default, whatever the tuner did
  uint64_t most_workers = 0;
  for (const auto& c : fed->counters) most_workers = std::max(most_workers, c.parallelism);
  CHECK(most_workers > 1);
  CHECK(fed->counters.back().name == "consumer");
  CHECK(fed->counters.back().items_in == 400);
}
