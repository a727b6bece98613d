#include "apps/serving/element_range.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace af::serving {

namespace {

template <class T>
void put(std::byte* out, T v) noexcept {
  std::memcpy(out, &v, sizeof v);
}

template <class T>
bool whole_in_range(double v) noexcept {
  // Compared as doubles: min is exact, and max + 1 is a power of two, so `< max + 1` is exact too
  // (max itself rounds up to 2^63 for int64).
  return std::trunc(v) == v && v >= static_cast<double>(std::numeric_limits<T>::min()) &&
         v < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
}

template <class T>
bool store_whole(std::byte* out, double v) noexcept {
  if (!whole_in_range<T>(v)) return false;
  put(out, static_cast<T>(v));
  return true;
}

template <class T>
bool store_integer(std::byte* out, int64_t v) noexcept {
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) || v > static_cast<int64_t>(std::numeric_limits<T>::max())) return false;
  put(out, static_cast<T>(v));
  return true;
}

}  // namespace

bool store_number_if_fits(std::byte* out, dtype type, double v) noexcept {
  switch (type) {
    case dtype::f64: put(out, v); return true;
    case dtype::boolean: put(out, static_cast<uint8_t>(v != 0.0)); return true;
    case dtype::i8: return store_whole<int8_t>(out, v);
    case dtype::u8: return store_whole<uint8_t>(out, v);
    case dtype::i32: return store_whole<int32_t>(out, v);
    case dtype::i64: return store_whole<int64_t>(out, v);
    case dtype::f32: case dtype::f16: case dtype::bf16: break;
    case dtype::string: return false;  // a number is not a string
  }
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) return false;
  const auto f = static_cast<float>(v);
  if (type == dtype::f32) {
    put(out, f);
    return true;
  }
  const uint16_t bits = type == dtype::f16 ? half{f}.bits : bfloat16{f}.bits;
  // A finite value that rounds to an infinity (70000 as f16) does not fit.
  if (std::isfinite(f) && (bits & 0x7fffu) == (type == dtype::f16 ? 0x7c00u : 0x7f80u)) return false;
  put(out, bits);
  return true;
}

bool store_integer_if_fits(std::byte* out, dtype type, int64_t v) noexcept {
  switch (type) {
    case dtype::i64: put(out, v); return true;
    case dtype::i32: return store_integer<int32_t>(out, v);
    case dtype::i8: return store_integer<int8_t>(out, v);
    case dtype::u8: return store_integer<uint8_t>(out, v);
    case dtype::boolean: put(out, static_cast<uint8_t>(v != 0)); return true;
    default: return store_number_if_fits(out, type, static_cast<double>(v));
  }
}

}  // namespace af::serving
