#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ops/assert.hpp"
#include "ops/error.hpp"

namespace af {

/// Element types. The numeric codes are part of the wire format: never renumber.
///
/// `string` holds byte strings (TF's DT_STRING: any bytes, not only UTF-8), one std::string per
/// element. It is not a number: no kernel computes on it, visit_dtype refuses it, and only the
/// functions that say so take it (views, copies, concat, comparison, printing). It never crosses
/// a byte-level format either: dtype_from_code and parse_dtype do not return it, so no file or
/// message can make one; a graph's signature can (value_dtype_from_code).
enum class dtype : uint8_t { f32 = 0, f64 = 1, f16 = 2, bf16 = 3, i8 = 4, u8 = 5, i32 = 6, i64 = 7, boolean = 8, string = 9 };

/// The numeric dtypes, codes 0 to dtype_count - 1 (string is not one of them).
inline constexpr int dtype_count = 9;

/// Bytes per element.
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f64: case dtype::i64: return 8;
    case dtype::f32: case dtype::i32: return 4;
    case dtype::f16: case dtype::bf16: return 2;
    case dtype::i8: case dtype::u8: case dtype::boolean: return 1;
    case dtype::string: return sizeof(std::string);
  }
  return 0;
}

constexpr bool is_string(dtype t) noexcept { return t == dtype::string; }

constexpr bool is_floating(dtype t) noexcept {
  return t == dtype::f32 || t == dtype::f64 || t == dtype::f16 || t == dtype::bf16;
}
constexpr bool is_integral(dtype t) noexcept {
  return t == dtype::i8 || t == dtype::u8 || t == dtype::i32 || t == dtype::i64;
}

/// "f32", "bf16", "bool", ...
std::string_view to_string(dtype t) noexcept;
/// Parses the names printed by to_string (also "float32", "int64", "bool", ...); unknown_dtype otherwise.
expected<dtype> parse_dtype(std::string_view name);
/// Checks a numeric dtype code read from the wire or a file; unknown_dtype otherwise (string's
/// code too: its elements are objects, never bytes to be read).
expected<dtype> dtype_from_code(uint32_t code);
/// The same, string included: for the types a graph declares, whose values its ops make.
expected<dtype> value_dtype_from_code(uint32_t code);

/// IEEE binary16, stored as bits; arithmetic happens in float.
struct half {
  uint16_t bits = 0;
  half() = default;
  half(float value) noexcept;  // NOLINT: implicit like a built-in float type
  operator float() const noexcept;
};

/// bfloat16 (the upper half of an IEEE float), round-to-nearest-even on conversion.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float value) noexcept {  // NOLINT
    uint32_t u = std::bit_cast<uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>((u + rounding) >> 16);
    }
  }
  operator float() const noexcept { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

/// Compile-time mapping between C++ element types and dtype.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of<half> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_of<bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of<uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_of<int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<int64_t> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_of<bool> { static constexpr dtype value = dtype::boolean; };
template <> struct dtype_of<std::string> { static constexpr dtype value = dtype::string; };
template <class T> inline constexpr dtype dtype_v = dtype_of<T>::value;

/// Calls fn(T{}) with the C++ type of `t` (a type tag; the value is meaningless). Numeric dtypes
/// only: a string reaching a numeric kernel is a bug upstream (a graph check or a decoder missed it).
template <class Fn>
decltype(auto) visit_dtype(dtype t, Fn&& fn) {
  AF_ASSERT(!is_string(t));
  switch (t) {
    case dtype::f32: return fn(float{});
    case dtype::f64: return fn(double{});
    case dtype::f16: return fn(half{});
    case dtype::bf16: return fn(bfloat16{});
    case dtype::i8: return fn(int8_t{});
    case dtype::u8: return fn(uint8_t{});
    case dtype::i32: return fn(int32_t{});
    case dtype::i64: return fn(int64_t{});
    case dtype::boolean: return fn(bool{});
    case dtype::string: break;
  }
  return fn(float{});
}

}  // namespace af
