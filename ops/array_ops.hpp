#pragma once

#include <cstdint>
#include <vector>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// Joins tensors of one dtype and rank along an existing `axis` (negative counts from the end);
/// every other dimension must agree. Any dtype. invalid_argument for an empty list.
expected<tensor> concat(const std::vector<tensor>& parts, int64_t axis);

/// Joins tensors of one dtype and shape along a new `axis` in [-(rank+1), rank]. Any dtype.
expected<tensor> stack(const std::vector<tensor>& parts, int64_t axis);

/// Picks slices of `params` along `axis` by `indices` (i32 or i64, any shape). The result has shape
/// params.shape[:axis] + indices.shape + params.shape[axis+1:]. out_of_range names the first bad
/// index and its (row-major) position in `indices`. Any dtype for `params`.
expected<tensor> gather(const tensor& params, const tensor& indices, int64_t axis = 0);

/// indices.shape + [depth], `on_value` where the last coordinate equals the index, `off_value`
/// elsewhere. Indices outside [0, depth) give a row of `off_value` (TensorFlow's rule). `indices`
/// may have any integer dtype.
expected<tensor> one_hot(const tensor& indices, int64_t depth, double on_value = 1, double off_value = 0,
                         dtype type = dtype::f32);

/// The gradient of `x.slice(axis, start, stop, step)` for an `x` of `input_shape`: zeros except
/// the sliced positions, which hold `grad`. Any dtype.
expected<tensor> slice_backprop(const tensor& grad, const shape& input_shape, int64_t axis, int64_t start, int64_t stop,
                                int64_t step = 1);

/// The gradient of gather(params, indices, axis) for `params` of `params_shape`: each slice of
/// `grad` added to the row its index picked (repeated indices accumulate). f32 and f64;
/// out_of_range names a bad index.
expected<tensor> gather_backprop(const tensor& grad, const tensor& indices, const shape& params_shape, int64_t axis = 0);

}  // namespace af
