// cast and where on the CPU (see ops/elementwise.hpp for the semantics).
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/elementwise.hpp"
#include "ops/kernels/cpu/elementwise_loops.hpp"

namespace af {

namespace {

using cpu::compute_t;

// One element of `From` converted to `To` by the rules documented on cast().
template <class To, class From>
To convert(From v) {
  using CF = compute_t<From>;
  using CT = compute_t<To>;
  const CF x = static_cast<CF>(v);
  if constexpr (std::is_same_v<To, bool>) {
    return x != CF(0);
  } else if constexpr (std::is_integral_v<CT> && std::is_floating_point_v<CF>) {
    // A float outside the integer's range is undefined behaviour in C++: saturate, and map NaN to 0.
    // 2^digits is max + 1 exactly, and min - 1 truncates to min, so these bounds are exact.
    constexpr double upper = 2.0 * static_cast<double>(std::numeric_limits<CT>::max() / 2 + 1);
    constexpr double lower = static_cast<double>(std::numeric_limits<CT>::min()) - 1.0;
    const double d = static_cast<double>(x);
    if (d != d) return To(0);
    if (d >= upper) return std::numeric_limits<CT>::max();
    if (d <= lower) return std::numeric_limits<CT>::min();
    return static_cast<To>(static_cast<CT>(x));
  } else {
    return To(static_cast<CT>(x));  // integer narrowing wraps (defined since C++20)
  }
}

template <class To, class From>
void cast_kernel(const cpu::loop_plan<1>& p, const From* x, To* out) {
  const int64_t sx = p.inner_stride(0);
  parallel_for(p.numel, cpu::elementwise_grain, [&](int64_t begin, int64_t end) {
    cpu::for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 1>& off, int64_t n) {
      To* __restrict dst = out + o;
      const From* __restrict src = x + off[0];
      if (sx == 1) {
        for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i * sx]);
      }
    });
  });
}

// where copies elements without looking at them, so it runs on unsigned words of the element size.
template <class W>
void where_kernel(const cpu::loop_plan<3>& p, const uint8_t* cond, const W* a, const W* b, W* out) {
  const int64_t sc = p.inner_stride(0), sa = p.inner_stride(1), sb = p.inner_stride(2);
  parallel_for(p.numel, cpu::elementwise_grain, [&](int64_t begin, int64_t end) {
    cpu::for_each_run(p, begin, end, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
      W* __restrict dst = out + o;
      const uint8_t* __restrict c = cond + off[0];
      const W* __restrict x = a + off[1];
      const W* __restrict y = b + off[2];
      if (sc == 1 && sa == 1 && sb == 1) {
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i] ? x[i] : y[i];
      } else if (sc == 1 && sa == 1 && sb == 0) {  // where(c, x, scalar): ReLU's gradient, say
        const W other = *y;
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i] ? x[i] : other;
      } else if (sc == 1 && sa == 0 && sb == 1) {
        const W other = *x;
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i] ? other : y[i];
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = c[i * sc] ? x[i * sa] : y[i * sb];
      }
    });
  });
}

template <class W>
void run_where(const cpu::loop_plan<3>& p, const tensor& cond, const tensor& a, const tensor& b, tensor& out) {
  where_kernel<W>(p, static_cast<const uint8_t*>(cond.raw_data()), static_cast<const W*>(a.raw_data()),
                  static_cast<const W*>(b.raw_data()), static_cast<W*>(out.raw_data()));
}

}  // namespace

expected<tensor> cast(const tensor& x, dtype to) {
  AF_TRY(cpu::check_cpu("cast", {&x}));
  AF_TRY_ASSIGN(tensor out, tensor::empty(x.shape(), to));
  const auto plan = cpu::make_plan<1>(x.shape(), {&x});
  visit_dtype(x.type(), [&](auto from_tag) {
    using From = decltype(from_tag);
    visit_dtype(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      cast_kernel<To, From>(plan, x.data<From>(), out.data<To>());
    });
  });
  return out;
}

expected<tensor> where(const tensor& cond, const tensor& a, const tensor& b) {
  AF_TRY(cpu::check_cpu("where", {&cond, &a, &b}));
  if (cond.type() != dtype::boolean)
    return make_error(errc::dtype_mismatch,
                      "where: condition must be bool, got " + std::string(to_string(cond.type())));
  if (a.type() != b.type())
    return make_error(errc::dtype_mismatch, "where: " + std::string(to_string(a.type())) + " and " +
                                                std::string(to_string(b.type())) + " differ");
  auto ca = broadcast_shapes(cond.shape(), a.shape(), "where");
  auto cab = ca ? broadcast_shapes(*ca, b.shape(), "where") : ca;
  if (!cab)
    return make_error(errc::shape_mismatch, "where: cannot broadcast shapes " + to_string(cond.shape()) +
                                                ", " + to_string(a.shape()) + " and " + to_string(b.shape()));
  const shape out_shape = *cab;
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, a.type()));
  const auto plan = cpu::make_plan<3>(out_shape, {&cond, &a, &b});
  switch (size_of(a.type())) {
    case 1: run_where<uint8_t>(plan, cond, a, b, out); break;
    case 2: run_where<uint16_t>(plan, cond, a, b, out); break;
    case 4: run_where<uint32_t>(plan, cond, a, b, out); break;
    default: run_where<uint64_t>(plan, cond, a, b, out); break;
  }
  return out;
}

}  // namespace af
