#include "ops/dtype.hpp"

#include <string>

namespace af {

std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i8: return "i8";
    case dtype::u8: return "u8";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::boolean: return "bool";
    case dtype::string: return "string";
  }
  return "?";
}

expected<dtype> parse_dtype(std::string_view name) {
  struct alias { std::string_view name; dtype type; };
  static constexpr alias aliases[] = {
      {"f32", dtype::f32},   {"float32", dtype::f32}, {"float", dtype::f32},
      {"f64", dtype::f64},   {"float64", dtype::f64}, {"double", dtype::f64},
      {"f16", dtype::f16},   {"float16", dtype::f16}, {"half", dtype::f16},
      {"bf16", dtype::bf16}, {"bfloat16", dtype::bf16},
      {"i8", dtype::i8},     {"int8", dtype::i8},
      {"u8", dtype::u8},     {"uint8", dtype::u8},
      {"i32", dtype::i32},   {"int32", dtype::i32},
      {"i64", dtype::i64},   {"int64", dtype::i64},
      {"bool", dtype::boolean}, {"boolean", dtype::boolean},
  };
  for (const auto& a : aliases)
    if (a.name == name) return a.type;
  return make_error(errc::unknown_dtype, "unknown dtype '" + std::string(name) + "'");
}

expected<dtype> dtype_from_code(uint32_t code) {
  if (code < static_cast<uint32_t>(dtype_count)) return static_cast<dtype>(code);
  if (code == static_cast<uint32_t>(dtype::string))
    return make_error(errc::unknown_dtype, "dtype code " + std::to_string(code) + " (string) cannot be read as bytes");
  return make_error(errc::unknown_dtype, "unknown dtype code " + std::to_string(code));
}

expected<dtype> value_dtype_from_code(uint32_t code) {
  if (code == static_cast<uint32_t>(dtype::string)) return dtype::string;
  return dtype_from_code(code);
}

// binary16 <-> binary32 conversions by bit manipulation (round to nearest even), so the CPU backend
// does not depend on compiler support for _Float16.
half::half(float value) noexcept {
  uint32_t x = std::bit_cast<uint32_t>(value);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    bits = static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // subnormal half or zero
    // Add 0.5 (as float) so that the FPU does the rounding into the subnormal range.
    float f = std::bit_cast<float>(abs) + 0.5f;
    bits = static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(f) - 0x3f000000u));
    return;
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  bits = static_cast<uint16_t>(sign | (abs >> 13));
}

half::operator float() const noexcept {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    float f = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -f : f;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace af
