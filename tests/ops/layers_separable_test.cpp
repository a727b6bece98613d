// DepthwiseConv2D and SeparableConv2D against direct loop convolutions in double: outputs, gradients
// for the input and every weight (central differences), Keras' weight layout, and input errors.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "layer_test_support.hpp"
#include "ops/train/layers.hpp"

using namespace af;
using namespace layer_testing;

namespace {

struct window {
  int64_t out, pad_before;
};

// TensorFlow's rule, written out again here rather than calling compute_window.
window window_of(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding) {
  const int64_t span = (k - 1) * dilation + 1;
  const int64_t out = padding == padding_mode::same ? (in + stride - 1) / stride : (in - span + stride) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
  return {out, padding == padding_mode::same ? total / 2 : 0};
}

struct conv_geometry {
  int64_t n, h, w, c;  // input
  int64_t kh, kw, m;   // depthwise kernel [kh, kw, c, m]
  std::array<int64_t, 2> strides{1, 1}, dilations{1, 1};
  padding_mode padding = padding_mode::valid;
  window wh() const { return window_of(h, kh, strides[0], dilations[0], padding); }
  window ww() const { return window_of(w, kw, strides[1], dilations[1], padding); }
};

// y[n, i, j, c*m + q] = sum x[n, i*s - pad + a*d, j*s - pad + b*d, c] * k[a, b, c, q] (+ bias).
values depthwise_reference(const conv_geometry& g, const values& x, const values& k, const values* bias) {
  const window wh = g.wh(), ww = g.ww();
  const int64_t cout = g.c * g.m;
  values y(static_cast<std::size_t>(g.n * wh.out * ww.out * cout));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t i = 0; i < wh.out; ++i)
      for (int64_t j = 0; j < ww.out; ++j)
        for (int64_t c = 0; c < g.c; ++c)
          for (int64_t q = 0; q < g.m; ++q) {
            double s = bias ? (*bias)[static_cast<std::size_t>(c * g.m + q)] : 0.0;
            for (int64_t a = 0; a < g.kh; ++a)
              for (int64_t b = 0; b < g.kw; ++b) {
                const int64_t r = i * g.strides[0] - wh.pad_before + a * g.dilations[0];
                const int64_t col = j * g.strides[1] - ww.pad_before + b * g.dilations[1];
                if (r < 0 || r >= g.h || col < 0 || col >= g.w) continue;
                s += x[static_cast<std::size_t>(((n * g.h + r) * g.w + col) * g.c + c)] *
                     k[static_cast<std::size_t>(((a * g.kw + b) * g.c + c) * g.m + q)];
              }
            y[static_cast<std::size_t>(((n * wh.out + i) * ww.out + j) * cout + c * g.m + q)] = s;
          }
  return y;
}

// A 1x1 convolution of [pixels, cin] by [1, 1, cin, filters] (+ bias).
values pointwise_reference(const values& y, int64_t cin, const values& p, int64_t filters, const values* bias) {
  const auto pixels = static_cast<int64_t>(y.size()) / cin;
  values z(static_cast<std::size_t>(pixels * filters));
  for (int64_t px = 0; px < pixels; ++px)
    for (int64_t f = 0; f < filters; ++f) {
      double s = bias ? (*bias)[static_cast<std::size_t>(f)] : 0.0;
      for (int64_t q = 0; q < cin; ++q)
        s += y[static_cast<std::size_t>(px * cin + q)] * p[static_cast<std::size_t>(q * filters + f)];
      z[static_cast<std::size_t>(px * filters + f)] = s;
    }
  return z;
}

values tanh_of(values v) {
  for (auto& e : v) e = std::tanh(e);
  return v;
}

// Runs a depthwise layer built for `g` and checks output and gradients against the loops.
void check_depthwise(const conv_geometry& g, const std::string& activation, bool use_bias) {
  nn::depthwise_options o;
  o.depth_multiplier = g.m;
  o.strides = g.strides;
  o.dilations = g.dilations;
  o.padding = g.padding;
  o.activation = activation;
  o.use_bias = use_bias;
  auto b = build(nn::depthwise_conv2d({g.kh, g.kw}, o), {g.h, g.w, g.c});
  REQUIRE(b.output.dims == shape{g.wh().out, g.ww().out, g.c * g.m});
  auto w = b.weights;
  if (use_bias) w[1] = sample_values(w[1].size(), 3);  // zeros would hide a misplaced bias
  const values x = sample_values(static_cast<std::size_t>(g.n * g.h * g.w * g.c), 1);
  const reference ref = [&](const values& xv, const std::vector<values>& ws) {
    auto y = depthwise_reference(g, xv, ws[0], use_bias ? &ws[1] : nullptr);
    return activation == "tanh" ? tanh_of(y) : y;
  };
  auto r = run_ok(b, make_tensor(x, {g.n, g.h, g.w, g.c}, dtype::f64), w, /*training=*/true);
  CHECK(r.y.shape() == shape{g.n, g.wh().out, g.ww().out, g.c * g.m});
  check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
  check_gradients(ref, x, w, r, b, 1e-7);
}

}  // namespace

TEST_CASE("depthwise conv2d declares Keras' depthwise_kernel and bias", "[layers][separable]") {
  nn::depthwise_options o;
  o.depth_multiplier = 2;
  o.name = "dw";
  auto b = build(nn::depthwise_conv2d({3, 2}, o), {6, 5, 3});
  REQUIRE(b.layer->weights().size() == 2);
  CHECK(b.layer->kind() == "DepthwiseConv2D");
  CHECK(b.layer->weights()[0].name == "dw/depthwise_kernel");
  CHECK(b.layer->weights()[0].spec.dims == shape{3, 2, 3, 2});
  CHECK(b.layer->weights()[1].name == "dw/bias");
  CHECK(b.layer->weights()[1].spec.dims == shape{6});
  CHECK(b.output.dims == shape{4, 4, 6});
}

TEST_CASE("depthwise conv2d matches a loop convolution with one filter per channel", "[layers][separable]") {
  check_depthwise({.n = 2, .h = 5, .w = 4, .c = 3, .kh = 3, .kw = 2, .m = 1}, "", true);
}

TEST_CASE("depthwise conv2d orders outputs channel-major with depth multiplier 2, same padding and stride 2",
          "[layers][separable]") {
  // Output channel c*m + q is input channel c with filter q, as Keras lays them out.
  conv_geometry g{.n = 2, .h = 5, .w = 6, .c = 3, .kh = 3, .kw = 3, .m = 2};
  g.strides = {2, 2};
  g.padding = padding_mode::same;
  check_depthwise(g, "", true);
}

TEST_CASE("depthwise conv2d with dilation, uneven strides and tanh", "[layers][separable]") {
  conv_geometry g{.n = 1, .h = 7, .w = 6, .c = 2, .kh = 2, .kw = 3, .m = 3};
  g.strides = {1, 2};
  g.dilations = {2, 1};
  check_depthwise(g, "tanh", false);
  g.padding = padding_mode::same;
  check_depthwise(g, "tanh", true);
}

TEST_CASE("separable conv2d is a depthwise convolution then a pointwise one with one bias", "[layers][separable]") {
  conv_geometry g{.n = 2, .h = 5, .w = 5, .c = 3, .kh = 3, .kw = 3, .m = 2};
  g.strides = {2, 2};
  g.padding = padding_mode::same;
  const int64_t filters = 4;
  nn::separable_options o;
  o.depth_multiplier = g.m;
  o.strides = g.strides;
  o.padding = g.padding;
  o.activation = "tanh";
  o.name = "sep";
  auto b = build(nn::separable_conv2d(filters, {g.kh, g.kw}, o), {g.h, g.w, g.c});
  CHECK(b.layer->kind() == "SeparableConv2D");
  REQUIRE(b.layer->weights().size() == 3);
  CHECK(b.layer->weights()[0].name == "sep/depthwise_kernel");
  CHECK(b.layer->weights()[0].spec.dims == shape{3, 3, 3, 2});
  CHECK(b.layer->weights()[1].name == "sep/pointwise_kernel");
  CHECK(b.layer->weights()[1].spec.dims == shape{1, 1, 6, filters});
  CHECK(b.layer->weights()[2].name == "sep/bias");
  CHECK(b.layer->weights()[2].spec.dims == shape{filters});
  CHECK(b.output.dims == shape{3, 3, filters});

  auto w = b.weights;
  w[2] = sample_values(w[2].size(), 5);
  const values x = sample_values(static_cast<std::size_t>(g.n * g.h * g.w * g.c), 2);
  const reference ref = [&](const values& xv, const std::vector<values>& ws) {
    return tanh_of(pointwise_reference(depthwise_reference(g, xv, ws[0], nullptr), g.c * g.m, ws[1], filters, &ws[2]));
  };
  const tensor xt = make_tensor(x, {g.n, g.h, g.w, g.c}, dtype::f64);
  auto r = run_ok(b, xt, w, /*training=*/false);
  check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
  check_gradients(ref, x, w, r, b, 1e-7);

  SECTION("and agrees in f32 within f32 rounding") {
    auto r32 = run_ok(b, xt, w, /*training=*/false, dtype::f32);
    CHECK(r32.y.type() == dtype::f32);
    check_values(r32.y.to_vector<double>(), ref(x, w), 1e-5, "f32 output");
    check_values(r32.grad_w[1], r.grad_w[1], 1e-4, "f32 d/d pointwise_kernel");
  }
}

TEST_CASE("depthwise and separable conv2d reject inputs that do not fit, naming the layer", "[layers][separable]") {
  nn::depthwise_options o;
  o.name = "dw_bad";
  auto e = apply_error(nn::depthwise_conv2d({3, 3}, o), {8, 8});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("DepthwiseConv2D 'dw_bad'") != std::string::npos);
  CHECK(e.message.find("rank 3") != std::string::npos);

  e = apply_error(nn::depthwise_conv2d({3, 3}, o), {8, 8, 2}, dtype::i32);
  CHECK(e.code == errc::dtype_mismatch);
  CHECK(e.message.find("DepthwiseConv2D 'dw_bad'") != std::string::npos);

  e = apply_error(nn::depthwise_conv2d({5, 5}, o), {4, 8, 2});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("does not fit") != std::string::npos);

  o.depth_multiplier = 0;
  e = apply_error(nn::depthwise_conv2d({3, 3}, o), {8, 8, 2});
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("depth_multiplier") != std::string::npos);

  nn::separable_options so;
  so.name = "sep_bad";
  e = apply_error(nn::separable_conv2d(4, {3, 3}, so), {8, 8, 2, 1});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("SeparableConv2D 'sep_bad'") != std::string::npos);
  e = apply_error(nn::separable_conv2d(0, {3, 3}, so), {8, 8, 2});
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("filters") != std::string::npos);
}
