// Gradients of conv2d and pooling on the CPU (NHWC input, HWIO filter, TensorFlow's padding).
// conv2d's gradients are GEMMs over the forward op's patch matrix (ops/kernels/cpu/im2col.hpp):
// filter gradient = patchesᵀ · output gradient, input gradient = col2im(output gradient · filterᵀ).
// Depthwise filters, whose GEMMs would be one column wide, and pooling run as direct loops over
// the windows, parallel over what is disjoint: images for input gradients, output channels for
// filter gradients.

#include <algorithm>
#include <string>
#include <vector>


#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/cpu/im2col.hpp"
#include "ops/kernels/cpu/simd.hpp"
#include "ops/linalg.hpp"
#include "ops/nn.hpp"
#include "ops/parallel.hpp"

namespace af {

namespace {

struct window_plan {
  int64_t n, h, w, cin, kh, kw, cg, cout, groups, coutg, sh, sw, dh, dw, oh, ow, pad_top, pad_left;
};

expected<window_plan> plan(const char* op, const shape& in, int64_t kh, int64_t kw, int64_t cg, int64_t cout,
                           const shape& out, int64_t groups, std::array<int64_t, 2> strides,
                           std::array<int64_t, 2> dilations, padding_mode padding) {
  if (in.size() != 4 || out.size() != 4)
    return make_error(errc::shape_mismatch, std::string{op} + ": NHWC tensors expected, got " + to_string(in) +
                                                " and " + to_string(out));
  window_plan p{in[0], in[1], in[2], in[3], kh, kw, cg, cout, groups, cout / std::max<int64_t>(1, groups),
                strides[0], strides[1], dilations[0], dilations[1], 0, 0, 0, 0};
  const auto rows = compute_window(p.h, kh, p.sh, p.dh, padding);
  const auto cols = compute_window(p.w, kw, p.sw, p.dw, padding);
  p.oh = rows.out, p.ow = cols.out, p.pad_top = rows.pad_before, p.pad_left = cols.pad_before;
  if (out[0] != p.n || out[1] != p.oh || out[2] != p.ow || out[3] != cout)
    return make_error(errc::shape_mismatch, std::string{op} + ": the output gradient " + to_string(out) +
                                                " does not match the forward output [" + std::to_string(p.n) + "," +
                                                std::to_string(p.oh) + "," + std::to_string(p.ow) + "," +
                                                std::to_string(cout) + "]");
  return p;
}

expected<void> check_float(const char* op, const tensor& a, const tensor& b) {
  if (a.type() != b.type() || (a.type() != dtype::f32 && a.type() != dtype::f64))
    return make_error(errc::dtype_mismatch, std::string{op} + ": needs two f32 or two f64 tensors, got " +
                                                std::string{to_string(a.type())} + " and " + std::string{to_string(b.type())});
  return {};
}

// Calls visit(i, j, ih, iw) for each filter tap of output pixel (y, x) that lands inside the input.
template <class Visit>
void for_each_tap(const window_plan& p, int64_t y, int64_t x, Visit visit) {
  for (int64_t i = 0; i < p.kh; ++i) {
    const int64_t ih = y * p.sh - p.pad_top + i * p.dh;
    if (ih < 0 || ih >= p.h) continue;
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t iw = x * p.sw - p.pad_left + j * p.dw;
      if (iw >= 0 && iw < p.w) visit(i, j, ih, iw);
    }
  }
}

template <class T>
void input_grad(const T* g, const T* f, T* dx, const window_plan& p) {
  parallel_for(p.n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t y = 0; y < p.oh; ++y)
        for (int64_t x = 0; x < p.ow; ++x) {
          const T* go = g + ((b * p.oh + y) * p.ow + x) * p.cout;
          for_each_tap(p, y, x, [&](int64_t i, int64_t j, int64_t ih, int64_t iw) {
            T* d = dx + ((b * p.h + ih) * p.w + iw) * p.cin;
            const T* fk = f + (i * p.kw + j) * p.cg * p.cout;
            for (int64_t grp = 0; grp < p.groups; ++grp)
              for (int64_t ci = 0; ci < p.cg; ++ci) {
                T sum = 0;
                for (int64_t co = grp * p.coutg; co < (grp + 1) * p.coutg; ++co) sum += go[co] * fk[ci * p.cout + co];
                d[grp * p.cg + ci] += sum;
              }
          });
        }
  });
}

template <class T>
void filter_grad(const T* in, const T* g, T* df, const window_plan& p) {
  parallel_for(p.cout, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t co = c0; co < c1; ++co) {
      const int64_t grp = co / p.coutg;
      for (int64_t b = 0; b < p.n; ++b)
        for (int64_t y = 0; y < p.oh; ++y)
          for (int64_t x = 0; x < p.ow; ++x) {
            const T go = g[((b * p.oh + y) * p.ow + x) * p.cout + co];
            for_each_tap(p, y, x, [&](int64_t i, int64_t j, int64_t ih, int64_t iw) {
              const T* src = in + ((b * p.h + ih) * p.w + iw) * p.cin + grp * p.cg;
              T* d = df + (i * p.kw + j) * p.cg * p.cout + co;
              for (int64_t ci = 0; ci < p.cg; ++ci) d[ci * p.cout] += go * src[ci];
            });
          }
    }
  });
}

// Row-major C = op(A) · op(B) + beta C for float and double.
using cpu::gemm;

// Output pixels per chunk of the patch matrix: whole images (col2im runs images in parallel),
// about 8 MiB of patches, at least one image.
template <class T>
int64_t chunk_rows(const window_plan& p) {
  const int64_t per_image = std::max<int64_t>(1, p.oh * p.ow);
  const int64_t images = std::max<int64_t>(1, (int64_t{8} << 20) / static_cast<int64_t>(sizeof(T)) /
                                                  std::max<int64_t>(1, cpu::patch_row(p) * per_image));
  return std::min(p.n, images) * per_image;
}

// Calls fn(col, r0, rows) for each chunk of patch-matrix rows, with one scratch buffer of
// chunk_rows rows reused by all chunks.
template <class T, class Fn>
expected<void> for_each_patch_chunk(const window_plan& p, dtype type, Fn fn) {
  const int64_t total = p.n * p.oh * p.ow, chunk = chunk_rows<T>(p);
  AF_TRY_ASSIGN(tensor scratch, tensor::empty({chunk * cpu::patch_row(p)}, type));
  for (int64_t r0 = 0; r0 < total; r0 += chunk) fn(scratch.data<T>(), r0, std::min(chunk, total - r0));
  return {};
}

// d filter [K, cout] += patchesᵀ [K, rows] · d out [rows, cout], group by group, chunk by chunk.
template <class T>
expected<void> filter_grad_gemm(const T* in, const T* g, T* df, const window_plan& p, dtype type) {
  const int64_t k = p.kh * p.kw * p.cg, lda = cpu::patch_row(p);
  return for_each_patch_chunk<T>(p, type, [&](T* col, int64_t r0, int64_t rows) {
    cpu::im2col(in, col, p, r0, rows);
    for (int64_t gi = 0; gi < p.groups; ++gi)
      gemm(true, false, k, p.coutg, rows, col + gi * k, lda, g + r0 * p.cout + gi * p.coutg, p.cout, T(1),
           df + gi * p.coutg, p.cout);
  });
}

// d patches [rows, K] = d out [rows, cout] · filterᵀ per group, then added back into d input.
template <class T>
expected<void> input_grad_gemm(const T* g, const T* f, T* dx, const window_plan& p, dtype type) {
  const int64_t k = p.kh * p.kw * p.cg, lda = cpu::patch_row(p);
  return for_each_patch_chunk<T>(p, type, [&](T* col, int64_t r0, int64_t rows) {
    for (int64_t gi = 0; gi < p.groups; ++gi)
      gemm(false, true, rows, k, p.coutg, g + r0 * p.cout + gi * p.coutg, p.cout, f + gi * p.coutg, p.cout, T(0),
           col + gi * k, lda);
    cpu::col2im_add(col, dx, p, r0, rows);
  });
}

// GEMMs pay off unless the filter is depthwise (one input channel per group) or there is nothing.
bool gemm_worthwhile(const window_plan& p) {
  return (p.cg > 1 || p.groups == 1) && p.n * p.oh * p.ow > 0 && p.cg > 0 && p.cout > 0;
}

template <class T>
expected<void> input_grad_of(const T* g, const T* f, T* dx, const window_plan& p, dtype type) {
  if (gemm_worthwhile(p)) return input_grad_gemm(g, f, dx, p, type);
  input_grad(g, f, dx, p);
  return {};
}

// Few input channels per window (an RGB first layer): the GEMM would be [27 x rows] x [rows x cout]
// with tiny M and N. Each fixed block of output rows accumulates its own [taps, cout] sums and the
// blocks are added in order (the same result on every run, whatever thread ran which block).
constexpr int64_t direct_window_limit = 32;

constexpr int fgrad_channels = 3;  // input channels of one window cell per register block
constexpr int fgrad_vectors = 4;   // vectors of output channels per register block

// sums[c][k0 + ...] += Σ_x src[x * stride + c] · go[x][k0 + ...] for `nc` input channels of one
// window cell over `count` output pixels: 12 sums and 3 broadcasts fill AVX2's 16 registers, and
// each gradient vector loaded serves three channels.
template <class T, int nc>
void filter_grad_block(const T* src, int64_t stride, const T* go, int64_t cout, int64_t count, T* sums) {
  using V = cpu::simd::vec<T>;
  constexpr int64_t width = cpu::simd::lanes<T>;
  V acc[nc][fgrad_vectors];
  for (int c = 0; c < nc; ++c)
    for (int v = 0; v < fgrad_vectors; ++v) acc[c][v] = cpu::simd::load(sums + c * cout + v * width);
  for (int64_t x = 0; x < count; ++x) {
    V gv[fgrad_vectors];
#pragma GCC unroll 4
    for (int v = 0; v < fgrad_vectors; ++v) gv[v] = cpu::simd::load(go + x * cout + v * width);
#pragma GCC unroll 3
    for (int c = 0; c < nc; ++c) {
      const V s = cpu::simd::splat(src[x * stride + c]);
#pragma GCC unroll 4
      for (int v = 0; v < fgrad_vectors; ++v) acc[c][v] += s * gv[v];
    }
  }
  for (int c = 0; c < nc; ++c)
    for (int v = 0; v < fgrad_vectors; ++v) cpu::simd::store(sums + c * cout + v * width, acc[c][v]);
}

// One window cell's sums [cin, cout] += inputᵀ · go over output pixels [0, count) of one row, pixel
// x reading src + x * stride; every sum runs over the pixels in order.
template <class T>
void accumulate_cell(const T* src, int64_t stride, const T* go, int64_t count, int64_t cin, int64_t cout, T* sums) {
  constexpr int64_t block = fgrad_vectors * cpu::simd::lanes<T>;
  const int64_t blocked = cout / block * block;
  for (int64_t k0 = 0; k0 < blocked; k0 += block) {
    int64_t c = 0;
    for (; c + fgrad_channels <= cin; c += fgrad_channels)
      filter_grad_block<T, fgrad_channels>(src + c, stride, go + k0, cout, count, sums + c * cout + k0);
    for (; c < cin; ++c) filter_grad_block<T, 1>(src + c, stride, go + k0, cout, count, sums + c * cout + k0);
  }
  for (int64_t c = 0; c < cin; ++c)
    for (int64_t k = blocked; k < cout; ++k) {
      T sum = sums[c * cout + k];
      for (int64_t x = 0; x < count; ++x) sum += src[x * stride + c] * go[x * cout + k];
      sums[c * cout + k] = sum;
    }
}

// Every window cell reads the input with a fixed stride along an output row, and only where it
// lies inside the input (padding adds nothing): no patch matrix is gathered.
template <class T>
void filter_grad_small_window(const T* in, const T* g, T* df, const window_plan& p) {
  const int64_t size = p.kh * p.kw * p.cin * p.cout;
  const int64_t rows = p.n * p.oh;
  const int64_t blocks = std::min<int64_t>(rows, 16);
  std::vector<T> sums(static_cast<std::size_t>(blocks * size), T{0});
  parallel_for(blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      T* block_sums = sums.data() + block * size;
      for (int64_t row = block * rows / blocks; row < (block + 1) * rows / blocks; ++row) {
        const int64_t b = row / p.oh, y = row % p.oh;
        const T* go = g + row * p.ow * p.cout;
        for (int64_t i = 0; i < p.kh; ++i) {
          const int64_t ih = y * p.sh - p.pad_top + i * p.dh;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t j = 0; j < p.kw; ++j) {
            // Output columns [x_lo, x_hi) read input column x * sw + iw0, inside the input.
            const int64_t iw0 = j * p.dw - p.pad_left;
            const int64_t x_lo = iw0 >= 0 ? 0 : (-iw0 + p.sw - 1) / p.sw;
            const int64_t x_hi = p.w - 1 - iw0 < 0 ? 0 : std::min(p.ow, (p.w - 1 - iw0) / p.sw + 1);
            if (x_lo >= x_hi) continue;
            const T* src = in + ((b * p.h + ih) * p.w + x_lo * p.sw + iw0) * p.cin;
            accumulate_cell(src, p.sw * p.cin, go + x_lo * p.cout, x_hi - x_lo, p.cin, p.cout,
                            block_sums + (i * p.kw + j) * p.cin * p.cout);
          }
        }
      }
    }
  });
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t k = 0; k < size; ++k) df[k] += sums[static_cast<std::size_t>(block * size + k)];
}

template <class T>
expected<void> filter_grad_of(const T* in, const T* g, T* df, const window_plan& p, dtype type) {
  if (p.groups == 1 && p.kh * p.kw * p.cin <= direct_window_limit && (p.kh > 1 || p.kw > 1) && p.n * p.oh > 0) {
    filter_grad_small_window(in, g, df, p);
    return {};
  }
  if (gemm_worthwhile(p)) return filter_grad_gemm(in, g, df, p, type);
  filter_grad(in, g, df, p);
  return {};
}

/// Windows that tile the input (stride = window, no padding): every cell belongs to at most one
/// window, so the gradient is written, not scattered, and each step runs over contiguous channels.
bool windows_tile(const window_plan& p) {
  return p.sh == p.kh && p.sw == p.kw && p.pad_top == 0 && p.pad_left == 0 && p.oh * p.kh <= p.h && p.ow * p.kw <= p.w;
}

/// Max-pool gradient for tiling windows: per channel, the first cell (row-major) holding the
/// window's maximum takes the output gradient, as in the general path. Channels go a vector at a
/// time with the selection done by masks: written as conditional stores, the compiler emitted
/// masked moves, which cost tens of cycles each on AMD cores.
template <class T>
void tiled_max_pool_grad(const T* in, const T* g, T* dx, const window_plan& p) {
  using V = cpu::simd::vec<T>;
  using M = cpu::simd::mask<T>;
  constexpr int64_t width = cpu::simd::lanes<T>;
  const int64_t blocked = p.cin / width * width;
  parallel_for(p.n * p.oh, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / p.oh, y = r % p.oh;
      for (int64_t x = 0; x < p.ow; ++x) {
        const T* go = g + ((b * p.oh + y) * p.ow + x) * p.cin;
        auto cell = [&](int64_t a, int64_t c) { return ((b * p.h + y * p.kh + a) * p.w + x * p.kw + c) * p.cin; };
        for (int64_t k0 = 0; k0 < blocked; k0 += width) {
          V best = cpu::simd::load(in + cell(0, 0) + k0);
          for (int64_t a = 0; a < p.kh; ++a)
            for (int64_t c = 0; c < p.kw; ++c) {
              const V v = cpu::simd::load(in + cell(a, c) + k0);
              best = best < v ? v : best;
            }
          const V grad = cpu::simd::load(go + k0);
          M open = ~M{};  // set until a cell of this channel took the gradient
          for (int64_t a = 0; a < p.kh; ++a)
            for (int64_t c = 0; c < p.kw; ++c) {
              const M take = (cpu::simd::load(in + cell(a, c) + k0) == best) & open;
              cpu::simd::store(dx + cell(a, c) + k0, cpu::simd::keep<T>(grad, take));
              open &= ~take;
            }
        }
        for (int64_t k = blocked; k < p.cin; ++k) {
          T best = in[cell(0, 0) + k];
          for (int64_t a = 0; a < p.kh; ++a)
            for (int64_t c = 0; c < p.kw; ++c) best = std::max(best, in[cell(a, c) + k]);
          bool open = true;
          for (int64_t a = 0; a < p.kh; ++a)
            for (int64_t c = 0; c < p.kw; ++c) {
              const bool take = open && in[cell(a, c) + k] == best;
              dx[cell(a, c) + k] = take ? go[k] : T{0};
              open = open && !take;
            }
        }
      }
    }
  });
}

template <class T, bool is_max>
void pool_grad(const T* in, const T* g, T* dx, const window_plan& p) {
  if constexpr (is_max) {
    if (windows_tile(p)) return tiled_max_pool_grad(in, g, dx, p);
  }
  parallel_for(p.n, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> best_value(is_max ? static_cast<std::size_t>(p.cin) : 0);
    std::vector<int64_t> best_at(best_value.size());
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t y = 0; y < p.oh; ++y)
        for (int64_t x = 0; x < p.ow; ++x) {
          const int64_t h0 = std::max<int64_t>(y * p.sh - p.pad_top, 0), h1 = std::min(y * p.sh - p.pad_top + p.kh, p.h);
          const int64_t w0 = std::max<int64_t>(x * p.sw - p.pad_left, 0), w1 = std::min(x * p.sw - p.pad_left + p.kw, p.w);
          if (h0 >= h1 || w0 >= w1) continue;
          // Channels innermost, so that the loops run over contiguous memory and vectorise.
          const T* go = g + ((b * p.oh + y) * p.ow + x) * p.cin;
          if constexpr (is_max) {
            // Per channel, the first cell (row-major) holding the window's maximum takes the gradient.
            const int64_t first = (b * p.h + h0) * p.w + w0;
            std::copy_n(in + first * p.cin, p.cin, best_value.data());
            std::fill(best_at.begin(), best_at.end(), first);
            for (int64_t ih = h0; ih < h1; ++ih)
              for (int64_t iw = w0; iw < w1; ++iw) {
                const int64_t at = (b * p.h + ih) * p.w + iw;
                const T* cell = in + at * p.cin;
                for (int64_t c = 0; c < p.cin; ++c) {
                  const bool larger = cell[c] > best_value[static_cast<std::size_t>(c)];
                  best_value[static_cast<std::size_t>(c)] = larger ? cell[c] : best_value[static_cast<std::size_t>(c)];
                  best_at[static_cast<std::size_t>(c)] = larger ? at : best_at[static_cast<std::size_t>(c)];
                }
              }
            for (int64_t c = 0; c < p.cin; ++c) dx[best_at[static_cast<std::size_t>(c)] * p.cin + c] += go[c];
          } else {
            // Each cell inside the input takes an equal share.
            const T cells = static_cast<T>((h1 - h0) * (w1 - w0));
            for (int64_t ih = h0; ih < h1; ++ih)
              for (int64_t iw = w0; iw < w1; ++iw) {
                T* d = dx + ((b * p.h + ih) * p.w + iw) * p.cin;
                for (int64_t c = 0; c < p.cin; ++c) d[c] += go[c] / cells;
              }
          }
        }
  });
}

}  // namespace

expected<tensor> conv2d_backprop_input(const tensor& grad_out, const tensor& filter, const shape& input_shape,
                                       const conv2d_options& o) {
  AF_TRY(check_float("conv2d_backprop_input", grad_out, filter));
  if (filter.ndim() != 4) return make_error(errc::shape_mismatch, "conv2d_backprop_input: the filter must be HWIO");
  AF_TRY_ASSIGN(auto p, plan("conv2d_backprop_input", input_shape, filter.dim(0), filter.dim(1), filter.dim(2),
                             filter.dim(3), grad_out.shape(), o.groups, o.strides, o.dilations, o.padding));
  AF_TRY_ASSIGN(auto dx, tensor::zeros(input_shape, grad_out.type()));
  AF_TRY_ASSIGN(auto g, grad_out.contiguous());
  AF_TRY_ASSIGN(auto f, filter.contiguous());
  if (dx.type() == dtype::f32) AF_TRY(input_grad_of(g.data<float>(), f.data<float>(), dx.data<float>(), p, dx.type()));
  else AF_TRY(input_grad_of(g.data<double>(), f.data<double>(), dx.data<double>(), p, dx.type()));
  return dx;
}

expected<tensor> conv2d_backprop_filter(const tensor& input, const tensor& grad_out, const shape& filter_shape,
                                        const conv2d_options& o) {
  AF_TRY(check_float("conv2d_backprop_filter", input, grad_out));
  if (filter_shape.size() != 4) return make_error(errc::shape_mismatch, "conv2d_backprop_filter: the filter must be HWIO");
  AF_TRY_ASSIGN(auto p, plan("conv2d_backprop_filter", input.shape(), filter_shape[0], filter_shape[1], filter_shape[2],
                             filter_shape[3], grad_out.shape(), o.groups, o.strides, o.dilations, o.padding));
  AF_TRY_ASSIGN(auto df, tensor::zeros(filter_shape, input.type()));
  AF_TRY_ASSIGN(auto x, input.contiguous());
  AF_TRY_ASSIGN(auto g, grad_out.contiguous());
  if (df.type() == dtype::f32) AF_TRY(filter_grad_of(x.data<float>(), g.data<float>(), df.data<float>(), p, df.type()));
  else AF_TRY(filter_grad_of(x.data<double>(), g.data<double>(), df.data<double>(), p, df.type()));
  return df;
}

expected<tensor> max_pool2d_backprop(const tensor& input, const tensor& grad_out, const pool_options& o) {
  AF_TRY(check_float("max_pool2d_backprop", input, grad_out));
  AF_TRY_ASSIGN(auto p, plan("max_pool2d_backprop", input.shape(), o.ksize[0], o.ksize[1], 1,
                             input.ndim() == 4 ? input.dim(3) : 0, grad_out.shape(), 1, o.strides, {1, 1}, o.padding));
  AF_TRY_ASSIGN(auto dx, tensor::zeros(input.shape(), input.type()));
  AF_TRY_ASSIGN(auto x, input.contiguous());
  AF_TRY_ASSIGN(auto g, grad_out.contiguous());
  if (dx.type() == dtype::f32) pool_grad<float, true>(x.data<float>(), g.data<float>(), dx.data<float>(), p);
  else pool_grad<double, true>(x.data<double>(), g.data<double>(), dx.data<double>(), p);
  return dx;
}

expected<tensor> avg_pool2d_backprop(const tensor& grad_out, const shape& input_shape, const pool_options& o) {
  AF_TRY(check_float("avg_pool2d_backprop", grad_out, grad_out));
  AF_TRY_ASSIGN(auto p, plan("avg_pool2d_backprop", input_shape, o.ksize[0], o.ksize[1], 1,
                             input_shape.size() == 4 ? input_shape[3] : 0, grad_out.shape(), 1, o.strides, {1, 1},
                             o.padding));
  AF_TRY_ASSIGN(auto dx, tensor::zeros(input_shape, grad_out.type()));
  AF_TRY_ASSIGN(auto g, grad_out.contiguous());
  if (dx.type() == dtype::f32) pool_grad<float, false>(nullptr, g.data<float>(), dx.data<float>(), p);
  else pool_grad<double, false>(nullptr, g.data<double>(), dx.data<double>(), p);
  return dx;
}

}  // namespace af
