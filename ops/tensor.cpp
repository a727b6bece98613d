#include "ops/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace af {

namespace {

// Calls fn(byte offset of element) for every element of `t` in row-major order.
template <class Fn>
void for_each_offset(const tensor& t, Fn&& fn) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const auto& dims = t.shape();
  const auto& st = t.strides();
  const int64_t elem = static_cast<int64_t>(size_of(t.type()));
  std::vector<int64_t> index(dims.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(off * elem);
    for (std::size_t d = dims.size(); d-- > 0;) {
      off += st[d];
      if (++index[d] < dims[d]) break;
      off -= st[d] * dims[d];
      index[d] = 0;
    }
  }
}

// Strings are objects: a tensor of them owns constructed std::strings, never raw memory.
expected<tensor> empty_strings(const af::shape& dims) {
  const int64_t n = af::numel(dims);
  // An element costs its std::string whatever its length: refuse a count no memory could hold
  // before vector throws for it.
  if (n < 0 || static_cast<uint64_t>(n) > std::vector<std::string>().max_size() / 2)
    return make_error(errc::out_of_memory, "empty: string" + af::to_string(dims) + " is larger than any memory");
  try {
    return tensor::from_vector(std::vector<std::string>(static_cast<std::size_t>(n)), dims);
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "empty: string" + af::to_string(dims) + " does not fit in memory");
  }
}

}  // namespace

double load_as_double(const void* p, dtype t) noexcept {
  return visit_dtype(t, [p](auto tag) -> double {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return static_cast<float>(v);
    else return static_cast<double>(v);
  });
}

void store_from_double(void* p, dtype t, double v) noexcept {
  visit_dtype(t, [p, v](auto tag) {
    using T = decltype(tag);
    T out;
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) out = T(static_cast<float>(v));
    else if constexpr (std::is_same_v<T, bool>) out = v != 0.0;
    else if constexpr (std::is_integral_v<T>) out = std::isfinite(v) ? static_cast<T>(v) : T{0};
    else out = static_cast<T>(v);
    std::memcpy(p, &out, sizeof(T));
  });
}

tensor::tensor(dtype type, af::shape dims, af::strides steps, int64_t offset, std::shared_ptr<storage> buf)
    : dtype_(type), shape_(std::move(dims)), strides_(std::move(steps)), offset_(offset),
      storage_(std::move(buf)) {
  AF_ASSERT(shape_.size() == strides_.size());
}

expected<tensor> tensor::empty(const af::shape& dims, dtype type, const std::shared_ptr<allocator>& alloc) {
  for (auto d : dims)
    if (d < 0)
      return make_error(errc::invalid_argument, "empty: negative dimension in shape " + af::to_string(dims));
  const std::shared_ptr<allocator>& owner = alloc ? alloc : cpu_allocator();
  if (is_string(type)) return empty_strings(dims);
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(af::numel(dims)), size_of(type), &bytes) ||
      af::numel(dims) == std::numeric_limits<int64_t>::max())
    return make_error(errc::out_of_memory, "empty: " + std::string{af::to_string(type)} + af::to_string(dims) +
                                               " is larger than any memory");
  auto buf = owner->allocate(bytes);
  if (!buf) return std::move(buf).error_value();
  return tensor{type, dims, contiguous_strides(dims), 0, std::move(*buf)};
}

expected<tensor> tensor::zeros(const af::shape& dims, dtype type, const std::shared_ptr<allocator>& alloc) {
  AF_TRY_ASSIGN(tensor t, empty(dims, type, alloc));
  if (!is_string(type)) std::memset(t.raw_data(), 0, t.nbytes());  // strings start empty
  return t;
}

expected<tensor> tensor::full(const af::shape& dims, double value, dtype type,
                              const std::shared_ptr<allocator>& alloc) {
  if (is_string(type)) return make_error(errc::dtype_mismatch, "full: a number cannot fill a string tensor");
  AF_TRY_ASSIGN(tensor t, empty(dims, type, alloc));
  char pattern[8];
  store_from_double(pattern, type, value);
  char* out = static_cast<char*>(t.raw_data());
  const std::size_t elem = size_of(type);
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(out + i * elem, pattern, elem);
  return t;
}

expected<tensor> tensor::arange(int64_t n, dtype type) {
  if (is_string(type)) return make_error(errc::dtype_mismatch, "arange: strings are not numbers");
  AF_TRY_ASSIGN(tensor t, empty({n}, type));
  char* out = static_cast<char*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) store_from_double(out + i * size_of(type), type, static_cast<double>(i));
  return t;
}

bool tensor::is_contiguous() const noexcept {
  if (numel() == 0) return true;  // nothing to lay out: any strides describe the same (empty) memory
  int64_t expected_stride = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected_stride) return false;
    expected_stride *= shape_[i];
  }
  return true;
}

double tensor::at(const std::vector<int64_t>& index) const {
  AF_ASSERT(index.size() == shape_.size());
  int64_t off = 0;
  for (std::size_t d = 0; d < index.size(); ++d) {
    AF_ASSERT(index[d] >= 0 && index[d] < shape_[d]);
    off += index[d] * strides_[d];
  }
  return load_as_double(static_cast<const char*>(raw_data()) + off * static_cast<int64_t>(size_of(dtype_)),
                        dtype_);
}

expected<tensor> tensor::reshape(const af::shape& dims) const {
  af::shape target = dims;
  int infer = -1;
  int64_t known = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (infer >= 0)
        return make_error(errc::invalid_argument, "reshape: more than one -1 in " + af::to_string(dims));
      infer = static_cast<int>(i);
    } else if (target[i] < 0) {
      return make_error(errc::invalid_argument, "reshape: negative dimension in " + af::to_string(dims));
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      return make_error(errc::shape_mismatch, "reshape: cannot reshape " + af::to_string(shape_) +
                                                  " into " + af::to_string(dims));
    target[infer] = numel() / known;
  }
  if (af::numel(target) != numel())
    return make_error(errc::shape_mismatch, "reshape: cannot reshape " + af::to_string(shape_) + " (" +
                                                std::to_string(numel()) + " elements) into " +
                                                af::to_string(dims));
  if (is_contiguous()) return tensor{dtype_, target, contiguous_strides(target), offset_, storage_};
  AF_TRY_ASSIGN(tensor dense, contiguous());
  return tensor{dtype_, target, contiguous_strides(target), dense.offset_, dense.storage_};
}

expected<tensor> tensor::slice(int64_t axis, int64_t start, int64_t stop, int64_t step) const {
  AF_TRY_ASSIGN(int a, normalize_axis(axis, ndim(), "slice"));
  if (ndim() == 0) return make_error(errc::invalid_argument, "slice: cannot slice a scalar");
  if (step <= 0)
    return make_error(errc::invalid_argument, "slice: step must be positive, got " + std::to_string(step));
  const int64_t n = shape_[a];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  af::shape dims = shape_;
  af::strides st = strides_;
  dims[a] = (stop - start + step - 1) / step;
  st[a] = strides_[a] * step;
  return tensor{dtype_, dims, st, offset_ + start * strides_[a], storage_};
}

expected<tensor> tensor::permute(const std::vector<int>& order) const {
  if (static_cast<int>(order.size()) != ndim())
    return make_error(errc::invalid_argument, "permute: order has " + std::to_string(order.size()) +
                                                  " axes for a tensor of rank " + std::to_string(ndim()));
  std::vector<bool> seen(order.size(), false);
  af::shape dims(order.size());
  af::strides st(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    AF_TRY_ASSIGN(int a, normalize_axis(order[i], ndim(), "permute"));
    if (seen[a]) return make_error(errc::invalid_argument, "permute: axis " + std::to_string(a) + " repeated");
    seen[a] = true;
    dims[i] = shape_[a];
    st[i] = strides_[a];
  }
  return tensor{dtype_, dims, st, offset_, storage_};
}

expected<tensor> tensor::transpose(int axis_a, int axis_b) const {
  AF_TRY_ASSIGN(int a, normalize_axis(axis_a, ndim(), "transpose"));
  AF_TRY_ASSIGN(int b, normalize_axis(axis_b, ndim(), "transpose"));
  std::vector<int> order(ndim());
  for (int i = 0; i < ndim(); ++i) order[i] = i;
  std::swap(order[a], order[b]);
  return permute(order);
}

expected<tensor> tensor::expand(const af::shape& dims) const {
  if (dims.size() < shape_.size())
    return make_error(errc::shape_mismatch, "expand: cannot expand " + af::to_string(shape_) + " to " +
                                                af::to_string(dims));
  const std::size_t lead = dims.size() - shape_.size();
  af::strides st(dims.size(), 0);
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] == dims[lead + i]) st[lead + i] = strides_[i];
    else if (shape_[i] != 1)
      return make_error(errc::shape_mismatch, "expand: cannot expand " + af::to_string(shape_) + " to " +
                                                  af::to_string(dims));
  }
  return tensor{dtype_, dims, st, offset_, storage_};
}

expected<tensor> tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

expected<tensor> tensor::clone() const {
  AF_TRY_ASSIGN(tensor out, empty(shape_, dtype_, nullptr));
  AF_TRY(copy_into(*this, out));
  return out;
}

expected<void> copy_into(const tensor& src, tensor& dst) {
  if (src.shape() != dst.shape())
    return make_error(errc::shape_mismatch, "copy: source " + to_string(src.shape()) +
                                                " and destination " + to_string(dst.shape()) + " differ");
  if (!dst.is_contiguous())
    return make_error(errc::invalid_argument, "copy: destination must be contiguous");
  char* out = static_cast<char*>(dst.raw_data());
  if (is_string(src.type()) || is_string(dst.type())) {
    if (src.type() != dst.type())
      return make_error(errc::dtype_mismatch, "copy: " + std::string{to_string(src.type())} + " to " +
                                                  std::string{to_string(dst.type())} + ": strings convert to nothing else");
    auto* to = reinterpret_cast<std::string*>(out);
    const char* in = static_cast<const char*>(src.raw_data());
    for_each_offset(src, [&](int64_t off) { *to++ = *reinterpret_cast<const std::string*>(in + off); });
    return {};
  }
  if (src.type() == dst.type()) {
    if (src.is_contiguous()) {
      std::memcpy(out, src.raw_data(), src.nbytes());
      return {};
    }
    const std::size_t elem = size_of(src.type());
    const char* in = static_cast<const char*>(src.raw_data());
    for_each_offset(src, [&](int64_t off) {
      std::memcpy(out, in + off, elem);
      out += elem;
    });
    return {};
  }
  const std::size_t out_elem = size_of(dst.type());
  const char* in = static_cast<const char*>(src.raw_data());
  for_each_offset(src, [&](int64_t off) {
    store_from_double(out, dst.type(), load_as_double(in + off, src.type()));
    out += out_elem;
  });
  return {};
}

std::string tensor::to_string(int64_t max_elements) const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(" << af::to_string(dtype_) << ", " << af::to_string(shape_) << ", ";
  if (is_string(dtype_)) {
    // Quoted, with bytes outside printable ASCII escaped, in row-major order.
    const auto strings = to_vector<std::string>();
    os << "[";
    for (std::size_t i = 0; i < strings.size() && static_cast<int64_t>(i) < max_elements; ++i) {
      os << (i ? ", \"" : "\"");
      for (unsigned char ch : strings[i]) {
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') os << static_cast<char>(ch);
        else {
          static constexpr char hex[] = "0123456789abcdef";
          os << "\\x" << hex[ch >> 4] << hex[ch & 15];
        }
      }
      os << "\"";
    }
    if (static_cast<int64_t>(strings.size()) > max_elements) os << ", ... (" << strings.size() << " elements)";
    os << "])";
    return os.str();
  }
  auto values = to_vector<double>();
  const int64_t n = static_cast<int64_t>(values.size());
  if (ndim() == 0) {
    os << values[0] << ")";
    return os.str();
  }
  // Nested brackets, one level per dimension; elements past max_elements become "...".
  af::strides st = contiguous_strides(shape_);
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    for (int d = 0; d < ndim(); ++d)
      if (i % (st[d] * shape_[d]) == 0) os << "[";
    os << values[static_cast<std::size_t>(i)];
    int closed = 0;
    for (int d = ndim(); d-- > 0;) {
      if ((i + 1) % (st[d] * shape_[d]) == 0) { os << "]"; ++closed; }
      else break;
    }
    if (i + 1 < n) os << (closed ? ", " : ", ");
  }
  if (n > max_elements) os << "... (" << n << " elements)";
  if (n == 0) os << "[]";
  os << ")";
  return os.str();
}

bool all_equal(const tensor& a, const tensor& b) {
  if (a.type() != b.type() || a.shape() != b.shape()) return false;
  if (is_string(a.type())) return a.to_vector<std::string>() == b.to_vector<std::string>();
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  return true;
}

bool all_close(const tensor& a, const tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  if (is_string(a.type()) || is_string(b.type())) return all_equal(a, b);  // no tolerance between strings
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

std::string to_string(device d) {
  return d.type == device_type::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

}  // namespace af
