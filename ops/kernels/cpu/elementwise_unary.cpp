// Unary elementwise math on the CPU (see ops/elementwise.hpp for the semantics).
#include <cmath>
#include <string>
#include <type_traits>

#include "ops/codegen/vector_math.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/cpu/elementwise_loops.hpp"

namespace af {

namespace {

using cpu::compute_t;

template <class C>
C wrap_neg(C x) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U(0) - static_cast<U>(x));  // -INT_MIN wraps to INT_MIN instead of trapping
}

struct neg_op {
  template <class C> C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return wrap_neg(x);
    else return -x;
  }
};
struct abs_op {
  template <class C> C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else if constexpr (std::is_integral_v<C>) return x < 0 ? wrap_neg(x) : x;
    else return std::fabs(x);
  }
};
struct relu_op {
  template <class C> C operator()(C x) const { return x < C(0) ? C(0) : x; }  // keeps NaN
};
// Float (and half, bfloat16: computed in float) uses the branch-free approximations of the fused
// kernels (ops/codegen/vector_math.hpp: exp ~2 ulp, tanh <= 5e-7 relative, erf <= 1.5e-7
// absolute), so that these loops vectorise; libm's expf/erff are a call per element and made eager
// GELU 8x slower than PyTorch's. Doubles keep libm.
template <class C>
[[gnu::always_inline]] inline C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>) return codegen::exp_full_range(x);
  else return std::exp(x);
}
template <class C>
[[gnu::always_inline]] inline C tanh_of(C x) {
  if constexpr (std::is_same_v<C, float>) return codegen::fast_tanh(x);
  else return std::tanh(x);
}
template <class C>
[[gnu::always_inline]] inline C erf_of(C x) {
  if constexpr (std::is_same_v<C, float>) return codegen::fast_erf(x);
  else return std::erf(x);
}

struct exp_op { template <class C> C operator()(C x) const { return exp_of(x); } };
struct log_op { template <class C> C operator()(C x) const { return std::log(x); } };
struct sqrt_op { template <class C> C operator()(C x) const { return std::sqrt(x); } };
struct rsqrt_op { template <class C> C operator()(C x) const { return C(1) / std::sqrt(x); } };
struct tanh_op { template <class C> C operator()(C x) const { return tanh_of(x); } };
struct erf_op { template <class C> C operator()(C x) const { return erf_of(x); } };
struct sigmoid_op {
  template <class C> C operator()(C x) const {
    // e^-|x| never overflows, so both halves stay finite for any x.
    const C e = exp_of(x >= C(0) ? -x : x);
    return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
  }
};
struct gelu_erf_op {
  template <class C> C operator()(C x) const {
    return C(0.5) * x * (C(1) + erf_of(x * C(0.70710678118654752440)));
  }
};
struct gelu_tanh_op {
  template <class C> C operator()(C x) const {
    const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);  // sqrt(2/pi)
    return C(0.5) * x * (C(1) + tanh_of(inner));
  }
};

template <class T, class Fn>
inline void unary_run(T* __restrict o, const T* __restrict x, int64_t sx, int64_t n, Fn fn) {
  if (sx == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i * sx]);
  }
}

template <class T, class Op>
void unary_kernel(const cpu::loop_plan<1>& p, const T* x, T* out, Op op) {
  using C = compute_t<T>;
  auto fn = [op](T v) -> T { return T(op(static_cast<C>(v))); };
  const int64_t sx = p.inner_stride(0);
  const bool streaming = static_cast<std::size_t>(p.numel) * sizeof(T) >= cpu::streaming_store_bytes;
  parallel_for(p.numel, cpu::elementwise_grain, [&](int64_t begin, int64_t end) {
    cpu::for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 1>& off, int64_t n) {
      const T* px = x + off[0];
      cpu::fill_contiguous(out + o, n, streaming, [&](T* dst, int64_t start, int64_t count) {
        unary_run(dst, px + start * sx, sx, count, fn);
      });
    });
  });
}

enum class domain { numeric, floating };

template <domain Allowed, class Op>
expected<tensor> unary(const char* name, const tensor& x, Op op) {
  AF_TRY(cpu::check_cpu(name, {&x}));
  if (Allowed == domain::floating && !is_floating(x.type()))
    return make_error(errc::unsupported,
                      std::string(name) + ": " + std::string(to_string(x.type())) + " is not a floating dtype");
  if (x.type() == dtype::boolean)
    return make_error(errc::unsupported, std::string(name) + ": bool is not a numeric dtype");
  AF_TRY_ASSIGN(tensor out, tensor::empty(x.shape(), x.type()));
  const auto plan = cpu::make_plan<1>(x.shape(), {&x});
  visit_dtype(x.type(), [&](auto tag) {
    using T = decltype(tag);
    // Only the dtypes that passed the checks above are instantiated.
    if constexpr (!std::is_same_v<T, bool> &&
                  (Allowed == domain::numeric || std::is_floating_point_v<compute_t<T>>))
      unary_kernel<T>(plan, x.data<T>(), out.data<T>(), op);
  });
  return out;
}

}  // namespace

expected<tensor> neg(const tensor& x) { return unary<domain::numeric>("neg", x, neg_op{}); }
expected<tensor> abs(const tensor& x) { return unary<domain::numeric>("abs", x, abs_op{}); }
expected<tensor> relu(const tensor& x) { return unary<domain::numeric>("relu", x, relu_op{}); }
expected<tensor> exp(const tensor& x) { return unary<domain::floating>("exp", x, exp_op{}); }
expected<tensor> log(const tensor& x) { return unary<domain::floating>("log", x, log_op{}); }
expected<tensor> sqrt(const tensor& x) { return unary<domain::floating>("sqrt", x, sqrt_op{}); }
expected<tensor> rsqrt(const tensor& x) { return unary<domain::floating>("rsqrt", x, rsqrt_op{}); }
expected<tensor> tanh(const tensor& x) { return unary<domain::floating>("tanh", x, tanh_op{}); }
expected<tensor> sigmoid(const tensor& x) { return unary<domain::floating>("sigmoid", x, sigmoid_op{}); }
expected<tensor> erf(const tensor& x) { return unary<domain::floating>("erf", x, erf_op{}); }
expected<tensor> gelu(const tensor& x, bool approximate) {
  if (approximate) return unary<domain::floating>("gelu", x, gelu_tanh_op{});
  return unary<domain::floating>("gelu", x, gelu_erf_op{});
}

}  // namespace af
