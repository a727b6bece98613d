#pragma once

#include <array>
#include <cstdint>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// Spatial padding, with TensorFlow's meaning.
enum class padding_mode : uint8_t {
  valid,  ///< no padding; windows that do not fit are dropped: out = ceil((in - dilated_k + 1) / stride)
  same,   ///< out = ceil(in / stride); zero padding split with the smaller half before
};

/// Output length and leading padding of one spatial dimension.
struct window_geometry {
  int64_t out = 0;
  int64_t pad_before = 0;
};

/// TensorFlow's rule for one dimension of length `in`, window `k`, `stride` and `dilation`:
/// SAME pads pad_total = max((out-1)*stride + (k-1)*dilation + 1 - in, 0), pad_before = pad_total/2.
/// VALID gives out = 0 when the dilated window is longer than the input.
window_geometry compute_window(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding) noexcept;

struct conv2d_options {
  std::array<int64_t, 2> strides{1, 1};    ///< {sh, sw}, each >= 1
  padding_mode padding = padding_mode::valid;
  std::array<int64_t, 2> dilations{1, 1};  ///< {dh, dw}, each >= 1
  int groups = 1;                          ///< Cin and Cout split into this many independent groups
};

/// 2-D convolution (cross-correlation, like TensorFlow) of an NHWC input [N,H,W,Cin] with an HWIO
/// filter [KH,KW,Cin/groups,Cout] into [N,OH,OW,Cout]. groups == Cin is a depthwise convolution
/// (Cout = Cin * multiplier). f32 and f64 natively, f16/bf16 computed in f32. shape_mismatch,
/// dtype_mismatch, invalid_argument (bad strides/dilations/groups), unsupported (not on the CPU).
expected<tensor> conv2d(const tensor& input, const tensor& filter, const conv2d_options& options = {});

struct pool_options {
  std::array<int64_t, 2> ksize{2, 2};    ///< {kh, kw}, each >= 1
  std::array<int64_t, 2> strides{2, 2};  ///< {sh, sw}, each >= 1
  padding_mode padding = padding_mode::valid;
};

/// Maximum over each window of an NHWC input; padded cells never win. Any numeric dtype.
expected<tensor> max_pool2d(const tensor& input, const pool_options& options = {});
/// Mean over each window of an NHWC input; padded cells are not counted (TensorFlow's rule).
/// Floating dtypes only.
expected<tensor> avg_pool2d(const tensor& input, const pool_options& options = {});

// -- gradients (what autodiff emits for the ops above; f32 and f64) ------------------------------
/// d conv2d / d input: the gradient of an input of `input_shape` [N,H,W,Cin] given the output's.
expected<tensor> conv2d_backprop_input(const tensor& grad_out, const tensor& filter, const shape& input_shape,
                                       const conv2d_options& options = {});
/// d conv2d / d filter: the gradient of a filter of `filter_shape` [KH,KW,Cin/groups,Cout].
expected<tensor> conv2d_backprop_filter(const tensor& input, const tensor& grad_out, const shape& filter_shape,
                                        const conv2d_options& options = {});
/// d max_pool2d: each window's gradient goes to the first of its maxima.
expected<tensor> max_pool2d_backprop(const tensor& input, const tensor& grad_out, const pool_options& options = {});
/// d avg_pool2d: each window's gradient is shared by its cells (padding not counted).
expected<tensor> avg_pool2d_backprop(const tensor& grad_out, const shape& input_shape, const pool_options& options = {});

/// exp(x - max) / sum(exp(x - max)) along `axis`; floating dtypes, f16/bf16 computed in f32.
expected<tensor> softmax(const tensor& x, int64_t axis = -1);
/// (x - max) - log(sum(exp(x - max))) along `axis`; floating dtypes, f16/bf16 computed in f32.
expected<tensor> log_softmax(const tensor& x, int64_t axis = -1);

}  // namespace af
