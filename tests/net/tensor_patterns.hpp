#pragma once

// Deterministic tensors that a test and its peer process both know, so every byte that crosses the
// wire can be checked on the far side (directly, or by checksum).

#include <cstdint>
#include <cstring>
#include <string>

#include "ops/tensor.hpp"

namespace af::test {

inline constexpr af::dtype pattern_dtypes[] = {af::dtype::f32, af::dtype::f64, af::dtype::f16,
                                               af::dtype::bf16, af::dtype::i8, af::dtype::u8,
                                               af::dtype::i32, af::dtype::i64, af::dtype::boolean};

/// The shape of tensor number `i` of a pattern stream: scalars, empty, odd sizes, and every 16th
/// one a full 4 MiB of f32-sized bytes.
inline af::shape pattern_shape(uint64_t i) {
  switch (i % 8) {
    case 0: return {};
    case 1: return {0, 5};
    case 2: return {7};
    case 3: return {3, 5};
    case 4: return {2, 3, 4};
    case 5: return {33, 1, 17};
    case 6: return {4, 0};
    default: return i % 16 == 7 ? af::shape{1024, 1024} : af::shape{129, 31};
  }
}

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

/// Tensor number `i`: a rotating dtype and shape, bytes derived from (i, position). Booleans hold 0/1.
inline af::tensor pattern_tensor(uint64_t i) {
  const auto type = pattern_dtypes[i % 9];
  auto dims = pattern_shape(i);
  if (i % 16 == 7) dims = {1024, static_cast<int64_t>(1024 * 4 / af::size_of(type))};  // 4 MiB
  af::tensor t = *af::tensor::empty(dims, type);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t k = 0; k < t.nbytes(); k += 8) {
    uint64_t word = mix(i * 0x9e3779b97f4a7c15ULL + k);
    std::memcpy(bytes + k, &word, std::min<std::size_t>(8, t.nbytes() - k));
  }
  if (type == af::dtype::boolean)
    for (std::size_t k = 0; k < t.nbytes(); ++k) bytes[k] &= 1;
  return t;
}

/// FNV-1a over dtype code, shape and the row-major bytes.
inline uint64_t checksum(const af::tensor& t) {
  uint64_t h = 1469598103934665603ULL;
  auto eat = [&](const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t k = 0; k < n; ++k) h = (h ^ c[k]) * 1099511628211ULL;
  };
  const auto code = static_cast<uint8_t>(t.type());
  eat(&code, 1);
  for (int64_t d : t.shape()) eat(&d, sizeof d);
  if (t.nbytes() == 0) return h;
  auto dense = *t.contiguous();
  eat(dense.raw_data(), dense.nbytes());
  return h;
}

/// Same dtype, shape and bytes.
inline bool same_bytes(const af::tensor& a, const af::tensor& b) {
  if (a.type() != b.type() || a.shape() != b.shape()) return false;
  if (a.nbytes() == 0) return true;
  auto da = *a.contiguous(), db = *b.contiguous();
  return da.nbytes() == db.nbytes() && std::memcmp(da.raw_data(), db.raw_data(), da.nbytes()) == 0;
}

}  // namespace af::test
