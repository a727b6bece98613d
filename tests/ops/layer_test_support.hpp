#pragma once

// Runs one af::nn layer outside a model, for the layer tests: build it for per-sample input specs,
// start its weights from their initializers (seeded), then trace it in an af::function fed
// [x, weights...] that returns the output, the gradients of sum(y * probe) for x and each trainable
// weight, and the values the layer assigns to its non-trainable weights (moving statistics).
// References in the tests are plain loops in double; gradients are checked against their central
// differences.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/runtime/function.hpp"
#include "ops/train/layers.hpp"

namespace layer_testing {

using values = std::vector<double>;

/// A built layer and its weights' starting values (add_weight order).
struct built_layer {
  af::nn::layer_ptr layer;
  std::vector<values> weights;
  std::vector<af::shape> weight_dims;
  af::nn::value_spec output;  ///< per sample
};

/// What one traced call of a layer gives.
struct run_result {
  af::tensor y;                    ///< with the batch axis
  values grad_x;                   ///< d sum(y * probe) / d x; empty for integer inputs
  std::vector<values> grad_w;      ///< per weight; empty for non-trainable ones
  std::map<int, values> assigned;  ///< weight index -> the value call_context::assign gave it
};

/// The weights of the probed sum whose gradients run() returns: not all equal, so that a gradient
/// that mixes up positions shows.
inline double probe(std::size_t i) { return std::sin(0.37 * static_cast<double>(i) + 0.2) + 0.5; }

inline double probed_sum(const values& y) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * probe(i);
  return s;
}

/// The layer applied to a model input of per-sample `dims`: its error (errc::none when it fits).
inline af::error apply_error(const af::nn::layer_ptr& layer, af::shape dims, af::dtype type = af::dtype::f32) {
  auto out = (*layer)(af::nn::input(std::move(dims), type));
  return out.status();
}

/// Builds `layer` for per-sample `dims` and draws its weights' starting values from `seed`.
inline built_layer build(af::nn::layer_ptr layer, af::shape dims, af::dtype type = af::dtype::f32, uint64_t seed = 7) {
  auto out = (*layer)(af::nn::input(std::move(dims), type));
  if (out.status()) FAIL(out.status().to_string());
  built_layer b{layer, {}, {}, out.spec()};
  uint64_t salt = 0;
  for (const auto& w : layer->weights()) {
    auto t = w.init(w.spec.dims, seed + 1000 * ++salt);
    if (!t) FAIL(t.error_value().to_string());
    b.weights.push_back(t->to_vector<double>());
    b.weight_dims.push_back(w.spec.dims);
  }
  return b;
}

inline af::tensor make_tensor(const values& v, const af::shape& dims, af::dtype type) {
  if (type == af::dtype::f64) return af::tensor::from_vector<double>(v, dims);
  if (type == af::dtype::f32) return af::tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), dims);
  if (type == af::dtype::i32) return af::tensor::from_vector<int32_t>(std::vector<int32_t>(v.begin(), v.end()), dims);
  if (type == af::dtype::i64) return af::tensor::from_vector<int64_t>(std::vector<int64_t>(v.begin(), v.end()), dims);
  FAIL("make_tensor: unsupported dtype");
  return af::tensor::from_vector<double>(v, dims);
}

/// One traced call of `b.layer` on `x` (batch axis first) with `weights`, weights and floating
/// inputs computed in `run_as` (f64: the references' precision; f32: what models run).
inline af::expected<run_result> run(const built_layer& b, const af::tensor& x, const std::vector<values>& weights,
                                    bool training, af::dtype run_as = af::dtype::f64) {
  const bool x_has_gradient = x.type() == af::dtype::f32 || x.type() == af::dtype::f64;
  std::vector<bool> trainable;
  for (const auto& w : b.layer->weights()) trainable.push_back(w.trainable);
  std::vector<int> assigned_to;  // filled while tracing
  af::function fn{[&](const std::vector<af::sym>& in) {
    std::vector<af::sym> w(in.begin() + 1, in.end());
    af::nn::call_context ctx(training, &w, nullptr);
    ctx.enter_layer(0);
    auto outs = b.layer->call({in[0]}, ctx);
    const af::sym y = outs.at(0);
    const auto dims = y.dims();
    values p(static_cast<std::size_t>(af::numel(dims)));
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = probe(i);
    const af::sym probed = y * af::constant(y, make_tensor(p, dims, y.dtype_of()));
    std::vector<af::sym> wrt;
    if (x_has_gradient) wrt.push_back(in[0]);
    for (std::size_t i = 0; i < w.size(); ++i)
      if (trainable[i]) wrt.push_back(w[i]);
    std::vector<af::sym> result{y};
    if (!wrt.empty()) {
      auto g = af::gradients(probed, wrt);
      result.insert(result.end(), g.begin(), g.end());
    }
    for (const auto& [index, value] : ctx.assignments()) {
      assigned_to.push_back(index);
      result.push_back(value);
    }
    return result;
  }};
  std::vector<af::tensor> args{x_has_gradient ? make_tensor(x.to_vector<double>(), x.shape(), run_as) : x};
  for (std::size_t i = 0; i < weights.size(); ++i) args.push_back(make_tensor(weights[i], b.weight_dims.at(i), run_as));
  auto out = fn(args);
  if (!out) return out.error_value();
  run_result r{out->at(0), {}, std::vector<values>(weights.size()), {}};
  std::size_t k = 1;
  if (x_has_gradient) r.grad_x = out->at(k++).to_vector<double>();
  for (std::size_t i = 0; i < weights.size(); ++i)
    if (trainable[i]) r.grad_w[i] = out->at(k++).to_vector<double>();
  for (int index : assigned_to) r.assigned[index] = out->at(k++).to_vector<double>();
  return r;
}

/// run() that fails the test on an error.
inline run_result run_ok(const built_layer& b, const af::tensor& x, const std::vector<values>& weights, bool training,
                         af::dtype run_as = af::dtype::f64) {
  auto r = run(b, x, weights, training, run_as);
  if (!r) FAIL(r.error_value().to_string());
  return *r;
}

/// |got - want| <= tol * (1 + |want|) everywhere, reporting the first miss.
inline void check_values(const values& got, const values& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]))) continue;
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])));
    return;
  }
}

/// Central differences of f at `at`.
inline values numeric_gradient(const std::function<double(const values&)>& f, const values& at, double h = 1e-5) {
  values g(at.size());
  values v = at;
  for (std::size_t i = 0; i < at.size(); ++i) {
    v[i] = at[i] + h;
    const double up = f(v);
    v[i] = at[i] - h;
    const double down = f(v);
    v[i] = at[i];
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// A layer's output, in double, for x and weights (row-major, the batch axis first).
using reference = std::function<values(const values& x, const std::vector<values>& w)>;

/// The gradients run() gave against central differences of probed_sum(reference) for x (when it
/// has one) and every trainable weight.
inline void check_gradients(const reference& ref, const values& x, const std::vector<values>& w, const run_result& r,
                            const built_layer& b, double tol) {
  if (!r.grad_x.empty()) {
    auto want = numeric_gradient([&](const values& xv) { return probed_sum(ref(xv, w)); }, x);
    check_values(r.grad_x, want, tol, "d/dx");
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!b.layer->weights()[i].trainable) continue;
    auto want = numeric_gradient(
        [&](const values& wi) {
          auto ws = w;
          ws[i] = wi;
          return probed_sum(ref(x, ws));
        },
        w[i]);
    check_values(r.grad_w[i], want, tol, std::string{"d/d "} + b.layer->weights()[i].name);
  }
}

/// Deterministic values in [low, high) for test inputs.
inline values sample_values(std::size_t n, uint64_t seed, double low = -1.0, double high = 1.0) {
  values v(n);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& e : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    e = low + (high - low) * static_cast<double>(s >> 11) / 9007199254740992.0;
  }
  return v;
}

}  // namespace layer_testing
