#pragma once

// Helpers for the graph, tracing and fusion tests: random inputs and closeness checks.

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <cmath>
#include <string>
#include <vector>

#include "ops/graph/fused_program.hpp"
#include "ops/graph/graph.hpp"
#include "ops/random.hpp"
#include "ops/tensor.hpp"

inline af::tensor random_tensor(const af::shape& dims, uint64_t seed, af::dtype type = af::dtype::f32,
                                double low = -2.0, double high = 2.0) {
  auto t = af::random_uniform(dims, seed, type, low, high);
  REQUIRE(t);
  return *t;
}

inline af::tensor value_of(const af::expected<af::tensor>& t) {
  if (!t) FAIL(t.error_value().to_string());
  return *t;
}

/// Same shape and dtype, and |a - b| <= atol + rtol * |b| everywhere (NaN only where both are).
inline void check_close(const af::tensor& a, const af::tensor& b, double rtol, double atol, const std::string& what = {}) {
  INFO(what);
  REQUIRE(a.type() == b.type());
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    const double excess = std::fabs(x[i] - y[i]) - (atol + rtol * std::fabs(y[i]));
    if (excess > worst || std::isnan(excess)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_at = i;
    }
  }
  INFO("worst at " << worst_at << ": " << (x.empty() ? 0 : x[worst_at]) << " vs " << (y.empty() ? 0 : y[worst_at]));
  CHECK(worst <= 0);
}

/// d loss / d inputs[i] by central differences (float64 inputs): what an analytic gradient is
/// checked against.
inline af::tensor numeric_gradient(const std::function<double(const std::vector<af::tensor>&)>& loss,
                                   const std::vector<af::tensor>& inputs, std::size_t i, double h = 1e-6) {
  auto numeric = value_of(inputs[i].clone());
  for (int64_t j = 0; j < inputs[i].numel(); ++j) {
    auto probe = [&](double delta) {
      std::vector<af::tensor> moved = inputs;
      moved[i] = value_of(inputs[i].clone());
      moved[i].data<double>()[j] += delta;
      return loss(moved);
    };
    numeric.data<double>()[j] = (probe(h) - probe(-h)) / (2 * h);
  }
  return numeric;
}

/// A graph the verifier must refuse: node 1 is a fused exp over f32[4] that declares f32[5].
inline af::graph::graph graph_with_inconsistent_fused_node() {
  using namespace af::graph;
  graph_builder b;
  const auto x = b.parameter({af::dtype::f32, {4}});
  auto program = std::make_shared<fused_program>();
  program->inputs = {value_type{af::dtype::f32, {4}}};
  program->steps = {fused_step{"exp", {0}, {}, value_type{af::dtype::f32, {4}}}};
  const auto fused = b.add_fused({x}, program, value_type{af::dtype::f32, {5}});  // wrong shape
  return std::move(b).finish({fused});
}
