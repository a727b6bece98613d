#pragma once

// Elements and generators the stage tests share.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "actors/stage.hpp"

namespace af::testing {

/// An element with one i64 scalar field "x".
inline element make_item(int64_t value) { return element{{"x", tensor::scalar<int64_t>(value)}}; }
inline int64_t value_of(const element& e) { return e.find("x")->item<int64_t>(); }

/// A generator of 0, 1, ..., n-1 (n < 0: endless) that counts its calls.
inline generator_fn counting(int64_t n, std::shared_ptr<std::atomic<int64_t>> calls) {
  return [n, calls, next = int64_t{0}]() mutable -> expected<std::optional<element>> {
    calls->fetch_add(1);
    if (n >= 0 && next >= n) return std::optional<element>{};
    return std::optional<element>{make_item(next++)};
  };
}

}  // namespace af::testing
