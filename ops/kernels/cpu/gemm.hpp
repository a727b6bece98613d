#pragma once

// The one GEMM entry of the CPU kernels (matmul, convolutions and their gradients): row-major
// C = op(A) op(B) + beta C, with op(A) [m, k] and op(B) [k, n]. The work is split over our own
// thread pool (parallel_for), rows of C or its columns, and OpenBLAS runs single-threaded on each
// share. One pool serves every kernel: OpenBLAS's own workers spun between calls and took a core
// from the loops around them (im2col, pooling, elementwise): the CNN training step went from 107
// to ~80 ms on 2 cores. GEMMs large on every side still use OpenBLAS's threads, which share packed
// operands (an MLP step was 10% slower split).

#include <cstdint>

namespace af::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace af::cpu
