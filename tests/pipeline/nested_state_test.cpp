// Iterator state of pipelines that run other datasets: repeat, interleave and zip save the position
// of their input and of every open child (with the elements each had ready), so a resume continues
// exactly, reading only what follows.

#include <random>

#include "pipeline/iterator.hpp"
#include "state_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

dataset scaled(dataset ds, int64_t factor, int64_t parallelism) {
  return ds.map([factor](element e) -> expected<element> {
    e.set("value", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * factor));
    return e;
  }, parallelism);
}

// The numbers [10000 i, 10000 i + n) of input element i: a child that generates in place.
dataset block_of(const element& e, int64_t n) {
  const int64_t i = e.find("value")->item<int64_t>();
  return dataset::range(i * 10000, i * 10000 + n);
}

}  // namespace

TEST_CASE("repeat, interleave and zip save their children's positions and resume exactly", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{21};
  auto short_block = [](const element& e) -> expected<dataset> { return block_of(e, 37); };
  auto chained_block = [](const element& e) -> expected<dataset> {
    return scaled(block_of(e, 29), 3, 2).shuffle(8).batch(4).unbatch();  // a chain of stage actors
  };
  const std::vector<std::pair<const char*, dataset>> cases = {
      {"repeat of a range (one source)", dataset::range(0, 50).repeat(4)},
      {"repeat of a chain with an unseeded shuffle (one chain per pass)",
       scaled(dataset::range(0, 60), 2, 2).shuffle(16).repeat(3)},
      {"repeat forever, taken", dataset::range(0, 7).map([](element e) -> expected<element> { return e; }).repeat().take(100)},
      {"interleave over a range, children in place, cycle 3, block 2, opened ahead",
       dataset::range(0, 8).interleave(short_block, 3, 2, 5)},
      {"interleave over a range, children as chains", dataset::range(0, 6).interleave(chained_block, 2, 3)},
      {"interleave over a chain (shuffled input)",
       dataset::range(0, 9).shuffle(4, 7).map([](element e) -> expected<element> { return e; }, 2).interleave(short_block, 4)},
      {"zip of a range and a chain",
       dataset::zip({dataset::range(0, 300), dataset::range(0, 400).map([](element e) -> expected<element> {
                       return element{{"other", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * 5)}};
                     }, 2)})},
      {"interleave of repeats, batched", dataset::range(0, 4).interleave([](const element& e) -> expected<dataset> {
         return block_of(e, 11).repeat(2);
       }, 2).batch(5).unbatch()},
  };
  for (const auto& [name, ds] : cases) {
    const auto total = drain(rt, ds).size();
    for (int round = 0; round < 3; ++round) {
      auto it = ds.iterate(rt);
      const std::size_t k = std::uniform_int_distribution<std::size_t>{0, total}(rng);
      INFO(name << ": saved after " << k << " of " << total);
      auto before = take_values(it, k);
      auto saved = it.save();
      CHECK(saved.replay_reason.empty());
      REQUIRE(saved.stages.has_value());
      auto restored = iterator_state::deserialize(saved.serialize());
      REQUIRE(restored.has_value());
      REQUIRE(restored->stages.has_value());
      auto rest = rest_of(it);  // the saved iterator goes on: nothing lost or repeated by saving
      CHECK(before.size() + rest.size() == total);
      auto resumed = ds.resume(rt, *restored);
      REQUIRE(resumed.has_value());
      CHECK(rest_of(*resumed) == rest);
    }
  }
}

TEST_CASE("a resumed interleave reads only what follows the saved position", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 8).interleave([](const element& e) -> expected<dataset> { return block_of(e, 10000); }, 4);
  auto it = ds.iterate(rt);
  take_values(it, 72000);  // 90% of the epoch
  auto saved = it.save();
  REQUIRE(saved.stages.has_value());
  REQUIRE(saved.stages->stages.size() == 1);
  const stage_state& interleave = saved.stages->stages.front();
  CHECK(interleave.nested.size() == 1 + 4);  // the input's position, then the 4 open children
  auto resumed = ds.resume(rt, saved);
  REQUIRE(resumed.has_value());
  auto rest = rest_of(*resumed);
  CHECK(rest.size() + 72000 == 80000);
  CHECK(rest == rest_of(it));
  const auto counters = resumed->counters();
  REQUIRE(!counters.front().inner.empty());
  INFO("the resumed children generated " << counters.front().inner.front().items_in);
  CHECK(counters.front().inner.front().items_in <= 8000);  // a replay would generate 80000
}

TEST_CASE("an interleave whose running children cannot save resumes by replay and says why", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 5).interleave([](const element& e) -> expected<dataset> {
    const int64_t base = e.find("value")->item<int64_t>() * 100;
    return dataset::from_generator("numbers", [base] {
      return generator_fn{[base, i = int64_t{0}]() mutable -> expected<std::optional<element>> {
        if (i >= 500) return std::optional<element>{};  // more than a child prepares: still running at the save
        return std::optional<element>{element{{"value", tensor::scalar<int64_t>(base + i++)}}};
      }};
    });
  }, 2);
  const auto everything = values(drain(rt, ds));
  auto it = ds.iterate(rt);
  take_values(it, 30);
  auto saved = it.save();
  CHECK_FALSE(saved.stages.has_value());
  CHECK_THAT(saved.replay_reason, Catch::Contains("generator"));
  auto resumed = ds.resume(rt, saved);
  REQUIRE(resumed.has_value());
  const auto expected_rest = std::vector<int64_t>(everything.begin() + 30, everything.end());
  CHECK(rest_of(*resumed) == expected_rest);
  CHECK(rest_of(it) == expected_rest);  // the cut that gave up lost nothing
}

TEST_CASE("a damaged interleave state is refused, never a crash", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 6).interleave([](const element& e) -> expected<dataset> {
    return scaled(block_of(e, 40), 2, 1).shuffle(5, 3);
  }, 3, 2);
  auto it = ds.iterate(rt);
  take_values(it, 50);
  const auto saved = it.save();
  REQUIRE(saved.stages.has_value());
  const std::string text = saved.serialize();
  check_damage_is_refused(rt, ds, text, 11, 9);
  // A header that does not fit the interleave is named.
  auto wrong = saved;
  wrong.stages->stages.front().data = "1 7 0 0 0 0 0";  // cursor 7 in a cycle of 3
  wrong.pending.clear();                                // else they come first
  auto resumed = ds.resume(rt, wrong);
  REQUIRE(resumed.has_value());
  auto first = resumed->next();
  REQUIRE_FALSE(first.has_value());
  CHECK_THAT(first.error_value().message, Catch::Contains("interleave"));
}
