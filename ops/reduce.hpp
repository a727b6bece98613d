#pragma once
// Reductions on the CPU. Axes may be negative; an empty axis list reduces over every axis; repeated
// or out-of-range axes are errors naming the op. With keepdims the reduced axes stay as size 1.
//
// Results do not depend on the thread budget: work is split into fixed blocks whose partial results
// are combined in a fixed order. Floating sums accumulate in double; integer sums wrap in the input
// dtype (like TensorFlow, the result keeps the input's dtype). max/min/argmax propagate NaN
// (argmax returns the first NaN, like NumPy).
//
// Empty reductions: sum is 0, mean is NaN, logsumexp is -inf; max, min, argmax and argmin have no
// value and are invalid_argument errors naming the op and shape.

#include <cstdint>
#include <vector>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// Sum over `axes` (numeric dtypes).
expected<tensor> reduce_sum(const tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
/// Arithmetic mean over `axes` (floating dtypes).
expected<tensor> reduce_mean(const tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
/// Largest element over `axes` (every dtype; bool acts as "any").
expected<tensor> reduce_max(const tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
/// Smallest element over `axes` (every dtype; bool acts as "all").
expected<tensor> reduce_min(const tensor& x, const std::vector<int64_t>& axes = {}, bool keepdims = false);
/// log(sum(exp(x))) over `axes`, computed stably by shifting with the running max (floating dtypes).
expected<tensor> reduce_logsumexp(const tensor& x, const std::vector<int64_t>& axes = {},
                                  bool keepdims = false);
/// Index (i64) of the first largest element along `axis`.
expected<tensor> argmax(const tensor& x, int64_t axis, bool keepdims = false);
/// Index (i64) of the first smallest element along `axis`.
expected<tensor> argmin(const tensor& x, int64_t axis, bool keepdims = false);

}  // namespace af
