#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/allocator.hpp"
#include "ops/elementwise.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

const std::vector<dtype> numeric_dtypes = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16,
                                           dtype::i8,  dtype::u8,  dtype::i32, dtype::i64};
const std::vector<dtype> floating_dtypes = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16};

tensor from_doubles(const std::vector<double>& values, const shape& dims, dtype type) {
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (std::size_t i = 0; i < values.size(); ++i) af::store_from_double(p + i * af::size_of(type), type, values[i]);
  return *t;
}

// Values that every dtype represents exactly (small integers, or halves for floats).
std::vector<double> random_values(int64_t n, dtype type, std::mt19937& rng, double lo = -8, double hi = 8) {
  std::uniform_int_distribution<int> pick(static_cast<int>(lo * 2), static_cast<int>(hi * 2));
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    x = pick(rng) / 2.0;
    if (!af::is_floating(type)) x = std::trunc(x);
    if (type == dtype::u8) x = std::fabs(x);
    if (type == dtype::boolean) x = x > 0;
  }
  return v;
}

enum class layout { contiguous, transposed, strided };

// A tensor of shape `dims` holding `values` row-major, laid out as asked (a view over a bigger or
// permuted buffer when not contiguous).
tensor make_tensor(const std::vector<double>& values, const shape& dims, dtype type, layout how) {
  const auto r = dims.size();
  if (how == layout::transposed && r >= 2) {
    shape swapped = dims;
    std::swap(swapped[r - 1], swapped[r - 2]);
    std::vector<double> v(values.size());
    const int64_t rows = dims[r - 2], cols = dims[r - 1], mat = rows * cols;
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      const int64_t base = i / std::max<int64_t>(mat, 1) * mat, row = (i % mat) / cols, col = i % cols;
      v[base + col * rows + row] = values[i];
    }
    auto t = from_doubles(v, swapped, type).transpose(-1, -2);
    REQUIRE(t);
    return *t;
  }
  if (how == layout::strided && r >= 1) {
    shape wide = dims;
    wide[r - 1] = dims[r - 1] * 2 + 1;
    std::vector<double> v(static_cast<std::size_t>(af::numel(wide)), 99.0);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i)
      v[i / dims[r - 1] * wide[r - 1] + 1 + 2 * (i % dims[r - 1])] = values[i];
    auto t = from_doubles(v, wide, type).slice(-1, 1, wide[r - 1], 2);
    REQUIRE(t);
    REQUIRE(t->shape() == dims);
    return *t;
  }
  return from_doubles(values, dims, type);
}

// Row-major index into a tensor of shape `in` broadcast to `out` for the output element `flat`.
int64_t broadcast_index(const shape& in, const shape& out, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::size_t d = out.size() - 1 - k;
    const int64_t coord = flat % out[d];
    flat /= out[d];
    if (k < in.size()) {
      const std::size_t e = in.size() - 1 - k;
      if (in[e] != 1) index += coord * stride;
      stride *= in[e];
    }
  }
  return index;
}

double tolerance(dtype t) {
  switch (t) {
    case dtype::f16: return 2e-3;
    case dtype::bf16: return 1.6e-2;
    case dtype::f32: return 2e-6;
    case dtype::f64: return 1e-12;
    default: return 0;
  }
}

// Rounds a reference value the way storing it in `t` does (integers wrap, floats round).
double as_stored(double v, dtype t) {
  if (af::is_integral(t) && std::isfinite(v)) {
    const int bits = static_cast<int>(af::size_of(t)) * 8;
    if (bits < 64) {
      const double m = std::ldexp(1.0, bits);
      v = std::fmod(v, m);
      if (v < 0) v += m;
      if (t != dtype::u8 && v >= m / 2) v -= m;
    }
    return v;
  }
  char buf[8];
  af::store_from_double(buf, t, v);
  return af::load_as_double(buf, t);
}

void check_values(const tensor& got, const std::vector<double>& want, dtype t, const std::string& what) {
  INFO(what);
  auto g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  const double tol = tolerance(t);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double w = as_stored(want[i], t);
    if (std::isnan(w)) {
      CHECK(std::isnan(g[i]));
    } else if (std::isinf(w)) {
      CHECK(g[i] == w);
    } else if (std::fabs(g[i] - w) > tol * (1 + std::fabs(w))) {
      INFO("element " << i << ": got " << g[i] << ", want " << w);
      CHECK(false);
      return;
    }
  }
}

using binary_fn = af::expected<tensor> (*)(const tensor&, const tensor&);

struct binary_case {
  const char* name;
  binary_fn op;
  std::function<double(double, double, dtype)> ref;
};

double int_div(double x, double y) { return y == 0 ? 0 : std::trunc(x / y); }

const std::vector<binary_case> arithmetic = {
    {"add", af::add, [](double x, double y, dtype) { return x + y; }},
    {"sub", af::sub, [](double x, double y, dtype) { return x - y; }},
    {"mul", af::mul, [](double x, double y, dtype) { return x * y; }},
    {"div", af::div, [](double x, double y, dtype t) { return af::is_integral(t) ? int_div(x, y) : x / y; }},
    {"maximum", af::maximum, [](double x, double y, dtype) { return std::max(x, y); }},
    {"minimum", af::minimum, [](double x, double y, dtype) { return std::min(x, y); }},
};

const std::vector<binary_case> comparisons = {
    {"equal", af::equal, [](double x, double y, dtype) { return double(x == y); }},
    {"not_equal", af::not_equal, [](double x, double y, dtype) { return double(x != y); }},
    {"less", af::less, [](double x, double y, dtype) { return double(x < y); }},
    {"less_equal", af::less_equal, [](double x, double y, dtype) { return double(x <= y); }},
    {"greater", af::greater, [](double x, double y, dtype) { return double(x > y); }},
    {"greater_equal", af::greater_equal, [](double x, double y, dtype) { return double(x >= y); }},
};

// Shape pairs covering same shapes, row/column vectors, scalars, rank differences and empty dims.
const std::vector<std::pair<shape, shape>> shape_pairs = {
    {{6}, {6}},         {{3, 5}, {3, 5}},     {{3, 5}, {5}},       {{3, 5}, {3, 1}},    {{4, 1, 6}, {1, 5, 1}},
    {{}, {7}},          {{2, 3}, {}},         {{}, {}},            {{2, 3, 4}, {3, 4}}, {{1}, {4, 4}},
    {{0, 3}, {3}},      {{2, 0}, {2, 1}},     {{5, 0}, {}},        {{2, 3, 70}, {70}},  {{33, 17}, {33, 17}},
};

void check_binary(const binary_case& c, dtype t, dtype out_type, std::mt19937& rng) {
  for (const auto& [sa, sb] : shape_pairs) {
    for (layout la : {layout::contiguous, layout::transposed, layout::strided}) {
      const auto va = random_values(af::numel(sa), t, rng);
      auto vb = random_values(af::numel(sb), t, rng);
      const tensor a = make_tensor(va, sa, t, la);
      const tensor b = make_tensor(vb, sb, t, la == layout::transposed ? layout::strided : layout::contiguous);
      auto out_shape = af::broadcast_shapes(sa, sb, "test");
      REQUIRE(out_shape);
      auto got = c.op(a, b);
      INFO(c.name << " " << af::to_string(t) << " " << af::to_string(sa) << " " << af::to_string(sb));
      REQUIRE(got);
      CHECK(got->type() == out_type);
      CHECK(got->shape() == *out_shape);
      std::vector<double> want(static_cast<std::size_t>(af::numel(*out_shape)));
      for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i)
        want[i] = c.ref(va[broadcast_index(sa, *out_shape, i)], vb[broadcast_index(sb, *out_shape, i)], t);
      check_values(*got, want, out_type, c.name);
    }
  }
}

std::string message_of(const af::expected<tensor>& r) { return r ? std::string("(no error)") : r.error_value().message; }

}  // namespace

TEST_CASE("add broadcasts a row vector across a matrix", "[cpu][elementwise]") {
  auto m = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto row = tensor::from_vector<float>({10, 20, 30});
  auto r = af::add(m, row);
  REQUIRE(r);
  CHECK(r->shape() == shape{2, 3});
  CHECK(r->to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  auto col = tensor::from_vector<float>({100, 200}, {2, 1});
  auto s = af::add(m, col);
  REQUIRE(s);
  CHECK(s->to_vector<float>() == std::vector<float>{101, 102, 103, 204, 205, 206});
}

TEST_CASE("binary arithmetic matches a reference loop for every numeric dtype, broadcast and layout",
          "[cpu][elementwise]") {
  std::mt19937 rng(1);
  for (const auto& c : arithmetic)
    for (dtype t : numeric_dtypes) check_binary(c, t, t, rng);
}

TEST_CASE("pow matches a reference loop for floats and integers", "[cpu][elementwise]") {
  auto x = tensor::from_vector<float>({2, 9, 0.5f, -2, 0}, {5});
  auto y = tensor::from_vector<float>({3, 0.5f, -1, 2, 0}, {5});
  auto r = af::pow(x, y);
  REQUIRE(r);
  CHECK(r->to_vector<float>() == std::vector<float>{8, 3, 2, 4, 1});
  auto xi = tensor::from_vector<int32_t>({2, -3, 5, 1, -1, -1, 0, 7});
  auto yi = tensor::from_vector<int32_t>({10, 3, 0, -5, -3, -4, -1, -2});
  auto ri = af::pow(xi, yi);
  REQUIRE(ri);
  // Negative exponents truncate 1/x^n toward zero; 0^-1 follows integer division by zero (0).
  CHECK(ri->to_vector<int32_t>() == std::vector<int32_t>{1024, -27, 1, 1, -1, 1, 0, 0});
  auto h = af::pow(*af::cast(x, dtype::f16), *af::cast(y, dtype::f16));
  REQUIRE(h);
  CHECK(h->to_vector<float>() == std::vector<float>{8, 3, 2, 4, 1});
}

TEST_CASE("comparisons return bool and match a reference loop for every dtype", "[cpu][elementwise]") {
  std::mt19937 rng(2);
  std::vector<dtype> all = numeric_dtypes;
  all.push_back(dtype::boolean);
  for (const auto& c : comparisons)
    for (dtype t : all) check_binary(c, t, dtype::boolean, rng);
  auto nan = tensor::from_vector<float>({std::nanf(""), 1});
  auto one = tensor::from_vector<float>({std::nanf(""), 1});
  CHECK(af::equal(nan, one)->to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(af::not_equal(nan, one)->to_vector<bool>() == std::vector<bool>{true, false});
}

TEST_CASE("integer division truncates toward zero and defines division by zero as 0", "[cpu][elementwise]") {
  auto x = tensor::from_vector<int32_t>({7, -7, 7, -7, 5, std::numeric_limits<int32_t>::min()});
  auto y = tensor::from_vector<int32_t>({2, 2, -2, -2, 0, -1});
  auto r = af::div(x, y);
  REQUIRE(r);
  CHECK(r->to_vector<int32_t>() ==
        std::vector<int32_t>{3, -3, -3, 3, 0, std::numeric_limits<int32_t>::min()});
  auto r8 = af::div(tensor::from_vector<int8_t>({-128, 9}), tensor::from_vector<int8_t>({-1, 0}));
  REQUIRE(r8);
  CHECK(r8->to_vector<int8_t>() == std::vector<int8_t>{-128, 0});
}

TEST_CASE("integer arithmetic wraps on overflow", "[cpu][elementwise]") {
  const int64_t big = std::numeric_limits<int64_t>::max();
  auto r = af::add(tensor::from_vector<int64_t>({big}), tensor::from_vector<int64_t>({1}));
  REQUIRE(r);
  CHECK(r->to_vector<int64_t>()[0] == std::numeric_limits<int64_t>::min());
  auto m = af::mul(tensor::from_vector<uint8_t>({200, 16}), tensor::from_vector<uint8_t>({2, 16}));
  REQUIRE(m);
  CHECK(m->to_vector<uint8_t>() == std::vector<uint8_t>{144, 0});
  auto n = af::neg(tensor::from_vector<int32_t>({std::numeric_limits<int32_t>::min(), 5}));
  REQUIRE(n);
  CHECK(n->to_vector<int32_t>() == std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -5});
}

TEST_CASE("maximum and minimum propagate NaN", "[cpu][elementwise]") {
  const float nan = std::nanf("");
  auto a = tensor::from_vector<float>({nan, 1, 3});
  auto b = tensor::from_vector<float>({1, nan, 2});
  auto mx = af::maximum(a, b)->to_vector<float>();
  auto mn = af::minimum(a, b)->to_vector<float>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 3);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 2);
}

TEST_CASE("tensor op scalar broadcasts a 0-d tensor of the tensor's dtype", "[cpu][elementwise]") {
  auto x = tensor::from_vector<int32_t>({1, 2, 3});
  auto r = af::add(x, 2.0);
  REQUIRE(r);
  CHECK(r->type() == dtype::i32);
  CHECK(r->to_vector<int32_t>() == std::vector<int32_t>{3, 4, 5});
  CHECK(af::mul(tensor::from_vector<float>({1.5f}), 2.0)->to_vector<float>()[0] == 3.0f);
  CHECK(af::maximum(tensor::from_vector<float>({-1, 4}), 0.0)->to_vector<float>() == std::vector<float>{0, 4});
  CHECK(af::pow(tensor::from_vector<double>({3}), 2.0)->to_vector<double>()[0] == 9.0);
  CHECK(af::sub(x, 1.0)->to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2});
  CHECK(af::div(x, 2.0)->to_vector<int32_t>() == std::vector<int32_t>{0, 1, 1});
  CHECK(af::minimum(x, 2.0)->to_vector<int32_t>() == std::vector<int32_t>{1, 2, 2});
}

TEST_CASE("unary ops match a reference loop on every floating dtype and layout", "[cpu][elementwise]") {
  struct unary_case {
    const char* name;
    std::function<af::expected<tensor>(const tensor&)> op;
    double (*ref)(double);
    double lo, hi;
  };
  const std::vector<unary_case> cases = {
      {"neg", af::neg, [](double x) { return -x; }, -8, 8},
      {"abs", af::abs, [](double x) { return std::fabs(x); }, -8, 8},
      {"relu", af::relu, [](double x) { return std::max(x, 0.0); }, -8, 8},
      {"exp", af::exp, [](double x) { return std::exp(x); }, -8, 8},
      {"log", af::log, [](double x) { return std::log(x); }, 0.5, 30},
      {"sqrt", af::sqrt, [](double x) { return std::sqrt(x); }, 0, 30},
      {"rsqrt", af::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.5, 30},
      {"tanh", af::tanh, [](double x) { return std::tanh(x); }, -4, 4},
      {"sigmoid", af::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"gelu", [](const tensor& x) { return af::gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -6, 6},
      {"gelu_tanh", [](const tensor& x) { return af::gelu(x, true); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -6, 6},
  };
  std::mt19937 rng(3);
  const std::vector<shape> shapes = {{}, {1}, {17}, {3, 5}, {2, 4, 9}, {0, 4}, {300, 300}};
  for (const auto& uc : cases)
    for (dtype t : floating_dtypes)
      for (const auto& s : shapes)
        for (layout how : {layout::contiguous, layout::transposed, layout::strided}) {
          const auto v = random_values(af::numel(s), t, rng, uc.lo, uc.hi);
          auto got = uc.op(make_tensor(v, s, t, how));
          INFO(uc.name << " " << af::to_string(t) << " " << af::to_string(s));
          REQUIRE(got);
          CHECK(got->shape() == s);
          CHECK(got->type() == t);
          std::vector<double> want(v.size());
          for (std::size_t i = 0; i < v.size(); ++i) want[i] = uc.ref(v[i]);
          check_values(*got, want, t, uc.name);
        }
}

TEST_CASE("neg, abs and relu work on every integer dtype", "[cpu][elementwise]") {
  std::mt19937 rng(4);
  for (dtype t : {dtype::i8, dtype::u8, dtype::i32, dtype::i64}) {
    const auto v = random_values(40, t, rng);
    const tensor x = make_tensor(v, {5, 8}, t, layout::transposed);
    std::vector<double> n(v.size()), a(v.size()), r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      n[i] = -v[i];
      a[i] = std::fabs(v[i]);
      r[i] = std::max(v[i], 0.0);
    }
    check_values(*af::neg(x), n, t, "neg");
    check_values(*af::abs(x), a, t, "abs");
    check_values(*af::relu(x), r, t, "relu");
  }
}

TEST_CASE("sigmoid stays finite and exact at the extremes", "[cpu][elementwise]") {
  auto r = af::sigmoid(tensor::from_vector<float>({-1000, -80, 0, 80, 1000}));
  REQUIRE(r);
  auto v = r->to_vector<float>();
  CHECK(v[0] == 0.0f);
  CHECK(v[1] >= 0.0f);
  CHECK(v[1] < 1e-30f);
  CHECK(v[2] == 0.5f);
  CHECK(v[3] == 1.0f);
  CHECK(v[4] == 1.0f);
}

TEST_CASE("where selects with three-way broadcasting and any layout", "[cpu][elementwise]") {
  std::mt19937 rng(5);
  const std::vector<std::array<shape, 3>> shapes = {
      {shape{4, 5}, shape{4, 5}, shape{4, 5}}, {shape{4, 1}, shape{5}, shape{}},
      {shape{3, 1, 2}, shape{1, 4, 1}, shape{4, 2}}, {shape{0, 3}, shape{3}, shape{1}}, {shape{}, shape{2, 2}, shape{2, 2}}};
  for (dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::i8, dtype::i64, dtype::boolean})
    for (const auto& s : shapes) {
      const auto vc = random_values(af::numel(s[0]), dtype::i32, rng);
      std::vector<double> cv(vc.size());
      for (std::size_t i = 0; i < vc.size(); ++i) cv[i] = vc[i] > 0;
      const auto va = random_values(af::numel(s[1]), t, rng), vb = random_values(af::numel(s[2]), t, rng);
      auto out_shape = af::broadcast_shapes(*af::broadcast_shapes(s[0], s[1], "t"), s[2], "t");
      auto got = af::where(make_tensor(cv, s[0], dtype::boolean, layout::strided),
                           make_tensor(va, s[1], t, layout::transposed), make_tensor(vb, s[2], t, layout::contiguous));
      INFO(af::to_string(t) << " " << af::to_string(s[0]) << af::to_string(s[1]) << af::to_string(s[2]));
      REQUIRE(got);
      CHECK(got->shape() == *out_shape);
      std::vector<double> want(static_cast<std::size_t>(af::numel(*out_shape)));
      for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i)
        want[i] = cv[broadcast_index(s[0], *out_shape, i)] != 0 ? va[broadcast_index(s[1], *out_shape, i)]
                                                               : vb[broadcast_index(s[2], *out_shape, i)];
      check_values(*got, want, t == dtype::boolean ? dtype::boolean : t, "where");
    }
}

TEST_CASE("cast converts between every pair of dtypes", "[cpu][elementwise]") {
  std::mt19937 rng(6);
  std::vector<dtype> all = numeric_dtypes;
  all.push_back(dtype::boolean);
  for (dtype from : all)
    for (dtype to : all) {
      const auto v = random_values(24, from == dtype::boolean ? dtype::u8 : from, rng, 0, 3);
      std::vector<double> src(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) src[i] = as_stored(v[i], from);
      auto got = af::cast(make_tensor(src, {4, 6}, from, layout::transposed), to);
      INFO(af::to_string(from) << " -> " << af::to_string(to));
      REQUIRE(got);
      CHECK(got->type() == to);
      std::vector<double> want(src.size());
      for (std::size_t i = 0; i < src.size(); ++i)
        want[i] = to == dtype::boolean ? double(src[i] != 0) : af::is_integral(to) ? std::trunc(src[i]) : src[i];
      check_values(*got, want, to, "cast");
    }
}

TEST_CASE("cast from float to integer truncates toward zero, saturates and maps NaN to 0", "[cpu][elementwise]") {
  const float inf = std::numeric_limits<float>::infinity();
  auto x = tensor::from_vector<float>({2.7f, -2.7f, std::nanf(""), 1e20f, -1e20f, inf, -inf, -0.5f});
  CHECK(af::cast(x, dtype::i32)->to_vector<int32_t>() ==
        std::vector<int32_t>{2, -2, 0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0});
  CHECK(af::cast(x, dtype::u8)->to_vector<uint8_t>() == std::vector<uint8_t>{2, 0, 0, 255, 0, 255, 0, 0});
  CHECK(af::cast(x, dtype::i64)->to_vector<int64_t>() ==
        std::vector<int64_t>{2, -2, 0, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 0});
  CHECK(af::cast(x, dtype::boolean)->to_vector<bool>() ==
        std::vector<bool>{true, true, true, true, true, true, true, true});
  CHECK(af::cast(tensor::from_vector<int32_t>({300, -1}), dtype::u8)->to_vector<uint8_t>() ==
        std::vector<uint8_t>{44, 255});
}

TEST_CASE("large contiguous and misaligned outputs are computed correctly on two threads", "[cpu][elementwise]") {
  af::set_thread_budget(2);
  const int64_t n = (int64_t{5} << 20) + 3;  // over the streaming threshold, odd length
  std::vector<float> va(static_cast<std::size_t>(n + 1)), vb(static_cast<std::size_t>(n));
  for (int64_t i = 0; i <= n; ++i) va[i] = static_cast<float>(i % 1000) * 0.5f;
  for (int64_t i = 0; i < n; ++i) vb[i] = static_cast<float>(i % 7);
  const tensor a = *tensor::from_vector(va).slice(0, 1, n + 1);  // offset by one element
  const tensor b = tensor::from_vector(vb);
  auto r = af::add(a, b);
  REQUIRE(r);
  auto out = r->to_vector<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += out[i] != va[i + 1] + vb[i];
  CHECK(wrong == 0);
  // A column vector broadcast over long rows streams runs whose second input has stride 0.
  const int64_t cols = (int64_t{1} << 20) + 5;
  auto wide = af::mul(*tensor::arange(4 * cols, dtype::f32)->reshape({4, cols}),
                      tensor::from_vector<float>({1, -1, 2, 0}, {4, 1}));
  REQUIRE(wide);
  auto wv = wide->to_vector<float>();
  const float factor[4] = {1, -1, 2, 0};
  int64_t wrong_wide = 0;
  for (int64_t i = 0; i < 4 * cols; ++i) wrong_wide += wv[i] != static_cast<float>(i) * factor[i / cols];
  CHECK(wrong_wide == 0);
  auto c = af::cast(b, dtype::f64);
  REQUIRE(c);
  CHECK(c->to_vector<double>()[n - 1] == vb[n - 1]);
  auto single = [&] {
    af::set_thread_budget(1);
    auto s = af::add(a, b);
    af::set_thread_budget(2);
    return s;
  }();
  CHECK(af::all_equal(*single, *r));
}

TEST_CASE("elementwise errors name the op, the shapes and the dtypes", "[cpu][elementwise]") {
  auto f = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto i = tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto r = af::add(f, tensor::from_vector<float>({1, 2, 3, 4}));
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::shape_mismatch);
  CHECK(r.error_value().to_string() == "shape_mismatch: add: cannot broadcast shapes [2,3] and [4]");
  r = af::mul(f, i);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::dtype_mismatch);
  CHECK(r.error_value().to_string() == "dtype_mismatch: mul: f32 and i32 differ");
  r = af::exp(i);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "unsupported: exp: i32 is not a floating dtype");
  auto b = *af::cast(f, dtype::boolean);
  r = af::add(b, b);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::unsupported);
  CHECK(message_of(r) == "add: bool is not a numeric dtype");
  CHECK(af::neg(b).error_value().code == errc::unsupported);
  r = af::less(f, tensor::from_vector<float>({1, 2}));
  REQUIRE_FALSE(r);
  CHECK(message_of(r) == "less: cannot broadcast shapes [2,3] and [2]");
  r = af::where(f, f, f);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::dtype_mismatch);
  CHECK(message_of(r) == "where: condition must be bool, got f32");
  r = af::where(b, f, i);
  REQUIRE_FALSE(r);
  CHECK(message_of(r) == "where: f32 and i32 differ");
  r = af::where(b, f, tensor::from_vector<float>({1, 2}));
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::shape_mismatch);
  CHECK(message_of(r) == "where: cannot broadcast shapes [2,3], [2,3] and [2]");
  r = af::sqrt(tensor{});
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::invalid_argument);
  CHECK(message_of(r) == "sqrt: undefined tensor");
  CHECK_FALSE(af::add(tensor{}, 1.0).has_value());
}

TEST_CASE("elementwise ops refuse tensors that are not on the cpu", "[cpu][elementwise]") {
  std::vector<float> host(4, 1.0f);
  auto buf = std::make_shared<af::storage>(host.data(), host.size() * sizeof(float), af::device::cuda(0),
                                           [](void*) {});
  const tensor g{dtype::f32, {4}, {1}, 0, buf};
  const tensor c = tensor::from_vector<float>({1, 2, 3, 4});
  for (auto r : {af::add(c, g), af::relu(g), af::cast(g, dtype::f64), af::where(*af::greater(c, c), g, c)}) {
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::unsupported);
    CHECK(r.error_value().message.find("cuda:0") != std::string::npos);
  }
}

TEST_CASE("out_of_memory from the allocator propagates out of an elementwise op", "[cpu][elementwise]") {
  const tensor a = *tensor::zeros({1 << 20}, dtype::f32);
  const auto previous = af::cpu_allocator();
  auto small = af::make_cpu_allocator({af::alloc_policy::grow, 1 << 20, "small"});
  REQUIRE(small);
  af::set_cpu_allocator(*small);
  auto r = af::add(a, a);
  auto c = af::cast(a, dtype::f64);
  af::set_cpu_allocator(previous);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::out_of_memory);
  REQUIRE_FALSE(c);
  CHECK(c.error_value().code == errc::out_of_memory);
}

TEST_CASE("float exp, sigmoid, tanh, erf and gelu keep libm's edges: overflow, subnormals, infinities, NaN",
          "[cpu][elementwise]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf, -200.0f, -103.0f, -95.0f, -87.5f, -87.0f, 0.0f, 87.5f, 88.5f, 88.8f, 200.0f, inf, nan};
  const tensor t = tensor::from_vector<float>(x);
  const auto e = af::exp(t)->to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("exp(" << x[i] << ") = " << e[i]);
    if (std::isnan(x[i])) {
      CHECK(std::isnan(e[i]));
      continue;
    }
    const double want = std::exp(static_cast<double>(x[i]));
    if (want > std::numeric_limits<float>::max()) CHECK(e[i] == inf);
    else if (want < std::numeric_limits<float>::denorm_min() / 2) CHECK(e[i] == 0.0f);
    // Subnormals keep fewer bits: judged against the smallest normal float.
    else CHECK(std::fabs(e[i] - want) <= 3e-7 * std::max(want, static_cast<double>(std::numeric_limits<float>::min())));
  }
  const auto s = af::sigmoid(t)->to_vector<float>();
  CHECK(s.front() == 0.0f);
  CHECK(s[s.size() - 2] == 1.0f);
  CHECK(std::isnan(s.back()));
  CHECK(std::fabs(s[2] - std::exp(-103.0)) <= 1e-45);  // e^-103: a subnormal, not 0 and not clamped
  const auto th = af::tanh(t)->to_vector<float>();
  CHECK(th.front() == -1.0f);
  CHECK(th[s.size() - 2] == 1.0f);
  CHECK(std::isnan(th.back()));
  const auto er = af::erf(t)->to_vector<float>();
  CHECK(er.front() == -1.0f);
  CHECK(er[6] == 0.0f);
  CHECK(er[s.size() - 2] == 1.0f);
  CHECK(std::isnan(er.back()));
  const auto g = af::gelu(t)->to_vector<float>();
  CHECK(g[1] == 0.0f);      // gelu(-200): x * Phi(x) underflows to -0
  CHECK(g[6] == 0.0f);
  CHECK(g[10] == 200.0f);   // gelu(200) = 200
  CHECK(std::isnan(g.back()));
}
