// CPU matmul: f32/f64 on OpenBLAS, f16/bf16 through f32, integers on a plain row loop.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <string>
#include <type_traits>

#include <cblas.h>

#include "ops/kernels/cpu/gemm.hpp"
#include "ops/linalg.hpp"
#include "ops/parallel.hpp"

namespace af {

namespace {

// OpenBLAS runs a GEMM single-threaded below m*n*k = 65536 * GEMM_MULTITHREAD_THRESHOLD (4), so
// batches of matrices this small are better spread over our own threads.
constexpr int64_t small_gemm_flops = int64_t{1} << 18;

// How BLAS can read a matrix in place: row-major, possibly transposed, with a leading dimension.
struct blas_layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

// A [rows, cols] matrix whose elements sit at row*rs + col*cs. Strides of size-1 dimensions never
// move the pointer, so they do not constrain the layout (NumPy leaves them arbitrary).
blas_layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t r = std::max<int64_t>(rows, 1);
  const int64_t c = std::max<int64_t>(cols, 1);
  if (cols <= 1 || cs == 1) {
    const int64_t ld = rows <= 1 ? c : rs;
    if (ld >= c && ld <= INT_MAX) return {true, false, ld};
  }
  if (rows <= 1 || rs == 1) {
    const int64_t ld = cols <= 1 ? r : cs;
    if (ld >= r && ld <= INT_MAX) return {true, true, ld};
  }
  return {};
}

blas_layout layout_of(const tensor& m) {
  const int n = m.ndim();
  return layout_of(m.shape()[n - 2], m.shape()[n - 1], m.strides()[n - 2], m.strides()[n - 1]);
}

// Element offset of each matrix of `t` (all but its last two dimensions index matrices) for every
// index of the broadcast batch shape, in row-major order. Broadcast dimensions contribute nothing.
std::vector<int64_t> batch_offsets(const tensor& t, const shape& batch) {
  const int64_t count = numel(batch);
  std::vector<int64_t> offsets(static_cast<std::size_t>(count), 0);
  const int own = t.ndim() - 2;
  const int lead = static_cast<int>(batch.size()) - own;
  std::vector<int64_t> index(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t off = 0;
    for (int d = 0; d < own; ++d)
      if (t.shape()[d] != 1) off += index[lead + d] * t.strides()[d];
    offsets[static_cast<std::size_t>(i)] = off;
    for (std::size_t d = batch.size(); d-- > 0;) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc) {
  cpu::gemm(ta, tb, m, n, k, a, lda, b, ldb, T(0), c, ldc);
}

// `a` [..., M, K] and `b` [..., K, N] with transposes already applied as views; `out` contiguous
// [batch..., M, N] with M, N, K > 0.
template <class T>
expected<void> blas_matmul(tensor a, tensor b, tensor& out, const shape& batch) {
  blas_layout la = layout_of(a);
  if (!la.ok) {  // only genuinely strided operands are copied
    AF_TRY_ASSIGN(a, a.contiguous());
    la = layout_of(a);
  }
  blas_layout lb = layout_of(b);
  if (!lb.ok) {
    AF_TRY_ASSIGN(b, b.contiguous());
    lb = layout_of(b);
  }
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const T* pa = a.template data<T>();
  const T* pb = b.template data<T>();
  T* pc = out.template data<T>();
  if (batch.empty()) {  // plain 2-D: no offset tables, since small GEMMs feel every allocation
    gemm(la.trans, lb.trans, m, n, k, pa, la.ld, pb, lb.ld, pc, n);
    return {};
  }
  const auto offs_a = batch_offsets(a, batch);
  const auto offs_b = batch_offsets(b, batch);
  const int64_t count = static_cast<int64_t>(offs_a.size());

  // One shared right matrix and a left operand whose matrices follow each other row by row
  // ([B,M,K] x [K,N]): a single GEMM with B*M rows is faster than B small ones.
  bool fold = count > 1 && !la.trans && m * count <= INT_MAX;
  for (int64_t i = 0; fold && i < count; ++i)
    fold = offs_b[i] == offs_b[0] && offs_a[i] == offs_a[0] + i * m * la.ld;
  if (fold || count == 1) {
    gemm(la.trans, lb.trans, m * (fold ? count : 1), n, k, pa + offs_a[0], la.ld, pb + offs_b[0], lb.ld, pc, n);
    return {};
  }
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      gemm(la.trans, lb.trans, m, n, k, pa + offs_a[i], la.ld, pb + offs_b[i], lb.ld, pc + i * m * n, n);
  };
  const int64_t flops = m * n * k;
  if (flops < small_gemm_flops && thread_budget() > 1)
    parallel_for(count, std::max<int64_t>(1, small_gemm_flops / 8 / flops), run);
  else
    run(0, count);  // each GEMM is big enough for OpenBLAS's own threads
  return {};
}

// Integer matmul: accumulates in uint64 so overflow wraps (as two's complement) instead of being UB.
template <class T>
void integer_matmul(const tensor& a, const tensor& b, tensor& out, const shape& batch) {
  const int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  const int64_t ars = a.strides()[a.ndim() - 2], acs = a.strides()[a.ndim() - 1];
  const int64_t brs = b.strides()[b.ndim() - 2], bcs = b.strides()[b.ndim() - 1];
  const auto offs_a = batch_offsets(a, batch);
  const auto offs_b = batch_offsets(b, batch);
  const T* pa = a.template data<T>();
  const T* pb = b.template data<T>();
  T* pc = out.template data<T>();
  auto widen = [](T v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
  const int64_t rows = static_cast<int64_t>(offs_a.size()) * m;
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * k)), [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> acc(static_cast<std::size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / m, i = r % m;
      std::fill(acc.begin(), acc.end(), 0);
      const T* arow = pa + offs_a[bi] + i * ars;
      const T* bmat = pb + offs_b[bi];
      for (int64_t p = 0; p < k; ++p) {
        const uint64_t av = widen(arow[p * acs]);
        if (av == 0) continue;
        const T* brow = bmat + p * brs;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * widen(brow[j * bcs]);
      }
      T* crow = pc + r * n;
      for (int64_t j = 0; j < n; ++j) crow[j] = static_cast<T>(acc[j]);
    }
  });
}

// Converts any view to a contiguous tensor of dtype `to`.
expected<tensor> converted(const tensor& t, dtype to) {
  AF_TRY_ASSIGN(tensor out, tensor::empty(t.shape(), to));
  AF_TRY(copy_into(t, out));
  return out;
}

std::string operands(const tensor& a, const tensor& b, bool ta, bool tb) {
  std::string s = to_string(a.shape()) + " x " + to_string(b.shape());
  if (ta || tb)
    s += std::string(" (transpose_a=") + (ta ? "true" : "false") + ", transpose_b=" + (tb ? "true" : "false") + ")";
  return s;
}

// `t` seen as a stack of matrices: 1-D becomes a row (left) or a column (right); the transpose flag
// swaps the last two dimensions as a view.
tensor as_matrices(const tensor& t, bool left, bool transpose) {
  if (t.ndim() == 1) {
    const int64_t len = t.shape()[0], step = t.strides()[0];
    shape dims = left ? shape{1, len} : shape{len, 1};
    strides st = left ? strides{len * step, step} : strides{step, 1};
    return tensor{t.type(), dims, st, t.offset(), t.buffer()};
  }
  if (!transpose) return t;
  shape dims = t.shape();
  strides st = t.strides();
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return tensor{t.type(), dims, st, t.offset(), t.buffer()};
}

}  // namespace

void sync_blas_threads() noexcept {
  static const std::string core = blas_core_name();  // links blas_core.cpp, whose start-up check runs first
  (void)core;
  // Our pool runs the shares of each GEMM (ops/kernels/cpu/gemm.hpp): OpenBLAS runs one thread.
  // Checked each time: a program may have set OpenBLAS's threads itself since.
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

expected<tensor> matmul(const tensor& a, const tensor& b, bool transpose_a, bool transpose_b) {
  if (!a.defined() || !b.defined())
    return make_error(errc::invalid_argument, "matmul: undefined operand");
  if (!a.dev().is_cpu() || !b.dev().is_cpu())
    return make_error(errc::unsupported, "matmul: CPU kernel got tensors on " + to_string(a.dev()) + " and " +
                                             to_string(b.dev()));
  if (a.type() != b.type())
    return make_error(errc::dtype_mismatch, "matmul: operand dtypes differ: " + std::string(to_string(a.type())) +
                                                " " + to_string(a.shape()) + " x " + std::string(to_string(b.type())) +
                                                " " + to_string(b.shape()));
  if (a.type() == dtype::boolean || is_string(a.type()))
    return make_error(errc::dtype_mismatch, "matmul: " + std::string(to_string(a.type())) + " operands are not supported: " +
                                                operands(a, b, transpose_a, transpose_b));
  if (a.ndim() == 0 || b.ndim() == 0)
    return make_error(errc::invalid_argument, "matmul: operands must have rank >= 1: " +
                                                  operands(a, b, transpose_a, transpose_b));
  const tensor va = as_matrices(a, true, transpose_a);
  const tensor vb = as_matrices(b, false, transpose_b);
  const int64_t m = va.dim(-2), k = va.dim(-1), n = vb.dim(-1);
  if (k != vb.dim(-2))
    return make_error(errc::shape_mismatch, "matmul: inner dimensions differ: " +
                                                operands(a, b, transpose_a, transpose_b));
  const shape batch_a(va.shape().begin(), va.shape().end() - 2);
  const shape batch_b(vb.shape().begin(), vb.shape().end() - 2);
  auto batch = broadcast_shapes(batch_a, batch_b, "matmul");
  if (!batch)
    return make_error(errc::shape_mismatch, "matmul: batch dimensions cannot be broadcast: " +
                                                operands(a, b, transpose_a, transpose_b));
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return make_error(errc::invalid_argument, "matmul: a matrix dimension exceeds 2^31-1: " +
                                                  operands(a, b, transpose_a, transpose_b));

  shape full = *batch;
  full.push_back(m);
  full.push_back(n);
  shape result = *batch;
  if (a.ndim() > 1) result.push_back(m);
  if (b.ndim() > 1) result.push_back(n);

  if (numel(full) == 0 || k == 0) return tensor::zeros(result, a.type());
  AF_TRY_ASSIGN(tensor out, tensor::empty(full, a.type()));
  switch (a.type()) {
    case dtype::f32: AF_TRY(blas_matmul<float>(va, vb, out, *batch)); break;
    case dtype::f64: AF_TRY(blas_matmul<double>(va, vb, out, *batch)); break;
    case dtype::f16:
    case dtype::bf16: {
      AF_TRY_ASSIGN(tensor fa, converted(va, dtype::f32));
      AF_TRY_ASSIGN(tensor fb, converted(vb, dtype::f32));
      AF_TRY_ASSIGN(tensor fc, tensor::empty(full, dtype::f32));
      AF_TRY(blas_matmul<float>(fa, fb, fc, *batch));
      AF_TRY(copy_into(fc, out));
      break;
    }
    case dtype::i8: integer_matmul<int8_t>(va, vb, out, *batch); break;
    case dtype::u8: integer_matmul<uint8_t>(va, vb, out, *batch); break;
    case dtype::i32: integer_matmul<int32_t>(va, vb, out, *batch); break;
    case dtype::i64: integer_matmul<int64_t>(va, vb, out, *batch); break;
    case dtype::boolean: case dtype::string: break;  // rejected above
  }
  if (result.size() == full.size()) return out;
  return out.reshape(result);
}

}  // namespace af
