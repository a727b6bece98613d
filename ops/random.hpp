#pragma once
// Counter-based random tensors (Philox4x32-10, Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11). Element i of a result is a pure function of (seed, offset, i): it does not
// depend on the thread budget, on how the work is chunked, or on the other elements. The 64-bit
// seed is the Philox key; the 128-bit counter is (block of elements, offset), so every offset is an
// independent stream of 2^64 blocks.

#include <array>
#include <cstdint>

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/shape.hpp"
#include "ops/tensor.hpp"

namespace af {

/// One Philox4x32 bijection with 10 rounds: four 32-bit words from a counter and a key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) noexcept;

/// A generator state that fits in two integers: save {seed, offset}, restore it, and the same
/// tensors come out again. Each successful call uses the stream `offset` and then advances it by 1.
struct philox_generator {
  uint64_t seed = 0;
  uint64_t offset = 0;

  /// Uniform in [low, high) (floating dtypes).
  expected<tensor> uniform(const shape& dims, dtype type = dtype::f32, double low = 0.0, double high = 1.0);
  /// Normal with `mean` and `stddev` by the Box-Muller transform (floating dtypes).
  expected<tensor> normal(const shape& dims, dtype type = dtype::f32, double mean = 0.0, double stddev = 1.0);
  /// Bool tensor, each element true with probability p in [0, 1].
  expected<tensor> bernoulli(const shape& dims, double p);

  friend bool operator==(const philox_generator&, const philox_generator&) = default;
};

/// Uniform in [low, high) from stream 0 of `seed`; invalid_argument unless low <= high, both finite.
expected<tensor> random_uniform(const shape& dims, uint64_t seed, dtype type = dtype::f32, double low = 0.0,
                                double high = 1.0);
/// Normal(mean, stddev) from stream 0 of `seed`; invalid_argument for a negative or non-finite stddev.
expected<tensor> random_normal(const shape& dims, uint64_t seed, dtype type = dtype::f32, double mean = 0.0,
                               double stddev = 1.0);
/// Bernoulli(p) as bool from stream 0 of `seed`; invalid_argument unless 0 <= p <= 1.
expected<tensor> random_bernoulli(const shape& dims, uint64_t seed, double p);

}  // namespace af
