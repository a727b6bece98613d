// CPU softmax and log-softmax along one axis, numerically stable: the maximum along the axis is
// subtracted before exponentiating, so large logits cannot overflow.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/nn.hpp"
#include "ops/parallel.hpp"

namespace af {

namespace {

// The tensor seen as [outer, len, inner] with the reduced axis in the middle.
struct axis_split {
  int64_t outer = 1, len = 1, inner = 1;
};

// Reduces each [len] column of `in` for `inner` neighbouring columns at once, so that the inner
// loops run over contiguous memory whether the axis is the last one (inner = 1) or not.
template <class T, bool is_log>
void softmax_kernel(const T* in, T* out, const axis_split& s) {
  const int64_t slab = s.len * s.inner;
  parallel_for(s.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(slab, 1)), [&](int64_t begin, int64_t end) {
    std::vector<T> peak(static_cast<std::size_t>(s.inner));
    std::vector<T> sum(static_cast<std::size_t>(s.inner));
    for (int64_t o = begin; o < end; ++o) {
      const T* x = in + o * slab;
      T* y = out + o * slab;
      std::fill(peak.begin(), peak.end(), -std::numeric_limits<T>::infinity());
      std::fill(sum.begin(), sum.end(), T{0});
      for (int64_t k = 0; k < s.len; ++k)
        for (int64_t i = 0; i < s.inner; ++i) peak[i] = std::max(peak[i], x[k * s.inner + i]);
      for (int64_t k = 0; k < s.len; ++k)
        for (int64_t i = 0; i < s.inner; ++i) {
          const T e = std::exp(x[k * s.inner + i] - peak[i]);
          sum[i] += e;
          if constexpr (!is_log) y[k * s.inner + i] = e;
        }
      if constexpr (is_log) {
        // (x - peak) - log(sum), not x - (peak + log(sum)): the shifted value is small and exact,
        // while peak + log(sum) would round at the magnitude of the logits.
        for (int64_t i = 0; i < s.inner; ++i) sum[i] = std::log(sum[i]);
        for (int64_t k = 0; k < s.len; ++k)
          for (int64_t i = 0; i < s.inner; ++i) y[k * s.inner + i] = (x[k * s.inner + i] - peak[i]) - sum[i];
      } else {
        for (int64_t i = 0; i < s.inner; ++i) sum[i] = T{1} / sum[i];
        for (int64_t k = 0; k < s.len; ++k)
          for (int64_t i = 0; i < s.inner; ++i) y[k * s.inner + i] *= sum[i];
      }
    }
  });
}

template <bool is_log>
expected<tensor> softmax_impl(const tensor& x, int64_t axis, const char* op) {
  if (!x.defined()) return make_error(errc::invalid_argument, std::string(op) + ": undefined input");
  if (!x.dev().is_cpu())
    return make_error(errc::unsupported, std::string(op) + ": CPU kernel got a tensor on " + to_string(x.dev()));
  if (!is_floating(x.type()))
    return make_error(errc::dtype_mismatch, std::string(op) + ": needs a floating dtype, got " +
                                                std::string(to_string(x.type())) + " " + to_string(x.shape()));
  // A scalar is one element along its only (implicit) axis, so axis 0 and -1 both name it.
  auto a = x.ndim() == 0 && (axis == 0 || axis == -1) ? expected<int>(0) : normalize_axis(axis, x.ndim(), op);
  if (!a)
    return make_error(errc::out_of_range, std::string(op) + ": axis " + std::to_string(axis) +
                                              " is out of range for shape " + to_string(x.shape()));
  axis_split s;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d < *a) s.outer *= x.shape()[d];
    else if (d == *a) s.len = x.shape()[d];
    else s.inner *= x.shape()[d];
  }
  AF_TRY_ASSIGN(tensor out, tensor::empty(x.shape(), x.type()));
  if (out.numel() == 0) return out;
  if (x.type() == dtype::f32 || x.type() == dtype::f64) {
    AF_TRY_ASSIGN(tensor in, x.contiguous());
    if (x.type() == dtype::f32) softmax_kernel<float, is_log>(in.data<float>(), out.data<float>(), s);
    else softmax_kernel<double, is_log>(in.data<double>(), out.data<double>(), s);
    return out;
  }
  // f16 / bf16: compute in f32, round once at the end.
  AF_TRY_ASSIGN(tensor in, tensor::empty(x.shape(), dtype::f32));
  AF_TRY(copy_into(x, in));
  AF_TRY_ASSIGN(tensor out32, tensor::empty(x.shape(), dtype::f32));
  softmax_kernel<float, is_log>(in.data<float>(), out32.data<float>(), s);
  AF_TRY(copy_into(out32, out));
  return out;
}

}  // namespace

expected<tensor> softmax(const tensor& x, int64_t axis) { return softmax_impl<false>(x, axis, "softmax"); }

expected<tensor> log_softmax(const tensor& x, int64_t axis) { return softmax_impl<true>(x, axis, "log_softmax"); }

}  // namespace af
