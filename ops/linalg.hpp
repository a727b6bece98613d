#pragma once

#include <string>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// Matrix product over the last two dimensions, like NumPy's matmul.
/// - 2-D x 2-D: [M,K] x [K,N] -> [M,N].
/// - Rank >= 3: the leading (batch) dimensions broadcast, so [B,M,K] x [K,N] -> [B,M,N] and
///   [B,1,M,K] x [1,C,K,N] -> [B,C,M,N].
/// - A 1-D left operand acts as a row [1,K], a 1-D right operand as a column [K,1]; the added
///   dimension is dropped from the result. The transpose flags do not apply to 1-D operands.
/// - transpose_a / transpose_b swap the last two dimensions of that operand first (no copy).
/// f32/f64 run on OpenBLAS without copying contiguous or transposed operands; f16/bf16 multiply in
/// f32; integer dtypes wrap around on overflow. shape_mismatch, dtype_mismatch (also for bool),
/// invalid_argument (undefined or rank-0 operands), unsupported (not on the CPU).
expected<tensor> matmul(const tensor& a, const tensor& b, bool transpose_a = false, bool transpose_b = false);

/// Keeps OpenBLAS single-threaded: our GEMM entry (ops/kernels/cpu/gemm.hpp) splits the work over
/// thread_budget() threads itself. One call into OpenBLAS when nothing changed, so BLAS-calling
/// kernels call it before every BLAS call.
void sync_blas_threads() noexcept;

/// The kernels OpenBLAS runs ("SkylakeX", "Haswell", ...; "unknown" for another BLAS). Where
/// Debian's OpenBLAS falls back to its Prescott kernels on a newer CPU, the library has it choose
/// again at program start (unless OPENBLAS_CORETYPE names a core).
std::string blas_core_name();

}  // namespace af
