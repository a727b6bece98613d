// CPU conv2d: im2col + GEMM per group on OpenBLAS, a direct GEMM for 1x1 stride-1 filters, and
// direct loops for depthwise filters (where im2col would turn into many one-column GEMMs) and for
// windows of few input channels (an RGB first layer).
#include <algorithm>
#include <climits>
#include <cstring>
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

// Scratch for one chunk of im2col rows: large enough for GEMMs to run at full speed, small
// enough to stay in the caching allocator's reusable blocks and mostly in L2/L3.
constexpr int64_t im2col_chunk_bytes = int64_t{8} << 20;

struct conv_geometry {
  int64_t n, h, w, cin;           // input
  int64_t kh, kw, cg, cout;       // filter; cg = cin / groups
  int64_t groups, coutg;          // coutg = cout / groups
  int64_t sh, sw, dh, dw;         // strides, dilations
  int64_t oh, ow, pad_top, pad_left;
};

template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  cpu::gemm(false, false, m, n, k, a, lda, b, ldb, T(0), c, ldc);
}

// Each output pixel reads one input channel per output channel, so the inner loop runs over the
// contiguous channel dimension and vectorises; no scratch memory.
template <class T>
void conv_depthwise(const T* in, const T* f, T* out, const conv_geometry& g) {
  const int64_t mult = g.cout / g.cin;
  const int64_t row_work = std::max<int64_t>(1, g.ow * g.kh * g.kw * g.cout);
  parallel_for(g.n * g.oh, std::max<int64_t>(1, 32768 / row_work), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.oh, y = row % g.oh;
      for (int64_t x = 0; x < g.ow; ++x) {
        T* o = out + (row * g.ow + x) * g.cout;
        std::fill(o, o + g.cout, T{0});
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = y * g.sh - g.pad_top + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = x * g.sw - g.pad_left + j * g.dw;
            if (iw < 0 || iw >= g.w) continue;
            const T* src = in + ((b * g.h + ih) * g.w + iw) * g.cin;
            const T* wt = f + (i * g.kw + j) * g.cout;
            if (mult == 1) {
              for (int64_t c = 0; c < g.cin; ++c) o[c] += src[c] * wt[c];
            } else {
              for (int64_t c = 0; c < g.cin; ++c)
                for (int64_t m = 0; m < mult; ++m) o[c * mult + m] += src[c] * wt[c * mult + m];
            }
          }
        }
      }
    }
  });
}

// Few input channels per window (an RGB first layer: 3x3x3 = 27): im2col would copy runs of three
// floats and a GEMM with K = 27 spends more on packing than on multiplying. Outputs are accumulated
// directly instead, in register blocks of `direct_pixels` pixels by `direct_vectors` vectors of
// output channels: 12 sums and 3 broadcasts fill AVX2's 16 registers, and each filter vector
// loaded serves three pixels.
constexpr int64_t direct_window_limit = 32;
constexpr int direct_pixels = 3;
constexpr int direct_vectors = 4;

// Outputs [k0, k0 + direct_vectors * lanes) of `np` pixels; cells[t * direct_pixels + p] holds the
// `cin` inputs of window cell t for pixel p (a zero row where the cell is padding).
template <class T, int np>
void direct_block(const T* const* cells, const T* f, T* out, int64_t k0, const conv_geometry& g) {
  using V = cpu::simd::vec<T>;
  constexpr int64_t width = cpu::simd::lanes<T>;
  V acc[np][direct_vectors] = {};
  const int64_t window = g.kh * g.kw;
  for (int64_t t = 0; t < window; ++t) {
    const T* wt = f + t * g.cin * g.cout + k0;
    const T* src[np];
    for (int p = 0; p < np; ++p) src[p] = cells[t * direct_pixels + p];
    for (int64_t c = 0; c < g.cin; ++c) {
      V w[direct_vectors];
#pragma GCC unroll 4
      for (int v = 0; v < direct_vectors; ++v) w[v] = cpu::simd::load(wt + c * g.cout + v * width);
#pragma GCC unroll 3
      for (int p = 0; p < np; ++p) {
        const V s = cpu::simd::splat(src[p][c]);
#pragma GCC unroll 4
        for (int v = 0; v < direct_vectors; ++v) acc[p][v] += s * w[v];
      }
    }
  }
  for (int p = 0; p < np; ++p)
    for (int v = 0; v < direct_vectors; ++v) cpu::simd::store(out + p * g.cout + k0 + v * width, acc[p][v]);
}

template <class T>
void conv_direct(const T* in, const T* f, T* out, const conv_geometry& g) {
  constexpr int64_t block = direct_vectors * cpu::simd::lanes<T>;
  const int64_t blocked = g.cout / block * block;  // channels past this take the scalar loop
  const int64_t window = g.kh * g.kw;
  const std::vector<T> zeros(static_cast<std::size_t>(g.cin), T{0});
  // Where window cell t of an interior pixel starts, relative to the cell (0, 0).
  std::vector<int64_t> cell_offset(static_cast<std::size_t>(window));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      cell_offset[static_cast<std::size_t>(i * g.kw + j)] = (i * g.dh * g.w + j * g.dw) * g.cin;
  // Output columns [x_first, x_last) read no padding column.
  const int64_t x_first = std::min(g.ow, (g.pad_left + g.sw - 1) / g.sw);
  const int64_t last_reach = g.w - 1 - (g.kw - 1) * g.dw + g.pad_left;  // x * sw may not pass it
  const int64_t x_last = last_reach < 0 ? x_first : std::max(x_first, std::min(g.ow, last_reach / g.sw + 1));
  const int64_t row_work = std::max<int64_t>(1, g.ow * window * g.cin * g.cout);
  parallel_for(g.n * g.oh, std::max<int64_t>(1, 65536 / row_work), [&](int64_t begin, int64_t end) {
    std::vector<const T*> cells(static_cast<std::size_t>(window * direct_pixels));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.oh, y = row % g.oh;
      const int64_t ih0 = y * g.sh - g.pad_top;
      const bool rows_inside = ih0 >= 0 && ih0 + (g.kh - 1) * g.dh < g.h;
      for (int64_t x0 = 0; x0 < g.ow; x0 += direct_pixels) {
        const int64_t np = std::min<int64_t>(direct_pixels, g.ow - x0);
        if (rows_inside && np == direct_pixels && x0 >= x_first && x0 + np <= x_last) {
          const T* base = in + ((b * g.h + ih0) * g.w + x0 * g.sw - g.pad_left) * g.cin;
          for (int64_t t = 0; t < window; ++t)
            for (int64_t p = 0; p < direct_pixels; ++p)
              cells[static_cast<std::size_t>(t * direct_pixels + p)] =
                  base + p * g.sw * g.cin + cell_offset[static_cast<std::size_t>(t)];
        } else {
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j)
              for (int64_t p = 0; p < direct_pixels; ++p) {
                const int64_t ih = ih0 + i * g.dh, iw = (x0 + p) * g.sw - g.pad_left + j * g.dw;
                const bool inside = p < np && ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
                cells[static_cast<std::size_t>((i * g.kw + j) * direct_pixels + p)] =
                    inside ? in + ((b * g.h + ih) * g.w + iw) * g.cin : zeros.data();
              }
        }
        T* o = out + (row * g.ow + x0) * g.cout;
        for (int64_t k0 = 0; k0 < blocked; k0 += block) {
          if (np == 3) direct_block<T, 3>(cells.data(), f, o, k0, g);
          else if (np == 2) direct_block<T, 2>(cells.data(), f, o, k0, g);
          else direct_block<T, 1>(cells.data(), f, o, k0, g);
        }
        for (int64_t p = 0; p < np; ++p)
          for (int64_t k = blocked; k < g.cout; ++k) {
            T sum{0};
            for (int64_t t = 0; t < window; ++t)
              for (int64_t c = 0; c < g.cin; ++c)
                sum += cells[static_cast<std::size_t>(t * direct_pixels + p)][c] * f[(t * g.cin + c) * g.cout + k];
            o[p * g.cout + k] = sum;
          }
      }
    }
  });
}

// The patch matrix in chunks of rows (ops/kernels/cpu/im2col.hpp), each multiplied by every
// group's filter slice in place: no filter copy is needed.
template <class T>
expected<void> conv_im2col(const T* in, const T* f, T* out, const conv_geometry& g, dtype type) {
  const int64_t k = g.kh * g.kw * g.cg;
  const int64_t lda = cpu::patch_row(g);
  const int64_t total = g.n * g.oh * g.ow;
  const int64_t chunk =
      std::min(total, std::max<int64_t>(im2col_chunk_bytes / static_cast<int64_t>(sizeof(T)) / lda, 32));
  AF_TRY_ASSIGN(tensor scratch, tensor::empty({chunk * lda}, type));
  T* col = scratch.data<T>();
  for (int64_t r0 = 0; r0 < total; r0 += chunk) {
    const int64_t rows = std::min(chunk, total - r0);
    cpu::im2col(in, col, g, r0, rows);
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm(rows, g.coutg, k, col + gi * k, lda, f + gi * g.coutg, g.cout, out + r0 * g.cout + gi * g.coutg, g.cout);
  }
  return {};
}

template <class T>
expected<void> run_conv(const tensor& input, const tensor& filter, tensor& out, const conv_geometry& g) {
  const T* in = input.data<T>();
  const T* f = filter.data<T>();
  T* o = out.data<T>();
  if (g.cg == 0) {  // no input channels: every output is an empty sum
    std::fill(o, o + out.numel(), T{0});
    return {};
  }
  if (g.groups > 1 && g.cg == 1) {
    conv_depthwise(in, f, o, g);
    return {};
  }
  if (g.groups == 1 && g.kh * g.kw * g.cin <= direct_window_limit && (g.kh > 1 || g.kw > 1)) {
    conv_direct(in, f, o, g);
    return {};
  }
  const int64_t pixels = g.n * g.h * g.w;
  if (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && pixels <= INT_MAX) {
    // A 1x1 stride-1 filter is a plain matmul of the [pixels, Cin] input with each group's slice.
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm(pixels, g.coutg, g.cg, in + gi * g.cg, g.cin, f + gi * g.coutg, g.cout, o + gi * g.coutg, g.cout);
    return {};
  }
  return conv_im2col(in, f, o, g, input.type());
}

std::string describe(const tensor& input, const tensor& filter, const conv2d_options& o) {
  return "input " + to_string(input.shape()) + ", filter " + to_string(filter.shape()) + ", strides [" +
         std::to_string(o.strides[0]) + "," + std::to_string(o.strides[1]) + "], dilations [" +
         std::to_string(o.dilations[0]) + "," + std::to_string(o.dilations[1]) + "], groups " +
         std::to_string(o.groups) + ", padding " + (o.padding == padding_mode::same ? "same" : "valid");
}

expected<tensor> converted(const tensor& t, dtype to) {
  AF_TRY_ASSIGN(tensor out, tensor::empty(t.shape(), to));
  AF_TRY(copy_into(t, out));
  return out;
}

}  // namespace

window_geometry compute_window(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding) noexcept {
  const int64_t span = (k - 1) * dilation + 1;
  window_geometry geo;
  if (padding == padding_mode::valid) {
    geo.out = in >= span ? (in - span) / stride + 1 : 0;
    return geo;
  }
  geo.out = (in + stride - 1) / stride;
  if (geo.out > 0) geo.pad_before = std::max<int64_t>((geo.out - 1) * stride + span - in, 0) / 2;
  return geo;
}

expected<tensor> conv2d(const tensor& input, const tensor& filter, const conv2d_options& options) {
  if (!input.defined() || !filter.defined()) return make_error(errc::invalid_argument, "conv2d: undefined operand");
  if (!input.dev().is_cpu() || !filter.dev().is_cpu())
    return make_error(errc::unsupported, "conv2d: CPU kernel got tensors on " + to_string(input.dev()) + " and " +
                                             to_string(filter.dev()));
  if (input.ndim() != 4 || filter.ndim() != 4)
    return make_error(errc::shape_mismatch, "conv2d: input must be NHWC and filter HWIO (rank 4): " +
                                                describe(input, filter, options));
  if (input.type() != filter.type() || !is_floating(input.type()))
    return make_error(errc::dtype_mismatch, "conv2d: needs matching floating dtypes, got " +
                                                std::string(to_string(input.type())) + " and " +
                                                std::string(to_string(filter.type())) + ": " +
                                                describe(input, filter, options));
  if (options.strides[0] < 1 || options.strides[1] < 1 || options.dilations[0] < 1 || options.dilations[1] < 1 ||
      options.groups < 1)
    return make_error(errc::invalid_argument, "conv2d: strides, dilations and groups must be >= 1: " +
                                                  describe(input, filter, options));
  conv_geometry g{};
  g.n = input.dim(0), g.h = input.dim(1), g.w = input.dim(2), g.cin = input.dim(3);
  g.kh = filter.dim(0), g.kw = filter.dim(1), g.cg = filter.dim(2), g.cout = filter.dim(3);
  g.groups = options.groups;
  g.sh = options.strides[0], g.sw = options.strides[1], g.dh = options.dilations[0], g.dw = options.dilations[1];
  if (g.kh < 1 || g.kw < 1)
    return make_error(errc::shape_mismatch, "conv2d: empty filter window: " + describe(input, filter, options));
  if (g.cin % g.groups != 0 || g.cout % g.groups != 0 || g.cg * g.groups != g.cin)
    return make_error(errc::shape_mismatch, "conv2d: input channels must equal filter in-channels x groups, and "
                                            "out-channels must divide by groups: " + describe(input, filter, options));
  g.coutg = g.cout / g.groups;
  const auto rows = compute_window(g.h, g.kh, g.sh, g.dh, options.padding);
  const auto cols = compute_window(g.w, g.kw, g.sw, g.dw, options.padding);
  if (options.padding == padding_mode::valid && (rows.out == 0 || cols.out == 0))
    return make_error(errc::shape_mismatch, "conv2d: the dilated filter window is larger than the input with "
                                            "valid padding: " + describe(input, filter, options));
  g.oh = rows.out, g.ow = cols.out, g.pad_top = rows.pad_before, g.pad_left = cols.pad_before;

  const shape out_shape{g.n, g.oh, g.ow, g.cout};
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, input.type()));
  if (out.numel() == 0) return out;
  if (input.type() == dtype::f32 || input.type() == dtype::f64) {
    AF_TRY_ASSIGN(tensor in, input.contiguous());
    AF_TRY_ASSIGN(tensor f, filter.contiguous());
    if (input.type() == dtype::f32) AF_TRY(run_conv<float>(in, f, out, g));
    else AF_TRY(run_conv<double>(in, f, out, g));
    return out;
  }
  // f16 / bf16: compute in f32.
  AF_TRY_ASSIGN(tensor in, converted(input, dtype::f32));
  AF_TRY_ASSIGN(tensor f, converted(filter, dtype::f32));
  AF_TRY_ASSIGN(tensor out32, tensor::empty(out_shape, dtype::f32));
  AF_TRY(run_conv<float>(in, f, out32, g));
  AF_TRY(copy_into(out32, out));
  return out;
}

}  // namespace af
