// Binary arithmetic and comparisons on the CPU (see ops/elementwise.hpp for the semantics).
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/elementwise.hpp"
#include "ops/kernels/cpu/elementwise_loops.hpp"

namespace af {

namespace {

using cpu::compute_t;

// Integer arithmetic goes through the unsigned type so overflow wraps instead of being undefined.
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
C int_pow(C base, C exponent) {
  if constexpr (std::is_signed_v<C>) {
    if (exponent < 0) {  // truncated 1 / base^-exponent; 1/0 is defined as 0 like integer division
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) ? C(-1) : C(1);
      return 0;
    }
  }
  C result = 1;
  for (;;) {
    if (exponent & 1) result = wrap_mul(result, base);
    exponent = static_cast<C>(exponent / 2);
    if (exponent == 0) return result;
    base = wrap_mul(base, base);
  }
}

struct add_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return wrap_add(x, y);
    else return x + y;
  }
};
struct sub_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return wrap_sub(x, y);
    else return x - y;
  }
};
struct mul_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return wrap_mul(x, y);
    else return x * y;
  }
};
struct div_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>)
        if (y == -1) return wrap_sub(C(0), x);  // INT_MIN / -1 would trap
      return static_cast<C>(x / y);
    } else {
      return x / y;
    }
  }
};
struct pow_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return int_pow(x, y);
    else return std::pow(x, y);
  }
};
struct maximum_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return x > y ? x : y;
    else return (x > y || x != x) ? x : y;  // NaN in either propagates
  }
};
struct minimum_op {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return x < y ? x : y;
    else return (x < y || x != x) ? x : y;
  }
};
struct equal_op { template <class C> bool operator()(C x, C y) const { return x == y; } };
struct not_equal_op { template <class C> bool operator()(C x, C y) const { return x != y; } };
struct less_op { template <class C> bool operator()(C x, C y) const { return x < y; } };
struct less_equal_op { template <class C> bool operator()(C x, C y) const { return x <= y; } };
struct greater_op { template <class C> bool operator()(C x, C y) const { return x > y; } };
struct greater_equal_op { template <class C> bool operator()(C x, C y) const { return x >= y; } };

// The innermost loop, specialised on the input strides so the common cases vectorise.
template <class T, class O, class Fn>
inline void binary_run(O* __restrict o, const T* __restrict a, int64_t sa, const T* __restrict b,
                       int64_t sb, int64_t n, Fn fn) {
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

template <class T, class O, class Op>
void binary_kernel(const cpu::loop_plan<2>& p, const T* a, const T* b, O* out, Op op) {
  using C = compute_t<T>;
  auto fn = [op](T x, T y) -> O { return O(op(static_cast<C>(x), static_cast<C>(y))); };
  const int64_t sa = p.inner_stride(0), sb = p.inner_stride(1);
  const bool streaming = static_cast<std::size_t>(p.numel) * sizeof(O) >= cpu::streaming_store_bytes;
  parallel_for(p.numel, cpu::elementwise_grain, [&](int64_t begin, int64_t end) {
    cpu::for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t n) {
      const T* pa = a + off[0];
      const T* pb = b + off[1];
      cpu::fill_contiguous(out + o, n, streaming, [&](O* dst, int64_t start, int64_t count) {
        binary_run(dst, pa + start * sa, sa, pb + start * sb, sb, count, fn);
      });
    });
  });
}

enum class operands { numeric, any };

// Checks, broadcasts and dispatches on the dtype once; `Out` void means "same dtype as the inputs".
template <class Out, class Op>
expected<tensor> binary(const char* name, const tensor& a, const tensor& b, operands allowed, Op op) {
  AF_TRY(cpu::check_cpu(name, {&a, &b}));
  if (a.type() != b.type())
    return make_error(errc::dtype_mismatch, std::string(name) + ": " + std::string(to_string(a.type())) +
                                                " and " + std::string(to_string(b.type())) + " differ");
  if (allowed == operands::numeric && a.type() == dtype::boolean)
    return make_error(errc::unsupported, std::string(name) + ": bool is not a numeric dtype");
  AF_TRY_ASSIGN(shape out_shape, broadcast_shapes(a.shape(), b.shape(), name));
  const dtype out_type = std::is_void_v<Out> ? a.type() : dtype_v<std::conditional_t<std::is_void_v<Out>, float, Out>>;
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, out_type));
  const auto plan = cpu::make_plan<2>(out_shape, {&a, &b});
  visit_dtype(a.type(), [&](auto tag) {
    using T = decltype(tag);
    using O = std::conditional_t<std::is_void_v<Out>, T, Out>;
    if constexpr (std::is_same_v<T, bool> && std::is_void_v<Out>) {
      // arithmetic on bool was rejected above
    } else {
      binary_kernel<T, O>(plan, a.data<T>(), b.data<T>(), out.data<O>(), op);
    }
  });
  return out;
}

// A 0-d tensor holding `value` in x's dtype (float for an undefined x, which then fails the op).
expected<tensor> scalar_like(const tensor& x, double value) { return tensor::full({}, value, x.type()); }

}  // namespace

expected<tensor> add(const tensor& a, const tensor& b) { return binary<void>("add", a, b, operands::numeric, add_op{}); }
expected<tensor> sub(const tensor& a, const tensor& b) { return binary<void>("sub", a, b, operands::numeric, sub_op{}); }
expected<tensor> mul(const tensor& a, const tensor& b) { return binary<void>("mul", a, b, operands::numeric, mul_op{}); }
expected<tensor> div(const tensor& a, const tensor& b) { return binary<void>("div", a, b, operands::numeric, div_op{}); }
expected<tensor> pow(const tensor& a, const tensor& b) { return binary<void>("pow", a, b, operands::numeric, pow_op{}); }
expected<tensor> maximum(const tensor& a, const tensor& b) {
  return binary<void>("maximum", a, b, operands::numeric, maximum_op{});
}
expected<tensor> minimum(const tensor& a, const tensor& b) {
  return binary<void>("minimum", a, b, operands::numeric, minimum_op{});
}

expected<tensor> equal(const tensor& a, const tensor& b) { return binary<bool>("equal", a, b, operands::any, equal_op{}); }
expected<tensor> not_equal(const tensor& a, const tensor& b) {
  return binary<bool>("not_equal", a, b, operands::any, not_equal_op{});
}
expected<tensor> less(const tensor& a, const tensor& b) { return binary<bool>("less", a, b, operands::any, less_op{}); }
expected<tensor> less_equal(const tensor& a, const tensor& b) {
  return binary<bool>("less_equal", a, b, operands::any, less_equal_op{});
}
expected<tensor> greater(const tensor& a, const tensor& b) {
  return binary<bool>("greater", a, b, operands::any, greater_op{});
}
expected<tensor> greater_equal(const tensor& a, const tensor& b) {
  return binary<bool>("greater_equal", a, b, operands::any, greater_equal_op{});
}

#define AF_SCALAR_OVERLOAD(name)                              \
  expected<tensor> name(const tensor& a, double b) {          \
    AF_TRY_ASSIGN(tensor s, scalar_like(a, b));               \
    return name(a, s);                                        \
  }
AF_SCALAR_OVERLOAD(add)
AF_SCALAR_OVERLOAD(sub)
AF_SCALAR_OVERLOAD(mul)
AF_SCALAR_OVERLOAD(div)
AF_SCALAR_OVERLOAD(pow)
AF_SCALAR_OVERLOAD(maximum)
AF_SCALAR_OVERLOAD(minimum)
#undef AF_SCALAR_OVERLOAD

}  // namespace af
