#pragma once
// A 32-byte vector of float or double for register-blocked kernels, written with GCC's vector
// extensions: one AVX register in release builds (-march=x86-64-v3), a pair of SSE registers where
// AVX is off (sanitizer and debug builds), the same arithmetic either way. Kernels keep small
// arrays of these as sums; with constant indices after unrolling the compiler holds them in
// registers, which plain `T acc[32]` arrays did not get (they stayed on the stack).

#include <cstdint>
#include <cstring>

// Passing 32-byte vectors by value without AVX changes the calling convention; these helpers are
// inline, so no call crosses a boundary built differently.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace af::cpu::simd {

template <class T>
struct vector_of;
template <>
struct vector_of<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct vector_of<double> {
  typedef double type __attribute__((vector_size(32)));
};

template <class T>
using vec = typename vector_of<T>::type;

/// Elements per vector.
template <class T>
inline constexpr int64_t lanes = static_cast<int64_t>(32 / sizeof(T));

/// What comparing two vec<T> gives: all ones or all zeros per lane, in integers of T's width.
template <class T>
using mask = decltype(vec<T>{} == vec<T>{});

/// Lanes of `v` where `m` is set, zeros elsewhere.
template <class T>
[[gnu::always_inline]] inline vec<T> keep(vec<T> v, mask<T> m) {
  return reinterpret_cast<vec<T>>(reinterpret_cast<mask<T>>(v) & m);
}

template <class T>
[[gnu::always_inline]] inline vec<T> load(const T* p) {
  vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
[[gnu::always_inline]] inline void store(T* p, vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}

template <class T>
[[gnu::always_inline]] inline vec<T> splat(T s) {
  return vec<T>{} + s;
}

}  // namespace af::cpu::simd

#pragma GCC diagnostic pop
