// Gradients of slicing and gathering on the CPU: the forward op's positions, written or added
// into zeros of the input's shape.

#include <cstring>
#include <string>

#include "ops/array_ops.hpp"

namespace af {

namespace {

// Elements before, along and after `axis` of `dims`.
struct axis_split {
  int64_t outer = 1, along = 1, inner = 1;
};

axis_split split_at(const shape& dims, int axis) {
  axis_split s;
  for (int i = 0; i < axis; ++i) s.outer *= dims[static_cast<std::size_t>(i)];
  s.along = dims[static_cast<std::size_t>(axis)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < dims.size(); ++i) s.inner *= dims[i];
  return s;
}

template <class T, class I>
expected<void> scatter_add(const T* g, const I* idx, int64_t count, T* out, const axis_split& p) {
  for (int64_t j = 0; j < count; ++j)
    if (idx[j] < 0 || idx[j] >= p.along)
      return make_error(errc::out_of_range, "gather_backprop: index " + std::to_string(idx[j]) + " at position " +
                                                std::to_string(j) + " is outside [0, " + std::to_string(p.along) + ")");
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      const T* src = g + (o * count + j) * p.inner;
      T* dst = out + (o * p.along + static_cast<int64_t>(idx[j])) * p.inner;
      for (int64_t k = 0; k < p.inner; ++k) dst[k] += src[k];
    }
  return {};
}

}  // namespace

expected<tensor> slice_backprop(const tensor& grad, const shape& input_shape, int64_t axis, int64_t start, int64_t stop,
                                int64_t step) {
  AF_TRY_ASSIGN(auto out, tensor::zeros(input_shape, grad.type()));
  // The forward slice of zeros tells where the gradient goes (and checks the arguments).
  AF_TRY_ASSIGN(auto view, out.slice(axis, start, stop, step));
  if (view.shape() != grad.shape())
    return make_error(errc::shape_mismatch, "slice_backprop: gradient " + to_string(grad.shape()) +
                                                " for a slice of shape " + to_string(view.shape()));
  AF_TRY_ASSIGN(int a, normalize_axis(axis, static_cast<int64_t>(input_shape.size()), "slice_backprop"));
  AF_TRY_ASSIGN(auto g, grad.contiguous());
  const auto dst = split_at(input_shape, a), src = split_at(grad.shape(), a);
  const std::size_t row_bytes = static_cast<std::size_t>(src.inner) * size_of(grad.type());
  const auto first = view.offset() - out.offset();  // elements: start * stride of the axis
  const auto* from = static_cast<const char*>(g.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < src.outer; ++o)
    for (int64_t i = 0; i < src.along; ++i) {
      const int64_t at = o * dst.along * dst.inner + first + i * step * dst.inner;
      std::memcpy(to + static_cast<std::size_t>(at) * size_of(grad.type()),
                  from + static_cast<std::size_t>(o * src.along + i) * row_bytes, row_bytes);
    }
  return out;
}

expected<tensor> gather_backprop(const tensor& grad, const tensor& indices, const shape& params_shape, int64_t axis) {
  AF_TRY_ASSIGN(int a, normalize_axis(axis, static_cast<int64_t>(params_shape.size()), "gather_backprop"));
  if (grad.type() != dtype::f32 && grad.type() != dtype::f64)
    return make_error(errc::dtype_mismatch, "gather_backprop: f32 or f64 gradients, got " + std::string{to_string(grad.type())});
  if (indices.type() != dtype::i32 && indices.type() != dtype::i64)
    return make_error(errc::dtype_mismatch, "gather_backprop: indices must be i32 or i64");
  const auto p = split_at(params_shape, a);
  const int64_t count = indices.numel();
  if (grad.numel() != p.outer * count * p.inner)
    return make_error(errc::shape_mismatch, "gather_backprop: gradient " + to_string(grad.shape()) + " does not match " +
                                                to_string(params_shape) + " gathered by " + to_string(indices.shape()));
  AF_TRY_ASSIGN(auto out, tensor::zeros(params_shape, grad.type()));
  AF_TRY_ASSIGN(auto g, grad.contiguous());
  AF_TRY_ASSIGN(auto idx, indices.contiguous());
  auto run = [&](auto* out_data, const auto* g_data) -> expected<void> {
    if (idx.type() == dtype::i32) return scatter_add(g_data, idx.data<int32_t>(), count, out_data, p);
    return scatter_add(g_data, idx.data<int64_t>(), count, out_data, p);
  };
  if (grad.type() == dtype::f32) AF_TRY(run(out.data<float>(), g.data<float>()));
  else AF_TRY(run(out.data<double>(), g.data<double>()));
  return out;
}

}  // namespace af
