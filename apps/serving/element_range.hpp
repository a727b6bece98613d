#pragma once

// A number from a request stored as one element of a dtype, only when it fits. A request's number
// is the client's, not ours: a 300 for a u8 input, a 1e39 for an f32 one or a 2.5 for an i32 one
// is refused by name, never cast (an out-of-range float-to-integer or double-to-float conversion
// is undefined behaviour, and a silent wrap would answer for a different input).
//
// The rules, for both REST decoders (they must agree) and TensorProto values:
//   integer dtypes   a whole number within the dtype's range (3.0 is 3; 2.5, 256 for u8: refused)
//   f32, f16, bf16   any value whose rounding stays finite; NaN and infinities as given
//   f64              anything
//   bool             zero is false, anything else true

#include <cstddef>
#include <cstdint>

#include "ops/dtype.hpp"

namespace af::serving {

/// Writes `v` as one element of `type` at `out`; false (nothing written) when it does not fit.
bool store_number_if_fits(std::byte* out, dtype type, double v) noexcept;

/// The same for an integer read exactly (a JSON integer, an int64_val); false when out of range.
bool store_integer_if_fits(std::byte* out, dtype type, int64_t v) noexcept;

}  // namespace af::serving
