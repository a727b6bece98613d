#include "ops/kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>

#include "ops/linalg.hpp"
#include "ops/parallel.hpp"

namespace af::cpu {

namespace {

// Below this many multiply-adds a split costs more than it saves.
constexpr int64_t split_flops = int64_t{1} << 18;
// GEMMs that go to OpenBLAS's own threads (see below): long on every side and large, or with an
// output of at least `wide_output` elements, each a dot product of at least `deep_k` terms.
constexpr int64_t large_side = 256;
constexpr int64_t large_flops = int64_t{1} << 26;
constexpr int64_t wide_output = int64_t{1} << 16;
constexpr int64_t deep_k = 512;
constexpr int64_t wide_side = 128;

void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

template <class T>
void split_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                T beta, T* c, int64_t ldc) {
  sync_blas_threads();
  const int64_t threads = thread_budget();
  const int64_t work = m * n * k;
  if (threads <= 1 || work < split_flops || m * n == 0) {
    call(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool large = std::min({m, n, k}) >= large_side && work >= large_flops;
  const bool wide_and_deep = std::min(m, n) >= wide_side && m * n >= wide_output && k >= deep_k;
  if (large || wide_and_deep) {
    // Large on every side (an MLP's hidden layers), or a wide output of deep dot products (a batch
    // of 128 through a 784x512 layer: our split ran at 0.53x of OpenBLAS there on an AMD EPYC):
    // OpenBLAS's own threads share one packed copy of each operand, which our split cannot. Its
    // workers spin afterwards, so GEMMs that interleave with our pool's kernels (a CNN's dense
    // layers with 128 outputs and their gradients) stay on our split.
    openblas_set_num_threads(static_cast<int>(threads));
    call(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    openblas_set_num_threads(1);
    return;
  }
  // Each share packs all of the operand it does not split: split the rows of C (packing B again
  // per share) when B is the smaller operand, its columns (packing A again) otherwise.
  const bool by_rows = n <= m;
  const int64_t extent = by_rows ? m : n;
  const int64_t align = 16;  // keeps shares on cache-line and kernel-block boundaries
  const int64_t parts = std::min<int64_t>(threads, std::max<int64_t>(1, extent / align));
  const int64_t share = (extent / parts + align - 1) / align * align;
  parallel_for(parts, 1, [&](int64_t first, int64_t last) {
    for (int64_t part = first; part < last; ++part) {
      const int64_t begin = part * share, end = std::min(extent, begin + share);
      if (begin >= end) continue;
      if (by_rows) {
        const T* a_rows = ta ? a + begin : a + begin * lda;
        call(ta, tb, end - begin, n, k, a_rows, lda, b, ldb, beta, c + begin * ldc, ldc);
      } else {
        const T* b_cols = tb ? b + begin * ldb : b + begin;
        call(ta, tb, m, end - begin, k, a, lda, b_cols, ldb, beta, c + begin, ldc);
      }
    }
  });
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  split_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  split_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace af::cpu
