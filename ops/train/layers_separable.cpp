// DepthwiseConv2D and SeparableConv2D.
//
// Keras stores a depthwise kernel as [KH, KW, C, m]: input channel c, multiplier j. Its output
// channel c*m + j is channel c convolved with filter (c, j). Our grouped conv2d with groups = C
// reads an HWIO filter [KH, KW, 1, C*m] and gives output channel o the input channel o / m (group
// o / (C*m / C)), with filter column o. Reshaping [KH, KW, C, m] row-major to [KH, KW, 1, C*m] puts
// (c, j) at column c*m + j, so the two orderings agree and the kernel needs no transpose.

#include <array>
#include <functional>
#include <string>

#include "ops/train/layers.hpp"

namespace af::nn {

namespace {

/// Per-sample output dims of a convolution over [H, W, C] (no batch axis); out <= 0 when the window
/// does not fit.
shape conv_output_dims(const shape& in, std::array<int64_t, 2> kernel, std::array<int64_t, 2> strides,
                       std::array<int64_t, 2> dilations, padding_mode padding, int64_t channels) {
  const auto h = compute_window(in[0], kernel[0], strides[0], dilations[0], padding);
  const auto w = compute_window(in[1], kernel[1], strides[1], dilations[1], padding);
  return shape{h.out, w.out, channels};
}

/// The checks a depthwise stage makes of its input and options; the error names `self`'s layer.
template <class Options>
expected<shape> check_depthwise(const std::vector<value_spec>& in, std::array<int64_t, 2> kernel, const Options& o,
                                const std::function<error(errc, const std::string&)>& fail) {
  if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
  if (in[0].dims.size() != 3)
    return fail(errc::shape_mismatch, "needs [H, W, C] per sample (rank 3), got " + to_string(in[0].dims));
  if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
  if (kernel[0] <= 0 || kernel[1] <= 0)
    return fail(errc::invalid_argument, std::string{"kernel size must be positive, got "} + std::to_string(kernel[0]) +
                                            "x" + std::to_string(kernel[1]));
  if (o.depth_multiplier <= 0)
    return fail(errc::invalid_argument, std::string{"depth_multiplier must be positive, got "} +
                                            std::to_string(o.depth_multiplier));
  if (o.strides[0] <= 0 || o.strides[1] <= 0 || o.dilations[0] <= 0 || o.dilations[1] <= 0)
    return fail(errc::invalid_argument, "strides and dilations must be positive");
  if (!known_activation(o.activation)) return fail(errc::invalid_argument, "unknown activation '" + o.activation + "'");
  const int64_t channels = in[0].dims[2];
  if (channels <= 0) return fail(errc::shape_mismatch, "needs at least one channel, got " + to_string(in[0].dims));
  shape out = conv_output_dims(in[0].dims, kernel, o.strides, o.dilations, o.padding, channels * o.depth_multiplier);
  if (out[0] <= 0 || out[1] <= 0)
    return fail(errc::shape_mismatch, std::string{"a "} + std::to_string(kernel[0]) + "x" + std::to_string(kernel[1]) +
                                          " window (dilations " + std::to_string(o.dilations[0]) + "," +
                                          std::to_string(o.dilations[1]) + ") does not fit input " +
                                          to_string(in[0].dims) + " with valid padding");
  return out;
}

/// x [N, H, W, C] convolved channel by channel with a Keras depthwise kernel [KH, KW, C, m].
sym depthwise(const sym& x, const sym& kernel, std::array<int64_t, 2> strides, padding_mode padding,
              std::array<int64_t, 2> dilations) {
  const auto k = kernel.dims();
  const sym filter = af::reshape(kernel, {k[0], k[1], 1, k[2] * k[3]});  // see the note at the top
  conv2d_options o;
  o.strides = strides;
  o.padding = padding;
  o.dilations = dilations;
  o.groups = static_cast<int>(k[2]);
  return af::conv2d(x, filter, o);
}

class depthwise_conv2d_layer final : public layer {
 public:
  depthwise_conv2d_layer(std::array<int64_t, 2> kernel_size, depthwise_options o)
      : layer("DepthwiseConv2D", layer_name{"depthwise_conv2d", o.name}), kernel_(kernel_size),
        options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    AF_TRY_ASSIGN(shape out, check_depthwise(in, kernel_, options_, [this](errc c, const std::string& w) { return fail(c, w); }));
    AF_TRY_ASSIGN(auto kernel_init, initializer_named(options_.depthwise_initializer));
    const int64_t channels = in[0].dims[2];
    add_weight("depthwise_kernel", {kernel_[0], kernel_[1], channels, options_.depth_multiplier}, kernel_init);
    if (options_.use_bias) add_weight("bias", {channels * options_.depth_multiplier}, zeros_initializer());
    return std::vector<value_spec>{{dtype::f32, out}};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    sym y = depthwise(in[0], ctx.weight(0), options_.strides, options_.padding, options_.dilations);
    if (options_.use_bias) y = y + ctx.weight(1);
    return {activate(options_.activation, y)};
  }

 private:
  std::array<int64_t, 2> kernel_;
  depthwise_options options_;
};

class separable_conv2d_layer final : public layer {
 public:
  separable_conv2d_layer(int64_t filters, std::array<int64_t, 2> kernel_size, separable_options o)
      : layer("SeparableConv2D", layer_name{"separable_conv2d", o.name}), filters_(filters),
        kernel_(kernel_size), options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    AF_TRY_ASSIGN(shape out, check_depthwise(in, kernel_, options_, [this](errc c, const std::string& w) { return fail(c, w); }));
    if (filters_ <= 0) return fail(errc::invalid_argument, "filters must be positive, got " + std::to_string(filters_));
    AF_TRY_ASSIGN(auto depthwise_init, initializer_named(options_.depthwise_initializer));
    AF_TRY_ASSIGN(auto pointwise_init, initializer_named(options_.pointwise_initializer));
    const int64_t channels = in[0].dims[2];
    const int64_t middle = channels * options_.depth_multiplier;
    add_weight("depthwise_kernel", {kernel_[0], kernel_[1], channels, options_.depth_multiplier}, depthwise_init);
    add_weight("pointwise_kernel", {1, 1, middle, filters_}, pointwise_init);
    if (options_.use_bias) add_weight("bias", {filters_}, zeros_initializer());
    out[2] = filters_;
    return std::vector<value_spec>{{dtype::f32, out}};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    const sym mid = depthwise(in[0], ctx.weight(0), options_.strides, options_.padding, options_.dilations);
    sym y = af::conv2d(mid, ctx.weight(1));  // 1x1, stride 1: a matmul over channels
    if (options_.use_bias) y = y + ctx.weight(2);
    return {activate(options_.activation, y)};
  }

 private:
  int64_t filters_;
  std::array<int64_t, 2> kernel_;
  separable_options options_;
};

}  // namespace

layer_ptr depthwise_conv2d(std::array<int64_t, 2> kernel_size, depthwise_options options) {
  return std::make_shared<depthwise_conv2d_layer>(kernel_size, std::move(options));
}

layer_ptr separable_conv2d(int64_t filters, std::array<int64_t, 2> kernel_size, separable_options options) {
  return std::make_shared<separable_conv2d_layer>(filters, kernel_size, std::move(options));
}

}  // namespace af::nn
