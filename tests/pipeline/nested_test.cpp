// Nested datasets stay inside the topology: each pass of a repeat over a pipeline, and each child
// pipeline of an interleave over generated inputs, runs as a chain of stage actors read through
// the flow protocol, with no thread of its own and no blocking reader.

#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>

#include <fstream>
#include <string>

#include "../support/eventually.hpp"
#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

int64_t threads_of_this_process() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoll(line.substr(8));
  return -1;
}

expected<element> same(element e) { return e; }

// range(n) through a stage of its own (a map on two workers): not a source that generates in place.
dataset staged_range(int64_t n) { return dataset::range(n).map(same, 2); }

// The process's threads while `ds` is being read (sampled after its first element).
int64_t threads_while_reading(runtime& rt, const dataset& ds, std::vector<int64_t>* got = nullptr) {
  auto it = ds.iterate(rt);
  int64_t threads = -1;
  std::vector<element> items;
  for (auto& e : it) {
    if (threads < 0) threads = threads_of_this_process();
    items.push_back(e);
  }
  REQUIRE(it.status().code == errc::none);
  if (got) *got = values(items);
  return threads;
}

}  // namespace

TEST_CASE("repeat over a pipeline and interleave over child pipelines start no threads", "[pipeline][nested]") {
  runtime rt{test_runtime_options()};
  const int64_t plain = threads_while_reading(rt, staged_range(200));

  std::vector<int64_t> got;
  const int64_t repeated = threads_while_reading(rt, staged_range(200).repeat(3), &got);
  std::vector<int64_t> want;
  for (int pass = 0; pass < 3; ++pass)
    for (int64_t i = 0; i < 200; ++i) want.push_back(i);
  CHECK(got == want);
  CHECK(repeated <= plain);  // a thread of CAF's own may come and go: nested work adds none

  const auto children = dataset::range(4).interleave(
      [](const element& e) -> expected<dataset> {
        const int64_t i = e.find("value")->item<int64_t>();
        return dataset::range(i * 100, i * 100 + 50).map(same).batch(5).unbatch();
      },
      2, 5);
  const int64_t interleaved = threads_while_reading(rt, children, &got);
  CHECK(got.size() == 200);
  CHECK(got.front() == 0);
  CHECK(got[5] == 100);  // blocks of 5 alternate between the two open children
  CHECK(interleaved <= plain);
}

TEST_CASE("repeat over a pipeline: empty passes end it, seeds differ per pass, failures name the stage",
          "[pipeline][nested]") {
  runtime rt{test_runtime_options()};
  CHECK(values(drain(rt, staged_range(0).repeat())).empty());
  auto none = staged_range(10).filter([](const element&) -> expected<bool> { return false; });
  CHECK(values(drain(rt, none.repeat())).empty());

  // A seeded shuffle inside a pipeline reshuffles on every pass, the same way on every run.
  const auto shuffled = staged_range(30).shuffle(30, 5).repeat(2);
  const auto first = values(drain(rt, shuffled));
  REQUIRE(first.size() == 60);
  CHECK(std::vector<int64_t>(first.begin(), first.begin() + 30) != std::vector<int64_t>(first.begin() + 30, first.end()));
  CHECK(values(drain(rt, shuffled)) == first);

  std::vector<element> before;
  auto failing = staged_range(5).map([](element e) -> expected<element> {
    if (e.find("value")->item<int64_t>() == 3) return make_error(errc::invalid_argument, "three is refused");
    return e;
  }, 1, true, "check").repeat(2);
  const error err = drain_error(rt, failing, &before);
  CHECK(err.code == errc::invalid_argument);
  INFO(err.message);
  CHECK(err.message.find("check") != std::string::npos);
  CHECK(err.message.find("three is refused") != std::string::npos);
  CHECK(values(before) == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("an endless repeat over a pipeline stops every pass's actors when the reader stops", "[pipeline][nested]") {
  runtime rt{test_runtime_options()};
  const std::size_t before = rt.system().registry().running();
  CHECK(values(drain(rt, staged_range(7).repeat().take(20))).size() == 20);
  CHECK(af::testing::eventually([&] { return rt.system().registry().running() == before; }));
}

TEST_CASE("zip reads each input as a child inside the topology and ends with the shortest", "[pipeline][nested]") {
  runtime rt{test_runtime_options()};
  // Children are not the topology's own actors: they may still be stopping when an iterator is
  // gone, so the count is compared with the one before anything ran.
  const std::size_t running = rt.system().registry().running();
  const int64_t plain = threads_while_reading(rt, staged_range(200));
  auto labels = staged_range(150).map([](element e) -> expected<element> {
    return element{{"label", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * 10)}};
  });
  auto it = dataset::zip({staged_range(200), labels.batch(3).unbatch()}).iterate(rt);
  std::vector<element> rows;
  int64_t threads = -1;
  for (auto& e : it) {
    if (threads < 0) threads = threads_of_this_process();
    rows.push_back(e);
  }
  REQUIRE(it.status().code == errc::none);
  CHECK(values(rows) == iota(0, 150));
  CHECK(values(rows, "label").back() == 1490);
  CHECK(threads <= plain);

  // An input's failure ends the zip after the rows before it; endless inputs stop with the reader.
  std::vector<element> before;
  auto failing = staged_range(10).map([](element e) -> expected<element> {
    if (e.find("value")->item<int64_t>() == 4) return make_error(errc::malformed_input, "row 4 is unreadable");
    return element{{"other", *e.find("value")}};
  });
  const error err = drain_error(rt, dataset::zip({staged_range(10), failing}), &before);
  CHECK(err.code == errc::malformed_input);
  CHECK(err.message.find("row 4 is unreadable") != std::string::npos);
  CHECK(values(before) == iota(0, 4));

  auto counter = dataset::range(1000000000).map([](element e) -> expected<element> { return element{{"i", *e.find("value")}}; });
  auto endless = dataset::zip({staged_range(3).repeat(), counter}).take(50);
  CHECK(values(drain(rt, endless), "i") == iota(0, 50));
  CHECK(af::testing::eventually([&] { return rt.system().registry().running() == running; }));
  CHECK(drain_error(rt, dataset::zip({})).message.find("zip of no datasets") != std::string::npos);
}

TEST_CASE("an interleave over a pipeline reads it as a chain inside the topology, in the sequential order",
          "[pipeline][nested]") {
  runtime rt{test_runtime_options()};
  const std::size_t running = rt.system().registry().running();
  const int64_t plain = threads_while_reading(rt, staged_range(200));
  auto child = [](const element& e) -> expected<dataset> {
    const int64_t i = e.find("value")->item<int64_t>();
    return dataset::range(i * 10, i * 10 + 4).map(same, 2);
  };
  // The outer input is a pipeline of stages (a parallel map), so no input generates in place.
  std::vector<int64_t> got;
  const int64_t threads = threads_while_reading(rt, staged_range(6).interleave(child, 2, 3), &got);
  CHECK(got == std::vector<int64_t>{0, 1, 2, 10, 11, 12, 3, 13, 20, 21, 22, 30, 31, 32, 23, 33,
                                    40, 41, 42, 50, 51, 52, 43, 53});
  CHECK(threads <= plain);

  // The outer input's failure arrives where the sequential algorithm meets it: when the cycle
  // needs the next child (none opened ahead: parallelism = cycle length), after every element of
  // the children opened before it.
  auto outer = staged_range(5).map([](element e) -> expected<element> {
    if (e.find("value")->item<int64_t>() == 2) return make_error(errc::io_error, "listing broke at 2");
    return e;
  }, 1, true, "list");
  std::vector<element> before;
  const error err = drain_error(rt, outer.interleave(child, 2, 3, 2), &before);
  CHECK(err.code == errc::io_error);
  CHECK(err.message.find("listing broke at 2") != std::string::npos);
  CHECK(values(before) == std::vector<int64_t>{0, 1, 2, 10, 11, 12, 3, 13});

  // An endless outer input stops with the reader, children and chain alike.
  CHECK(values(drain(rt, staged_range(3).repeat().interleave(child, 2).take(30))).size() == 30);
  CHECK(af::testing::eventually([&] { return rt.system().registry().running() == running; }));
}
