// Credit-based flow control through source, transform and sink stages.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "actors/runtime.hpp"
#include "actors/stage.hpp"
#include "stage_test_util.hpp"
#include "../support/cpu_burn.hpp"
#include "../support/eventually.hpp"

namespace {

using af::testing::counting;
using af::testing::make_item;
using af::testing::value_of;

af::expected<std::vector<af::element>> identity(af::element e) {
  return std::vector<af::element>{std::move(e)};
}

// Simulated work: a short spin, occasionally a sleep (only ever to slow a stage, never to wait).
struct jitter {
  std::mt19937 rng;
  int max_spin_us;
  void operator()() {
    if (max_spin_us == 0) return;
    int us = std::uniform_int_distribution<int>(0, max_spin_us)(rng);
    if (std::uniform_int_distribution<int>(0, 19)(rng) == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100 + us));
      return;
    }
    af::testing::burn_cpu(std::chrono::microseconds(us));
  }
};

enum class op_kind { increment, duplicate, drop_multiples_of_three };

std::vector<int64_t> apply_reference(op_kind k, const std::vector<int64_t>& in) {
  std::vector<int64_t> out;
  for (auto v : in) {
    if (k == op_kind::increment) out.push_back(v + 1);
    if (k == op_kind::duplicate) {
      out.push_back(2 * v);
      out.push_back(2 * v + 1);
    }
    if (k == op_kind::drop_multiples_of_three && v % 3 != 0) out.push_back(v);
  }
  return out;
}

af::transform_fn make_op(op_kind k, jitter delay) {
  return [k, delay](af::element e) mutable -> af::expected<std::vector<af::element>> {
    delay();
    std::vector<int64_t> outs = apply_reference(k, {value_of(e)});
    std::vector<af::element> result;
    for (auto v : outs) result.push_back(make_item(v));
    return result;
  };
}

}  // namespace

TEST_CASE("a chain of stages delivers every element exactly once and in order for any slots, "
          "length and speeds", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng{seed};
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int n = pick(0, 250);
    const int max_spin = pick(0, 3) == 0 ? 0 : pick(1, 30);
    std::vector<int64_t> expected(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) expected[static_cast<std::size_t>(i)] = i;

    auto calls = std::make_shared<std::atomic<int64_t>>(0);
    auto gen = [inner = counting(n, calls), delay = jitter{std::mt19937{seed * 7u}, max_spin}]() mutable {
      delay();
      return inner();
    };
    auto p = af::pipeline::from_generator("source", gen, {.slots = static_cast<std::size_t>(pick(1, 16))});
    const int length = pick(0, 4);
    for (int s = 0; s < length; ++s) {
      auto k = static_cast<op_kind>(pick(0, 2));
      expected = apply_reference(k, expected);
      std::string name = "t";
      name += std::to_string(s);  // (not "t" + ...: GCC 12 warns falsely on that with -O3)
      p = p.transform(name, make_op(k, jitter{std::mt19937{seed * 31u + s}, max_spin}),
                      {.slots = static_cast<std::size_t>(pick(1, 16))});
    }
    jitter reader_delay{std::mt19937{seed * 131u}, max_spin};
    std::vector<int64_t> got;
    auto stream = af::iterate(rt, p, {.slots = static_cast<std::size_t>(pick(1, 16))});
    for (auto& e : stream) {
      got.push_back(value_of(e));
      reader_delay();
    }
    REQUIRE(stream.status().code == af::errc::none);
    REQUIRE(got == expected);
  }
}

TEST_CASE("a stalled reader stops the producer once every slot is full, and memory stays bounded",
          "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto alloc = af::make_cpu_allocator({.name = "stall"});
  REQUIRE(alloc);
  constexpr int64_t floats_per_item = 16 * 1024;  // 64 KiB per element
  std::mutex mtx;
  std::condition_variable cv;
  int64_t produced = 0;
  auto gen = [&, a = *alloc]() -> af::expected<std::optional<af::element>> {
    auto t = af::tensor::zeros({floats_per_item}, af::dtype::f32, a);
    if (!t) return t.error_value();
    {
      std::lock_guard<std::mutex> guard{mtx};
      ++produced;
    }
    cv.notify_all();
    return std::optional<af::element>{af::element{{"x", *t}}};
  };
  auto p = af::pipeline::from_generator("source", gen, {.slots = 3})
               .transform("pass", identity, {.slots = 2});
  const af::sink_options reader{.slots = 4, .name = "reader"};
  const int64_t bound = static_cast<int64_t>(p.total_slots() + reader.slots);
  {
    auto stream = af::iterate(rt, p, reader);
    auto first = stream.next();  // take one element, then stall
    REQUIRE(first);
    REQUIRE(first->has_value());
    std::unique_lock<std::mutex> lock{mtx};
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return produced >= bound; }));
    // Every slot is full: more production would need credit that nobody grants (that nothing then
    // runs at all is shown on the deterministic scheduler in quiescence_test.cpp).
    CHECK(produced == bound);
    lock.unlock();
    const auto stats = (*alloc)->stats();
    CHECK(stats.peak_bytes_in_use <= static_cast<std::size_t>(bound) * floats_per_item * sizeof(float));
    CHECK(stats.bytes_in_use == static_cast<std::size_t>(bound) * floats_per_item * sizeof(float));
    // Stages publish their counters after the call that produced: wait for them to say "full".
    REQUIRE(stream.counters().size() == 3);
    CHECK(stream.counters()[0].name == "source");
    CHECK(af::testing::eventually([&] {
      const auto counters = stream.counters();
      return counters[0].items_in == static_cast<uint64_t>(bound) && counters[0].buffered == 3 &&
             counters[1].buffered == 2;
    }));
  }
  // The stream is gone, and with it every stage and every element it held.
  CHECK((*alloc)->stats().bytes_in_use == 0);
}

TEST_CASE("a generator error reaches the reader after the elements before it, naming the stage",
          "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  int64_t next = 0;
  auto gen = [next]() mutable -> af::expected<std::optional<af::element>> {
    if (next == 5) return af::make_error(af::errc::io_error, "disk on fire");
    return std::optional<af::element>{make_item(next++)};
  };
  auto stream = af::iterate(rt, af::pipeline::from_generator("reader_src", gen, {.slots = 2})
                                    .transform("pass", identity, {.slots = 3}));
  std::vector<int64_t> got;
  for (auto& e : stream) got.push_back(value_of(e));
  CHECK(got == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(stream.status().code == af::errc::io_error);
  CHECK(stream.status().message.find("stage 'reader_src'") != std::string::npos);
  CHECK(stream.status().message.find("disk on fire") != std::string::npos);
  auto again = stream.next();  // the error stays the stream's answer
  REQUIRE_FALSE(again);
  CHECK(again.error_value().code == af::errc::io_error);
}

TEST_CASE("a transform that throws fails the stream with its name and stops the source", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto explode = [](af::element e) -> af::expected<std::vector<af::element>> {
    if (value_of(e) == 3) throw std::runtime_error("boom");
    return std::vector<af::element>{std::move(e)};
  };
  auto p = af::pipeline::from_generator("numbers", counting(-1, calls))
               .transform("explode", explode, {.slots = 1});
  auto stream = af::iterate(rt, p, {.slots = 4});
  std::vector<int64_t> got;
  for (auto& e : stream) got.push_back(value_of(e));
  CHECK(got == std::vector<int64_t>{0, 1, 2});
  CHECK(stream.status().code == af::errc::invalid_argument);
  CHECK(stream.status().message.find("stage 'explode'") != std::string::npos);
  CHECK(stream.status().message.find("boom") != std::string::npos);
  // The stream collected the topology when it failed, so the endless source has stopped; it ran
  // ahead of the failing element by no more than the slots and the one credit in flight allow.
  CHECK(calls->load() <= 4 + static_cast<int64_t>(p.total_slots()) + 1);
  CHECK(stream.counters()[0].items_in == static_cast<uint64_t>(calls->load()));
}

TEST_CASE("a transform returning an error value fails the stream like a throw", "[actors]") {
  af::runtime rt{{.scheduler_threads = 1}};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto check = [](af::element e) -> af::expected<std::vector<af::element>> {
    if (value_of(e) == 2) return af::make_error(af::errc::shape_mismatch, "want [3], got [2]");
    return std::vector<af::element>{std::move(e)};
  };
  auto stream = af::iterate(rt, af::pipeline::from_generator("numbers", counting(100, calls))
                                    .transform("check", check));
  std::size_t seen = 0;
  for (auto& e : stream) {
    (void)e;
    ++seen;
  }
  CHECK(seen == 2);
  CHECK(stream.status().code == af::errc::shape_mismatch);
  CHECK(stream.status().message == "stage 'check': want [3], got [2]");
}

TEST_CASE("destroying a reader early cancels upstream: the source stops and nothing leaks",
          "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto alloc = af::make_cpu_allocator({.name = "cancel"});
  REQUIRE(alloc);
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto gen = [calls, a = *alloc]() -> af::expected<std::optional<af::element>> {
    calls->fetch_add(1);
    auto t = af::tensor::zeros({256}, af::dtype::f32, a);
    if (!t) return t.error_value();
    return std::optional<af::element>{af::element{{"x", *t}}};
  };
  {
    auto stream = af::iterate(rt, af::pipeline::from_generator("endless", gen, {.slots = 4})
                                      .transform("a", identity, {.slots = 3})
                                      .transform("b", identity, {.slots = 5}));
    int taken = 0;
    for (auto& e : stream) {
      (void)e;
      if (++taken == 10) break;
    }
    CHECK(taken == 10);
  }
  // The destructor waited for every stage to terminate: the source does not run again, however
  // long one waits (a source left running would call its generator within a millisecond).
  const auto calls_after = calls->load();
  CHECK((*alloc)->stats().bytes_in_use == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(calls->load() == calls_after);
}

TEST_CASE("cancel() stops a stream and next() then reports cancelled", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto stream = af::iterate(rt, af::pipeline::from_generator("endless", counting(-1, calls)));
  REQUIRE(stream.next());
  stream.cancel();
  auto after = stream.next();
  REQUIRE_FALSE(after);
  CHECK(after.error_value().code == af::errc::cancelled);
}

TEST_CASE("a callback sink receives every element and then the end", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  int64_t sum = 0;  // touched only by the sink actor until done
  std::promise<af::error> done;
  auto topo = af::launch(
      rt, af::pipeline::from_generator("numbers", counting(1000, calls), {.slots = 8}),
      {.slots = 3, .name = "summer"},
      [&](af::element&& e) -> af::expected<void> {
        sum += value_of(e);
        return {};
      },
      [&](const af::error& status) { done.set_value(status); });
  auto fut = done.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(fut.get().code == af::errc::none);
  CHECK(sum == 999 * 1000 / 2);
  topo.shutdown();
  auto counters = topo.counters();
  REQUIRE(counters.size() == 2);
  CHECK(counters[1].name == "summer");
  CHECK(counters[1].items_in == 1000);
  CHECK(counters[1].items_out == 1000);
}

TEST_CASE("a callback sink that returns an error cancels the stream with that error", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  std::promise<af::error> done;
  auto topo = af::launch(
      rt, af::pipeline::from_generator("endless", counting(-1, calls)), {.slots = 2, .name = "picky"},
      [](af::element&& e) -> af::expected<void> {
        if (value_of(e) == 7) return af::make_error(af::errc::out_of_range, "seven");
        return {};
      },
      [&](const af::error& status) { done.set_value(status); });
  auto fut = done.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto status = fut.get();
  CHECK(status.code == af::errc::out_of_range);
  CHECK(status.message == "seven");
}

TEST_CASE("a pipeline prints itself as a graph with its slots", "[actors]") {
  auto p = af::pipeline::from_generator("read", counting(1, std::make_shared<std::atomic<int64_t>>()),
                                        {.slots = 3})
               .transform("decode", identity, {.slots = 5});
  CHECK(p.total_slots() == 8);
  auto dot = p.to_dot();
  CHECK(dot.find("read\\nslots 3") != std::string::npos);
  CHECK(dot.find("s0 -> s1") != std::string::npos);
}
