#pragma once
// The loops a fused CPU program is made of (ops/codegen/cpu_fused.cpp): one loop per step over a
// chunk of contiguous values that stays in L1. Each is instantiated from the op's own scalar
// formula (the functor of its definition in ops/graph/defs/), twice on x86: for the build's
// baseline ISA and, through a function-level target attribute, for AVX-512 (twice the lanes),
// picked at run time when the CPU has it. Needs -O3 -fno-math-errno -fno-trapping-math in the
// translation unit that instantiates them (see ops/CMakeLists.txt), or sqrt and the clamps of the
// approximations keep the loops scalar.

#include <cmath>
#include <cstdint>

namespace af::cpu {

/// x * scale + shift around a unary step: multiplies and adds by a single value folded into its
/// loop (shift -0 leaves every x, -0 included, unchanged).
template <class T>
struct affine {
  T scale = T(1);
  T shift = -T(0);
  bool identity() const noexcept { return scale == T(1) && shift == T(0) && std::signbit(shift); }
};

template <class T>
using unary_loop = void (*)(T* out, const T* a, int64_t n, affine<T> pre, affine<T> post);
template <class T>
using binary_loop = void (*)(T* out, const T* a, const T* b, int64_t n);

/// One fusible op's loops for f32 and f64, already resolved for this CPU. Unary ops set the unary
/// pair, binary ops the binary pair.
struct step_loops {
  unary_loop<float> unary_f32 = nullptr;
  unary_loop<double> unary_f64 = nullptr;
  binary_loop<float> binary_f32 = nullptr;
  binary_loop<double> binary_f64 = nullptr;

  bool unary() const noexcept { return unary_f32 != nullptr; }
  template <class T>
  unary_loop<T> unary_for() const noexcept {
    if constexpr (sizeof(T) == sizeof(float)) return unary_f32;
    else return unary_f64;
  }
  template <class T>
  binary_loop<T> binary_for() const noexcept {
    if constexpr (sizeof(T) == sizeof(float)) return binary_f32;
    else return binary_f64;
  }
};

namespace detail {

template <class T, class F>
void unary_steps(T* __restrict o, const T* __restrict a, int64_t n, affine<T> pre, affine<T> post) {
  const F f{};
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i] * pre.scale + pre.shift) * post.scale + post.shift;
}
template <class T, class F>
void binary_steps(T* __restrict o, const T* __restrict a, const T* __restrict b, int64_t n) {
  const F f{};
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define AF_STEP_LOOPS_AVX512 1
#if defined(__clang__)  // clang knows no prefer-vector-width in a target attribute
#define AF_AVX512_TARGET [[gnu::target("avx512f,avx512dq,avx512vl,avx512bw")]]
#else
#define AF_AVX512_TARGET [[gnu::target("avx512f,avx512dq,avx512vl,avx512bw,prefer-vector-width=512")]]
#endif
template <class T, class F>
AF_AVX512_TARGET void unary_steps_avx512(T* __restrict o, const T* __restrict a, int64_t n, affine<T> pre,
                                         affine<T> post) {
  const F f{};
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i] * pre.scale + pre.shift) * post.scale + post.shift;
}
template <class T, class F>
AF_AVX512_TARGET void binary_steps_avx512(T* __restrict o, const T* __restrict a, const T* __restrict b, int64_t n) {
  const F f{};
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}
#undef AF_AVX512_TARGET

inline bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return has;
}
#endif

}  // namespace detail

/// The loops of a unary op whose formula is `F` (a functor `template <class C> C operator()(C)`).
template <class F>
step_loops unary_step_loops() {
  step_loops s;
  s.unary_f32 = &detail::unary_steps<float, F>;
  s.unary_f64 = &detail::unary_steps<double, F>;
#if defined(AF_STEP_LOOPS_AVX512)
  if (detail::cpu_has_avx512()) {
    s.unary_f32 = &detail::unary_steps_avx512<float, F>;
    s.unary_f64 = &detail::unary_steps_avx512<double, F>;
  }
#endif
  return s;
}

/// The loops of a binary op whose formula is `F` (`template <class C> C operator()(C, C)`).
template <class F>
step_loops binary_step_loops() {
  step_loops s;
  s.binary_f32 = &detail::binary_steps<float, F>;
  s.binary_f64 = &detail::binary_steps<double, F>;
#if defined(AF_STEP_LOOPS_AVX512)
  if (detail::cpu_has_avx512()) {
    s.binary_f32 = &detail::binary_steps_avx512<float, F>;
    s.binary_f64 = &detail::binary_steps_avx512<double, F>;
  }
#endif
  return s;
}

/// y = x: what a pending multiply-add becomes when no unary step can take it.
struct identity_formula {
  template <class C>
  C operator()(C x) const {
    return x;
  }
};

}  // namespace af::cpu
