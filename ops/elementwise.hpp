#pragma once
// Elementwise ops on the CPU: arithmetic and comparisons with NumPy broadcasting, unary math, where
// and cast. Every op returns a fresh contiguous tensor or an error naming the op, shapes and dtypes;
// none throws or aborts on bad arguments.
//
// Dtype rules (like TensorFlow): binary ops need equal dtypes, there is no implicit promotion.
// Arithmetic takes every numeric dtype (not bool); comparisons take every dtype and return bool;
// transcendental ops take floating dtypes only. f16/bf16 compute in float.
// Integers wrap on overflow (two's complement). Integer division truncates toward zero and defines
// x / 0 = 0 (no trap); integer pow with a negative exponent gives the truncated value of 1/x^n
// (0 unless |x| == 1, and 0 for x == 0). maximum/minimum propagate NaN like NumPy.

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

// -- binary arithmetic ------------------------------------------------------------------------------
/// a + b with broadcasting.
expected<tensor> add(const tensor& a, const tensor& b);
/// a - b with broadcasting.
expected<tensor> sub(const tensor& a, const tensor& b);
/// a * b with broadcasting.
expected<tensor> mul(const tensor& a, const tensor& b);
/// a / b with broadcasting; integers truncate toward zero and x / 0 == 0.
expected<tensor> div(const tensor& a, const tensor& b);
/// a ** b with broadcasting.
expected<tensor> pow(const tensor& a, const tensor& b);
/// Larger of a and b (NaN if either is NaN).
expected<tensor> maximum(const tensor& a, const tensor& b);
/// Smaller of a and b (NaN if either is NaN).
expected<tensor> minimum(const tensor& a, const tensor& b);

// -- comparisons (result dtype bool) ----------------------------------------------------------------
/// a == b elementwise.
expected<tensor> equal(const tensor& a, const tensor& b);
/// a != b elementwise (true where either is NaN).
expected<tensor> not_equal(const tensor& a, const tensor& b);
/// a < b elementwise.
expected<tensor> less(const tensor& a, const tensor& b);
/// a <= b elementwise.
expected<tensor> less_equal(const tensor& a, const tensor& b);
/// a > b elementwise.
expected<tensor> greater(const tensor& a, const tensor& b);
/// a >= b elementwise.
expected<tensor> greater_equal(const tensor& a, const tensor& b);

// -- tensor op scalar: the scalar becomes a 0-d tensor of a's dtype ---------------------------------
expected<tensor> add(const tensor& a, double b);
expected<tensor> sub(const tensor& a, double b);
expected<tensor> mul(const tensor& a, double b);
expected<tensor> div(const tensor& a, double b);
expected<tensor> pow(const tensor& a, double b);
expected<tensor> maximum(const tensor& a, double b);
expected<tensor> minimum(const tensor& a, double b);

// -- unary --------------------------------------------------------------------------------------------
/// -x (numeric dtypes).
expected<tensor> neg(const tensor& x);
/// |x| (numeric dtypes).
expected<tensor> abs(const tensor& x);
/// max(x, 0) (numeric dtypes; NaN stays NaN).
expected<tensor> relu(const tensor& x);
/// e^x (floating dtypes).
expected<tensor> exp(const tensor& x);
/// Natural logarithm (floating dtypes).
expected<tensor> log(const tensor& x);
/// Square root (floating dtypes).
expected<tensor> sqrt(const tensor& x);
/// 1 / sqrt(x) (floating dtypes).
expected<tensor> rsqrt(const tensor& x);
/// Hyperbolic tangent (floating dtypes).
expected<tensor> tanh(const tensor& x);
/// 1 / (1 + e^-x), evaluated without overflow (floating dtypes).
expected<tensor> sigmoid(const tensor& x);
/// The error function (floating dtypes); GELU's gradient needs it.
expected<tensor> erf(const tensor& x);
/// x * Phi(x) with the exact erf form, or the tanh approximation when `approximate` (like
/// tf.nn.gelu) (floating dtypes).
expected<tensor> gelu(const tensor& x, bool approximate = false);

// -- selection and conversion -----------------------------------------------------------------------
/// cond ? a : b elementwise, broadcasting all three; cond must be bool, a and b of one dtype.
expected<tensor> where(const tensor& cond, const tensor& a, const tensor& b);
/// x converted to `to`. Floating to integer truncates toward zero, saturates at the integer's range
/// and maps NaN to 0; anything to bool is x != 0; bool is 0/1; integer narrowing wraps.
expected<tensor> cast(const tensor& x, dtype to);

}  // namespace af
