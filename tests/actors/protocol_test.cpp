// The flow protocol as seen by hand-written actors: violations, second consumers, dead producers,
// and an actor (a trainer, a remote node) consuming a pipeline through flow::inbound.

#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <future>

#include "actors/flow_protocol.hpp"
#include "actors/runtime.hpp"
#include "actors/stage.hpp"

using namespace af::flow;

namespace {

af::element make_item(int64_t value) { return af::element{{"x", af::tensor::scalar<int64_t>(value)}}; }

// A producer that always sends `extra` elements more than it was granted. (Test actors take an
// argument: CAF 0.17 dereferences a null argument tuple when spawning without any, which UBSan
// reports.)
caf::behavior greedy_producer(caf::event_based_actor* self, uint64_t extra) {
  return {
      [self, extra](demand_atom, uint64_t n) {
        std::vector<af::element> batch;
        for (uint64_t i = 0; i < n + extra; ++i) batch.push_back(make_item(static_cast<int64_t>(i)));
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), batch_atom::value,
                   std::move(batch));
      },
      [self](cancel_atom) { self->quit(); },
  };
}

// A producer that dies on its first demand, without end or fail.
caf::behavior dying_producer(caf::event_based_actor* self, caf::exit_reason reason) {
  return {
      [self, reason](demand_atom, uint64_t) { self->quit(reason); },
      [self](cancel_atom) { self->quit(); },
  };
}

// A consumer actor in the shape of a trainer: it pulls with a window of 2 and sums what it gets.
struct summing_state {
  inbound in;
  int64_t sum = 0;
  int64_t count = 0;
  std::promise<std::pair<int64_t, int64_t>>* result = nullptr;
};

caf::behavior summing_consumer(caf::stateful_actor<summing_state>* self, caf::actor producer,
                               std::promise<std::pair<int64_t, int64_t>>* result) {
  self->state.in = inbound{std::move(producer)};
  self->state.result = result;
  self->state.in.attach(self);
  self->state.in.grant_up_to(self, 2);
  return {
      [self](batch_atom, const std::vector<af::element>& items) {
        auto& st = self->state;
        if (st.in.on_batch(items.size(), "trainer")) {  // Catch2 asserts only on the test thread
          st.result->set_value({-2, -2});
          self->quit();
          return;
        }
        for (const auto& e : items) st.sum += e.find("x")->item<int64_t>();
        st.count += static_cast<int64_t>(items.size());
        st.in.grant_up_to(self, 2);
      },
      [self](end_atom) {
        self->state.result->set_value({self->state.sum, self->state.count});
        self->quit();
      },
      [self](fail_atom, const caf::error&) {
        self->state.result->set_value({-1, -1});
        self->quit();
      },
  };
}

}  // namespace

TEST_CASE("a stage that receives more elements than it granted reports a protocol violation",
          "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto rogue = rt.system().spawn(greedy_producer, uint64_t{1});
  auto stream = af::iterate(rt, af::pipeline::from_actor("rogue", rogue).transform(
                                    "checked", [](af::element e) -> af::expected<std::vector<af::element>> {
                                      return std::vector<af::element>{std::move(e)};
                                    }, {.slots = 3}));
  for (auto& e : stream) (void)e;
  CHECK(stream.status().code == af::errc::protocol_violation);
  CHECK(stream.status().message.find("stage 'checked'") != std::string::npos);
  CHECK(stream.status().message.find("only 3 credits") != std::string::npos);
}

TEST_CASE("a reader fed more than its credit reports a protocol violation", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto rogue = rt.system().spawn(greedy_producer, uint64_t{1});
  auto stream = af::iterate(rt, af::pipeline::from_actor("rogue", rogue), {.slots = 2, .name = "reader"});
  auto first = stream.next();
  REQUIRE_FALSE(first);
  CHECK(first.error_value().code == af::errc::protocol_violation);
  CHECK(first.error_value().message.find("stage 'reader'") != std::string::npos);
}

TEST_CASE("a producer refuses demand from a second consumer", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto topo = af::launch(rt, af::pipeline::from_generator("numbers", [] {
                           return af::expected<std::optional<af::element>>{std::optional<af::element>{make_item(1)}};
                         }));
  caf::scoped_actor first{rt.system()};
  caf::scoped_actor second{rt.system()};
  first->send(topo.tail(), demand_atom::value, uint64_t{1});
  first->receive([](batch_atom, const std::vector<af::element>& items) { CHECK(items.size() == 1); });
  second->send(topo.tail(), demand_atom::value, uint64_t{1});
  bool refused = false;
  second->receive([&](fail_atom, const caf::error& err) {
    refused = af::from_caf_error(err).code == af::errc::protocol_violation;
  });
  CHECK(refused);
}

TEST_CASE("a producer that dies without end fails the stream with peer_down", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto mortal = rt.system().spawn(dying_producer, caf::exit_reason::user_shutdown);
  auto stream = af::iterate(rt, af::pipeline::from_actor("mortal", mortal)
                                    .transform("pass", [](af::element e) -> af::expected<std::vector<af::element>> {
                                      return std::vector<af::element>{std::move(e)};
                                    }));
  auto first = stream.next();
  REQUIRE_FALSE(first);
  CHECK(first.error_value().code == af::errc::peer_down);
  CHECK(first.error_value().message.find("stage 'pass'") != std::string::npos);
}

TEST_CASE("an actor consumes a launched pipeline through the protocol with its own window", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  int64_t next = 0;
  auto topo = af::launch(rt, af::pipeline::from_generator("numbers", [next]() mutable {
                           if (next == 100) return af::expected<std::optional<af::element>>{std::optional<af::element>{}};
                           return af::expected<std::optional<af::element>>{std::optional<af::element>{make_item(next++)}};
                         }, {.slots = 4}));
  std::promise<std::pair<int64_t, int64_t>> result;
  rt.system().spawn(summing_consumer, topo.tail(), &result);
  auto fut = result.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto [sum, count] = fut.get();
  CHECK(count == 100);
  CHECK(sum == 99 * 100 / 2);
}
