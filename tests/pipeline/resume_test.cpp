// Saving an iterator mid-stream and resuming it yields exactly the remaining sequence.

#include <random>

#include "pipeline/iterator.hpp"
#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

// Takes `k` elements, saves, finishes; returns (the saved state, the values after the save).
std::pair<iterator_state, std::vector<int64_t>> split_at(runtime& rt, const dataset& ds, std::size_t k) {
  auto it = ds.iterate(rt);
  for (std::size_t i = 0; i < k; ++i) {
    auto next = it.next();
    REQUIRE(next.has_value());
    REQUIRE(next->has_value());
  }
  auto saved = it.save();
  std::vector<element> rest;
  for (auto& e : it) rest.push_back(e);
  REQUIRE(it.status().code == errc::none);
  return {saved, values(rest)};
}

std::vector<int64_t> resumed_values(runtime& rt, const dataset& ds, const iterator_state& saved) {
  auto restored = iterator_state::deserialize(saved.serialize());
  REQUIRE(restored.has_value());
  auto it = ds.resume(rt, *restored);
  REQUIRE(it.has_value());
  std::vector<element> rest;
  for (auto& e : *it) rest.push_back(e);
  REQUIRE(it->status().code == errc::none);
  return values(rest);
}

}  // namespace

TEST_CASE("resume after a save mid-stream yields the identical remaining sequence", "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{3};
  // Unseeded shuffles across epochs, a parallel ordered map, a batch and an unbatch, interleave.
  auto ds = dataset::range(1, 6)
                .interleave([](const element& e) -> expected<dataset> {
                  const int64_t i = e.find("value")->item<int64_t>();
                  return dataset::range(i * 100, i * 100 + 40);
                }, 3, 4)
                .shuffle(64)
                .map([](element e) -> expected<element> {
                  e.set("value", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * 2));
                  return e;
                }, 3)
                .repeat(2)
                .batch(5)
                .unbatch();
  for (int round = 0; round < 4; ++round) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>{0, 400}(rng);
    auto [saved, rest] = split_at(rt, ds, k);
    INFO("saved after " << k);
    CHECK(saved.consumed == k);
    CHECK(resumed_values(rt, ds, saved) == rest);
  }
}

TEST_CASE("a saved state is refused by another pipeline and malformed text is named", "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  auto [saved, rest] = split_at(rt, dataset::range(10).shuffle(4), 3);
  CHECK(rest.size() == 7);
  auto other = dataset::range(10).shuffle(5).resume(rt, saved);
  REQUIRE_FALSE(other.has_value());
  CHECK_THAT(other.error_value().message, Catch::Contains("another pipeline"));
  CHECK_THAT(iterator_state::deserialize("hello").error_value().message, Catch::Contains("iterator state"));
  auto text = saved.serialize();
  CHECK_THAT(iterator_state::deserialize(text.substr(0, text.size() - 2)).error_value().message,
             Catch::Contains("fingerprint"));
}
