// Dense, activation, flatten, reshape, dropout, add and concatenate.

#include <numeric>

#include "ops/train/layers.hpp"

namespace af::nn {

namespace {

std::string dims_text(const shape& dims) { return to_string(dims); }

/// The batch axis (the traced value's first dim) followed by per-sample `dims`.
std::vector<int64_t> with_batch(const sym& x, const shape& dims) {
  std::vector<int64_t> out{x.dims()[0]};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

class dense_layer final : public layer {
 public:
  dense_layer(int64_t units, dense_options o)
      : layer("Dense", layer_name{"dense", o.name}), units_(units), options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
    if (in[0].dims.empty()) return fail(errc::shape_mismatch, "needs at least one axis per sample, got a scalar");
    if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
    if (units_ <= 0) return fail(errc::invalid_argument, "units must be positive, got " + std::to_string(units_));
    if (!known_activation(options_.activation)) return fail(errc::invalid_argument, "unknown activation '" + options_.activation + "'");
    AF_TRY_ASSIGN(auto kernel_init, initializer_named(options_.kernel_initializer));
    AF_TRY_ASSIGN(auto bias_init, initializer_named(options_.bias_initializer));
    add_weight("kernel", {in[0].dims.back(), units_}, kernel_init);
    if (options_.use_bias) add_weight("bias", {units_}, bias_init);
    value_spec out = in[0];
    out.dims.back() = units_;
    return std::vector<value_spec>{out};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    sym x = in[0];
    const auto dims = x.dims();
    // Higher-rank inputs: one matmul over every leading axis.
    if (dims.size() > 2) x = af::reshape(x, {-1, dims.back()});
    sym y = af::matmul(x, ctx.weight(0));
    if (options_.use_bias) y = y + ctx.weight(1);
    if (dims.size() > 2) {
      std::vector<int64_t> out(dims.begin(), dims.end());
      out.back() = units_;
      y = af::reshape(y, out);
    }
    return {activate(options_.activation, y)};
  }

 private:
  int64_t units_;
  dense_options options_;
};

class activation_layer final : public layer {
 public:
  activation_layer(std::string activation, std::string name)
      : layer("Activation", layer_name{"activation", name}), activation_(std::move(activation)) {}
  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input");
    if (!known_activation(activation_)) return fail(errc::invalid_argument, "unknown activation '" + activation_ + "'");
    return in;
  }
  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override { return {activate(activation_, in[0])}; }

 private:
  std::string activation_;
};

class reshape_layer final : public layer {
 public:
  reshape_layer(std::string kind, layer_name name, std::optional<std::vector<int64_t>> target)
      : layer(std::move(kind), std::move(name)), target_(std::move(target)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input");
    const int64_t count = numel(in[0].dims);
    if (!target_) return std::vector<value_spec>{{in[0].type, shape{count}}};  // flatten
    shape out;
    int64_t known = 1, unknown_at = -1;
    for (std::size_t i = 0; i < target_->size(); ++i) {
      const int64_t d = (*target_)[i];
      if (d == -1 && unknown_at < 0) {
        unknown_at = static_cast<int64_t>(i);
      } else if (d <= 0) {
        return fail(errc::invalid_argument, "bad target dim " + std::to_string(d) + " (one -1 allowed, others positive)");
      } else {
        known *= d;
      }
      out.push_back(d);
    }
    if (unknown_at >= 0 && known > 0 && count % known == 0) out[static_cast<std::size_t>(unknown_at)] = count / known;
    if (numel(out) != count)
      return fail(errc::shape_mismatch, "cannot reshape " + dims_text(in[0].dims) + " (" + std::to_string(count) +
                                            " elements) to " + dims_text(out));
    return std::vector<value_spec>{{in[0].type, out}};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override {
    return {af::reshape(in[0], with_batch(in[0], output_dims_of(in[0])))};
  }

 private:
  shape output_dims_of(const sym& x) const {
    const auto dims = x.dims();
    int64_t count = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) count *= dims[i];
    if (!target_) return shape{count};
    shape out;
    int64_t known = 1;
    for (auto d : *target_)
      if (d > 0) known *= d;
    for (auto d : *target_) out.push_back(d == -1 ? count / known : d);
    return out;
  }

  std::optional<std::vector<int64_t>> target_;  // nullopt: flatten
};

class dropout_layer final : public layer {
 public:
  dropout_layer(double rate, std::string name) : layer("Dropout", layer_name{"dropout", name}), rate_(rate) {}
  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input");
    if (!(rate_ >= 0 && rate_ < 1)) return fail(errc::invalid_argument, "rate must be in [0, 1), got " + std::to_string(rate_));
    if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
    return in;
  }
  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    if (!ctx.training() || rate_ == 0) return {in[0]};
    const auto dims = in[0].dims();
    auto noise = ctx.uniform(std::vector<int64_t>(dims.begin(), dims.end()));
    auto keep = af::less(noise, constant_like(noise, 1.0 - rate_));
    return {af::where(keep, in[0] * (1.0 / (1.0 - rate_)), constant_like(in[0], 0.0))};
  }

 private:
  double rate_;
};

class add_layer final : public layer {
 public:
  explicit add_layer(std::string name) : layer("Add", layer_name{"add", name}) {}
  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() < 2) return fail(errc::invalid_argument, "needs at least two inputs");
    for (const auto& s : in)
      if (s != in[0]) return fail(errc::shape_mismatch, "inputs differ: " + graph::to_string(in[0]) + " and " + graph::to_string(s));
    return std::vector<value_spec>{in[0]};
  }
  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override {
    sym sum = in[0];
    for (std::size_t i = 1; i < in.size(); ++i) sum = sum + in[i];
    return {sum};
  }
};

class concatenate_layer final : public layer {
 public:
  concatenate_layer(int64_t axis, std::string name)
      : layer("Concatenate", layer_name{"concatenate", name}), axis_(axis) {}
  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.empty()) return fail(errc::invalid_argument, "needs inputs");
    const auto rank = static_cast<int64_t>(in[0].dims.size());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return fail(errc::invalid_argument, "axis " + std::to_string(axis_) + " out of range for rank " + std::to_string(rank));
    value_spec out = in[0];
    for (std::size_t i = 1; i < in.size(); ++i) {
      bool fits = in[i].type == out.type && static_cast<int64_t>(in[i].dims.size()) == rank;
      for (int64_t d = 0; fits && d < rank; ++d)
        fits = d == axis || in[i].dims[static_cast<std::size_t>(d)] == in[0].dims[static_cast<std::size_t>(d)];
      if (!fits) return fail(errc::shape_mismatch, "cannot join " + graph::to_string(in[0]) + " and " + graph::to_string(in[i]) + " on axis " + std::to_string(axis_));
      out.dims[static_cast<std::size_t>(axis)] += in[i].dims[static_cast<std::size_t>(axis)];
    }
    axis_resolved_ = axis;
    return std::vector<value_spec>{out};
  }
  std::vector<sym> call(const std::vector<sym>& in, call_context&) const override {
    return {af::concat(in, axis_resolved_ + 1)};  // + the batch axis
  }

 private:
  int64_t axis_;
  int64_t axis_resolved_ = 0;
};

}  // namespace

layer_ptr dense(int64_t units, dense_options options) { return std::make_shared<dense_layer>(units, std::move(options)); }
layer_ptr activation(std::string a, std::string name) { return std::make_shared<activation_layer>(std::move(a), std::move(name)); }
layer_ptr flatten(std::string name) {
  return std::make_shared<reshape_layer>("Flatten", layer_name{"flatten", name}, std::nullopt);
}
layer_ptr reshape(std::vector<int64_t> target, std::string name) {
  return std::make_shared<reshape_layer>("Reshape", layer_name{"reshape", name}, std::move(target));
}
layer_ptr dropout(double rate, std::string name) { return std::make_shared<dropout_layer>(rate, std::move(name)); }
layer_ptr add(std::string name) { return std::make_shared<add_layer>(std::move(name)); }
layer_ptr concatenate(int64_t axis, std::string name) { return std::make_shared<concatenate_layer>(axis, std::move(name)); }

}  // namespace af::nn
