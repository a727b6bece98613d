#pragma once

// Branch-free float approximations of exp, erf and tanh that compilers vectorise (plain arithmetic,
// selects and integer bit tricks; no calls into libm). Accuracy, measured against double-precision
// libm over the ranges the tests sweep (always inlined, so each ISA build of the fused loops gets
// its own copy): exp ~2 ulp on [-87, 88] (saturates at e^88 above), erf
// absolute error <= 1.5e-7 (Abramowitz & Stegun 7.1.26), tanh relative error <= 5e-7. Doubles use
// libm: fused f64 programs are for exactness, f32 for speed.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace af::cpu {

// e^x for x in [-87, 88] (the callers clamp): no range checks, so that a caller that knows its
// range pays for none.
[[gnu::always_inline]] inline float exp_in_range(float x) {
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor would stop vectorisation).
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // x - k ln2 in two parts, so the reduced argument keeps its low bits.
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

[[gnu::always_inline]] inline float fast_exp(float x) { return exp_in_range(std::min(std::max(x, -87.0f), 88.0f)); }

// e^x with libm's edges: inf past ln(FLT_MAX), subnormals down to 0, NaN for NaN. Arguments
// outside exp_in_range's range are shifted by 32 and the result scaled back by e^+-32.
[[gnu::always_inline]] inline float exp_full_range(float x) {
  const bool tiny = x < -87.0f, huge = x > 87.0f;
  const float shifted = tiny ? std::max(x, -119.0f) + 32.0f : huge ? std::min(x, 89.0f) - 32.0f : x;
  const float r = exp_in_range(shifted);
  const float scaled = tiny ? r * 1.26641655e-14f : huge ? r * 7.89629602e13f : r;
  return x > 88.7228394f ? std::numeric_limits<float>::infinity() : scaled;
}

[[gnu::always_inline]] inline float fast_erf(float x) {
  // Beyond 9 erf is 1 in float; the clamp also keeps -a*a within exp_in_range's range.
  const float a = std::min(std::fabs(x), 9.0f);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * exp_in_range(-a * a);
  return std::copysign(y, x);
}

[[gnu::always_inline]] inline float fast_tanh(float x) {
  const float a = std::fabs(x);
  // Near 0 the odd series keeps full relative precision; elsewhere 1 - 2/(e^2a + 1).
  const float a2 = a * a;
  float series = 62.0f / 2835.0f;
  series = series * a2 - 17.0f / 315.0f;
  series = series * a2 + 2.0f / 15.0f;
  series = series * a2 - 1.0f / 3.0f;
  series = (series * a2) * a + a;
  const float far = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
  const float y = a < 0.25f ? series : far;
  return std::copysign(y, x);
}

[[gnu::always_inline]] inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

}  // namespace af::cpu
