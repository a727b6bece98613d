// Conv2D, MaxPool2D, AvgPool2D and GlobalAveragePooling2D (NHWC).

#include "ops/train/layers.hpp"

namespace af::nn {

namespace {

/// Checks a per-sample image spec [H, W, C] for `who`.
expected<void> check_image(const std::vector<value_spec>& in, const std::function<error(errc, const std::string&)>& fail) {
  if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
  if (in[0].dims.size() != 3)
    return fail(errc::shape_mismatch, "needs images [H, W, C] per sample, got " + graph::to_string(in[0]));
  if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input, got " + graph::to_string(in[0]));
  return {};
}

expected<int64_t> spatial_extent(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding,
                                 const std::function<error(errc, const std::string&)>& fail) {
  if (k <= 0 || stride <= 0 || dilation <= 0) return fail(errc::invalid_argument, "kernel, strides and dilations must be positive");
  const auto g = compute_window(in, k, stride, dilation, padding);
  if (g.out <= 0)
    return fail(errc::shape_mismatch, "a window of " + std::to_string((k - 1) * dilation + 1) + " does not fit an axis of " +
                                          std::to_string(in) + " without padding");
  return g.out;
}

class conv2d_layer final : public layer {
 public:
  conv2d_layer(int64_t filters, std::array<int64_t, 2> kernel, conv_options o)
      : layer("Conv2D", layer_name{"conv2d", o.name}), filters_(filters), kernel_(kernel), options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    auto failer = [this](errc c, const std::string& w) { return fail(c, w); };
    AF_TRY(check_image(in, failer));
    if (filters_ <= 0) return fail(errc::invalid_argument, "filters must be positive, got " + std::to_string(filters_));
    if (!known_activation(options_.activation)) return fail(errc::invalid_argument, "unknown activation '" + options_.activation + "'");
    const auto& d = in[0].dims;
    AF_TRY_ASSIGN(auto oh, spatial_extent(d[0], kernel_[0], options_.strides[0], options_.dilations[0], options_.padding, failer));
    AF_TRY_ASSIGN(auto ow, spatial_extent(d[1], kernel_[1], options_.strides[1], options_.dilations[1], options_.padding, failer));
    AF_TRY_ASSIGN(auto kernel_init, initializer_named(options_.kernel_initializer));
    AF_TRY_ASSIGN(auto bias_init, initializer_named(options_.bias_initializer));
    add_weight("kernel", {kernel_[0], kernel_[1], d[2], filters_}, kernel_init);
    if (options_.use_bias) add_weight("bias", {filters_}, bias_init);
    return std::vector<value_spec>{{dtype::f32, shape{oh, ow, filters_}}};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    af::conv2d_options o;
    o.strides = options_.strides;
    o.padding = options_.padding;
    o.dilations = options_.dilations;
    sym y = af::conv2d(in[0], ctx.weight(0), o);
    if (options_.use_bias) y = y + ctx.weight(1);
    return {activate(options_.activation, y)};
  }

 private:
  int64_t filters_;
  std::array<int64_t, 2> kernel_;
  conv_options options_;
};

class pool_layer final : public layer {
 public:
  pool_layer(bool max, pooling_options o)
      : layer(max ? "MaxPooling2D" : "AveragePooling2D", layer_name{max ? "max_pooling2d" : "average_pooling2d", o.name}),
        max_(max) {
    pool_.ksize = o.pool_size;
    pool_.strides = o.strides[0] == 0 && o.strides[1] == 0 ? o.pool_size : o.strides;
    pool_.padding = o.padding;
  }

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    auto failer = [this](errc c, const std::string& w) { return fail(c, w); };
    AF_TRY(check_image(in, failer));
    const auto& d = in[0].dims;
    AF_TRY_ASSIGN(auto oh, spatial_extent(d[0], pool_.ksize[0], pool_.strides[0], 1, pool_.padding, failer));
    AF_TRY_ASSIGN(auto ow, spatial_extent(d[1], pool_.ksize[1], pool_.strides[1], 1, pool_.padding, failer));
    return std::vector<value_spec>{{dtype::f32, shape{oh, ow, d[2]}}};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override {
    return {max_ ? af::max_pool2d(in[0], pool_) : af::avg_pool2d(in[0], pool_)};
  }

 private:
  bool max_;
  pool_options pool_;
};

class global_average_pool_layer final : public layer {
 public:
  explicit global_average_pool_layer(std::string name)
      : layer("GlobalAveragePooling2D", layer_name{"global_average_pooling2d", name}) {}
  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    AF_TRY(check_image(in, [this](errc c, const std::string& w) { return fail(c, w); }));
    return std::vector<value_spec>{{dtype::f32, shape{in[0].dims[2]}}};
  }
  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override {
    return {af::reduce_mean(in[0], {1, 2})};
  }
};

}  // namespace

layer_ptr conv2d(int64_t filters, std::array<int64_t, 2> kernel_size, conv_options options) {
  return std::make_shared<conv2d_layer>(filters, kernel_size, std::move(options));
}
layer_ptr max_pool2d(pooling_options options) { return std::make_shared<pool_layer>(true, std::move(options)); }
layer_ptr avg_pool2d(pooling_options options) { return std::make_shared<pool_layer>(false, std::move(options)); }
layer_ptr global_average_pooling2d(std::string name) { return std::make_shared<global_average_pool_layer>(std::move(name)); }

}  // namespace af::nn
