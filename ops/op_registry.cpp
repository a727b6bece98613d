#include "ops/op_registry.hpp"

#include <array>
#include <exception>
#include <tuple>
#include <type_traits>

#include "ops/array_ops.hpp"
#include "ops/elementwise.hpp"
#include "ops/linalg.hpp"
#include "ops/nn.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"

namespace af {

// -- attributes ---------------------------------------------------------------------------------

op_attrs::op_attrs(std::initializer_list<entry> init) {
  for (const auto& e : init) set(e.first, e.second);
}

op_attrs& op_attrs::set(std::string name, attr_value value) {
  for (auto& e : entries_)
    if (e.first == name) {
      e.second = std::move(value);
      return *this;
    }
  entries_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const attr_value* op_attrs::find(std::string_view name) const noexcept {
  for (const auto& e : entries_)
    if (e.first == name) return &e.second;
  return nullptr;
}

namespace {

template <class T>
expected<T> get_as(const op_attrs& attrs, std::string_view name, std::optional<T> fallback,
                   const char* kind) {
  const attr_value* v = attrs.find(name);
  if (!v) {
    if (fallback) return std::move(*fallback);
    return make_error(errc::invalid_argument, "missing attribute '" + std::string{name} + "'");
  }
  if (const T* x = std::get_if<T>(v)) return *x;
  if constexpr (std::is_same_v<T, double>)
    if (const int64_t* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return make_error(errc::invalid_argument,
                    "attribute '" + std::string{name} + "' is not " + kind);
}

}  // namespace

expected<int64_t> op_attrs::get_int(std::string_view name, std::optional<int64_t> fallback) const {
  return get_as<int64_t>(*this, name, fallback, "an integer");
}
expected<double> op_attrs::get_float(std::string_view name, std::optional<double> fallback) const {
  return get_as<double>(*this, name, fallback, "a number");
}
expected<std::vector<int64_t>> op_attrs::get_ints(std::string_view name,
                                                  std::optional<std::vector<int64_t>> fallback) const {
  return get_as<std::vector<int64_t>>(*this, name, std::move(fallback), "a list of integers");
}
expected<std::string> op_attrs::get_string(std::string_view name,
                                           std::optional<std::string> fallback) const {
  return get_as<std::string>(*this, name, std::move(fallback), "a string");
}

// -- registry -----------------------------------------------------------------------------------

void op_registry::add(std::string name, op_fn fn) { ops_[std::move(name)] = std::move(fn); }

bool op_registry::contains(std::string_view name) const { return ops_.find(name) != ops_.end(); }

std::vector<std::string> op_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, fn] : ops_) out.push_back(name);
  return out;
}

expected<std::vector<tensor>> op_registry::run(std::string_view name,
                                               const std::vector<tensor>& inputs,
                                               const op_attrs& attrs) const {
  auto it = ops_.find(name);
  if (it == ops_.end())
    return make_error(errc::invalid_argument, "unknown op '" + std::string{name} + "'");
  expected<std::vector<tensor>> result = std::vector<tensor>{};
  try {
    result = it->second(inputs, attrs);
  } catch (const std::exception& ex) {
    result = make_error(errc::invalid_argument, std::string{"threw: "} + ex.what());
  } catch (...) {
    result = make_error(errc::invalid_argument, "threw a non-standard exception");
  }
  if (result) return result;
  // Kernels usually name themselves already ("matmul: ..."); make sure every error does.
  error err = std::move(result).error_value();
  if (err.message.find(name) == std::string::npos) err.message = std::string{name} + ": " + err.message;
  return err;
}

expected<void> expect_inputs(std::string_view op, const std::vector<tensor>& inputs, std::size_t n) {
  if (inputs.size() == n) return {};
  return make_error(errc::invalid_argument, "op '" + std::string{op} + "' takes " + std::to_string(n) +
                                                " inputs, got " + std::to_string(inputs.size()));
}

// -- the CPU kernel table -----------------------------------------------------------------------
// One entry per op: check arity, read attributes (with TensorFlow's defaults), call the kernel.

namespace {

expected<std::vector<tensor>> one(expected<tensor> t) {
  if (!t) return std::move(t).error_value();
  return std::vector<tensor>{std::move(*t)};
}

expected<padding_mode> padding_of(const op_attrs& a) {
  AF_TRY_ASSIGN(auto name, a.get_string("padding", std::string{"valid"}));
  if (name == "valid" || name == "VALID") return padding_mode::valid;
  if (name == "same" || name == "SAME") return padding_mode::same;
  return make_error(errc::invalid_argument, "padding must be 'valid' or 'same', not '" + name + "'");
}

expected<std::array<int64_t, 2>> pair_of(const op_attrs& a, const char* name, std::array<int64_t, 2> dflt) {
  AF_TRY_ASSIGN(auto v, a.get_ints(name, std::vector<int64_t>{dflt[0], dflt[1]}));
  if (v.size() != 2)
    return make_error(errc::invalid_argument, std::string{"attribute '"} + name + "' needs 2 values");
  return std::array<int64_t, 2>{v[0], v[1]};
}

using binary_kernel = expected<tensor> (*)(const tensor&, const tensor&);
using unary_kernel = expected<tensor> (*)(const tensor&);
using reduce_kernel = expected<tensor> (*)(const tensor&, const std::vector<int64_t>&, bool);

void register_elementwise(op_registry& r) {
  const std::pair<const char*, binary_kernel> binary[] = {
      {"add", &af::add},         {"sub", &af::sub},
      {"mul", &af::mul},         {"div", &af::div},
      {"pow", &af::pow},         {"maximum", &af::maximum},
      {"minimum", &af::minimum}, {"equal", &af::equal},
      {"not_equal", &af::not_equal}, {"less", &af::less},
      {"less_equal", &af::less_equal}, {"greater", &af::greater},
      {"greater_equal", &af::greater_equal}};
  for (auto [name, kernel] : binary)
    r.add(name, [name = name, kernel = kernel](const std::vector<tensor>& in,
                                               const op_attrs&) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 2));
      return one(kernel(in[0], in[1]));
    });
  const std::pair<const char*, unary_kernel> unary[] = {
      {"neg", &af::neg},   {"abs", &af::abs},     {"relu", &af::relu},   {"exp", &af::exp},
      {"log", &af::log},   {"sqrt", &af::sqrt},   {"rsqrt", &af::rsqrt}, {"tanh", &af::tanh},
      {"sigmoid", &af::sigmoid}, {"erf", &af::erf}};
  for (auto [name, kernel] : unary)
    r.add(name, [name = name, kernel = kernel](const std::vector<tensor>& in,
                                               const op_attrs&) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 1));
      return one(kernel(in[0]));
    });
  r.add("gelu", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("gelu", in, 1));
    AF_TRY_ASSIGN(auto approximate, a.get_int("approximate", 0));
    return one(gelu(in[0], approximate != 0));
  });
  r.add("where", [](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("where", in, 3));
    return one(where(in[0], in[1], in[2]));
  });
  r.add("cast", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("cast", in, 1));
    AF_TRY_ASSIGN(auto type_name, a.get_string("dtype"));
    AF_TRY_ASSIGN(auto type, parse_dtype(type_name));
    return one(cast(in[0], type));
  });
}

void register_reduce(op_registry& r) {
  const std::pair<const char*, reduce_kernel> reductions[] = {
      {"reduce_sum", &af::reduce_sum}, {"reduce_mean", &af::reduce_mean},
      {"reduce_max", &af::reduce_max}, {"reduce_min", &af::reduce_min},
      {"reduce_logsumexp", &af::reduce_logsumexp}};
  for (auto [name, kernel] : reductions)
    r.add(name, [name = name, kernel = kernel](const std::vector<tensor>& in,
                                               const op_attrs& a) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 1));
      AF_TRY_ASSIGN(auto axes, a.get_ints("axes", std::vector<int64_t>{}));
      AF_TRY_ASSIGN(auto keepdims, a.get_int("keepdims", 0));
      return one(kernel(in[0], axes, keepdims != 0));
    });
  using arg_kernel = expected<tensor> (*)(const tensor&, int64_t, bool);
  const std::pair<const char*, arg_kernel> args[] = {{"argmax", &af::argmax}, {"argmin", &af::argmin}};
  for (auto [name, kernel] : args)
    r.add(name, [name = name, kernel = kernel](const std::vector<tensor>& in,
                                               const op_attrs& a) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 1));
      AF_TRY_ASSIGN(auto axis, a.get_int("axis"));
      AF_TRY_ASSIGN(auto keepdims, a.get_int("keepdims", 0));
      return one(kernel(in[0], axis, keepdims != 0));
    });
}

void register_linalg(op_registry& r) {
  r.add("matmul", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("matmul", in, 2));
    AF_TRY_ASSIGN(auto ta, a.get_int("transpose_a", 0));
    AF_TRY_ASSIGN(auto tb, a.get_int("transpose_b", 0));
    return one(matmul(in[0], in[1], ta != 0, tb != 0));
  });
}

void register_nn(op_registry& r) {
  r.add("conv2d", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("conv2d", in, 2));
    conv2d_options o;
    AF_TRY_ASSIGN(o.strides, pair_of(a, "strides", {1, 1}));
    AF_TRY_ASSIGN(o.dilations, pair_of(a, "dilations", {1, 1}));
    AF_TRY_ASSIGN(o.padding, padding_of(a));
    AF_TRY_ASSIGN(auto groups, a.get_int("groups", 1));
    o.groups = static_cast<int>(groups);
    return one(conv2d(in[0], in[1], o));
  });
  auto pool = [](const char* name, expected<tensor> (*kernel)(const tensor&, const pool_options&)) {
    return [name, kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 1));
      pool_options o;
      AF_TRY_ASSIGN(o.ksize, pair_of(a, "ksize", {2, 2}));
      AF_TRY_ASSIGN(o.strides, pair_of(a, "strides", {2, 2}));
      AF_TRY_ASSIGN(o.padding, padding_of(a));
      return one(kernel(in[0], o));
    };
  };
  auto conv_options = [](const op_attrs& a) -> expected<conv2d_options> {
    conv2d_options o;
    AF_TRY_ASSIGN(o.strides, pair_of(a, "strides", {1, 1}));
    AF_TRY_ASSIGN(o.dilations, pair_of(a, "dilations", {1, 1}));
    AF_TRY_ASSIGN(o.padding, padding_of(a));
    AF_TRY_ASSIGN(auto groups, a.get_int("groups", 1));
    o.groups = static_cast<int>(groups);
    return o;
  };
  auto pool_options_of = [](const op_attrs& a) -> expected<pool_options> {
    pool_options o;
    AF_TRY_ASSIGN(o.ksize, pair_of(a, "ksize", {2, 2}));
    AF_TRY_ASSIGN(o.strides, pair_of(a, "strides", {2, 2}));
    AF_TRY_ASSIGN(o.padding, padding_of(a));
    return o;
  };
  // Gradients: (grad_out, filter) with "input_shape"; (input, grad_out) with "filter_shape";
  // (input, grad_out) for max pooling; (grad_out) with "input_shape" for average pooling.
  r.add("conv2d_backprop_input", [conv_options](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("conv2d_backprop_input", in, 2));
    AF_TRY_ASSIGN(auto o, conv_options(a));
    AF_TRY_ASSIGN(auto dims, a.get_ints("input_shape"));
    return one(conv2d_backprop_input(in[0], in[1], shape(dims), o));
  });
  r.add("conv2d_backprop_filter", [conv_options](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("conv2d_backprop_filter", in, 2));
    AF_TRY_ASSIGN(auto o, conv_options(a));
    AF_TRY_ASSIGN(auto dims, a.get_ints("filter_shape"));
    return one(conv2d_backprop_filter(in[0], in[1], shape(dims), o));
  });
  r.add("max_pool2d_backprop", [pool_options_of](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("max_pool2d_backprop", in, 2));
    AF_TRY_ASSIGN(auto o, pool_options_of(a));
    return one(max_pool2d_backprop(in[0], in[1], o));
  });
  r.add("avg_pool2d_backprop", [pool_options_of](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("avg_pool2d_backprop", in, 1));
    AF_TRY_ASSIGN(auto o, pool_options_of(a));
    AF_TRY_ASSIGN(auto dims, a.get_ints("input_shape"));
    return one(avg_pool2d_backprop(in[0], shape(dims), o));
  });
  r.add("max_pool2d", pool("max_pool2d", &max_pool2d));
  r.add("avg_pool2d", pool("avg_pool2d", &avg_pool2d));
  auto along_axis = [](const char* name, expected<tensor> (*kernel)(const tensor&, int64_t)) {
    return [name, kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 1));
      AF_TRY_ASSIGN(auto axis, a.get_int("axis", -1));
      return one(kernel(in[0], axis));
    };
  };
  r.add("softmax", along_axis("softmax", &softmax));
  r.add("log_softmax", along_axis("log_softmax", &log_softmax));
}

void register_array_ops(op_registry& r) {
  r.add("concat", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto axis, a.get_int("axis", 0));
    return one(concat(in, axis));
  });
  r.add("stack", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto axis, a.get_int("axis", 0));
    return one(stack(in, axis));
  });
  // Gradients: (grad) with input_shape, axis, start, stop, step; (grad, indices) with params_shape, axis.
  r.add("slice_backprop", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("slice_backprop", in, 1));
    AF_TRY_ASSIGN(auto dims, a.get_ints("input_shape"));
    AF_TRY_ASSIGN(auto axis, a.get_int("axis"));
    AF_TRY_ASSIGN(auto start, a.get_int("start"));
    AF_TRY_ASSIGN(auto stop, a.get_int("stop"));
    AF_TRY_ASSIGN(auto step, a.get_int("step", 1));
    return one(slice_backprop(in[0], shape(dims), axis, start, stop, step));
  });
  r.add("gather_backprop", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("gather_backprop", in, 2));
    AF_TRY_ASSIGN(auto dims, a.get_ints("params_shape"));
    AF_TRY_ASSIGN(auto axis, a.get_int("axis", 0));
    return one(gather_backprop(in[0], in[1], shape(dims), axis));
  });
  r.add("gather", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("gather", in, 2));
    AF_TRY_ASSIGN(auto axis, a.get_int("axis", 0));
    return one(gather(in[0], in[1], axis));
  });
  r.add("one_hot", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("one_hot", in, 1));
    AF_TRY_ASSIGN(auto depth, a.get_int("depth"));
    AF_TRY_ASSIGN(auto on, a.get_float("on_value", 1.0));
    AF_TRY_ASSIGN(auto off, a.get_float("off_value", 0.0));
    AF_TRY_ASSIGN(auto type_name, a.get_string("dtype", std::string{"f32"}));
    AF_TRY_ASSIGN(auto type, parse_dtype(type_name));
    return one(one_hot(in[0], depth, on, off, type));
  });
}

}  // namespace

// Random ops: attributes shape, seed, dtype ("f32"), and low/high or mean/stddev.
void register_random(op_registry& r) {
  using sampler = expected<tensor> (*)(const shape&, uint64_t, dtype, double, double);
  const std::tuple<const char*, sampler, const char*, double, const char*, double> ops[] = {
      {"random_uniform", &random_uniform, "low", 0.0, "high", 1.0},
      {"random_normal", &random_normal, "mean", 0.0, "stddev", 1.0}};
  for (auto [name, sample, first, first_default, second, second_default] : ops)
    // Captured by name: clang before 16 cannot capture structured bindings (a C++20 addition).
    r.add(name, [name = name, sample = sample, first = first, first_default = first_default, second = second,
                 second_default = second_default](const std::vector<tensor>& in,
                                                  const op_attrs& a) -> expected<std::vector<tensor>> {
      AF_TRY(expect_inputs(name, in, 0));
      AF_TRY_ASSIGN(auto dims, a.get_ints("shape"));
      AF_TRY_ASSIGN(auto seed, a.get_int("seed", 0));
      AF_TRY_ASSIGN(auto type_name, a.get_string("dtype", std::string{"f32"}));
      AF_TRY_ASSIGN(auto type, parse_dtype(type_name));
      AF_TRY_ASSIGN(auto x, a.get_float(first, first_default));
      AF_TRY_ASSIGN(auto y, a.get_float(second, second_default));
      return one(sample(shape(dims), static_cast<uint64_t>(seed), type, x, y));
    });
}

// Uniform [0, 1) from the i64 scalar seed input mixed with the "salt" attribute: the same seed and
// salt give the same tensor, so a training step fed a new seed per step draws new dropout masks
// without retracing, and a resumed run draws the masks the uninterrupted one drew.
void register_stateless_random(op_registry& r) {
  r.add("stateless_random_uniform", [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY(expect_inputs("stateless_random_uniform", in, 1));
    if (in[0].type() != dtype::i64 || in[0].numel() != 1)
      return make_error(errc::invalid_argument, std::string{"stateless_random_uniform: the seed must be one i64, got "} +
                                                    std::string{to_string(in[0].type())} + " " + to_string(in[0].shape()));
    AF_TRY_ASSIGN(auto dims, a.get_ints("shape"));
    AF_TRY_ASSIGN(auto salt, a.get_int("salt", 0));
    AF_TRY_ASSIGN(auto type_name, a.get_string("dtype", std::string{"f32"}));
    AF_TRY_ASSIGN(auto type, parse_dtype(type_name));
    const auto seed = static_cast<uint64_t>(in[0].data<int64_t>()[0]);  // one element: strides do not matter
    // SplitMix64's finaliser: nearby (seed, salt) pairs give unrelated Philox keys.
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(salt) + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return one(random_uniform(shape(dims), z ^ (z >> 31), type, 0.0, 1.0));
  });
}

void register_cpu_kernels(op_registry& registry) {
  register_stateless_random(registry);
  register_random(registry);
  register_elementwise(registry);
  register_reduce(registry);
  register_linalg(registry);
  register_nn(registry);
  register_array_ops(registry);
}

std::shared_ptr<const op_registry> default_op_registry() {
  static const std::shared_ptr<const op_registry> shared = [] {
    auto r = std::make_shared<op_registry>();
    register_cpu_kernels(*r);
    return r;
  }();
  return shared;
}

}  // namespace af
