// Interleave runs in one of two ways: an interleave stage merging child source stages (when its
// input generates in place) or one stage reading nested pipelines (otherwise). Both must give the
// order of the sequential algorithm, surface a child's error where it falls, and stop early.

#include <atomic>
#include <thread>

#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>

#include "pipeline_test_util.hpp"
#include "../support/eventually.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

// The sequential interleave of `inputs` (each a child's values): the reference for every variant.
std::vector<int64_t> reference_interleave(const std::vector<std::vector<int64_t>>& inputs, std::size_t cycle,
                                          std::size_t block) {
  struct slot {
    std::size_t child = SIZE_MAX;  // SIZE_MAX: empty
    std::size_t at = 0;
  };
  std::vector<slot> slots(cycle);
  std::vector<int64_t> out;
  std::size_t next_input = 0, index = 0, in_block = 0;
  for (;;) {
    auto& s = slots[index];
    if (s.child != SIZE_MAX) {
      if (s.at < inputs[s.child].size()) {
        out.push_back(inputs[s.child][s.at++]);
        if (++in_block >= block) {
          in_block = 0;
          index = (index + 1) % cycle;
        }
      } else {
        s.child = SIZE_MAX;
        in_block = 0;
        index = (index + 1) % cycle;
      }
      continue;
    }
    if (next_input < inputs.size()) {
      s = {next_input++, 0};
      continue;
    }
    bool any = false;
    for (const auto& t : slots) any = any || t.child != SIZE_MAX;
    if (!any) return out;
    in_block = 0;
    index = (index + 1) % cycle;
  }
}

// Child i: values i*100 .. i*100 + (i % 4) * 3 (some children empty), each times 1 through a map.
dataset child_of(const element& e, int64_t map_parallelism) {
  const int64_t i = e.find("value")->item<int64_t>();
  return dataset::range(i * 100, i * 100 + (i % 4) * 3).map([](element x) -> expected<element> { return x; },
                                                             map_parallelism);
}

std::vector<std::vector<int64_t>> child_values(int64_t children) {
  std::vector<std::vector<int64_t>> inputs;
  for (int64_t i = 0; i < children; ++i) inputs.push_back(iota(i * 100, i * 100 + (i % 4) * 3));
  return inputs;
}

}  // namespace

TEST_CASE("interleave order is the sequential algorithm's whether input and children run in place or not",
          "[pipeline][interleave]") {
  runtime rt{test_runtime_options()};
  constexpr int64_t children = 11;
  for (std::size_t cycle : {1u, 2u, 3u, 5u}) {
    for (std::size_t block : {1u, 2u, 4u}) {
      const auto expect = reference_interleave(child_values(children), cycle, block);
      for (int64_t parallelism : {int64_t{1}, int64_t{4}, autotune}) {
        INFO("cycle " << cycle << " block " << block << " parallelism " << parallelism);
        // In place: a range input, children a range and a sequential map (one actor each).
        auto in_place = dataset::range(children).interleave(
            [](const element& e) -> expected<dataset> { return child_of(e, 1); }, static_cast<int64_t>(cycle),
            static_cast<int64_t>(block), parallelism);
        CHECK(values(drain(rt, in_place)) == expect);
        // Children that are pipelines of their own (a parallel map): read through nested streams.
        auto nested_children = dataset::range(children).interleave(
            [](const element& e) -> expected<dataset> { return child_of(e, 2); }, static_cast<int64_t>(cycle),
            static_cast<int64_t>(block), parallelism);
        CHECK(values(drain(rt, nested_children)) == expect);
        // An input that is a pipeline itself: the sequential interleave stage.
        auto nested_input = dataset::range(children)
                                .map([](element e) -> expected<element> { return e; }, 2)
                                .interleave([](const element& e) -> expected<dataset> { return child_of(e, 1); },
                                            static_cast<int64_t>(cycle), static_cast<int64_t>(block), parallelism);
        CHECK(values(drain(rt, nested_input)) == expect);
      }
    }
  }
}

TEST_CASE("an interleave child's error arrives after every element before it in interleave order",
          "[pipeline][interleave]") {
  runtime rt{test_runtime_options()};
  // Child 1 fails at its third element; cycle 2, block 1: 0, 100, 1, 101, 2, then the error.
  auto ds = dataset::range(3).interleave(
      [](const element& e) -> expected<dataset> {
        const int64_t i = e.find("value")->item<int64_t>();
        return dataset::range(i * 100, i * 100 + 10).map([](element x) -> expected<element> {
          if (x.find("value")->item<int64_t>() == 102) return make_error(errc::invalid_argument, "102 is bad");
          return x;
        });
      },
      2, 1);
  std::vector<element> before;
  const error err = drain_error(rt, ds, &before);
  CHECK(values(before) == std::vector<int64_t>{0, 100, 1, 101, 2});
  CHECK(err.code == errc::invalid_argument);
  CHECK_THAT(err.message, Catch::Matchers::Contains("102 is bad"));
  // The interleave function's own failure names the input element that caused it.
  auto thrower = dataset::range(4).interleave(
      [](const element& e) -> expected<dataset> {
        if (e.find("value")->item<int64_t>() == 2) throw std::runtime_error("no child for 2");
        return dataset::range(1);
      },
      1, 1);
  CHECK_THAT(drain_error(rt, thrower).message, Catch::Matchers::Contains("no child for 2"));
}

TEST_CASE("take on an interleave of endless children stops them", "[pipeline][interleave]") {
  runtime rt{test_runtime_options()};
  const std::size_t before = rt.system().registry().running();
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  auto ds = dataset::range(4)
                .interleave(
                    [made](const element& e) -> expected<dataset> {
                      const int64_t i = e.find("value")->item<int64_t>();
                      return dataset::range(i, i + 1).repeat().map([made](element x) -> expected<element> {
                        made->fetch_add(1);
                        return x;
                      });
                    },
                    2, 3)
                .take(7);
  CHECK(values(drain(rt, ds)) == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0});
  // Children prepare a bounded number of elements ahead (their slots) and stop once the stream
  // has ended: every actor terminates, so none can make more (quiescence_test.cpp shows the
  // exact counts on the deterministic scheduler).
  CHECK(af::testing::eventually([&] { return rt.system().registry().running() == before; }));
  CHECK(made->load() < 5000);
}
