// Backpressure and shutdown claims that are about "nothing more happens": a stalled consumer leaves
// every stage holding exactly its slots and then idle; a cancelled stream stops every actor. Run
// on CAF's deterministic test coordinator (runtime_options::deterministic), where "no job left" is
// a fact rather than a guess made after sleeping.

#include <catch2/catch.hpp>

#include <caf/actor_registry.hpp>
#include <caf/all.hpp>

#include <atomic>
#include <memory>
#include <vector>

#include "actors/caf_error.hpp"
#include "actors/flow_protocol.hpp"
#include "actors/runtime.hpp"
#include "actors/stage.hpp"
#include "ops/allocator.hpp"
#include "stage_test_util.hpp"
#include "../support/deterministic.hpp"

namespace {

using af::testing::counting;
using af::testing::make_item;
using af::testing::run_until_quiet;
using af::testing::value_of;

using grant_atom = caf::atom_constant<caf::atom("t_grant")>;
using stop_atom = caf::atom_constant<caf::atom("t_stop")>;

// What a test consumer saw; written only by the consumer, which runs on the test thread.
struct consumer_log {
  std::vector<int64_t> values;
  std::vector<af::element> kept;  // elements held (keeps their memory alive), if asked to keep
  bool ended = false;
  af::errc failed = af::errc::none;
};

struct consumer_state {
  af::flow::inbound in;
  uint64_t credit_total = 0;
};

// A consumer actor with a credit the test raises by messages, and a cancel on stop.
caf::behavior test_consumer(caf::stateful_actor<consumer_state>* self, caf::actor producer,
                            std::shared_ptr<consumer_log> log, bool keep) {
  self->state.in = af::flow::inbound{std::move(producer)};
  self->state.in.attach(self);
  self->set_down_handler([self, log](const caf::down_msg&) {
    if (!log->ended && log->failed == af::errc::none) log->failed = af::errc::peer_down;
    self->quit();
  });
  return {
      [self](grant_atom, uint64_t more) {
        self->state.credit_total += more;
        self->state.in.grant_up_to(self, self->state.in.granted() + more);
      },
      [self](stop_atom) {
        self->state.in.cancel(self);
        self->quit();
      },
      [self, log, keep](af::flow::batch_atom, std::vector<af::element>& items) {
        if (self->state.in.on_batch(items, "test consumer")) log->failed = af::errc::protocol_violation;
        for (auto& e : items) {
          log->values.push_back(value_of(e));
          if (keep) log->kept.push_back(std::move(e));
        }
      },
      [self, log](af::flow::end_atom) {
        log->ended = true;
        self->state.in.close();
        self->quit();
      },
      [self, log](af::flow::fail_atom, const caf::error& err) {
        log->failed = af::from_caf_error(err).code;
        self->state.in.close();
        self->quit();
      },
  };
}

std::size_t running(af::runtime& rt) { return rt.system().registry().running(); }

std::vector<int64_t> iota_from(int64_t first, int64_t count) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

af::expected<std::vector<af::element>> plus_one(af::element e) {
  return std::vector<af::element>{make_item(value_of(e) + 1)};
}

}  // namespace

TEST_CASE("a stalled consumer leaves every stage holding exactly its slots, then nothing runs",
          "[actors][deterministic]") {
  af::runtime rt{{.deterministic = true}};
  const std::size_t before = running(rt);
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  constexpr std::size_t source_slots = 3, transform_slots = 2, map_slots = 5;
  auto p = af::pipeline::from_generator("source", counting(-1, calls), {.slots = source_slots})
               .transform("pass", [](af::element e) -> af::expected<std::vector<af::element>> {
                 return std::vector<af::element>{std::move(e)};
               }, {.slots = transform_slots})
               .parallel_map("pmap", plus_one, {.parallelism = 3, .slots = map_slots});
  auto topo = af::launch(rt, p);
  auto log = std::make_shared<consumer_log>();
  auto consumer = rt.system().spawn(test_consumer, topo.tail(), log, false);
  caf::anon_send(consumer, grant_atom::value, uint64_t{4});
  const auto jobs = run_until_quiet(rt);
  CHECK(jobs > 0);
  CHECK(log->values == iota_from(1, 4));
  // Every slot is full and nobody grants more: the source produced the delivered elements plus one
  // per slot, and a second drive finds no job at all.
  const auto held = static_cast<int64_t>(source_slots + transform_slots + map_slots);
  CHECK(calls->load() == 4 + held);
  CHECK(run_until_quiet(rt) == 0);
  auto counters = topo.counters();
  REQUIRE(counters.size() == 3);
  CHECK(counters[0].buffered == source_slots);
  CHECK(counters[1].buffered == transform_slots);
  CHECK(counters[2].buffered == map_slots);
  CHECK(counters[2].parallelism == 3);

  // The consumer resumes: what waited is delivered first, in order, and the stages refill.
  caf::anon_send(consumer, grant_atom::value, uint64_t{10});
  run_until_quiet(rt);
  CHECK(log->values == iota_from(1, 14));
  CHECK(calls->load() == 14 + held);
  CHECK(run_until_quiet(rt) == 0);
  // The stages' time with full slots and no credit is accounted as blocked on output.
  counters = topo.counters();
  CHECK(counters[0].blocked_ns > 0);
  CHECK(counters[2].blocked_ns > 0);

  // Cancelling stops the source, the transform, the coordinator and its three workers.
  caf::anon_send(consumer, stop_atom::value);
  run_until_quiet(rt);
  CHECK(running(rt) == before);
  const auto final_calls = calls->load();
  CHECK(run_until_quiet(rt) == 0);
  CHECK(calls->load() == final_calls);
  CHECK(log->failed == af::errc::none);
}

TEST_CASE("elements held by a stalled topology are exactly its slots' worth of memory, freed at shutdown",
          "[actors][deterministic]") {
  af::runtime rt{{.deterministic = true}};
  auto alloc = af::make_cpu_allocator({.name = "stall"});
  REQUIRE(alloc);
  constexpr int64_t floats_per_item = 16 * 1024;  // 64 KiB per element
  constexpr std::size_t item_bytes = floats_per_item * sizeof(float);
  auto gen = [a = *alloc, next = int64_t{0}]() mutable -> af::expected<std::optional<af::element>> {
    auto t = af::tensor::zeros({floats_per_item}, af::dtype::f32, a);
    if (!t) return t.error_value();
    return std::optional<af::element>{af::element{{"x", af::tensor::scalar<int64_t>(next++)}, {"payload", *t}}};
  };
  auto p = af::pipeline::from_generator("source", gen, {.slots = 3})
               .transform("pass", [](af::element e) -> af::expected<std::vector<af::element>> {
                 return std::vector<af::element>{std::move(e)};
               }, {.slots = 2});
  auto log = std::make_shared<consumer_log>();
  {
    auto topo = af::launch(rt, p);
    auto consumer = rt.system().spawn(test_consumer, topo.tail(), log, true);
    caf::anon_send(consumer, grant_atom::value, uint64_t{1});
    run_until_quiet(rt);
    REQUIRE(log->values == std::vector<int64_t>{0});
    // One element with the consumer, 3 + 2 in the stages: no allocation was ever beyond that.
    const auto stats = (*alloc)->stats();
    CHECK(stats.bytes_in_use == 6 * item_bytes);
    CHECK(stats.peak_bytes_in_use == 6 * item_bytes);
    CHECK(run_until_quiet(rt) == 0);
    caf::anon_send(consumer, stop_atom::value);
    run_until_quiet(rt);
  }
  log->kept.clear();
  // The topology is gone, and with it every stage and every element it held.
  CHECK((*alloc)->stats().bytes_in_use == 0);
}

TEST_CASE("cancelling an interleave of endless children stops every child", "[actors][deterministic]") {
  af::runtime rt{{.deterministic = true}};
  const std::size_t before = running(rt);
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  constexpr std::size_t cycle = 2, child_slots = 3;
  // Child i repeats i forever.
  auto opener = [made] {
    return [made, next = int64_t{0}]() mutable -> af::expected<std::optional<af::child_source>> {
      const int64_t i = next++;
      af::generator_fn gen = [made, i]() -> af::expected<std::optional<af::element>> {
        made->fetch_add(1);
        return std::optional<af::element>{make_item(i)};
      };
      return std::optional<af::child_source>{af::child_source{std::move(gen), false}};
    };
  };
  auto p = af::pipeline::interleave("interleave", opener,
                                    {.cycle_length = cycle, .block_length = 3, .child_slots = child_slots},
                                    {.slots = 2});
  auto topo = af::launch(rt, p);
  auto log = std::make_shared<consumer_log>();
  auto consumer = rt.system().spawn(test_consumer, topo.tail(), log, false);
  caf::anon_send(consumer, grant_atom::value, uint64_t{7});
  run_until_quiet(rt);
  CHECK(log->values == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0});
  CHECK(run_until_quiet(rt) == 0);
  // Stalled: each child prepared at most its slots ahead; nothing runs until demand comes.
  const int64_t stalled = made->load();
  CHECK(stalled <= static_cast<int64_t>(7 + 2 + cycle * (child_slots + 3)));
  caf::anon_send(consumer, stop_atom::value);
  run_until_quiet(rt);
  CHECK(running(rt) == before);
  CHECK(made->load() == stalled);
  CHECK(run_until_quiet(rt) == 0);
}
