#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "ops/elementwise.hpp"
#include "ops/nn.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::padding_mode;
using af::shape;
using af::tensor;

namespace {

tensor random_tensor(const shape& dims, dtype type, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (int64_t i = 0; i < t->numel(); ++i) af::store_from_double(p + i * af::size_of(type), type, dist(rng));
  return *t;
}

// TensorFlow's output size and leading padding, written out independently of the library.
struct extent {
  int64_t out, before;
};
extent tf_extent(int64_t in, int64_t k, int64_t stride, int64_t dilation, bool same) {
  const int64_t span = (k - 1) * dilation + 1;
  if (!same) return {in >= span ? (in - span + stride) / stride : 0, 0};
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
  return {out, total / 2};
}

// The seven loops of a convolution: visit(output, input, filter) gets the flat indices of every
// product, output by output and, within one, in window order; taps in the padding are skipped.
// Returns the output shape.
template <class Visit>
shape for_each_conv_product(const shape& in, const shape& fs, const af::conv2d_options& o, Visit visit) {
  const int64_t n = in[0], h = in[1], w = in[2], cin = in[3];
  const int64_t kh = fs[0], kw = fs[1], cg = fs[2], cout = fs[3];
  const int64_t coutg = cout / o.groups;
  const bool same = o.padding == padding_mode::same;
  const auto ey = tf_extent(h, kh, o.strides[0], o.dilations[0], same);
  const auto ex = tf_extent(w, kw, o.strides[1], o.dilations[1], same);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < ey.out; ++y)
      for (int64_t xo = 0; xo < ex.out; ++xo)
        for (int64_t oc = 0; oc < cout; ++oc)
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j)
              for (int64_t c = 0; c < cg; ++c) {
                const int64_t ih = y * o.strides[0] - ey.before + i * o.dilations[0];
                const int64_t iw = xo * o.strides[1] - ex.before + j * o.dilations[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                visit(static_cast<std::size_t>(((b * ey.out + y) * ex.out + xo) * cout + oc),
                      static_cast<std::size_t>(((b * h + ih) * w + iw) * cin + oc / coutg * cg + c),
                      static_cast<std::size_t>(((i * kw + j) * cg + c) * cout + oc));
              }
  return {n, ey.out, ex.out, cout};
}

// The convolution, accumulated in double.
tensor reference_conv(const tensor& input, const tensor& filter, const af::conv2d_options& o) {
  const auto x = input.to_vector<double>();
  const auto f = filter.to_vector<double>();
  std::vector<double> out;
  const shape dims = for_each_conv_product(input.shape(), filter.shape(), o, [&](std::size_t oi, std::size_t xi, std::size_t fi) {
    if (out.size() <= oi) out.resize(oi + 1, 0.0);
    out[oi] += x[xi] * f[fi];
  });
  if (af::numel(dims) == 0) return *tensor::zeros(dims, dtype::f64);
  out.resize(static_cast<std::size_t>(af::numel(dims)), 0.0);  // outputs whose whole window is padding
  return tensor::from_vector(out, dims);
}

// Pooling reference: the maximum or the mean of the cells of each window that lie inside the input.
tensor reference_pool(const tensor& input, const af::pool_options& o, bool is_max) {
  const auto x = input.to_vector<double>();
  const int64_t n = input.dim(0), h = input.dim(1), w = input.dim(2), c = input.dim(3);
  const bool same = o.padding == padding_mode::same;
  const auto ey = tf_extent(h, o.ksize[0], o.strides[0], 1, same);
  const auto ex = tf_extent(w, o.ksize[1], o.strides[1], 1, same);
  std::vector<double> out;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < ey.out; ++y)
      for (int64_t xo = 0; xo < ex.out; ++xo)
        for (int64_t ch = 0; ch < c; ++ch) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int count = 0;
          for (int64_t i = 0; i < o.ksize[0]; ++i)
            for (int64_t j = 0; j < o.ksize[1]; ++j) {
              const int64_t ih = y * o.strides[0] - ey.before + i, iw = xo * o.strides[1] - ex.before + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              const double v = x[((b * h + ih) * w + iw) * c + ch];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          out.push_back(is_max ? best : sum / count);
        }
  const shape dims{n, ey.out, ex.out, c};
  if (out.empty()) return *tensor::zeros(dims, dtype::f64);
  return tensor::from_vector(out, dims);
}

std::string describe(const shape& in, const shape& f, const af::conv2d_options& o) {
  return af::to_string(in) + " * " + af::to_string(f) + " strides " + std::to_string(o.strides[0]) + "," +
         std::to_string(o.strides[1]) + " dilations " + std::to_string(o.dilations[0]) + "," +
         std::to_string(o.dilations[1]) + " groups " + std::to_string(o.groups) +
         (o.padding == padding_mode::same ? " same" : " valid");
}

}  // namespace

TEST_CASE("compute_window follows TensorFlow's SAME and VALID rules", "[cpu][conv]") {
  CHECK(af::compute_window(5, 3, 2, 1, padding_mode::same).out == 3);
  CHECK(af::compute_window(5, 3, 2, 1, padding_mode::same).pad_before == 1);  // pad_total 2
  CHECK(af::compute_window(6, 3, 2, 1, padding_mode::same).out == 3);
  CHECK(af::compute_window(6, 3, 2, 1, padding_mode::same).pad_before == 0);  // pad_total 1: the extra one goes after
  CHECK(af::compute_window(7, 3, 1, 2, padding_mode::same).pad_before == 2);  // dilated span 5
  CHECK(af::compute_window(7, 3, 1, 2, padding_mode::valid).out == 3);
  CHECK(af::compute_window(7, 3, 3, 1, padding_mode::valid).out == 2);
  CHECK(af::compute_window(2, 3, 1, 1, padding_mode::valid).out == 0);
}

TEST_CASE("conv2d on random shapes and options matches a naive seven-loop convolution", "[cpu][conv]") {
  std::mt19937 rng(2024);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int compared = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const dtype type = trial % 3 == 2 ? dtype::f64 : dtype::f32;
    af::conv2d_options o;
    o.strides = {pick(1, 3), pick(1, 3)};
    o.dilations = {pick(1, 2), pick(1, 2)};
    o.padding = pick(0, 1) ? padding_mode::same : padding_mode::valid;
    const int64_t kind = pick(0, 2);  // groups 1, 2 or Cin (depthwise)
    int64_t cin = pick(1, 5);
    if (kind == 1) cin = 2 * pick(1, 3);
    o.groups = static_cast<int>(kind == 0 ? 1 : kind == 1 ? 2 : cin);
    const int64_t cout = o.groups * pick(1, 3);
    const shape in_shape{pick(0, 2), pick(1, 9), pick(1, 9), cin};
    const shape f_shape{pick(1, 3), pick(1, 3), cin / o.groups, cout};
    INFO(describe(in_shape, f_shape, o));
    auto input = random_tensor(in_shape, type, rng);
    auto filter = random_tensor(f_shape, type, rng);
    auto got = af::conv2d(input, filter, o);
    const int64_t span_h = (f_shape[0] - 1) * o.dilations[0] + 1, span_w = (f_shape[1] - 1) * o.dilations[1] + 1;
    if (o.padding == padding_mode::valid && (in_shape[1] < span_h || in_shape[2] < span_w)) {
      check_error(got, errc::shape_mismatch, "conv2d: the dilated filter window is larger than the input");
      continue;
    }
    REQUIRE(got);
    CHECK(got->type() == type);
    auto want = reference_conv(input, filter, o);
    REQUIRE(got->shape() == want.shape());
    CHECK(af::all_close(*got, want, 1e-4, 1e-4));
    ++compared;
  }
  CHECK(compared > 60);
}

TEST_CASE("conv2d fast paths agree with the reference: 1x1, depthwise with a multiplier, large im2col", "[cpu][conv]") {
  std::mt19937 rng(77);
  struct conv_case { shape in, f; af::conv2d_options o; };
  const std::vector<conv_case> cases = {
      {{2, 5, 6, 8}, {1, 1, 8, 5}, {}},                                           // 1x1 as one GEMM
      {{2, 5, 6, 8}, {1, 1, 4, 6}, {{1, 1}, padding_mode::valid, {1, 1}, 2}},     // 1x1 per group
      {{1, 7, 7, 3}, {1, 1, 3, 4}, {{2, 2}, padding_mode::same, {1, 1}, 1}},      // strided 1x1 goes to im2col
      {{2, 9, 8, 4}, {3, 3, 1, 8}, {{1, 2}, padding_mode::same, {2, 1}, 4}},      // depthwise, multiplier 2
      {{1, 6, 6, 5}, {2, 3, 1, 5}, {{2, 1}, padding_mode::valid, {1, 1}, 5}},     // depthwise, multiplier 1
      {{2, 64, 64, 32}, {3, 3, 32, 16}, {{1, 1}, padding_mode::same, {1, 1}, 1}}, // im2col in several chunks
  };
  for (const auto& cc : cases) {
    INFO(describe(cc.in, cc.f, cc.o));
    auto input = random_tensor(cc.in, dtype::f32, rng);
    auto filter = random_tensor(cc.f, dtype::f32, rng);
    auto got = af::conv2d(input, filter, cc.o);
    REQUIRE(got);
    CHECK(af::all_close(*got, reference_conv(input, filter, cc.o), 1e-4, 1e-4));
  }
}

TEST_CASE("conv2d reads non-contiguous inputs and filters, and f16/bf16 run in f32", "[cpu][conv]") {
  std::mt19937 rng(8);
  af::conv2d_options o{{2, 1}, padding_mode::same, {1, 2}, 1};
  auto wide = random_tensor({2, 7, 6, 6}, dtype::f32, rng);
  auto input = *wide.slice(3, 0, 6, 2);                       // every other channel: [2,7,6,3]
  auto filter = *random_tensor({3, 2, 4, 3}, dtype::f32, rng).permute({1, 0, 3, 2});  // [2,3,3,4]
  REQUIRE_FALSE(input.is_contiguous());
  REQUIRE_FALSE(filter.is_contiguous());
  auto got = af::conv2d(input, filter, o);
  REQUIRE(got);
  CHECK(af::all_close(*got, reference_conv(input, filter, o), 1e-4, 1e-4));
  for (dtype type : {dtype::f16, dtype::bf16}) {
    auto x = random_tensor({1, 5, 5, 2}, type, rng);
    auto f = random_tensor({3, 3, 2, 3}, type, rng);
    auto y = af::conv2d(x, f, o);
    REQUIRE(y);
    CHECK(y->type() == type);
    CHECK(af::all_close(*y, reference_conv(x, f, o), 3e-2, 3e-2));
  }
}

TEST_CASE("conv2d of an empty batch or zero output channels gives an empty result", "[cpu][conv]") {
  std::mt19937 rng(1);
  auto y = af::conv2d(*tensor::zeros({0, 5, 5, 3}, dtype::f32), random_tensor({3, 3, 3, 4}, dtype::f32, rng),
                      {{2, 2}, padding_mode::same, {1, 1}, 1});
  REQUIRE(y);
  CHECK(y->shape() == shape{0, 3, 3, 4});
  auto z = af::conv2d(random_tensor({1, 4, 4, 2}, dtype::f32, rng), *tensor::zeros({2, 2, 2, 0}, dtype::f32));
  REQUIRE(z);
  CHECK(z->shape() == shape{1, 3, 3, 0});
}

TEST_CASE("conv2d reports bad shapes, dtypes and options with the op name and the shapes", "[cpu][conv]") {
  auto x = *tensor::zeros({1, 5, 5, 4}, dtype::f32);
  auto f = *tensor::zeros({3, 3, 4, 2}, dtype::f32);
  check_error(af::conv2d(*tensor::zeros({5, 5, 4}, dtype::f32), f), errc::shape_mismatch,
              "conv2d: input must be NHWC and filter HWIO (rank 4): input [5,5,4], filter [3,3,4,2]");
  check_error(af::conv2d(x, *tensor::zeros({3, 3, 4, 2}, dtype::f64)), errc::dtype_mismatch,
              "conv2d: needs matching floating dtypes, got f32 and f64");
  check_error(af::conv2d(*tensor::zeros({1, 5, 5, 4}, dtype::i32), *tensor::zeros({3, 3, 4, 2}, dtype::i32)),
              errc::dtype_mismatch, "i32");
  check_error(af::conv2d(x, *tensor::zeros({3, 3, 3, 2}, dtype::f32)), errc::shape_mismatch,
              "input [1,5,5,4], filter [3,3,3,2]");
  check_error(af::conv2d(x, *tensor::zeros({3, 3, 2, 3}, dtype::f32), {{1, 1}, padding_mode::valid, {1, 1}, 2}),
              errc::shape_mismatch, "groups 2");
  check_error(af::conv2d(x, *tensor::zeros({3, 3, 4, 2}, dtype::f32), {{1, 1}, padding_mode::valid, {1, 1}, 3}),
              errc::shape_mismatch, "groups 3");
  check_error(af::conv2d(x, f, {{0, 1}, padding_mode::valid, {1, 1}, 1}), errc::invalid_argument, "strides [0,1]");
  check_error(af::conv2d(x, f, {{1, 1}, padding_mode::valid, {1, 0}, 1}), errc::invalid_argument, "dilations [1,0]");
  check_error(af::conv2d(x, f, {{1, 1}, padding_mode::valid, {1, 1}, 0}), errc::invalid_argument, "groups 0");
  check_error(af::conv2d(x, f, {{1, 1}, padding_mode::valid, {3, 1}, 1}), errc::shape_mismatch,
              "larger than the input with valid padding: input [1,5,5,4], filter [3,3,4,2]");
  check_error(af::conv2d(x, *tensor::zeros({0, 3, 4, 2}, dtype::f32)), errc::shape_mismatch, "empty filter window");
  auto bytes = std::size_t{400};
  auto gpu = std::make_shared<af::storage>(new char[bytes], bytes, af::device::cuda(0),
                                           [](void* p) { delete[] static_cast<char*>(p); });
  check_error(af::conv2d(tensor{dtype::f32, {1, 5, 5, 4}, af::contiguous_strides({1, 5, 5, 4}), 0, gpu}, f),
              errc::unsupported, "conv2d: CPU kernel got tensors on cuda:0");
}

TEST_CASE("max and average pooling on random shapes match the reference", "[cpu][pool]") {
  std::mt19937 rng(99);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 80; ++trial) {
    af::pool_options o{{pick(1, 3), pick(1, 3)}, {pick(1, 3), pick(1, 3)},
                       pick(0, 1) ? padding_mode::same : padding_mode::valid};
    const shape dims{pick(0, 2), pick(o.ksize[0], 8), pick(o.ksize[1], 8), pick(1, 4)};
    const dtype type = trial % 2 ? dtype::f64 : dtype::f32;
    auto x = random_tensor(dims, type, rng);
    INFO(af::to_string(dims) << " ksize " << o.ksize[0] << "," << o.ksize[1] << " strides " << o.strides[0] << ","
                             << o.strides[1] << (o.padding == padding_mode::same ? " same" : " valid"));
    auto mx = af::max_pool2d(x, o);
    auto av = af::avg_pool2d(x, o);
    REQUIRE(mx);
    REQUIRE(av);
    CHECK(af::all_close(*mx, reference_pool(x, o, true), 1e-6, 1e-6));
    CHECK(af::all_close(*av, reference_pool(x, o, false), 1e-5, 1e-6));
  }
}

TEST_CASE("average pooling does not count padded cells and max pooling never picks them", "[cpu][pool]") {
  auto x = tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1});
  af::pool_options o{{2, 2}, {1, 1}, padding_mode::same};  // pad_total 1, all of it after
  auto av = af::avg_pool2d(x, o);
  REQUIRE(av);
  CHECK(av->to_vector<float>() == std::vector<float>{3, 4, 4.5f, 6, 7, 7.5f, 7.5f, 8.5f, 9});
  auto negative = tensor::from_vector<float>({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 3, 3, 1});
  auto mx = af::max_pool2d(negative, {{3, 3}, {2, 2}, padding_mode::same});
  REQUIRE(mx);
  CHECK(mx->to_vector<float>() == std::vector<float>{-1, -2, -4, -5});
}

TEST_CASE("max pooling works for integer and half dtypes and strided views", "[cpu][pool]") {
  auto x = tensor::from_vector<int32_t>({5, -1, 7, 2, -8, 3, 0, 9}, {1, 2, 4, 1});
  auto mx = af::max_pool2d(x, {{2, 2}, {2, 2}, padding_mode::valid});
  REQUIRE(mx);
  CHECK(mx->type() == dtype::i32);
  CHECK(mx->to_vector<int32_t>() == std::vector<int32_t>{5, 9});
  std::mt19937 rng(4);
  auto wide = random_tensor({2, 6, 5, 4}, dtype::f32, rng);
  auto view = *wide.slice(1, 0, 6, 2);  // [2,3,5,4], row step 2
  af::pool_options o{{2, 2}, {1, 2}, padding_mode::same};
  auto pooled = af::avg_pool2d(view, o);
  REQUIRE(pooled);
  CHECK(af::all_close(*pooled, reference_pool(view, o, false), 1e-5, 1e-6));
  auto h = random_tensor({1, 4, 4, 2}, dtype::bf16, rng);
  auto ph = af::max_pool2d(h, o);
  REQUIRE(ph);
  CHECK(ph->type() == dtype::bf16);
  CHECK(af::all_close(*ph, reference_pool(h, o, true), 0, 0));  // a maximum is exact in any dtype
}

TEST_CASE("pooling reports bad shapes, dtypes and options with the op name and the shapes", "[cpu][pool]") {
  auto x = *tensor::zeros({1, 4, 4, 2}, dtype::f32);
  check_error(af::max_pool2d(*tensor::zeros({4, 4, 2}, dtype::f32)), errc::shape_mismatch,
              "max_pool2d: input must be NHWC (rank 4): input [4,4,2]");
  check_error(af::avg_pool2d(*tensor::zeros({1, 4, 4, 2}, dtype::i32)), errc::dtype_mismatch,
              "avg_pool2d: unsupported dtype i32");
  check_error(af::max_pool2d(*tensor::zeros({1, 4, 4, 2}, dtype::boolean)), errc::dtype_mismatch,
              "max_pool2d: unsupported dtype bool");
  check_error(af::avg_pool2d(x, {{0, 2}, {1, 1}, padding_mode::same}), errc::invalid_argument, "ksize [0,2]");
  check_error(af::max_pool2d(x, {{2, 2}, {1, -1}, padding_mode::same}), errc::invalid_argument, "strides [1,-1]");
  check_error(af::max_pool2d(x, {{5, 2}, {1, 1}, padding_mode::valid}), errc::shape_mismatch,
              "max_pool2d: the window is larger than the input with valid padding: input [1,4,4,2], ksize [5,2]");
}

TEST_CASE("conv2d gradients on random shapes and options are the adjoints of the naive convolution", "[cpu][conv]") {
  // conv is linear in the input and in the filter, so for any output-shaped G:
  //   <conv(X, W), G> = <X, backprop_input(G, W)> = <W, backprop_filter(X, G)>.
  // Covers the GEMM paths (groups with several channels each) and the depthwise loops.
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> small(1, 3);
  auto dot = [](const tensor& a, const tensor& b) {
    const auto x = a.to_vector<double>(), y = b.to_vector<double>();
    REQUIRE(x.size() == y.size());
    double s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
    return s;
  };
  for (int round = 0; round < 40; ++round) {
    af::conv2d_options o;
    o.groups = round % 4 == 3 ? 3 : round % 4 == 2 ? 2 : 1;
    const int64_t cg = round % 8 == 7 ? 1 : small(rng);  // cg 1 with groups 3: depthwise
    const int64_t cin = cg * o.groups, cout = o.groups * small(rng);
    o.strides = {small(rng), small(rng)};
    o.dilations = {small(rng) == 3 ? 2 : 1, 1};
    o.padding = round % 2 ? padding_mode::same : padding_mode::valid;
    const shape in_dims{small(rng), 5 + small(rng), 4 + small(rng), cin};
    const tensor x = random_tensor(in_dims, dtype::f64, rng);
    const tensor w = random_tensor({small(rng), small(rng), cg, cout}, dtype::f64, rng);
    const tensor y = reference_conv(x, w, o);
    INFO("round " << round << ": input " << af::to_string(in_dims) << ", filter " << af::to_string(w.shape())
                  << ", groups " << o.groups << ", output " << af::to_string(y.shape()));
    const tensor g = random_tensor(y.shape(), dtype::f64, rng);
    const double forward = dot(y, g);
    auto dx = af::conv2d_backprop_input(g, w, in_dims, o);
    auto dw = af::conv2d_backprop_filter(x, g, w.shape(), o);
    REQUIRE(dx);
    REQUIRE(dw);
    CHECK(dot(x, *dx) == Approx(forward).epsilon(1e-10).margin(1e-10));
    CHECK(dot(w, *dw) == Approx(forward).epsilon(1e-10).margin(1e-10));
  }
}

TEST_CASE("max pooling's gradient goes to the first maximal cell of each window, tiled or not", "[cpu][pool]") {
  // Ties everywhere: a 4x5 input of ones, 2 channels. Tiling 2x2 windows (the fast path) leave the
  // last column in no window; overlapping 2x2 windows with stride 1 take the general path.
  auto x = *af::tensor::full({1, 4, 5, 2}, 1.0, af::dtype::f32);
  for (const auto& o : {af::pool_options{{2, 2}, {2, 2}, af::padding_mode::valid}, af::pool_options{{2, 2}, {1, 1}, af::padding_mode::valid}}) {
    auto y = af::max_pool2d(x, o);
    REQUIRE(y);
    auto g = *af::tensor::full(y->shape(), 1.0, af::dtype::f32);
    auto dx = af::max_pool2d_backprop(x, g, o);
    REQUIRE(dx);
    std::vector<double> want(40, 0.0);
    for (int64_t i = 0; i < y->dim(1); ++i)
      for (int64_t j = 0; j < y->dim(2); ++j)
        for (int c = 0; c < 2; ++c) want[static_cast<std::size_t>(((i * o.strides[0]) * 5 + j * o.strides[1]) * 2 + c)] += 1;
    CHECK(dx->to_vector<double>() == want);
  }
}

namespace {

// Both gradients of the convolution for output gradient `grad`, accumulated in double.
std::pair<std::vector<double>, std::vector<double>> reference_conv_grads(const tensor& input, const tensor& filter,
                                                                          const tensor& grad,
                                                                          const af::conv2d_options& o) {
  const auto x = input.to_vector<double>(), f = filter.to_vector<double>(), g = grad.to_vector<double>();
  std::vector<double> dx(x.size(), 0.0), df(f.size(), 0.0);
  for_each_conv_product(input.shape(), filter.shape(), o, [&](std::size_t oi, std::size_t xi, std::size_t fi) {
    dx[xi] += f[fi] * g[oi];
    df[fi] += x[xi] * g[oi];
  });
  return {dx, df};
}

}  // namespace

TEST_CASE("conv2d's register-blocked loops for windows of few channels match the reference, with gradients", "[cpu][conv]") {
  // Windows of at most 32 values (an RGB first layer) take direct loops that hold sums for blocks of
  // 3 pixels (forward) or 3 window values (filter gradient) by 4 vectors of output channels: these
  // shapes cover whole blocks, channel tails past the last block, pixel and window-value tails,
  // padding, strides and dilations, in both float widths.
  std::mt19937 rng(909);
  struct conv_case { shape in, f; af::conv2d_options o; };
  const std::vector<conv_case> cases = {
      {{2, 9, 10, 3}, {3, 3, 3, 40}, {}},                                          // 27 values, one block + 8
      {{1, 8, 7, 2}, {2, 2, 2, 64}, {{2, 1}, padding_mode::same, {1, 1}, 1}},      // 8 values: window tail 2
      {{2, 11, 9, 1}, {3, 3, 1, 35}, {{1, 2}, padding_mode::valid, {2, 1}, 1}},    // dilated, odd channels
      {{1, 6, 5, 4}, {1, 3, 4, 96}, {{1, 1}, padding_mode::same, {1, 1}, 1}},      // several whole blocks
  };
  for (const dtype type : {dtype::f32, dtype::f64}) {
    const double tolerance = type == dtype::f32 ? 1e-4 : 1e-12;
    for (const auto& cc : cases) {
      INFO(af::to_string(type) << " " << describe(cc.in, cc.f, cc.o));
      const tensor x = random_tensor(cc.in, type, rng), w = random_tensor(cc.f, type, rng);
      auto y = af::conv2d(x, w, cc.o);
      REQUIRE(y);
      CHECK(af::all_close(*y, reference_conv(x, w, cc.o), tolerance, tolerance));
      const tensor g = random_tensor(y->shape(), type, rng);
      const auto [want_dx, want_df] = reference_conv_grads(x, w, g, cc.o);
      auto dx = af::conv2d_backprop_input(g, w, cc.in, cc.o);
      auto dw = af::conv2d_backprop_filter(x, g, cc.f, cc.o);
      REQUIRE(dx);
      REQUIRE(dw);
      CHECK(af::all_close(*dx, tensor::from_vector(want_dx, cc.in), tolerance, tolerance));
      CHECK(af::all_close(*dw, tensor::from_vector(want_df, cc.f), tolerance, tolerance));
    }
  }
}

TEST_CASE("tiled max pooling's gradient over many channels matches the first-maximum reference", "[cpu][pool]") {
  // The tiled path selects a vector of channels at a time by masks, then the leftover channels one
  // by one: 13 channels in f32 (8 + 5) and 10 in f64 (4 + 4 + 2). Values from five levels make
  // ties common, and rows/columns left over past the last window get no gradient.
  std::mt19937 rng(515);
  std::uniform_int_distribution<int> level(0, 4);
  for (const dtype type : {dtype::f32, dtype::f64}) {
    const int64_t n = 2, h = 7, w = 9, c = type == dtype::f32 ? 13 : 10;
    const af::pool_options o{{2, 3}, {2, 3}, padding_mode::valid};
    const int64_t oh = h / 2, ow = w / 3;
    std::vector<double> xs(static_cast<std::size_t>(n * h * w * c));
    for (auto& v : xs) v = level(rng);
    const tensor x = *af::cast(tensor::from_vector(xs, {n, h, w, c}), type);
    const tensor g = random_tensor({n, oh, ow, c}, type, rng);
    auto dx = af::max_pool2d_backprop(x, g, o);
    REQUIRE(dx);
    const auto gs = g.to_vector<double>();
    std::vector<double> want(xs.size(), 0.0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xo = 0; xo < ow; ++xo)
          for (int64_t k = 0; k < c; ++k) {
            auto at = [&](int64_t i, int64_t j) { return static_cast<std::size_t>(((b * h + y * 2 + i) * w + xo * 3 + j) * c + k); };
            std::size_t best = at(0, 0);
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 3; ++j)
                if (xs[at(i, j)] > xs[best]) best = at(i, j);
            want[best] = gs[static_cast<std::size_t>(((b * oh + y) * ow + xo) * c + k)];
          }
    INFO(af::to_string(type));
    CHECK(dx->to_vector<double>() == want);
  }
}
