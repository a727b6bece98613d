#pragma once

// Helpers shared by the pipeline tests: a runtime, draining a dataset, reading scalar fields.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/runtime.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/iterator.hpp"

namespace af::data::testing {

/// The runtime options pipeline tests use (one runtime per test case: CAF must not be torn down
/// by static destructors).
inline runtime_options test_runtime_options() { return {.scheduler_threads = 4}; }

/// Every element of one iteration; fails the test on a pipeline error.
inline std::vector<element> drain(runtime& rt, const dataset& ds) {
  auto it = ds.iterate(rt);
  std::vector<element> out;
  for (;;) {
    auto next = it.next();
    if (!next) FAIL("pipeline failed: " << next.error_value().message);
    if (!next->has_value()) break;
    out.push_back(std::move(**next));
  }
  return out;
}

/// The error one iteration ends with, with the elements before it.
inline error drain_error(runtime& rt, const dataset& ds, std::vector<element>* before = nullptr) {
  auto it = ds.iterate(rt);
  for (;;) {
    auto next = it.next();
    if (!next) return next.error_value();
    if (!next->has_value()) return {};
    if (before) before->push_back(std::move(**next));
  }
}

/// Field `name` of every element as int64 values, flattened.
inline std::vector<int64_t> values(const std::vector<element>& items, const std::string& name = "value") {
  std::vector<int64_t> out;
  for (const auto& e : items) {
    const tensor* t = e.find(name);
    REQUIRE(t != nullptr);
    for (auto v : t->to_vector<int64_t>()) out.push_back(v);
  }
  return out;
}

inline std::vector<int64_t> iota(int64_t start, int64_t stop) {
  std::vector<int64_t> out;
  for (int64_t i = start; i < stop; ++i) out.push_back(i);
  return out;
}

}  // namespace af::data::testing
