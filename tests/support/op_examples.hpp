#pragma once

// One or more example calls of every op (tests/ops/op_def_test.cpp fails for an op without one):
// input dtypes, shapes and value ranges, and attributes. The op-definition test runs each through
// kernel, inference, gradient and fusion; the graph codec test round-trips each. Adding an op adds
// its definition (ops/graph/defs/) and its line here.

#include <cmath>
#include <string>
#include <vector>

#include "../ops/graph_test_support.hpp"
#include "ops/elementwise.hpp"
#include "ops/graph/graph.hpp"

namespace af::testing {

struct input_spec {
  dtype type;
  shape dims;
  double low = -2.0, high = 2.0;  ///< values drawn from [low, high); integers from [low, high) too
};

struct op_example {
  std::string op;
  std::vector<input_spec> inputs;
  op_attrs attrs;
};

inline input_spec real(shape dims, double low = -2.0, double high = 2.0) { return {dtype::f64, std::move(dims), low, high}; }
inline input_spec indices(shape dims, int64_t bound) { return {dtype::i64, std::move(dims), 0, static_cast<double>(bound)}; }
inline input_spec flags(shape dims) { return {dtype::boolean, std::move(dims)}; }

using ints = std::vector<int64_t>;

// One or more calls per op, small enough for finite differences. Inputs are float64 where the op
// takes real numbers; the fusion check repeats them in float32.
inline std::vector<op_example> examples() {
  const op_attrs conv{{"padding", std::string{"same"}}, {"strides", ints{2, 2}}};
  auto with = [](op_attrs a, std::string name, attr_value v) { return a.set(std::move(name), std::move(v)), a; };
  std::vector<op_example> out = {
      {"neg", {real({2, 3})}, {}},
      {"abs", {real({2, 3})}, {}},
      {"relu", {real({2, 3})}, {}},
      {"exp", {real({2, 3})}, {}},
      {"log", {real({2, 3}, 0.3, 3.0)}, {}},
      {"sqrt", {real({2, 3}, 0.3, 3.0)}, {}},
      {"rsqrt", {real({2, 3}, 0.3, 3.0)}, {}},
      {"tanh", {real({2, 3})}, {}},
      {"sigmoid", {real({2, 3}, -6.0, 6.0)}, {}},
      {"erf", {real({2, 3})}, {}},
      {"softplus", {real({2, 3}, -30.0, 30.0)}, {}},
      {"gelu", {real({2, 3}, -3.0, 3.0)}, {}},
      {"gelu", {real({2, 3}, -3.0, 3.0)}, {{"approximate", int64_t{1}}}},
      {"add", {real({2, 3}), real({3})}, {}},
      {"sub", {real({2, 3}), real({2, 1})}, {}},
      {"mul", {real({2, 3}), real({1, 3})}, {}},
      {"div", {real({2, 3}), real({2, 3}, 0.5, 2.0)}, {}},
      {"pow", {real({2, 3}, 0.5, 2.0), real({2, 3}, 0.5, 2.0)}, {}},
      {"maximum", {real({2, 3}), real({2, 3})}, {}},
      {"minimum", {real({2, 3}), real({3})}, {}},
      {"equal", {real({2, 3}), real({2, 3})}, {}},
      {"not_equal", {real({2, 3}), real({2, 3})}, {}},
      {"less", {real({2, 3}), real({3})}, {}},
      {"less_equal", {real({2, 3}), real({2, 3})}, {}},
      {"greater", {real({2, 3}), real({2, 3})}, {}},
      {"greater_equal", {real({2, 3}), real({2, 3})}, {}},
      {"where", {flags({2, 3}), real({2, 3}), real({2, 3})}, {}},
      {"cast", {real({2, 3})}, {{"dtype", std::string{"f64"}}}},
      {"cast", {real({2, 3})}, {{"dtype", std::string{"f32"}}}},
      {"reduce_sum", {real({2, 3, 4})}, {{"axes", ints{1}}}},
      {"reduce_sum", {real({2, 3})}, {{"keepdims", int64_t{1}}}},
      {"reduce_mean", {real({2, 3, 4})}, {{"axes", ints{0, 2}}}},
      {"reduce_max", {real({2, 3, 4})}, {{"axes", ints{2}}, {"keepdims", int64_t{1}}}},
      {"reduce_min", {real({2, 3, 4})}, {{"axes", ints{1}}}},
      {"reduce_logsumexp", {real({2, 3, 4})}, {{"axes", ints{2}}}},
      {"argmax", {real({2, 3, 4})}, {{"axis", int64_t{1}}}},
      {"argmin", {real({2, 3, 4})}, {{"axis", int64_t{2}}}},
      {"softmax", {real({2, 5})}, {}},
      {"log_softmax", {real({2, 5})}, {{"axis", int64_t{0}}}},
      {"reshape", {real({2, 3})}, {{"shape", ints{3, -1}}}},
      {"broadcast_to", {real({1, 3})}, {{"shape", ints{2, 3}}}},
      {"copy", {real({2, 3})}, {}},
      {"transpose", {real({2, 3, 4})}, {{"perm", ints{2, 0, 1}}}},
      {"slice", {real({4, 3})}, {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"stop", int64_t{4}}, {"step", int64_t{2}}}},
      {"concat", {real({2, 3}), real({1, 3})}, {{"axis", int64_t{0}}}},
      {"stack", {real({2, 3}), real({2, 3})}, {{"axis", int64_t{1}}}},
      {"gather", {real({4, 3}), indices({5}, 4)}, {}},
      {"one_hot", {indices({3}, 4)}, {{"depth", int64_t{4}}}},
      {"slice_backprop",
       {real({2, 3})},
       {{"input_shape", ints{4, 3}}, {"axis", int64_t{0}}, {"start", int64_t{1}}, {"stop", int64_t{4}}, {"step", int64_t{2}}}},
      {"gather_backprop", {real({5, 3}), indices({5}, 4)}, {{"params_shape", ints{4, 3}}}},
      {"matmul", {real({2, 3}), real({3, 4})}, {}},
      {"matmul", {real({2, 3, 2}), real({4, 3})}, {{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}}},
      {"conv2d", {real({1, 5, 5, 2}), real({3, 3, 2, 3})}, conv},
      {"conv2d_backprop_input", {real({1, 3, 3, 3}), real({3, 3, 2, 3})}, with(conv, "input_shape", ints{1, 5, 5, 2})},
      {"conv2d_backprop_filter", {real({1, 5, 5, 2}), real({1, 3, 3, 3})}, with(conv, "filter_shape", ints{3, 3, 2, 3})},
      {"max_pool2d", {real({1, 4, 4, 2})}, {}},
      {"avg_pool2d", {real({1, 5, 5, 2})}, {{"padding", std::string{"same"}}}},
      {"max_pool2d_backprop", {real({1, 4, 4, 2}), real({1, 2, 2, 2})}, {}},
      {"avg_pool2d_backprop", {real({1, 2, 2, 2})}, {{"input_shape", ints{1, 4, 4, 2}}}},
      {"random_uniform", {}, {{"shape", ints{2, 3}}, {"seed", int64_t{7}}, {"dtype", std::string{"f64"}}}},
      {"random_normal", {}, {{"shape", ints{2, 3}}, {"seed", int64_t{7}}}},
      {"stateless_random_uniform", {indices({}, 1000)}, {{"shape", ints{2, 3}}, {"salt", int64_t{3}}}},
  };
  return out;
}

inline tensor make_input(const input_spec& s, dtype as, uint64_t seed) {
  if (s.type == dtype::f64) return value_of(cast(random_tensor(s.dims, seed, dtype::f64, s.low, s.high), as));
  auto draws = random_tensor(s.dims, seed, dtype::f64, s.low, s.high).to_vector<double>();
  if (s.type == dtype::boolean) {
    std::vector<uint8_t> bits;
    for (double d : draws) bits.push_back(d > 0 ? 1 : 0);
    return value_of(cast(tensor::from_vector(bits, s.dims), dtype::boolean));
  }
  std::vector<int64_t> values;
  for (double d : draws) values.push_back(static_cast<int64_t>(std::floor(d)));
  return value_of(cast(tensor::from_vector(values, s.dims), s.type));
}

inline std::vector<tensor> make_inputs(const op_example& ex, dtype real_type, uint64_t seed) {
  std::vector<tensor> in;
  for (const auto& s : ex.inputs) in.push_back(make_input(s, real_type, seed++));
  return in;
}

}  // namespace af::testing
