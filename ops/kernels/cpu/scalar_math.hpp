#pragma once
// Scalar building blocks of the elementwise ops' formulas (ops/graph/defs/elementwise_*.cpp): integer
// arithmetic that wraps instead of being undefined, and the float approximations that let loops
// vectorise. Each op's formula is written once, as a functor over the compute type, and the eager
// kernel, the fused CPU loops and (as text) the CUDA kernels all use it.

#include <cmath>
#include <type_traits>

#include "ops/kernels/cpu/vector_math.hpp"

namespace af::cpu {

template <class C>
C wrap_add(C x, C y) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(x) + static_cast<U>(y));
}
template <class C>
C wrap_sub(C x, C y) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(x) - static_cast<U>(y));
}
template <class C>
C wrap_mul(C x, C y) {
  using U = std::make_unsigned_t<C>;
  // Widen to at least unsigned int so u8/i8 products do not promote to (signed) int and overflow.
  using W = std::common_type_t<U, unsigned>;
  return static_cast<C>(static_cast<U>(static_cast<W>(static_cast<U>(x)) * static_cast<W>(static_cast<U>(y))));
}
template <class C>
C wrap_neg(C x) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U(0) - static_cast<U>(x));  // -INT_MIN wraps to INT_MIN instead of trapping
}

// Float (and half, bfloat16: computed in float) uses branch-free approximations (exp ~2 ulp over
// the full range, tanh <= 5e-7 relative, erf <= 1.5e-7 absolute) so that loops vectorise; libm's
// expf/erff are a call per element and made GELU 8x slower than PyTorch's. Doubles keep libm.
template <class C>
[[gnu::always_inline]] inline C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) return exp_full_range(x);
  else return std::exp(x);
}
template <class C>
[[gnu::always_inline]] inline C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>) return fast_tanh(x);
  else return std::tanh(x);
}
template <class C>
[[gnu::always_inline]] inline C erf_of(C x) {
  if constexpr (std::is_same_v<C, float>) return fast_erf(x);
  else return std::erf(x);
}

}  // namespace af::cpu
