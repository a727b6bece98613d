// BatchNormalization and LayerNormalization, as Keras computes them: the biased variance (divided
// by the count, not count - 1) both for normalising and for the moving variance.

#include <numeric>
#include <string>

#include "ops/train/layers.hpp"

namespace af::nn {

namespace {

/// Axes 0 .. rank-2 of a traced value: every axis but the last (the batch axis included).
std::vector<int64_t> all_but_last(const sym& x) {
  std::vector<int64_t> axes(x.dims().size() - 1);
  std::iota(axes.begin(), axes.end(), int64_t{0});
  return axes;
}

class batch_normalization_layer final : public layer {
 public:
  explicit batch_normalization_layer(batch_norm_options o)
      : layer("BatchNormalization", layer_name{"batch_normalization", o.name}), options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
    if (in[0].dims.empty()) return fail(errc::shape_mismatch, "needs at least one axis per sample (the channels), got a scalar");
    if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
    if (!(options_.momentum >= 0 && options_.momentum <= 1))
      return fail(errc::invalid_argument, "momentum must be in [0, 1], got " + std::to_string(options_.momentum));
    if (!(options_.epsilon > 0)) return fail(errc::invalid_argument, "epsilon must be positive, got " + std::to_string(options_.epsilon));
    const int64_t channels = in[0].dims.back();
    if (options_.scale) gamma_ = add_weight("gamma", {channels}, ones_initializer());
    if (options_.center) beta_ = add_weight("beta", {channels}, zeros_initializer());
    moving_mean_ = add_weight("moving_mean", {channels}, zeros_initializer(), /*trainable=*/false);
    moving_variance_ = add_weight("moving_variance", {channels}, ones_initializer(), /*trainable=*/false);
    return in;
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    const sym& x = in[0];
    const sym& moving_mean = ctx.weight(moving_mean_);
    const sym& moving_variance = ctx.weight(moving_variance_);
    sym mean = moving_mean, variance = moving_variance;
    if (ctx.training()) {
      const auto axes = all_but_last(x);
      mean = af::reduce_mean(x, axes);
      const sym centred = x - mean;
      variance = af::reduce_mean(centred * centred, axes);
      const double m = options_.momentum;
      ctx.assign(moving_mean_, moving_mean * m + mean * (1.0 - m));
      ctx.assign(moving_variance_, moving_variance * m + variance * (1.0 - m));
    }
    sym inv = af::rsqrt(variance + options_.epsilon);
    if (options_.scale) inv = inv * ctx.weight(gamma_);
    sym y = (x - mean) * inv;
    if (options_.center) y = y + ctx.weight(beta_);
    return {y};
  }

 private:
  batch_norm_options options_;
  int gamma_ = -1, beta_ = -1, moving_mean_ = -1, moving_variance_ = -1;  // add_weight indices
};

class layer_normalization_layer final : public layer {
 public:
  explicit layer_normalization_layer(layer_norm_options o)
      : layer("LayerNormalization", layer_name{"layer_normalization", o.name}), options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
    if (in[0].dims.empty()) return fail(errc::shape_mismatch, "needs at least one axis per sample, got a scalar");
    if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
    if (!(options_.epsilon > 0)) return fail(errc::invalid_argument, "epsilon must be positive, got " + std::to_string(options_.epsilon));
    const int64_t features = in[0].dims.back();
    if (options_.scale) gamma_ = add_weight("gamma", {features}, ones_initializer());
    if (options_.center) beta_ = add_weight("beta", {features}, zeros_initializer());
    return in;
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    const sym& x = in[0];
    const std::vector<int64_t> last{static_cast<int64_t>(x.dims().size()) - 1};
    const sym mean = af::reduce_mean(x, last, /*keepdims=*/true);
    const sym centred = x - mean;
    const sym variance = af::reduce_mean(centred * centred, last, /*keepdims=*/true);
    sym y = centred * af::rsqrt(variance + options_.epsilon);
    if (options_.scale) y = y * ctx.weight(gamma_);
    if (options_.center) y = y + ctx.weight(beta_);
    return {y};
  }

 private:
  layer_norm_options options_;
  int gamma_ = -1, beta_ = -1;
};

}  // namespace

layer_ptr batch_normalization(batch_norm_options options) {
  return std::make_shared<batch_normalization_layer>(std::move(options));
}

layer_ptr layer_normalization(layer_norm_options options) {
  return std::make_shared<layer_normalization_layer>(std::move(options));
}

}  // namespace af::nn
