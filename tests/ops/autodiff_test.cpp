// Reverse-mode gradients on graphs against central finite differences in float64, for every op
// with a gradient rule; and a whole training step (forward, backward, update) as one graph.

#include <catch2/catch.hpp>

#include <cmath>

#include "graph_test_support.hpp"
#include "ops/array_ops.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime/function.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/runtime/tape.hpp"
#include "ops/linalg.hpp"
#include "ops/passes/passes.hpp"

using namespace af;
using syms = std::vector<sym>;

namespace {

struct grad_case {
  const char* name;
  std::function<sym(const syms&)> f;
  std::vector<shape> shapes;
  double low = -2.0, high = 2.0;
};

// A loss whose derivative differs per element, so a wrong rule cannot hide behind symmetry.
sym loss_of(const sym& out) { return reduce_sum(out * out) * 0.5 + reduce_sum(out * 0.3); }

void check_gradient(const grad_case& c, uint64_t seed) {
  INFO(c.name);
  std::vector<tensor> args;
  for (const auto& s : c.shapes) args.push_back(random_tensor(s, seed++, dtype::f64, c.low, c.high));
  function loss{[&](const syms& in) { return syms{loss_of(c.f(in))}; }};
  function with_grads{[&](const syms& in) {
    auto l = loss_of(c.f(in));
    auto g = gradients(l, in);
    g.insert(g.begin(), l);
    return g;
  }};
  auto analytic = with_grads(args);
  if (!analytic) FAIL(analytic.error_value().to_string());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const tensor numeric =
        numeric_gradient([&](const std::vector<tensor>& at) { return loss(at).value().front().item<double>(); }, args, i);
    check_close((*analytic)[i + 1], numeric, 1e-5, 1e-6, "gradient of argument " + std::to_string(i));
  }
}

std::vector<grad_case> cases() {
  return {
      {"add (broadcast)", [](const syms& x) { return x[0] + x[1]; }, {{2, 3}, {3}}},
      {"sub (broadcast)", [](const syms& x) { return x[0] - x[1]; }, {{2, 3}, {2, 1}}},
      {"mul (broadcast)", [](const syms& x) { return x[0] * x[1]; }, {{2, 3}, {1, 3}}},
      {"div", [](const syms& x) { return x[0] / x[1]; }, {{2, 3}, {2, 3}}, 0.5, 2.0},
      {"pow", [](const syms& x) { return pow(x[0], x[1]); }, {{5}, {5}}, 0.5, 2.0},
      {"maximum", [](const syms& x) { return maximum(x[0], x[1]); }, {{6}, {6}}},
      {"minimum", [](const syms& x) { return minimum(x[0], x[1]); }, {{6}, {6}}},
      {"neg", [](const syms& x) { return -x[0]; }, {{4}}},
      {"abs", [](const syms& x) { return abs(x[0]); }, {{6}}},
      {"relu", [](const syms& x) { return relu(x[0]); }, {{6}}},
      {"exp", [](const syms& x) { return exp(x[0]); }, {{5}}},
      {"log", [](const syms& x) { return log(x[0]); }, {{5}}, 0.3, 3.0},
      {"sqrt", [](const syms& x) { return sqrt(x[0]); }, {{5}}, 0.3, 3.0},
      {"rsqrt", [](const syms& x) { return rsqrt(x[0]); }, {{5}}, 0.3, 3.0},
      {"tanh", [](const syms& x) { return tanh(x[0]); }, {{5}}},
      {"sigmoid", [](const syms& x) { return sigmoid(x[0]); }, {{5}}},
      {"erf", [](const syms& x) { return erf(x[0]); }, {{5}}},
      {"gelu", [](const syms& x) { return gelu(x[0]); }, {{7}}, -3.0, 3.0},
      {"gelu (tanh approximation)", [](const syms& x) { return gelu(x[0], true); }, {{7}}, -3.0, 3.0},
      {"where", [](const syms& x) { return where(greater(x[0], x[1]), x[0] * 2.0, x[1] * x[1]); }, {{6}, {6}}},
      {"cast", [](const syms& x) { return cast(x[0] * x[0], dtype::f64); }, {{4}}},
      {"reduce_sum", [](const syms& x) { return reduce_sum(x[0], {1}); }, {{2, 3, 2}}},
      {"reduce_mean", [](const syms& x) { return reduce_mean(x[0], {0, 2}, true); }, {{2, 3, 2}}},
      {"reduce_max", [](const syms& x) { return reduce_max(x[0], {-1}); }, {{3, 4}}},
      {"reduce_min", [](const syms& x) { return apply("reduce_min", {x[0]}, {{"axes", std::vector<int64_t>{0}}}); }, {{3, 4}}},
      {"reduce_logsumexp",
       [](const syms& x) { return apply("reduce_logsumexp", {x[0]}, {{"axes", std::vector<int64_t>{1}}}); }, {{3, 4}}},
      {"softmax", [](const syms& x) { return softmax(x[0]); }, {{2, 5}}},
      {"log_softmax", [](const syms& x) { return log_softmax(x[0], 0); }, {{3, 4}}},
      {"reshape", [](const syms& x) { return reshape(x[0], {3, 2}) * x[1]; }, {{2, 3}, {3, 2}}},
      {"transpose", [](const syms& x) { return transpose(x[0], {2, 0, 1}) * x[1]; }, {{2, 3, 4}, {4, 2, 3}}},
      {"broadcast_to", [](const syms& x) { return broadcast_to(x[0], {4, 3}) * x[1]; }, {{3}, {4, 3}}},
      {"matmul", [](const syms& x) { return matmul(x[0], x[1]); }, {{3, 4}, {4, 2}}},
      {"matmul transpose_a", [](const syms& x) { return matmul(x[0], x[1], true, false); }, {{4, 3}, {4, 2}}},
      {"matmul transpose_b", [](const syms& x) { return matmul(x[0], x[1], false, true); }, {{3, 4}, {2, 4}}},
      {"matmul both transposed", [](const syms& x) { return matmul(x[0], x[1], true, true); }, {{4, 3}, {2, 4}}},
      {"batched matmul broadcasting", [](const syms& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 2}}},
      {"conv2d", [](const syms& x) { return conv2d(x[0], x[1]); }, {{2, 5, 5, 2}, {3, 3, 2, 3}}},
      {"conv2d same, stride 2",
       [](const syms& x) { return conv2d(x[0], x[1], {.strides = {2, 2}, .padding = padding_mode::same}); },
       {{1, 5, 6, 2}, {3, 2, 2, 2}}},
      {"conv2d dilated, 2 groups",
       [](const syms& x) { return conv2d(x[0], x[1], {.dilations = {2, 1}, .groups = 2}); },
       {{1, 6, 4, 4}, {2, 2, 2, 4}}},
      {"max_pool2d", [](const syms& x) { return max_pool2d(x[0]); }, {{2, 4, 4, 3}}},
      {"avg_pool2d same", [](const syms& x) { return avg_pool2d(x[0], {.ksize = {3, 3}, .strides = {2, 2}, .padding = padding_mode::same}); },
       {{1, 5, 5, 2}}},
      {"slice", [](const syms& x) { return slice(x[0], 1, 1, 4) * slice(x[0], 1, 0, 6, 2); }, {{2, 6}}},
      {"concat", [](const syms& x) { return concat({x[0], x[1] * x[1]}, 1); }, {{2, 3}, {2, 2}}},
      {"stack", [](const syms& x) { return stack({x[0], exp(x[1])}, 0); }, {{2, 3}, {2, 3}}},
      {"gather (repeated rows add up)",
       [](const syms& x) { return gather(x[0], constant(x[0], tensor::from_vector<int64_t>({2, 0, 2, 1}, {2, 2})), 0); },
       {{3, 4}}},
      {"gather along axis 1",
       [](const syms& x) { return gather(x[0], constant(x[0], tensor::from_vector<int32_t>({1, 1, 0})), 1) * 2.0; },
       {{2, 3}}},
      {"a value used twice", [](const syms& x) { return tanh(x[0]) * x[0] + exp(x[0] * x[1]); }, {{4}, {4}}},
  };
}

}  // namespace

TEST_CASE("every gradient rule matches central finite differences in float64", "[graph][autodiff]") {
  uint64_t seed = 100;
  for (const auto& c : cases()) {
    check_gradient(c, seed);
    seed += 10;
  }
}

TEST_CASE("an input the value does not depend on gets zeros", "[graph][autodiff]") {
  function fn{[](const syms& in) { return gradients(reduce_sum(exp(in[0])), {in[0], in[1]}); }};
  auto g = fn({random_tensor({3}, 1, dtype::f64), random_tensor({2, 2}, 2, dtype::f64)});
  REQUIRE(g);
  check_close((*g)[1], value_of(tensor::zeros({2, 2}, dtype::f64)), 0, 0);
}

TEST_CASE("an op without a gradient rule fails the trace naming it", "[graph][autodiff]") {
  // A gradient of a gradient through a convolution needs rules for the backprop ops: not there yet.
  function fn{[](const syms& in) {
    auto y = conv2d(in[0], in[1]);
    auto gx = gradients(reduce_sum(y * y), {in[0]})[0];
    return gradients(reduce_sum(gx), {in[1]});
  }};
  auto failed = fn({random_tensor({1, 4, 4, 1}, 1, dtype::f64), random_tensor({2, 2, 1, 1}, 2, dtype::f64)});
  REQUIRE_FALSE(failed);
  CHECK(failed.error_value().code == errc::unsupported);
  CHECK_THAT(failed.error_value().message, Catch::Contains("conv2d_backprop") && Catch::Contains("autodiff_test.cpp"));
}

TEST_CASE("a traced training step holds forward, backward and the update, and learns", "[graph][autodiff]") {
  // Two-layer MLP on a fixed regression batch; one graph returns the loss and updated weights.
  function step{[](const syms& in) {
    const auto &x = in[0], &target = in[1], &w1 = in[2], &b1 = in[3], &w2 = in[4];
    auto h = gelu(matmul(x, w1) + b1);
    auto err = matmul(h, w2) - target;
    auto loss = reduce_mean(err * err);
    auto g = gradients(loss, {w1, b1, w2});
    const double lr = 0.05;
    return syms{loss, w1 - g[0] * lr, b1 - g[1] * lr, w2 - g[2] * lr};
  }};
  const auto x = random_tensor({16, 4}, 1), target = random_tensor({16, 1}, 2, dtype::f32, -1, 1);
  std::vector<tensor> params{random_tensor({4, 8}, 3, dtype::f32, -0.5, 0.5), value_of(tensor::zeros({8}, dtype::f32)),
                             random_tensor({8, 1}, 4, dtype::f32, -0.5, 0.5)};
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    auto out = step({x, target, params[0], params[1], params[2]});
    if (!out) FAIL(out.error_value().to_string());
    const double loss = (*out)[0].item<double>();
    if (i == 0) first = loss;
    last = loss;
    params = {(*out)[1], (*out)[2], (*out)[3]};
  }
  CHECK(step.trace_count() == 1);
  CHECK(last < 0.7 * first);
  auto concrete = step.concrete({{dtype::f32, {16, 4}}, {dtype::f32, {16, 1}}, {dtype::f32, {4, 8}}, {dtype::f32, {8}},
                                 {dtype::f32, {8, 1}}});
  REQUIRE(concrete);
  CHECK((*concrete)->optimized.count("fused") >= 2);  // the backward pass's elementwise chains fuse too
}

TEST_CASE("the eager tape computes each value as it is written and its gradients agree with traced ones",
          "[graph][autodiff][eager]") {
  const auto w0 = random_tensor({4, 3}, 1, dtype::f64), x0 = random_tensor({5, 4}, 2, dtype::f64);
  gradient_tape tape;
  const sym w = tape.watch(w0, "w");
  const sym x = tape.constant(x0);
  const sym h = matmul(x, w);
  // Eager: the value is there before anything else is written.
  check_close(tape.value(h), value_of(af::matmul(x0, w0)), 1e-12, 0);
  const sym loss = reduce_mean(gelu(h) * h);
  auto eager_grads = tape.gradient(loss, {w});
  REQUIRE(eager_grads);

  function traced{[](const syms& in) {
    auto l = reduce_mean(gelu(matmul(in[1], in[0])) * matmul(in[1], in[0]));
    return syms{l, gradients(l, {in[0]})[0]};
  }};
  auto want = traced({w0, x0});
  REQUIRE(want);
  check_close(tape.value(loss), (*want)[0], 1e-12, 1e-14);
  check_close(eager_grads->front(), (*want)[1], 1e-10, 1e-12);
  CHECK(graph::eliminate_dead_code(tape.recorded({loss})).count("matmul") == 1);  // the backward ones are dead here

  // A shape that does not fit fails on the line that wrote it.
  CHECK_THROWS_AS(matmul(w, w), trace_error);
}

TEST_CASE("traced indexing ops equal their eager kernels", "[graph][autodiff]") {
  const auto table = random_tensor({5, 3}, 1, dtype::f64);
  const auto ids = tensor::from_vector<int64_t>({4, 0, 4}, {3});
  function fn{[](const syms& in) {
    auto picked = gather(in[0], in[1]);
    auto labels = one_hot(in[1], 5, dtype::f64);
    return syms{concat({picked, labels}, 1), stack({picked, picked * 2.0}, 0), slice(in[0], 0, -2, 5)};
  }};
  auto got = fn({table, ids});
  if (!got) FAIL(got.error_value().to_string());
  const auto picked = value_of(af::gather(table, ids));
  check_close((*got)[0], value_of(af::concat({picked, value_of(af::one_hot(ids, 5, 1, 0, dtype::f64))}, 1)), 0, 0);
  check_close((*got)[1], value_of(af::stack({picked, value_of(af::mul(picked, value_of(tensor::full({}, 2.0, dtype::f64))))}, 0)), 0, 0);
  check_close((*got)[2], value_of(value_of(table.slice(0, -2, 5)).contiguous()), 0, 0);
}

TEST_CASE("gradients of gradients come from the same rules", "[graph][autodiff]") {
  // d/dx of sum(d tanh / dx) = -2 tanh (1 - tanh^2); d2/dx2 of sum(x^3 + x w) = 6x.
  function second{[](const syms& in) {
    auto x = in[0];
    auto g = gradients(reduce_sum(tanh(x)), {x})[0];
    auto h = gradients(reduce_sum(g), {x})[0];
    auto cubic = gradients(reduce_sum(x * x * x + matmul(reshape(x, {1, 4}), in[1])), {x})[0];
    return syms{h, gradients(reduce_sum(cubic), {x})[0]};
  }};
  const auto x = random_tensor({4}, 1, dtype::f64), w = random_tensor({4, 1}, 2, dtype::f64);
  auto got = second({x, w});
  if (!got) FAIL(got.error_value().to_string());
  const auto xs = x.to_vector<double>();
  const auto h = (*got)[0].to_vector<double>(), six_x = (*got)[1].to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double t = std::tanh(xs[i]);
    CHECK(h[i] == Approx(-2 * t * (1 - t * t)).epsilon(1e-12));
    CHECK(six_x[i] == Approx(6 * xs[i]).epsilon(1e-12));
  }
}
