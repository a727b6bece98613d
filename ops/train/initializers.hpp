#pragma once

// Weight initialisers as tf.keras.initializers defines them, deterministic for a seed (Philox):
// Glorot (Xavier) and He, uniform and truncated normal, scaled by the tensor's fans.

#include <cstdint>

#include "ops/tensor.hpp"

namespace af::initializers {

/// Fan-in and fan-out as Keras counts them: a dense kernel [in, out]; a convolution filter
/// [KH, KW, Cin, Cout] multiplies both by the receptive field KH*KW; a vector has its length for
/// both, a scalar 1.
struct fans {
  double in = 1;
  double out = 1;
};
fans fans_of(const shape& dims);

/// Normal(0, stddev) with values beyond two standard deviations drawn again.
expected<tensor> truncated_normal(const shape& dims, uint64_t seed, double stddev, dtype type = dtype::f32);

/// Uniform in +-sqrt(6 / (fan_in + fan_out)).
expected<tensor> glorot_uniform(const shape& dims, uint64_t seed, dtype type = dtype::f32);
/// Truncated normal with standard deviation sqrt(2 / (fan_in + fan_out)) (after truncation).
expected<tensor> glorot_normal(const shape& dims, uint64_t seed, dtype type = dtype::f32);
/// Uniform in +-sqrt(6 / fan_in).
expected<tensor> he_uniform(const shape& dims, uint64_t seed, dtype type = dtype::f32);
/// Truncated normal with standard deviation sqrt(2 / fan_in) (after truncation).
expected<tensor> he_normal(const shape& dims, uint64_t seed, dtype type = dtype::f32);

}  // namespace af::initializers
