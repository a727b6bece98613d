#pragma once

// Helpers shared by the iterator-state tests: reading values off an iterator, and damaging a
// saved state to check that it is refused or restores a pipeline that fails cleanly.

#include <random>
#include <string>
#include <vector>

#include "pipeline_test_util.hpp"

namespace af::data::testing {

/// The "value" field (or `field`) of the next `k` elements; fails the test if the stream ends.
inline std::vector<int64_t> take_values(iterator& it, std::size_t k, const std::string& field = "value") {
  std::vector<element> got;
  for (std::size_t i = 0; i < k; ++i) {
    auto next = it.next();
    REQUIRE(next.has_value());
    REQUIRE(next->has_value());
    got.push_back(std::move(**next));
  }
  return values(got, field);
}

/// The values of everything the iterator still gives; fails the test on a pipeline error.
inline std::vector<int64_t> rest_of(iterator& it, const std::string& field = "value") {
  std::vector<element> rest;
  for (auto& e : it) rest.push_back(e);
  REQUIRE(it.status().code == errc::none);
  return values(rest, field);
}

/// Every `truncation_step`-th truncation of `text` (a serialized state of `ds`) is refused; 60
/// flipped bytes are refused, or restore a pipeline that fails cleanly or runs to its end.
inline void check_damage_is_refused(runtime& rt, const dataset& ds, const std::string& text, std::size_t truncation_step,
                                    unsigned seed) {
  for (std::size_t n = 0; n < text.size(); n += truncation_step)
    CHECK_FALSE(iterator_state::deserialize(text.substr(0, n)).has_value());
  std::mt19937 rng{seed};
  for (int round = 0; round < 60; ++round) {
    std::string damaged = text;
    damaged[std::uniform_int_distribution<std::size_t>{0, text.size() - 1}(rng)] ^= static_cast<char>(1 + round % 255);
    auto parsed = iterator_state::deserialize(damaged);
    if (!parsed) continue;
    auto resumed = ds.resume(rt, *parsed);
    if (!resumed) continue;
    for (int i = 0; i < 1000; ++i) {
      auto next = resumed->next();
      if (!next || !next->has_value()) break;
    }
  }
}

}  // namespace af::data::testing
