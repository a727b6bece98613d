// A dataset feeding an actor (data::feed): every element reaches the handler on the consuming
// actor in order, a stop or an error ends the feed and cancels upstream, the pipeline never holds
// more than its slots while the handler is slow, and a feed continues from a saved position.

#include <atomic>
#include <set>
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

// Every element of `ds` with unseeded shuffles drawing from `base_seed`.
std::vector<element> drain_from(runtime& rt, const dataset& ds, uint64_t base_seed) {
  auto it = ds.resume(rt, iterator_state{base_seed, 0, ds.to_dot()});
  REQUIRE(it.has_value());
  std::vector<element> out;
  for (auto& e : *it) out.push_back(e);
  REQUIRE(it->status().code == errc::none);
  return out;
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

TEST_CASE("a handler's error or exception ends the feed with it, a pipeline's error is told apart", "[feed]") {
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

TEST_CASE("a feed continues from an iterator's saved position, another pipeline's position is refused", "[feed]") {
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

TEST_CASE("a paused feed keeps its topology up, holds what arrives within its slots and resumes in order", "[feed]") {
  runtime rt{test_runtime_options()};
  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  const auto ds = counted_numbers(1000, produced).map([](element e) -> expected<element> { return e; });
  const feed_options options{.name = "pausing", .slots = 3};
  const int64_t bound = static_cast<int64_t>(ds.to_pipeline(rt).total_slots() + options.slots + 1);
  std::vector<int64_t> seen;  // handed over by each pause and resume
  std::set<int64_t> held;
  auto session = start_feed(rt, ds, [&](element&& e) -> expected<feed_verdict> {
    // Every 100 elements a hold (the element comes again first after the resume), then a pause.
    const int64_t v = value_of(e);
    if (v % 100 == 50 && held.insert(v).second) return feed_verdict::hold;
    seen.push_back(v);
    return v % 100 == 50 ? feed_verdict::pause : feed_verdict::more;
  }, options);
  REQUIRE(session.has_value());
  int pauses = 0;
  while (session->wait()) {
    ++pauses;
    const int64_t handled = static_cast<int64_t>(seen.size());
    // Paused: the stages fill their slots and stop there.
    CHECK(af::testing::eventually([&] { return produced->load() >= std::min<int64_t>(1000, handled + bound - 2); },
                                  std::chrono::seconds(10)));
    CHECK(produced->load() <= handled + bound + 1);
    session->resume();
  }
  auto fed = session->finish();
  CHECK_FALSE(fed.status);
  CHECK(pauses == 20);
  CHECK(seen == iota(0, 1000));
  CHECK(fed.handled == 1000);
}

TEST_CASE("a feed that ends while paused ends after the held elements, finishing a paused feed stops it cleanly", "[feed]") {
  runtime rt{test_runtime_options()};
  std::vector<int64_t> seen;
  bool held_once = false;
  auto session = start_feed(rt, dataset::range(10), [&](element&& e) -> expected<feed_verdict> {
    if (value_of(e) == 7 && !held_once) {
      held_once = true;
      return feed_verdict::hold;  // the stream's end arrives behind 7, 8, 9
    }
    seen.push_back(value_of(e));
    return feed_verdict::more;
  });
  REQUIRE(session.has_value());
  REQUIRE(session->wait());
  CHECK(seen == iota(0, 7));
  session->resume();
  CHECK_FALSE(session->wait());
  CHECK(seen == iota(0, 10));
  CHECK_FALSE(session->finish().status);

  auto endless = start_feed(rt, dataset::range(10).repeat(), [&](element&&) -> expected<feed_verdict> {
    return feed_verdict::pause;
  });
  REQUIRE(endless.has_value());
  REQUIRE(endless->wait());
  auto stopped = endless->finish();
  // Failed under TSan while shutdown could reach a stage after its upstream had quit (now downstream first).
  INFO(to_string(stopped.status.code) << ": " << stopped.status.message);
  CHECK_FALSE(stopped.status);
  CHECK(stopped.handled == 1);
}

TEST_CASE("numbered passes tag every element with its pass and draw repeat's order for that pass", "[feed]") {
  runtime rt{test_runtime_options()};
  const auto ds = dataset::range(20).shuffle(20);
  for (const auto& input : {ds, ds.map([](element e) -> expected<element> { return e; }, 2)}) {
    // Passes 2 and 3 on their own see what passes 2 and 3 of a run from pass 0 see.
    const auto all = input.passes(0, 4, "pass"), later = input.passes(2, 2, "pass");
    auto from_zero = drain_from(rt, all, 42);
    auto from_two = drain_from(rt, later, 42);
    REQUIRE(from_zero.size() == 80);
    REQUIRE(from_two.size() == 40);
    CHECK(values(from_zero, "pass") == [] {
      std::vector<int64_t> v;
      for (int64_t p = 0; p < 4; ++p) v.insert(v.end(), 20, p);
      return v;
    }());
    CHECK(values(std::vector<element>(from_zero.begin() + 40, from_zero.end())) == values(from_two));
    CHECK(values(std::vector<element>(from_zero.begin(), from_zero.begin() + 20)) !=
          values(std::vector<element>(from_zero.begin() + 20, from_zero.begin() + 40)));  // reshuffled per pass
  }
  // A source that generates in place stays one source across its passes; tagged the same way.
  const auto numbered = drain_from(rt, dataset::range(3).passes(5, 2, "pass"), 1);
  CHECK(values(numbered) == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(values(numbered, "pass") == std::vector<int64_t>{5, 5, 5, 6, 6, 6});
}

TEST_CASE("an interleave with few slots keeps merging after it sent: a skip behind it never stalls", "[feed]") {
  // The skip takes its credit's worth without answering with more demand; the interleave (passes
  // keep 4 slots) must refill its output from what its child has ready after each send.
  runtime rt{{.scheduler_threads = 2}};
  const auto rows = tensor::from_vector<float>(std::vector<float>(96 * 4, 1.0f), {96, 4});
  const auto epochs = dataset::from_tensor_slices({{"x", rows}}).shuffle(96).batch(8).passes(1, 2, "pass");
  for (int round = 0; round < 30; ++round) {
    int64_t handled = 0;
    auto fed = feed(rt, epochs, [&](element&&) -> expected<feed_verdict> {
      ++handled;
      return feed_verdict::more;
    }, {.from = iterator_state{7, 5, epochs.to_dot()}});
    REQUIRE(fed.has_value());
    CHECK_FALSE(fed->status);
    CHECK(handled == 19);
  }
}

TEST_CASE("a paused feed's snapshot continues exactly in a new feed, from its stages' state", "[feed]") {
  runtime rt{test_runtime_options()};
  auto mapped = std::make_shared<std::atomic<int64_t>>(0);
  const auto ds = dataset::range(300)
                      .map([mapped](element e) -> expected<element> {
                        mapped->fetch_add(1);
                        return e;
                      })
                      .shuffle(64);
  const uint64_t base_seed = 21;
  std::vector<int64_t> whole;
  REQUIRE(feed(rt, ds, [&](element&& e) -> expected<feed_verdict> {
    whole.push_back(value_of(e));
    return feed_verdict::more;
  }, {.from = iterator_state{base_seed, 0, ds.to_dot()}}));
  REQUIRE(whole.size() == 300);

  std::vector<int64_t> seen;
  auto collect = [&](element&& e) -> expected<feed_verdict> {
    seen.push_back(value_of(e));
    return seen.size() == 100 ? feed_verdict::pause : feed_verdict::more;
  };
  auto first = start_feed(rt, ds, collect, {.slots = 3, .from = iterator_state{base_seed, 0, ds.to_dot()}});
  REQUIRE(first.has_value());
  REQUIRE(first->wait());
  const auto at = first->snapshot();
  CHECK(at.replay_reason.empty());
  REQUIRE(at.stages.has_value());
  CHECK(at.consumed == 100);
  CHECK_FALSE(at.pending.empty());  // what reached the paused replica's slots
  CHECK_FALSE(first->finish().status);

  mapped->store(0);
  auto rest = feed(rt, ds, collect, {.from = at});
  REQUIRE(rest);
  CHECK_FALSE(rest->status);
  CHECK(seen == whole);
  // Only what followed the snapshot's mark is mapped again: the shuffle buffer and the pending
  // elements come from the state (a replay would map all 300).
  CHECK(mapped->load() <= 300 - static_cast<int64_t>(at.pending.size()) - 100 - 64);
}

TEST_CASE("a snapshot of a feed paused behind the stream's end holds the rest, a generator's replays", "[feed]") {
  runtime rt{test_runtime_options()};
  std::vector<int64_t> seen;
  bool held_once = false;
  auto hold_at_7 = [&](element&& e) -> expected<feed_verdict> {
    if (value_of(e) == 7 && !held_once) {
      held_once = true;
      return feed_verdict::hold;
    }
    seen.push_back(value_of(e));
    return feed_verdict::more;
  };
  const auto ds = dataset::range(10);
  auto session = start_feed(rt, ds, hold_at_7);
  REQUIRE(session.has_value());
  REQUIRE(session->wait());
  CHECK(af::testing::eventually([&] {
    // The end arrives behind 7, 8 and 9; a snapshot then needs no mark from the stages.
    return session->snapshot().pending.size() == 3;
  }, std::chrono::seconds(10)));
  const auto at = session->snapshot();
  REQUIRE(at.stages.has_value());
  CHECK(at.stages->upstream_ended);
  session->finish();
  auto rest = feed(rt, ds, hold_at_7, {.from = at});
  REQUIRE(rest);
  CHECK(seen == iota(0, 10));

  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  const auto generated = counted_numbers(50, produced);
  seen.clear();
  auto pause_at_20 = [&](element&& e) -> expected<feed_verdict> {
    seen.push_back(value_of(e));
    return seen.size() == 20 ? feed_verdict::pause : feed_verdict::more;
  };
  auto gen_session = start_feed(rt, generated, pause_at_20);
  REQUIRE(gen_session.has_value());
  REQUIRE(gen_session->wait());
  const auto replayed = gen_session->snapshot();
  CHECK_FALSE(replayed.stages.has_value());
  CHECK_FALSE(replayed.replay_reason.empty());
  CHECK(replayed.consumed == 20);
  gen_session->finish();
  REQUIRE(feed(rt, generated, pause_at_20, {.from = replayed}));
  CHECK(seen == iota(0, 50));
}
