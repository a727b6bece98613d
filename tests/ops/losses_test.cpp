// Training losses: values against formulas computed here in double, gradients against their closed
// forms or central differences, and shape errors that name the loss and the call site.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "graph_test_support.hpp"
#include "ops/runtime/function.hpp"
#include "ops/train/losses.hpp"

using namespace af;
using syms = std::vector<sym>;

namespace {

tensor f64(std::vector<double> v, shape dims) { return tensor::from_vector<double>(v, dims); }

// The loss and d loss / d predictions for `loss(targets, predictions)` run as one traced graph.
std::pair<double, std::vector<double>> loss_and_gradient(const std::function<sym(const sym&, const sym&)>& loss,
                                                         const tensor& targets, const tensor& predictions) {
  function fn{[&](const syms& in) {
    auto l = loss(in[0], in[1]);
    return syms{l, gradients(l, {in[1]})[0]};
  }};
  auto out = fn({targets, predictions});
  if (!out) FAIL(out.error_value().to_string());
  return {out->at(0).to_vector<double>().at(0), out->at(1).to_vector<double>()};
}

// Central differences of the loss in each prediction.
std::vector<double> numeric_gradient(const std::function<sym(const sym&, const sym&)>& loss, const tensor& targets,
                                     const std::vector<double>& p, const shape& dims) {
  std::vector<double> g(p.size());
  const double h = 1e-6;
  for (std::size_t i = 0; i < p.size(); ++i) {
    auto up = p, down = p;
    up[i] += h;
    down[i] -= h;
    g[i] = (loss_and_gradient(loss, targets, f64(up, dims)).first - loss_and_gradient(loss, targets, f64(down, dims)).first) /
           (2 * h);
  }
  return g;
}

void check_vector(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}

double sigmoid_of(double z) { return 1 / (1 + std::exp(-z)); }

}  // namespace

TEST_CASE("sparse categorical cross-entropy is the mean -log softmax of the labelled class", "[train][losses]") {
  const std::vector<double> z = {2.0, -1.0, 0.5, 0.1, 0.2, 3.0, -2.0, 0.0, 1.0};  // 3 samples, 3 classes
  const std::vector<int64_t> labels = {0, 2, 1};
  auto loss = [](const sym& y, const sym& logits) { return losses::sparse_categorical_crossentropy(y, logits); };
  auto [value, grad] = loss_and_gradient(loss, tensor::from_vector<int64_t>(labels), f64(z, {3, 3}));
  double want = 0;
  std::vector<double> want_grad(9);
  for (int n = 0; n < 3; ++n) {
    double denom = 0;
    for (int c = 0; c < 3; ++c) denom += std::exp(z[n * 3 + c]);
    want -= (z[n * 3 + labels[n]] - std::log(denom)) / 3;
    for (int c = 0; c < 3; ++c) want_grad[n * 3 + c] = (std::exp(z[n * 3 + c]) / denom - (c == labels[n])) / 3;
  }
  CHECK(value == Approx(want).epsilon(1e-12));
  check_vector(grad, want_grad, 1e-12);
}

TEST_CASE("categorical cross-entropy takes soft targets and label smoothing", "[train][losses]") {
  const std::vector<double> z = {2.0, -1.0, 0.5, 0.1, 0.2, 3.0};
  const std::vector<double> t = {0.0, 1.0, 0.0, 0.25, 0.25, 0.5};
  for (double smoothing : {0.0, 0.1}) {
    INFO("label_smoothing " << smoothing);
    auto loss = [smoothing](const sym& y, const sym& logits) {
      return losses::categorical_crossentropy(y, logits, smoothing);
    };
    auto [value, grad] = loss_and_gradient(loss, f64(t, {2, 3}), f64(z, {2, 3}));
    double want = 0;
    std::vector<double> want_grad(6);
    for (int n = 0; n < 2; ++n) {
      double denom = 0;
      for (int c = 0; c < 3; ++c) denom += std::exp(z[n * 3 + c]);
      for (int c = 0; c < 3; ++c) {
        const double target = t[n * 3 + c] * (1 - smoothing) + smoothing / 3;
        want -= target * (z[n * 3 + c] - std::log(denom)) / 2;
        want_grad[n * 3 + c] = (std::exp(z[n * 3 + c]) / denom - target) / 2;  // targets sum to 1
      }
    }
    CHECK(value == Approx(want).epsilon(1e-12));
    check_vector(grad, want_grad, 1e-12);
  }
}

TEST_CASE("binary cross-entropy from logits stays finite for large logits", "[train][losses]") {
  const std::vector<double> z = {3.0, -2.0, 0.0, 800.0, -800.0, 0.7};
  const std::vector<double> t = {1.0, 0.0, 1.0, 0.0, 0.0, 0.3};
  auto loss = [](const sym& y, const sym& logits) { return losses::binary_crossentropy(y, logits); };
  auto [value, grad] = loss_and_gradient(loss, f64(t, {2, 3}), f64(z, {2, 3}));
  double want = 0;
  std::vector<double> want_grad(6);
  for (std::size_t i = 0; i < z.size(); ++i) {
    // -[t log s(z) + (1 - t) log(1 - s(z))], written without overflow for |z| = 800
    want += (std::max(z[i], 0.0) - z[i] * t[i] + std::log1p(std::exp(-std::fabs(z[i])))) / 6;
    want_grad[i] = (sigmoid_of(z[i]) - t[i]) / 6;
  }
  CHECK(std::isfinite(value));
  CHECK(value == Approx(want).epsilon(1e-12));
  check_vector(grad, want_grad, 1e-9);
}

TEST_CASE("binary focal cross-entropy down-weights easy examples", "[train][losses]") {
  const std::vector<double> z = {3.0, -2.0, 0.0, 0.5};
  const std::vector<double> t = {1.0, 0.0, 1.0, 0.0};
  auto loss = [](const sym& y, const sym& logits) { return losses::binary_focal_crossentropy(y, logits, 2.0, 0.25); };
  auto [value, grad] = loss_and_gradient(loss, f64(t, {4}), f64(z, {4}));
  double want = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double p = sigmoid_of(z[i]);
    const double p_t = t[i] * p + (1 - t[i]) * (1 - p);
    const double alpha_t = t[i] * 0.25 + (1 - t[i]) * 0.75;
    want += alpha_t * std::pow(1 - p_t, 2.0) * -std::log(p_t) / 4;
  }
  CHECK(value == Approx(want).epsilon(1e-12));
  check_vector(grad, numeric_gradient(loss, f64(t, {4}), z, {4}), 1e-6);
  // gamma 0 and alpha 0.5 give half the plain binary cross-entropy.
  auto plain = [](const sym& y, const sym& logits) { return losses::binary_focal_crossentropy(y, logits, 0.0, 0.5) * 2.0; };
  auto bce = [](const sym& y, const sym& logits) { return losses::binary_crossentropy(y, logits); };
  CHECK(loss_and_gradient(plain, f64(t, {4}), f64(z, {4})).first ==
        Approx(loss_and_gradient(bce, f64(t, {4}), f64(z, {4})).first).epsilon(1e-12));
}

TEST_CASE("mean squared, mean absolute and Huber errors and their gradients", "[train][losses]") {
  const std::vector<double> p = {0.5, -1.5, 2.0, 4.0, -0.2, 0.0};
  const std::vector<double> t = {0.0, 1.0, 2.5, 0.0, -0.3, 1.0};
  const tensor targets = f64(t, {3, 2});
  auto mse = [](const sym& y, const sym& x) { return losses::mean_squared_error(y, x); };
  auto mae = [](const sym& y, const sym& x) { return losses::mean_absolute_error(y, x); };
  auto huber = [](const sym& y, const sym& x) { return losses::huber(y, x, 1.0); };
  double want_mse = 0, want_mae = 0, want_huber = 0;
  std::vector<double> g_mse(6), g_mae(6), g_huber(6);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] - t[i];
    want_mse += e * e / 6;
    want_mae += std::fabs(e) / 6;
    want_huber += (std::fabs(e) <= 1 ? 0.5 * e * e : std::fabs(e) - 0.5) / 6;
    g_mse[i] = 2 * e / 6;
    g_mae[i] = (e > 0 ? 1.0 : -1.0) / 6;
    g_huber[i] = (std::fabs(e) <= 1 ? e : (e > 0 ? 1.0 : -1.0)) / 6;
  }
  auto [v1, d1] = loss_and_gradient(mse, targets, f64(p, {3, 2}));
  CHECK(v1 == Approx(want_mse).epsilon(1e-12));
  check_vector(d1, g_mse, 1e-12);
  auto [v2, d2] = loss_and_gradient(mae, targets, f64(p, {3, 2}));
  CHECK(v2 == Approx(want_mae).epsilon(1e-12));
  check_vector(d2, g_mae, 1e-12);
  auto [v3, d3] = loss_and_gradient(huber, targets, f64(p, {3, 2}));
  CHECK(v3 == Approx(want_huber).epsilon(1e-12));
  check_vector(d3, g_huber, 1e-12);
}

TEST_CASE("a loss given mismatched shapes or types fails the trace naming itself and the call", "[train][losses]") {
  auto trace_fails = [](const function::body& body, const std::vector<tensor>& args, const std::string& expect) {
    function fn{body};
    auto out = fn(args);
    REQUIRE_FALSE(out);
    INFO(out.error_value().message);
    CHECK(out.error_value().message.find(expect) != std::string::npos);
    CHECK(out.error_value().message.find("losses_test.cpp:") != std::string::npos);
  };
  const tensor column = f64({1, 2, 3}, {3, 1}), row = f64({1, 2, 3}, {3});
  trace_fails([](const syms& in) { return syms{losses::mean_squared_error(in[0], in[1])}; }, {row, column},
              "mean_squared_error: targets f64[3] and predictions f64[3,1] differ in shape");
  trace_fails([](const syms& in) { return syms{losses::sparse_categorical_crossentropy(in[0], in[1])}; },
              {row, f64({1, 2, 3, 4, 5, 6}, {3, 2})}, "labels must be integer class ids");
  trace_fails([](const syms& in) { return syms{losses::sparse_categorical_crossentropy(in[0], in[1])}; },
              {tensor::from_vector<int32_t>({0, 1}), f64({1, 2, 3, 4, 5, 6}, {3, 2})}, "differ in batch size");
  trace_fails([](const syms& in) { return syms{losses::huber(in[0], in[1], -1.0)}; }, {row, row}, "delta must be > 0");
}
