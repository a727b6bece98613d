// BatchNormalization and LayerNormalization against loops in double: outputs, gradients for the
// input and the trainable weights (central differences), the moving statistics after a training
// call, inference with the moving statistics, and input errors.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "layer_test_support.hpp"
#include "ops/train/layers.hpp"

using namespace af;
using namespace layer_testing;

namespace {

struct channel_stats {
  values mean, variance;  // biased: divided by the count, as Keras does
};

// Statistics per channel (the last axis) over every other axis of x.
channel_stats stats_of(const values& x, std::size_t channels) {
  const std::size_t rows = x.size() / channels;
  channel_stats s{values(channels, 0.0), values(channels, 0.0)};
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < channels; ++c) s.mean[c] += x[r * channels + c] / static_cast<double>(rows);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < channels; ++c) {
      const double d = x[r * channels + c] - s.mean[c];
      s.variance[c] += d * d / static_cast<double>(rows);
    }
  return s;
}

// (x - mean) / sqrt(variance + eps) * gamma + beta per channel; null gamma/beta: 1 and 0.
values normalise(const values& x, const values& mean, const values& variance, const values* gamma, const values* beta,
                 double eps) {
  const std::size_t channels = mean.size();
  values y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i % channels;
    y[i] = (x[i] - mean[c]) / std::sqrt(variance[c] + eps) * (gamma ? (*gamma)[c] : 1.0) + (beta ? (*beta)[c] : 0.0);
  }
  return y;
}

values positive_values(std::size_t n, uint64_t seed) { return sample_values(n, seed, 0.5, 2.0); }

}  // namespace

TEST_CASE("batch normalization declares gamma, beta and non-trainable moving statistics", "[layers][norm]") {
  nn::batch_norm_options o;
  o.name = "bn";
  auto b = build(nn::batch_normalization(o), {4, 4, 3});
  CHECK(b.layer->kind() == "BatchNormalization");
  CHECK(b.output.dims == shape{4, 4, 3});
  const auto& w = b.layer->weights();
  REQUIRE(w.size() == 4);
  const char* names[] = {"bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"};
  const bool trainable[] = {true, true, false, false};
  const double start[] = {1, 0, 0, 1};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(w[i].name == names[i]);
    CHECK(w[i].spec.dims == shape{3});
    CHECK(w[i].trainable == trainable[i]);
    CHECK(b.weights[i] == values(3, start[i]));
  }
}

TEST_CASE("batch normalization normalises with the batch statistics while training and moves its averages",
          "[layers][norm]") {
  const double momentum = 0.9, eps = 1e-3;
  for (const shape& dims : {shape{3, 4}, shape{2, 2, 3}, shape{5}}) {
    INFO("per-sample dims " << to_string(dims));
    nn::batch_norm_options o;
    o.momentum = momentum;
    o.epsilon = eps;
    auto b = build(nn::batch_normalization(o), dims);
    const auto channels = static_cast<std::size_t>(dims.back());
    auto w = b.weights;  // gamma, beta, moving_mean, moving_variance
    w[0] = sample_values(channels, 11, 0.5, 1.5);
    w[1] = sample_values(channels, 12);
    w[2] = sample_values(channels, 13);
    w[3] = positive_values(channels, 14);
    shape x_dims{2};
    x_dims.insert(x_dims.end(), dims.begin(), dims.end());
    const values x = sample_values(static_cast<std::size_t>(numel(x_dims)), 15, -2.0, 3.0);
    const reference ref = [&](const values& xv, const std::vector<values>& ws) {
      const auto s = stats_of(xv, channels);
      return normalise(xv, s.mean, s.variance, &ws[0], &ws[1], eps);
    };
    auto r = run_ok(b, make_tensor(x, x_dims, dtype::f64), w, /*training=*/true);
    check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
    check_gradients(ref, x, w, r, b, 1e-6);

    // moving = moving * momentum + batch * (1 - momentum), with the biased batch variance.
    const auto s = stats_of(x, channels);
    REQUIRE(r.assigned.size() == 2);
    REQUIRE(r.assigned.count(2) == 1);
    REQUIRE(r.assigned.count(3) == 1);
    values want_mean(channels), want_variance(channels);
    for (std::size_t c = 0; c < channels; ++c) {
      want_mean[c] = w[2][c] * momentum + s.mean[c] * (1 - momentum);
      want_variance[c] = w[3][c] * momentum + s.variance[c] * (1 - momentum);
    }
    check_values(r.assigned[2], want_mean, 1e-12, "moving mean");
    check_values(r.assigned[3], want_variance, 1e-12, "moving variance");
  }
}

TEST_CASE("batch normalization uses the moving statistics for inference and moves nothing", "[layers][norm]") {
  const double eps = 1e-2;
  nn::batch_norm_options o;
  o.epsilon = eps;
  auto b = build(nn::batch_normalization(o), {3, 2});
  auto w = b.weights;
  w[0] = sample_values(2, 21, 0.5, 1.5);
  w[1] = sample_values(2, 22);
  w[2] = sample_values(2, 23);
  w[3] = positive_values(2, 24);
  const values x = sample_values(12, 25);
  const reference ref = [&](const values& xv, const std::vector<values>& ws) {
    return normalise(xv, ws[2], ws[3], &ws[0], &ws[1], eps);
  };
  auto r = run_ok(b, make_tensor(x, {2, 3, 2}, dtype::f64), w, /*training=*/false);
  check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
  check_gradients(ref, x, w, r, b, 1e-6);
  CHECK(r.assigned.empty());
  CHECK(r.grad_w[2].empty());  // non-trainable: no gradient asked for
}

TEST_CASE("batch normalization without center or scale has only the moving statistics", "[layers][norm]") {
  nn::batch_norm_options o;
  o.center = false;
  o.scale = false;
  o.momentum = 0.5;
  auto b = build(nn::batch_normalization(o), {4});
  REQUIRE(b.layer->weights().size() == 2);
  CHECK(b.layer->weights()[0].name.ends_with("/moving_mean"));
  CHECK(b.layer->weights()[1].name.ends_with("/moving_variance"));
  const values x = sample_values(12, 31);
  const reference ref = [&](const values& xv, const std::vector<values>&) {
    const auto s = stats_of(xv, 4);
    return normalise(xv, s.mean, s.variance, nullptr, nullptr, 1e-3);
  };
  auto r = run_ok(b, make_tensor(x, {3, 4}, dtype::f64), b.weights, /*training=*/true);
  check_values(r.y.to_vector<double>(), ref(x, b.weights), 1e-12, "output");
  check_gradients(ref, x, b.weights, r, b, 1e-6);
  const auto s = stats_of(x, 4);
  values want_mean(4), want_variance(4);
  for (std::size_t c = 0; c < 4; ++c) {
    want_mean[c] = 0.5 * s.mean[c];
    want_variance[c] = 0.5 + 0.5 * s.variance[c];
  }
  REQUIRE(r.assigned.size() == 2);
  check_values(r.assigned[0], want_mean, 1e-12, "moving mean");
  check_values(r.assigned[1], want_variance, 1e-12, "moving variance");
}

TEST_CASE("batch normalization in f32 agrees with the double reference", "[layers][norm]") {
  auto b = build(nn::batch_normalization(), {3, 3});
  auto w = b.weights;
  w[0] = sample_values(3, 41, 0.5, 1.5);
  w[1] = sample_values(3, 42);
  const values x = sample_values(18, 43, -2.0, 2.0);
  const tensor xt = make_tensor(x, {2, 3, 3}, dtype::f32);
  auto r = run_ok(b, xt, w, /*training=*/true, dtype::f32);
  auto r64 = run_ok(b, xt, w, /*training=*/true);
  CHECK(r.y.type() == dtype::f32);
  check_values(r.y.to_vector<double>(), r64.y.to_vector<double>(), 1e-5, "f32 output");
  check_values(r.grad_x, r64.grad_x, 1e-4, "f32 d/dx");
  check_values(r.grad_w[0], r64.grad_w[0], 1e-4, "f32 d/d gamma");
}

TEST_CASE("layer normalization normalises each sample over its last axis", "[layers][norm]") {
  const double eps = 1e-3;
  for (bool affine : {true, false}) {
    INFO("center and scale: " << affine);
    nn::layer_norm_options o;
    o.center = affine;
    o.scale = affine;
    o.name = affine ? "ln_affine" : "ln_plain";
    auto b = build(nn::layer_normalization(o), {3, 5});
    CHECK(b.layer->kind() == "LayerNormalization");
    REQUIRE(b.layer->weights().size() == (affine ? 2u : 0u));
    auto w = b.weights;
    if (affine) {
      CHECK(b.layer->weights()[0].name == "ln_affine/gamma");
      CHECK(b.layer->weights()[0].spec.dims == shape{5});
      CHECK(b.layer->weights()[1].name == "ln_affine/beta");
      CHECK(w[0] == values(5, 1.0));
      CHECK(w[1] == values(5, 0.0));
      w[0] = sample_values(5, 51, 0.5, 1.5);
      w[1] = sample_values(5, 52);
    }
    const values x = sample_values(30, 53, -2.0, 2.0);
    const reference ref = [&](const values& xv, const std::vector<values>& ws) {
      values y(xv.size());
      for (std::size_t row = 0; row < xv.size() / 5; ++row) {
        const values part(xv.begin() + static_cast<std::ptrdiff_t>(row * 5), xv.begin() + static_cast<std::ptrdiff_t>(row * 5 + 5));
        const auto s = stats_of(part, 1);  // one "channel": the whole row
        for (std::size_t j = 0; j < 5; ++j)
          y[row * 5 + j] = (part[j] - s.mean[0]) / std::sqrt(s.variance[0] + eps) * (affine ? ws[0][j] : 1.0) +
                           (affine ? ws[1][j] : 0.0);
      }
      return y;
    };
    for (bool training : {true, false}) {  // the same either way
      auto r = run_ok(b, make_tensor(x, {2, 3, 5}, dtype::f64), w, training);
      check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
      check_gradients(ref, x, w, r, b, 1e-6);
      CHECK(r.assigned.empty());
    }
  }
}

TEST_CASE("normalization layers reject inputs that do not fit, naming the layer", "[layers][norm]") {
  nn::batch_norm_options bo;
  bo.name = "bn_bad";
  auto e = apply_error(nn::batch_normalization(bo), {});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("BatchNormalization 'bn_bad'") != std::string::npos);
  e = apply_error(nn::batch_normalization(bo), {4}, dtype::i64);
  CHECK(e.code == errc::dtype_mismatch);
  CHECK(e.message.find("BatchNormalization 'bn_bad'") != std::string::npos);
  bo.momentum = 1.5;
  e = apply_error(nn::batch_normalization(bo), {4});
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("momentum") != std::string::npos);

  nn::layer_norm_options lo;
  lo.name = "ln_bad";
  e = apply_error(nn::layer_normalization(lo), {3}, dtype::i32);
  CHECK(e.code == errc::dtype_mismatch);
  CHECK(e.message.find("LayerNormalization 'ln_bad'") != std::string::npos);
  e = apply_error(nn::layer_normalization(lo), {});
  CHECK(e.code == errc::shape_mismatch);
}
