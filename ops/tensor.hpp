#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/allocator.hpp"
#include "ops/assert.hpp"
#include "ops/device.hpp"
#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/shape.hpp"

namespace af {

/// An n-dimensional array: a value type {dtype, shape, strides, device, offset, shared storage}.
/// Copying a tensor is O(1) and shares the storage. A tensor that has been sent to another actor is
/// immutable by convention; kernels write fresh outputs and may reuse an input's buffer only when
/// its storage is uniquely owned.
class tensor {
 public:
  /// An undefined tensor (defined() is false), the moved-from and default state.
  tensor() = default;
  tensor(dtype type, af::shape dims, af::strides steps, int64_t offset, std::shared_ptr<storage> buf);

  // -- factories --------------------------------------------------------------------------------
  /// Uninitialised contiguous tensor; out_of_memory beyond the allocator's limit. Strings are
  /// empty strings, held outside any allocator.
  static expected<tensor> empty(const af::shape& dims, dtype type,
                                const std::shared_ptr<allocator>& alloc = nullptr);
  static expected<tensor> zeros(const af::shape& dims, dtype type,
                                const std::shared_ptr<allocator>& alloc = nullptr);
  /// Every element set to `value` converted to `type`.
  static expected<tensor> full(const af::shape& dims, double value, dtype type,
                               const std::shared_ptr<allocator>& alloc = nullptr);
  /// A tensor holding `values` (moved in without a copy; pass a copy to keep yours). It takes no
  /// memory from an allocator, so it cannot fail for want of it. The element count must match the
  /// shape (asserted: a caller's bug). Booleans are stored one byte each.
  template <class T>
  static tensor from_vector(std::vector<T> values, const af::shape& dims);
  template <class T>
  static tensor from_vector(std::vector<T> values) {
    const auto n = static_cast<int64_t>(values.size());
    return from_vector(std::move(values), af::shape{n});
  }
  template <class T>
  static tensor scalar(T value) { return from_vector(std::vector<T>{value}, {}); }
  /// 0, 1, ..., n-1 (like arange), in `type`.
  static expected<tensor> arange(int64_t n, dtype type = dtype::f32);

  // -- description ------------------------------------------------------------------------------
  bool defined() const noexcept { return storage_ != nullptr; }
  dtype type() const noexcept { return dtype_; }
  const af::shape& shape() const noexcept { return shape_; }
  const af::strides& strides() const noexcept { return strides_; }
  int64_t dim(int axis) const { return shape_[axis < 0 ? axis + ndim() : axis]; }
  int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  int64_t numel() const noexcept { return af::numel(shape_); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * size_of(dtype_); }
  /// Offset of the first element into the storage, in elements.
  int64_t offset() const noexcept { return offset_; }
  device dev() const noexcept { return storage_ ? storage_->dev() : device::cpu(); }
  const std::shared_ptr<storage>& buffer() const noexcept { return storage_; }
  /// Row-major with no gaps (views with a slice step or a permutation are not).
  bool is_contiguous() const noexcept;
  /// True when no other tensor shares this storage, so a kernel may write into it.
  bool is_unique() const noexcept { return storage_ && storage_.use_count() == 1; }

  // -- element access ---------------------------------------------------------------------------
  /// Address of the first element (offset applied).
  void* raw_data() const noexcept {
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(size_of(dtype_));
  }
  template <class T>
  T* data() const {
    AF_ASSERT(dtype_v<T> == dtype_);
    return static_cast<T*>(raw_data());
  }
  /// The element at `index` (one index per dimension), converted to double.
  double at(const std::vector<int64_t>& index) const;
  /// The single element of a one-element tensor, converted to T.
  template <class T>
  T item() const {
    AF_ASSERT(numel() == 1);
    return static_cast<T>(at(std::vector<int64_t>(shape_.size(), 0)));
  }
  /// All elements in row-major order, converted to T (works for any view). A string tensor gives
  /// std::string and nothing else.
  template <class T>
  std::vector<T> to_vector() const;

  // -- views and copies -------------------------------------------------------------------------
  /// Same elements in a new shape (one dimension may be -1). A view when contiguous, else a copy.
  expected<tensor> reshape(const af::shape& dims) const;
  /// Elements start, start+step, ... < stop along `axis` (negative start/stop count from the end).
  expected<tensor> slice(int64_t axis, int64_t start, int64_t stop, int64_t step = 1) const;
  /// Reorders dimensions; a view (no copy).
  expected<tensor> permute(const std::vector<int>& order) const;
  expected<tensor> transpose(int axis_a = -2, int axis_b = -1) const;
  /// Broadcast view to a larger shape (stride 0 along expanded dims).
  expected<tensor> expand(const af::shape& dims) const;
  /// This tensor if contiguous, else a contiguous copy.
  expected<tensor> contiguous() const;
  /// A contiguous copy that shares nothing with this tensor.
  expected<tensor> clone() const;

  /// Printed like "tensor(f32, [2,3], [[1, 2, 3], [4, 5, 6]])", eliding beyond `max_elements`.
  std::string to_string(int64_t max_elements = 64) const;

 private:
  /// The same bytes read as booleans (one byte each, 0 or 1).
  tensor as_boolean() const { return tensor{dtype::boolean, shape_, strides_, offset_, storage_}; }

  dtype dtype_ = dtype::f32;
  af::shape shape_;
  af::strides strides_;
  int64_t offset_ = 0;
  std::shared_ptr<storage> storage_;
};

/// Same dtype, shape and elements (NaN equals NaN here, so round-trips compare equal).
bool all_equal(const tensor& a, const tensor& b);
/// Same shape and |a - b| <= atol + rtol * |b| elementwise (compared in double, any dtypes).
bool all_close(const tensor& a, const tensor& b, double rtol = 1e-5, double atol = 1e-6);

/// Copies `src` (any layout) into the contiguous tensor `dst` of the same shape, converting dtype.
expected<void> copy_into(const tensor& src, tensor& dst);

/// Reads the element at byte address `p` of dtype `t` as double / writes `v` converted to `t`.
double load_as_double(const void* p, dtype t) noexcept;
void store_from_double(void* p, dtype t, double v) noexcept;

template <class T>
tensor tensor::from_vector(std::vector<T> values, const af::shape& dims) {
  AF_ASSERT(static_cast<int64_t>(values.size()) == af::numel(dims));
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> packs bits
    return from_vector(std::vector<uint8_t>(values.begin(), values.end()), dims).as_boolean();
  } else {
    if (values.empty()) values.reserve(1);  // a real address even for no elements
    auto held = std::make_shared<std::vector<T>>(std::move(values));
    const std::size_t nbytes = held->size() * sizeof(T);
    auto buf = std::make_shared<storage>(held->data(), nbytes, device::cpu(), [held](void*) mutable { held.reset(); });
    return tensor{dtype_v<T>, dims, contiguous_strides(dims), 0, std::move(buf)};
  }
}

template <class T>
std::vector<T> tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(numel()));
  if (numel() == 0) return out;
  // Strings copy as strings and convert to nothing else; numbers never become strings.
  if constexpr (std::is_same_v<T, std::string>) AF_ASSERT(is_string(dtype_));
  else AF_ASSERT(!is_string(dtype_));
  std::vector<int64_t> index(shape_.size(), 0);
  const char* base = static_cast<const char*>(raw_data());
  const std::size_t elem = size_of(dtype_);
  for (int64_t n = 0; n < numel(); ++n) {
    int64_t off = 0;
    for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * strides_[d];
    const char* p = base + off * static_cast<int64_t>(elem);
    if constexpr (std::is_same_v<T, std::string>) {
      out.push_back(*reinterpret_cast<const std::string*>(p));
    } else if (dtype_ == dtype_v<T>) {  // exact, also for i64 values beyond double's 53 bits
      T v;
      std::memcpy(&v, p, sizeof(T));
      out.push_back(v);
    } else if constexpr (std::is_same_v<T, bool>) {
      out.push_back(load_as_double(p, dtype_) != 0.0);
    } else {
      out.push_back(static_cast<T>(load_as_double(p, dtype_)));
    }
    for (std::size_t d = index.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace af
