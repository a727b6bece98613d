#pragma once
// Loop machinery shared by the CPU elementwise kernels (private to ops/kernels/cpu/).
//
// Every elementwise op writes a fresh contiguous output from N strided inputs. A loop_plan folds the
// inputs' broadcasting into strides (0 along broadcast dims), drops size-1 dims and merges adjacent
// dims that are laid out back to back for every operand. After that the common cases are a single
// run: same-shape contiguous inputs have inner strides 1, "tensor op scalar" has a stride 0, and a
// row vector broadcast is an outer dim of stride 0 around a contiguous inner run. The kernels then
// only have to specialise the innermost loop on its strides.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/parallel.hpp"
#include "ops/shape.hpp"
#include "ops/tensor.hpp"

namespace af::cpu {

/// Elements per parallel chunk: below this an op stays on the calling thread.
inline constexpr int64_t elementwise_grain = 64 * 1024;
/// Outputs at least this large bypass the cache with streaming stores: they would not stay in the
/// cache anyway, and skipping the read-for-ownership of the destination saves a third of the traffic.
inline constexpr std::size_t streaming_store_bytes = std::size_t{16} << 20;

/// The type arithmetic happens in: float for the 16-bit floats, the element type otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

/// Iteration space of an elementwise loop over N inputs writing a contiguous output.
template <int N>
struct loop_plan {
  std::vector<int64_t> dims;                 ///< coalesced dims, outermost first; never empty
  std::array<std::vector<int64_t>, N> st{};  ///< per input: stride in elements along each dim
  int64_t numel = 0;

  int64_t inner() const { return dims.back(); }
  int64_t inner_stride(int k) const { return st[k].back(); }
};

/// Plans a loop over `out_shape` (the broadcast of all inputs' shapes).
template <int N>
loop_plan<N> make_plan(const shape& out_shape, const std::array<const tensor*, N>& in) {
  const std::size_t rank = out_shape.size();
  loop_plan<N> p;
  p.numel = af::numel(out_shape);
  // Broadcast strides, aligned to the output's rank.
  std::array<std::vector<int64_t>, N> full;
  for (int k = 0; k < N; ++k) {
    full[k].assign(rank, 0);
    const auto& s = in[k]->shape();
    const auto& t = in[k]->strides();
    const std::size_t lead = rank - s.size();
    for (std::size_t d = lead; d < rank; ++d)
      full[k][d] = s[d - lead] == 1 ? 0 : t[d - lead];
  }
  for (std::size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;
    // Merge into the previous dim when every input steps over it as one run.
    bool merge = !p.dims.empty();
    for (int k = 0; k < N && merge; ++k) merge = p.st[k].back() == full[k][d] * out_shape[d];
    if (merge) {
      p.dims.back() *= out_shape[d];
      for (int k = 0; k < N; ++k) p.st[k].back() = full[k][d];
    } else {
      p.dims.push_back(out_shape[d]);
      for (int k = 0; k < N; ++k) p.st[k].push_back(full[k][d]);
    }
  }
  if (p.dims.empty()) {  // a scalar, or all dims of size 1
    p.dims.push_back(1);
    for (int k = 0; k < N; ++k) p.st[k].push_back(0);
  }
  return p;
}

/// Calls fn(out_index, in_offsets, count) for each innermost run covering output elements
/// [begin, end): output element out_index + j reads input k at in_offsets[k] + j * inner_stride(k).
template <int N, class Fn>
void for_each_run(const loop_plan<N>& p, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;  // also keeps a 0-sized dim away from the divisions below
  const int r = static_cast<int>(p.dims.size());
  std::vector<int64_t> idx(static_cast<std::size_t>(r), 0);
  std::array<int64_t, N> off{};
  int64_t rem = begin;
  for (int d = r; d-- > 0;) {
    idx[d] = rem % p.dims[d];
    rem /= p.dims[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * p.st[k][d];
  }
  const int64_t inner = p.dims[r - 1];
  for (int64_t pos = begin; pos < end;) {
    const int64_t count = std::min(inner - idx[r - 1], end - pos);
    fn(pos, off, count);
    pos += count;
    if (pos >= end) break;
    // The run ended at the end of the inner dim: step the outer index like an odometer.
    for (int k = 0; k < N; ++k) off[k] -= idx[r - 1] * p.st[k][r - 1];
    idx[r - 1] = 0;
    for (int d = r - 1; d-- > 0;) {
      for (int k = 0; k < N; ++k) off[k] += p.st[k][d];
      if (++idx[d] < p.dims[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= p.dims[d] * p.st[k][d];
      idx[d] = 0;
    }
  }
}

/// Copies `bytes` (a multiple of 32) from the cache-resident `src` to 32-byte aligned `dst` with
/// non-temporal stores.
inline void stream_copy(void* dst, const void* src, std::size_t bytes) noexcept {
#if defined(__AVX__)
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  for (std::size_t i = 0; i < bytes / 32; ++i) _mm256_stream_si256(d + i, _mm256_load_si256(s + i));
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// Orders this thread's streaming stores before whatever signals completion to other threads.
inline void stream_fence() noexcept {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

/// Fills out[0, n) with body(dst, start, count) (which writes elements start..start+count of the
/// result to dst[0..count)). Large outputs are computed block-wise into an L1-resident buffer and
/// streamed to memory; `streaming` chooses that path.
template <class O, class Body>
void fill_contiguous(O* out, int64_t n, bool streaming, Body&& body) {
  constexpr int64_t block = 4096 / static_cast<int64_t>(sizeof(O));
  if (!streaming || n < 4 * block) {  // short runs (a broadcast row) gain nothing from streaming
    body(out, 0, n);
    return;
  }
  alignas(64) O buffer[block];
  const auto misalign = reinterpret_cast<std::uintptr_t>(out) % 32;
  int64_t head = misalign == 0 ? 0 : static_cast<int64_t>((32 - misalign) / sizeof(O));
  if (misalign % sizeof(O) != 0) head = n;  // cannot align: plain stores
  head = std::min(head, n);
  body(out, 0, head);
  int64_t i = head;
  for (; i + block <= n; i += block) {
    body(buffer, i, block);
    stream_copy(out + i, buffer, sizeof(buffer));
  }
  body(out + i, i, n - i);
  stream_fence();
}

/// unsupported naming `op` unless every tensor is defined and on the CPU.
inline expected<void> check_cpu(const char* op, std::initializer_list<const tensor*> ts) {
  for (const tensor* t : ts) {
    if (!t->defined())
      return make_error(errc::invalid_argument, std::string(op) + ": undefined tensor");
    if (!t->dev().is_cpu())
      return make_error(errc::unsupported, std::string(op) + ": tensor on " + to_string(t->dev()) +
                                               ", this kernel runs on the cpu only");
  }
  return {};
}

}  // namespace af::cpu
