#pragma once
// The eager CPU kernels of the elementwise ops, instantiated from each op's scalar formula (its
// definition in ops/graph/defs/): checks, broadcasting, dtype dispatch and the strided loops.
// Private to ops/; see ops/elementwise.hpp for the semantics every formula follows.

#include <string>
#include <type_traits>

#include "ops/kernels/cpu/elementwise_loops.hpp"

namespace af::cpu {

/// Which dtypes a unary formula accepts: every numeric one, or only the floating ones.
enum class unary_domain { numeric, floating };
/// Which dtypes a binary formula accepts: numeric (arithmetic) or any, bool included (comparisons).
enum class binary_operands { numeric, any };

namespace detail {

template <class T, class Fn>
inline void unary_run(T* __restrict o, const T* __restrict x, int64_t sx, int64_t n, Fn fn) {
  if (sx == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i * sx]);
  }
}

template <class T, class F>
void unary_kernel(const loop_plan<1>& p, const T* x, T* out) {
  using C = compute_t<T>;
  auto fn = [](T v) -> T { return T(F{}(static_cast<C>(v))); };
  const int64_t sx = p.inner_stride(0);
  const bool streaming = static_cast<std::size_t>(p.numel) * sizeof(T) >= streaming_store_bytes;
  parallel_for(p.numel, elementwise_grain, [&](int64_t begin, int64_t end) {
    for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 1>& off, int64_t n) {
      const T* px = x + off[0];
      fill_contiguous(out + o, n, streaming, [&](T* dst, int64_t start, int64_t count) {
        unary_run(dst, px + start * sx, sx, count, fn);
      });
    });
  });
}

// The innermost loop, specialised on the input strides so the common cases vectorise.
template <class T, class O, class Fn>
inline void binary_run(O* __restrict o, const T* __restrict a, int64_t sa, const T* __restrict b, int64_t sb,
                       int64_t n, Fn fn) {
  if (n <= 0) return;
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T y = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i], y);
  } else if (sa == 0 && sb == 1) {
    const T x = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i * sa], b[i * sb]);
  }
}

template <class T, class O, class F>
void binary_kernel(const loop_plan<2>& p, const T* a, const T* b, O* out) {
  using C = compute_t<T>;
  auto fn = [](T x, T y) -> O { return O(F{}(static_cast<C>(x), static_cast<C>(y))); };
  const int64_t sa = p.inner_stride(0), sb = p.inner_stride(1);
  const bool streaming = static_cast<std::size_t>(p.numel) * sizeof(O) >= streaming_store_bytes;
  parallel_for(p.numel, elementwise_grain, [&](int64_t begin, int64_t end) {
    for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t n) {
      const T* pa = a + off[0];
      const T* pb = b + off[1];
      fill_contiguous(out + o, n, streaming, [&](O* dst, int64_t start, int64_t count) {
        binary_run(dst, pa + start * sa, sa, pb + start * sb, sb, count, fn);
      });
    });
  });
}

}  // namespace detail

/// `F` applied to every element of x, into a fresh contiguous tensor of x's dtype.
template <class F, unary_domain Allowed>
expected<tensor> apply_unary(const char* name, const tensor& x) {
  AF_TRY(check_cpu(name, {&x}));
  if (Allowed == unary_domain::floating && !is_floating(x.type()))
    return make_error(errc::unsupported,
                      std::string(name) + ": " + std::string(to_string(x.type())) + " is not a floating dtype");
  if (x.type() == dtype::boolean)
    return make_error(errc::unsupported, std::string(name) + ": bool is not a numeric dtype");
  AF_TRY_ASSIGN(tensor out, tensor::empty(x.shape(), x.type()));
  const auto plan = make_plan<1>(x.shape(), {&x});
  visit_dtype(x.type(), [&](auto tag) {
    using T = decltype(tag);
    // Only the dtypes that passed the checks above are instantiated.
    if constexpr (!std::is_same_v<T, bool> &&
                  (Allowed == unary_domain::numeric || std::is_floating_point_v<compute_t<T>>))
      detail::unary_kernel<T, F>(plan, x.data<T>(), out.data<T>());
  });
  return out;
}

/// `F` applied to a and b broadcast together. `Out` void: the result has the inputs' dtype; else
/// `Out` (bool for comparisons).
template <class Out, class F, binary_operands Allowed>
expected<tensor> apply_binary(const char* name, const tensor& a, const tensor& b) {
  AF_TRY(check_cpu(name, {&a, &b}));
  if (a.type() != b.type())
    return make_error(errc::dtype_mismatch, std::string(name) + ": " + std::string(to_string(a.type())) + " and " +
                                                std::string(to_string(b.type())) + " differ");
  if (Allowed == binary_operands::numeric && a.type() == dtype::boolean)
    return make_error(errc::unsupported, std::string(name) + ": bool is not a numeric dtype");
  AF_TRY_ASSIGN(shape out_shape, broadcast_shapes(a.shape(), b.shape(), name));
  const dtype out_type = std::is_void_v<Out> ? a.type() : dtype_v<std::conditional_t<std::is_void_v<Out>, float, Out>>;
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, out_type));
  const auto plan = make_plan<2>(out_shape, {&a, &b});
  visit_dtype(a.type(), [&](auto tag) {
    using T = decltype(tag);
    using O = std::conditional_t<std::is_void_v<Out>, T, Out>;
    if constexpr (!(std::is_same_v<T, bool> && std::is_void_v<Out>))  // arithmetic on bool was refused
      detail::binary_kernel<T, O, F>(plan, a.data<T>(), b.data<T>(), out.data<O>());
  });
  return out;
}

}  // namespace af::cpu
