// CPU concat, stack, gather and one_hot. They only move bytes, so every numeric dtype takes one path
// that copies whole contiguous runs with memcpy; strings are assigned element by element.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/array_ops.hpp"
#include "ops/parallel.hpp"

namespace af {

namespace {

// Below this many bytes per task, splitting a copy over threads costs more than it saves.
constexpr int64_t copy_grain_bytes = 64 * 1024;

std::string shapes_of(const std::vector<tensor>& parts) {
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) s += ", ";
    s += to_string(parts[i].shape());
  }
  return s;
}

expected<void> check_cpu(const std::vector<tensor>& parts, const char* op) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].defined())
      return make_error(errc::invalid_argument, std::string(op) + ": tensor " + std::to_string(i) + " is undefined");
    if (!parts[i].dev().is_cpu())
      return make_error(errc::unsupported, std::string(op) + ": CPU kernel got tensor " + std::to_string(i) +
                                               " on " + to_string(parts[i].dev()));
  }
  return {};
}

expected<void> check_same_dtype(const std::vector<tensor>& parts, const char* op) {
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (parts[i].type() != parts[0].type())
      return make_error(errc::dtype_mismatch, std::string(op) + ": tensor " + std::to_string(i) + " is " +
                                                  std::string(to_string(parts[i].type())) + " but tensor 0 is " +
                                                  std::string(to_string(parts[0].type())) + " (shapes " +
                                                  shapes_of(parts) + ")");
  return {};
}

int64_t product(const shape& s, std::size_t begin, std::size_t end) {
  int64_t p = 1;
  for (std::size_t d = begin; d < end; ++d) p *= s[d];
  return p;
}

// `t` with a new dimension of size 1 before `axis`: a view, since a size-1 dimension's stride
// never moves the pointer.
tensor with_unit_axis(const tensor& t, int axis) {
  shape dims = t.shape();
  strides st = t.strides();
  dims.insert(dims.begin() + axis, 1);
  st.insert(st.begin() + axis, 1);
  return tensor{t.type(), dims, st, t.offset(), t.buffer()};
}

}  // namespace

expected<tensor> concat(const std::vector<tensor>& parts, int64_t axis) {
  if (parts.empty()) return make_error(errc::invalid_argument, "concat: no tensors to join");
  AF_TRY(check_cpu(parts, "concat"));
  AF_TRY(check_same_dtype(parts, "concat"));
  const shape& first = parts[0].shape();
  if (first.empty())
    return make_error(errc::invalid_argument, "concat: cannot join scalars (shapes " + shapes_of(parts) + ")");
  auto a = normalize_axis(axis, static_cast<int64_t>(first.size()), "concat");
  if (!a)
    return make_error(errc::out_of_range, "concat: axis " + std::to_string(axis) + " is out of range for shapes " +
                                              shapes_of(parts));
  shape out_shape = first;
  out_shape[*a] = 0;
  for (const auto& p : parts) {
    bool fits = p.ndim() == static_cast<int>(first.size());
    for (int d = 0; fits && d < p.ndim(); ++d) fits = d == *a || p.shape()[d] == first[d];
    if (!fits)
      return make_error(errc::shape_mismatch, "concat: shapes differ outside axis " + std::to_string(*a) + ": " +
                                                  shapes_of(parts));
    out_shape[*a] += p.shape()[*a];
  }
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, parts[0].type()));
  if (out.numel() == 0) return out;

  const int64_t elem = static_cast<int64_t>(size_of(out.type()));
  const int64_t outer = product(out_shape, 0, *a);
  const int64_t inner = product(out_shape, *a + 1, out_shape.size()) * elem;
  const int64_t out_row = out_shape[*a] * inner;
  std::vector<tensor> dense;
  std::vector<int64_t> dst_offset;
  int64_t at = 0;
  for (const auto& p : parts) {
    if (p.numel() == 0) continue;
    AF_TRY_ASSIGN(tensor c, p.contiguous());
    dense.push_back(std::move(c));
    dst_offset.push_back(at);
    at += p.shape()[*a] * inner;
  }
  if (is_string(out.type())) {
    // Strings are objects: assigned one by one (a memcpy would share their heap buffers).
    const int64_t per_byte = elem;
    auto* to = out.data<std::string>();
    for (int64_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < dense.size(); ++i) {
        const int64_t row = dense[i].shape()[*a] * inner / per_byte;
        const std::string* from = dense[i].data<std::string>() + o * row;
        std::copy(from, from + row, to + (o * out_row + dst_offset[i]) / per_byte);
      }
    return out;
  }
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(outer, std::max<int64_t>(1, copy_grain_bytes / out_row), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      for (std::size_t i = 0; i < dense.size(); ++i) {
        const int64_t row = dense[i].shape()[*a] * inner;
        std::memcpy(dst + o * out_row + dst_offset[i], static_cast<const char*>(dense[i].raw_data()) + o * row,
                    static_cast<std::size_t>(row));
      }
  });
  return out;
}

expected<tensor> stack(const std::vector<tensor>& parts, int64_t axis) {
  if (parts.empty()) return make_error(errc::invalid_argument, "stack: no tensors to join");
  AF_TRY(check_cpu(parts, "stack"));
  AF_TRY(check_same_dtype(parts, "stack"));
  for (const auto& p : parts)
    if (p.shape() != parts[0].shape())
      return make_error(errc::shape_mismatch, "stack: shapes differ: " + shapes_of(parts));
  auto a = normalize_axis(axis, parts[0].ndim() + 1, "stack");
  if (!a)
    return make_error(errc::out_of_range, "stack: axis " + std::to_string(axis) + " is out of range for shapes " +
                                              shapes_of(parts));
  std::vector<tensor> views;
  views.reserve(parts.size());
  for (const auto& p : parts) views.push_back(with_unit_axis(p, *a));
  return concat(views, *a);
}

expected<tensor> gather(const tensor& params, const tensor& indices, int64_t axis) {
  AF_TRY(check_cpu({params, indices}, "gather"));
  const std::string shapes = "params " + to_string(params.shape()) + ", indices " + to_string(indices.shape()) +
                             ", axis " + std::to_string(axis);
  if (indices.type() != dtype::i32 && indices.type() != dtype::i64)
    return make_error(errc::dtype_mismatch, "gather: indices must be i32 or i64, got " +
                                                std::string(to_string(indices.type())) + " (" + shapes + ")");
  if (params.ndim() == 0) return make_error(errc::invalid_argument, "gather: params must have rank >= 1 (" + shapes + ")");
  auto a = normalize_axis(axis, params.ndim(), "gather");
  if (!a) return make_error(errc::out_of_range, "gather: axis " + std::to_string(axis) + " is out of range (" + shapes + ")");
  const int64_t dim = params.shape()[*a];
  const auto idx = indices.to_vector<int64_t>();
  for (std::size_t pos = 0; pos < idx.size(); ++pos)
    if (idx[pos] < 0 || idx[pos] >= dim)
      return make_error(errc::out_of_range, "gather: index " + std::to_string(idx[pos]) + " out of range [0," +
                                                std::to_string(dim) + ") at position " + std::to_string(pos) + " (" +
                                                shapes + ")");
  shape out_shape(params.shape().begin(), params.shape().begin() + *a);
  out_shape.insert(out_shape.end(), indices.shape().begin(), indices.shape().end());
  out_shape.insert(out_shape.end(), params.shape().begin() + *a + 1, params.shape().end());
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, params.type()));
  if (out.numel() == 0) return out;

  AF_TRY_ASSIGN(tensor src, params.contiguous());
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t outer = product(params.shape(), 0, *a);
  const int64_t inner = product(params.shape(), *a + 1, params.shape().size()) * static_cast<int64_t>(size_of(params.type()));
  if (is_string(params.type())) {  // objects, assigned one by one
    const int64_t row = inner / static_cast<int64_t>(size_of(dtype::string));
    const std::string* from = src.data<std::string>();
    auto* to = out.data<std::string>();
    for (int64_t t = 0; t < outer * n; ++t) {
      const int64_t o = t / n, j = t % n;
      std::copy(from + (o * dim + idx[j]) * row, from + (o * dim + idx[j] + 1) * row, to + t * row);
    }
    return out;
  }
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  parallel_for(outer * n, std::max<int64_t>(1, copy_grain_bytes / inner), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / n, j = t % n;
      std::memcpy(to + t * inner, from + (o * dim + idx[j]) * inner, static_cast<std::size_t>(inner));
    }
  });
  return out;
}

expected<tensor> one_hot(const tensor& indices, int64_t depth, double on_value, double off_value, dtype type) {
  AF_TRY(check_cpu({indices}, "one_hot"));
  if (!is_integral(indices.type()))
    return make_error(errc::dtype_mismatch, "one_hot: indices must be integers, got " +
                                                std::string(to_string(indices.type())) + " " + to_string(indices.shape()));
  if (depth < 0)
    return make_error(errc::invalid_argument, "one_hot: depth must be >= 0, got " + std::to_string(depth) +
                                                  " for indices " + to_string(indices.shape()));
  shape out_shape = indices.shape();
  out_shape.push_back(depth);
  AF_TRY_ASSIGN(tensor out, tensor::full(out_shape, off_value, type));
  if (out.numel() == 0) return out;
  const std::size_t elem = size_of(type);
  char on[8];
  store_from_double(on, type, on_value);
  char* dst = static_cast<char*>(out.raw_data());
  const auto idx = indices.to_vector<int64_t>();
  for (std::size_t i = 0; i < idx.size(); ++i)
    if (idx[i] >= 0 && idx[i] < depth)
      std::memcpy(dst + (static_cast<int64_t>(i) * depth + idx[i]) * static_cast<int64_t>(elem), on, elem);
  return out;
}

}  // namespace af
