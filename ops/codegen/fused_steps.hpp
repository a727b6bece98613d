#pragma once

// The step loops of fused CPU kernels, included by cpu_fused.cpp (built for the baseline ISA) and
// cpu_fused_avx512.cpp (built for AVX-512): the same source, vectorised for each. Everything here
// has internal linkage, so the two builds never merge.

#include <cmath>
#include <cstdint>

#include "ops/codegen/vector_math.hpp"

namespace af::codegen {

enum class code : uint8_t {
  add, sub, mul, div, pow, maximum, minimum,  // binary
  copy, neg, abs, relu, exp, log, sqrt, rsqrt, tanh, sigmoid, erf, gelu_erf, gelu_tanh  // unary
};

inline bool is_unary(code c) noexcept { return c >= code::copy; }

/// x * scale + shift around a unary step: scalar multiplies and adds folded into its loop (shift
/// -0 leaves every x, -0 included, unchanged).
template <class T>
struct affine {
  T scale = T(1);
  T shift = -T(0);
  bool identity() const noexcept { return scale == T(1) && shift == T(0) && std::signbit(shift); }
};

namespace {

// The transcendental functions: fast approximations for float, libm for double.
template <class T>
struct math {
  static T exp(T x) { return std::exp(x); }
  static T erf(T x) { return std::erf(x); }
  static T tanh(T x) { return std::tanh(x); }
  static T sigmoid(T x) { return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)); }
};
template <>
struct math<float> {
  static float exp(float x) { return fast_exp(x); }
  static float erf(float x) { return fast_erf(x); }
  static float tanh(float x) { return fast_tanh(x); }
  static float sigmoid(float x) { return fast_sigmoid(x); }
};

template <class T, class F>
void map1(T* __restrict o, const T* __restrict a, int64_t n, affine<T> pre, affine<T> post, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i] * pre.scale + pre.shift) * post.scale + post.shift;
}
template <class T, class F>
void map2(T* __restrict o, const T* __restrict a, const T* __restrict b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}

// One step over one chunk; the formulas match the eager kernels (NaN rules included). `pre` and
// `post` apply to unary steps only.
template <class T>
void run_step(code c, T* o, const T* a, const T* b, int64_t n, affine<T> pre, affine<T> post) {
  using M = math<T>;
  auto map1 = [&](T* __restrict out, const T* __restrict in, int64_t count, auto f) {
    af::codegen::map1(out, in, count, pre, post, f);
  };
  switch (c) {
    case code::add: return map2(o, a, b, n, [](T x, T y) { return x + y; });
    case code::sub: return map2(o, a, b, n, [](T x, T y) { return x - y; });
    case code::mul: return map2(o, a, b, n, [](T x, T y) { return x * y; });
    case code::div: return map2(o, a, b, n, [](T x, T y) { return x / y; });
    case code::pow: return map2(o, a, b, n, [](T x, T y) { return std::pow(x, y); });
    case code::maximum: return map2(o, a, b, n, [](T x, T y) { return (x > y || x != x) ? x : y; });
    case code::minimum: return map2(o, a, b, n, [](T x, T y) { return (x < y || x != x) ? x : y; });
    case code::copy: return map1(o, a, n, [](T x) { return x; });
    case code::neg: return map1(o, a, n, [](T x) { return -x; });
    case code::abs: return map1(o, a, n, [](T x) { return std::fabs(x); });
    case code::relu: return map1(o, a, n, [](T x) { return x < T(0) ? T(0) : x; });
    case code::exp: return map1(o, a, n, [](T x) { return M::exp(x); });
    case code::log: return map1(o, a, n, [](T x) { return std::log(x); });
    case code::sqrt: return map1(o, a, n, [](T x) { return std::sqrt(x); });
    case code::rsqrt: return map1(o, a, n, [](T x) { return T(1) / std::sqrt(x); });
    case code::tanh: return map1(o, a, n, [](T x) { return M::tanh(x); });
    case code::sigmoid: return map1(o, a, n, [](T x) { return M::sigmoid(x); });
    case code::erf: return map1(o, a, n, [](T x) { return M::erf(x); });
    case code::gelu_erf:
      return map1(o, a, n, [](T x) { return T(0.5) * x * (T(1) + M::erf(x * T(0.70710678118654752440))); });
    case code::gelu_tanh:
      return map1(o, a, n, [](T x) {
        const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
        return T(0.5) * x * (T(1) + M::tanh(inner));
      });
  }
}

}  // namespace

}  // namespace af::codegen
