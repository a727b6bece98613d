// CPU max and average pooling over NHWC tensors, TensorFlow semantics: padded cells are skipped
// (never the maximum, never counted in the mean).
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/nn.hpp"
#include "ops/parallel.hpp"

namespace af {

namespace {

struct pool_geometry {
  int64_t n, h, w, c;
  int64_t kh, kw, sh, sw;
  int64_t oh, ow, pad_top, pad_left;
};

// Accumulator type: f16/bf16 and f32 in float, f64 in double, integers (max only) in themselves.
template <class T>
using accumulator_t =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, T, float>>;

template <class T, bool is_max>
void pool(const T* in, T* out, const pool_geometry& g) {
  using A = accumulator_t<T>;
  const A init = is_max ? std::numeric_limits<A>::lowest() : A{0};
  const int64_t row_work = std::max<int64_t>(1, g.ow * g.kh * g.kw * g.c);
  parallel_for(g.n * g.oh, std::max<int64_t>(1, 32768 / row_work), [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<std::size_t>(g.c));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.oh, y = row % g.oh;
      const int64_t h0 = std::max<int64_t>(y * g.sh - g.pad_top, 0);
      const int64_t h1 = std::min(y * g.sh - g.pad_top + g.kh, g.h);
      for (int64_t x = 0; x < g.ow; ++x) {
        const int64_t w0 = std::max<int64_t>(x * g.sw - g.pad_left, 0);
        const int64_t w1 = std::min(x * g.sw - g.pad_left + g.kw, g.w);
        std::fill(acc.begin(), acc.end(), init);
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const T* src = in + ((b * g.h + ih) * g.w + iw) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) {
              const A v = static_cast<A>(src[ch]);
              if constexpr (is_max) acc[ch] = v > acc[ch] ? v : acc[ch];
              else acc[ch] += v;
            }
          }
        // SAME windows always overlap the input; the guard keeps a degenerate window finite.
        const int64_t count = std::max<int64_t>(h1 - h0, 0) * std::max<int64_t>(w1 - w0, 0);
        T* o = out + (row * g.ow + x) * g.c;
        for (int64_t ch = 0; ch < g.c; ++ch) {
          if (count == 0) o[ch] = T(A{0});
          else if constexpr (is_max) o[ch] = T(acc[ch]);
          else o[ch] = T(acc[ch] / static_cast<A>(count));
        }
      }
    }
  });
}

std::string describe(const tensor& input, const pool_options& o) {
  return "input " + to_string(input.shape()) + ", ksize [" + std::to_string(o.ksize[0]) + "," +
         std::to_string(o.ksize[1]) + "], strides [" + std::to_string(o.strides[0]) + "," +
         std::to_string(o.strides[1]) + "], padding " + (o.padding == padding_mode::same ? "same" : "valid");
}

template <bool is_max>
expected<tensor> pool2d(const tensor& input, const pool_options& options, const char* op) {
  if (!input.defined()) return make_error(errc::invalid_argument, std::string(op) + ": undefined input");
  if (!input.dev().is_cpu())
    return make_error(errc::unsupported, std::string(op) + ": CPU kernel got a tensor on " + to_string(input.dev()));
  if (input.ndim() != 4)
    return make_error(errc::shape_mismatch, std::string(op) + ": input must be NHWC (rank 4): " +
                                                describe(input, options));
  const dtype type = input.type();
  if (type == dtype::boolean || (!is_max && !is_floating(type)))
    return make_error(errc::dtype_mismatch, std::string(op) + ": unsupported dtype " + std::string(to_string(type)) +
                                                ": " + describe(input, options));
  if (options.ksize[0] < 1 || options.ksize[1] < 1 || options.strides[0] < 1 || options.strides[1] < 1)
    return make_error(errc::invalid_argument, std::string(op) + ": ksize and strides must be >= 1: " +
                                                  describe(input, options));
  pool_geometry g{};
  g.n = input.dim(0), g.h = input.dim(1), g.w = input.dim(2), g.c = input.dim(3);
  g.kh = options.ksize[0], g.kw = options.ksize[1], g.sh = options.strides[0], g.sw = options.strides[1];
  const auto rows = compute_window(g.h, g.kh, g.sh, 1, options.padding);
  const auto cols = compute_window(g.w, g.kw, g.sw, 1, options.padding);
  if (options.padding == padding_mode::valid && (rows.out == 0 || cols.out == 0))
    return make_error(errc::shape_mismatch, std::string(op) + ": the window is larger than the input with valid "
                                                              "padding: " + describe(input, options));
  g.oh = rows.out, g.ow = cols.out, g.pad_top = rows.pad_before, g.pad_left = cols.pad_before;
  AF_TRY_ASSIGN(tensor out, tensor::empty({g.n, g.oh, g.ow, g.c}, type));
  if (out.numel() == 0) return out;
  AF_TRY_ASSIGN(tensor in, input.contiguous());
  visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) pool<T, is_max>(in.data<T>(), out.data<T>(), g);
  });
  return out;
}

}  // namespace

expected<tensor> max_pool2d(const tensor& input, const pool_options& options) {
  return pool2d<true>(input, options, "max_pool2d");
}

expected<tensor> avg_pool2d(const tensor& input, const pool_options& options) {
  return pool2d<false>(input, options, "avg_pool2d");
}

}  // namespace af
