#pragma once

// A vector of trivially copyable values that keeps up to N of them inline. Tensor shapes and
// strides use it: nearly every tensor has few dimensions, and a heap allocation per shape and per
// stride vector was a large part of creating a small tensor (an input pipeline creates several per
// element, on different threads than the ones that free them).
//
// It converts to and from std::vector<T> implicitly, so code written against std::vector keeps
// working.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

namespace af {

template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>, "small_vector holds trivially copyable values");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  small_vector() noexcept = default;
  explicit small_vector(size_type n) { resize(n); }
  small_vector(size_type n, const T& value) { assign(n, value); }
  small_vector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  small_vector(It first, It last) {
    assign(first, last);
  }
  small_vector(const std::vector<T>& values) { assign(values.begin(), values.end()); }  // NOLINT: implicit by design
  small_vector(const small_vector& other) { assign(other.begin(), other.end()); }
  small_vector(small_vector&& other) noexcept { steal(other); }
  ~small_vector() { release(); }

  small_vector& operator=(const small_vector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  small_vector& operator=(small_vector&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  small_vector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design

  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      const auto n = static_cast<size_type>(std::distance(first, last));
      // `first` may point into this vector: copy before growing.
      if (n > capacity_) {
        small_vector fresh;
        fresh.grow_to(n);
        std::copy(first, last, fresh.data_);
        fresh.size_ = n;
        *this = std::move(fresh);
        return;
      }
      std::copy(first, last, data_);
      size_ = n;
    } else {
      clear();
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(size_type n, const T& value) {
    const T copy = value;
    clear();
    reserve(n);
    std::fill_n(data_, n, copy);
    size_ = n;
  }

  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator{end()}; }
  reverse_iterator rend() noexcept { return reverse_iterator{begin()}; }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator{end()}; }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator{begin()}; }

  T& operator[](size_type i) noexcept { return data_[i]; }
  const T& operator[](size_type i) const noexcept { return data_[i]; }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_type n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() noexcept { size_ = 0; }
  void resize(size_type n) { resize(n, T{}); }
  void resize(size_type n, const T& value) {
    const T copy = value;
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, copy);
    size_ = n;
  }
  void push_back(const T& value) {
    const T copy = value;  // `value` may live in this vector
    make_room(size_ + 1);
    data_[size_++] = copy;
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_type{1}, value); }
  iterator insert(const_iterator pos, size_type n, const T& value) {
    const T copy = value;
    const auto at = static_cast<size_type>(pos - data_);
    open_gap(at, n);
    std::fill_n(data_ + at, n, copy);
    return data_ + at;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const small_vector values(first, last);  // the range may point into this vector
    const auto at = static_cast<size_type>(pos - data_);
    open_gap(at, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    auto* from = const_cast<T*>(first);
    auto* to = const_cast<T*>(last);
    std::copy(to, end(), from);
    size_ -= static_cast<size_type>(to - from);
    return from;
  }

  void swap(small_vector& other) noexcept {
    small_vector tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const small_vector& a, const small_vector& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const small_vector& a, const small_vector& b) noexcept { return !(a == b); }
  friend bool operator<(const small_vector& a, const small_vector& b) noexcept {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const small_vector& a, const std::vector<T>& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const std::vector<T>& a, const small_vector& b) noexcept { return b == a; }
  friend bool operator!=(const small_vector& a, const std::vector<T>& b) noexcept { return !(a == b); }
  friend bool operator!=(const std::vector<T>& a, const small_vector& b) noexcept { return !(b == a); }

 private:
  bool on_heap() const noexcept { return data_ != inline_; }

  void grow_to(size_type n) {
    n = std::max<size_type>(n, N);
    auto* fresh = new T[n];
    std::copy(data_, data_ + size_, fresh);
    release();
    data_ = fresh;
    capacity_ = n;
  }
  // Room for `needed` values, doubling the capacity when it grows.
  void make_room(size_type needed) {
    if (needed > capacity_) grow_to(std::max(needed, 2 * capacity_));
  }
  void release() noexcept {
    if (on_heap()) delete[] data_;
    data_ = inline_;
    capacity_ = N;
  }
  // Takes other's values; leaves other empty and inline.
  void steal(small_vector& other) noexcept {
    if (other.on_heap()) {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = N;
    } else {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
    }
    size_ = other.size_;
    other.size_ = 0;
  }
  // Moves [at, size) up by n, growing as needed.
  void open_gap(size_type at, size_type n) {
    make_room(size_ + n);
    std::copy_backward(data_ + at, data_ + size_, data_ + size_ + n);
    size_ += n;
  }

  T inline_[N] = {};
  T* data_ = inline_;
  size_type size_ = 0;
  size_type capacity_ = N;
};

}  // namespace af
