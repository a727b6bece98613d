#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/parallel.hpp"
#include "ops/reduce.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

tensor from_doubles(const std::vector<double>& values, const shape& dims, dtype type) {
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (std::size_t i = 0; i < values.size(); ++i) af::store_from_double(p + i * af::size_of(type), type, values[i]);
  return *t;
}

// The same values viewed through a permutation that reverses the axes (a non-contiguous tensor).
tensor reversed_view(const std::vector<double>& values, const shape& dims, dtype type) {
  const int r = static_cast<int>(dims.size());
  shape rev(dims.rbegin(), dims.rend());
  std::vector<double> v(values.size());
  const auto st = af::contiguous_strides(rev);
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    int64_t rem = i, off = 0;
    for (int d = r; d-- > 0;) {
      off += (rem % dims[d]) * st[r - 1 - d];
      rem /= dims[d];
    }
    v[off] = values[i];
  }
  std::vector<int> order(r);
  for (int d = 0; d < r; ++d) order[d] = r - 1 - d;
  auto t = from_doubles(v, rev, type).permute(order);
  REQUIRE(t);
  return *t;
}

struct reference {
  shape out_shape;
  std::vector<std::vector<double>> groups;  // the input values reduced into each output
};

reference group_by_output(const std::vector<double>& values, const shape& dims, std::vector<bool> mask,
                          bool keepdims) {
  reference ref;
  shape kept;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (!mask[d]) kept.push_back(dims[d]);
    if (!mask[d] || keepdims) ref.out_shape.push_back(mask[d] ? 1 : dims[d]);
  }
  ref.groups.resize(static_cast<std::size_t>(af::numel(kept)));
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    int64_t rem = i, o = 0, scale = 1;
    for (std::size_t d = dims.size(); d-- > 0;) {
      const int64_t c = rem % dims[d];
      rem /= dims[d];
      if (!mask[d]) {
        o += c * scale;
        scale *= dims[d];
      }
    }
    ref.groups[o].push_back(values[i]);
  }
  return ref;
}

double tolerance(dtype t) {
  switch (t) {
    case dtype::f16: return 2e-3;
    case dtype::bf16: return 1.6e-2;
    case dtype::f32: return 1e-6;
    case dtype::f64: return 1e-12;
    default: return 0;
  }
}

using reduce_fn = af::expected<tensor> (*)(const tensor&, const std::vector<int64_t>&, bool);

struct reduce_case {
  const char* name;
  reduce_fn op;
  double (*ref)(const std::vector<double>&);
  bool floating_only;
  bool any_dtype;
};

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / static_cast<double>(v.size()); }
double ref_max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double ref_min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double ref_logsumexp(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  return std::log(s);
}

const std::vector<reduce_case> reductions = {
    {"reduce_sum", af::reduce_sum, ref_sum, false, false},
    {"reduce_mean", af::reduce_mean, ref_mean, true, false},
    {"reduce_max", af::reduce_max, ref_max, false, true},
    {"reduce_min", af::reduce_min, ref_min, false, true},
    {"reduce_logsumexp", af::reduce_logsumexp, ref_logsumexp, true, false},
};

}  // namespace

TEST_CASE("reduce_sum over rows and columns of a matrix", "[cpu][reduce]") {
  auto m = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(af::reduce_sum(m, {0})->to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(af::reduce_sum(m, {-1})->to_vector<float>() == std::vector<float>{6, 15});
  auto all = af::reduce_sum(m);
  REQUIRE(all);
  CHECK(all->shape() == shape{});
  CHECK(all->item<float>() == 21);
  auto kept = af::reduce_sum(m, {1}, true);
  REQUIRE(kept);
  CHECK(kept->shape() == shape{2, 1});
}

TEST_CASE("reductions match a reference loop for every dtype, axis set and layout", "[cpu][reduce]") {
  std::mt19937 rng(11);
  const std::vector<shape> shapes = {{},         {7},          {1, 5},        {4, 1, 3},    {3, 5, 2, 4},
                                     {50, 40},   {40, 50},     {6, 33, 20},   {2, 0, 3},    {300, 7},
                                     {3, 40000}, {2, 3000, 17}};
  const std::vector<dtype> dtypes = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16, dtype::i8,
                                     dtype::u8,  dtype::i32, dtype::i64, dtype::boolean};
  for (const auto& rc : reductions)
    for (dtype t : dtypes) {
      if (rc.floating_only && !af::is_floating(t)) continue;
      if (t == dtype::boolean && !rc.any_dtype) continue;
      for (const auto& s : shapes) {
        // The long shapes exercise blocked partials and column tiles; a few dtypes suffice there.
        if (af::numel(s) > 10000 && t != dtype::f32 && t != dtype::bf16) continue;
        const int r = static_cast<int>(s.size());
        std::vector<double> v(static_cast<std::size_t>(af::numel(s)));
        std::uniform_int_distribution<int> pick(t == dtype::u8 || t == dtype::boolean ? 0 : -6, 6);
        for (auto& x : v) x = t == dtype::boolean ? pick(rng) > 3 : pick(rng) / (af::is_floating(t) ? 2.0 : 1.0);
        // Every subset of axes for small ranks, a few random ones otherwise; plus "all" as {}.
        std::vector<std::vector<int64_t>> axis_sets = {{}};
        for (int mask = 1; mask < (1 << r); ++mask) {
          std::vector<int64_t> axes;
          for (int d = 0; d < r; ++d)
            if (mask & (1 << d)) axes.push_back(rng() % 2 ? d : d - r);  // mix negative axes in
          axis_sets.push_back(axes);
        }
        for (const auto& axes : axis_sets)
          for (bool keepdims : {false, true})
            for (bool reversed : {false, true}) {
              std::vector<bool> mask(static_cast<std::size_t>(r), axes.empty());
              for (auto a : axes) mask[static_cast<std::size_t>(a < 0 ? a + r : a)] = true;
              const auto ref = group_by_output(v, s, mask, keepdims);
              bool empty_group = false;
              for (const auto& g : ref.groups) empty_group |= g.empty();
              if (empty_group && (rc.any_dtype)) continue;  // covered by the empty-reduction test
              const tensor x = reversed ? reversed_view(v, s, t) : from_doubles(v, s, t);
              auto got = rc.op(x, axes, keepdims);
              INFO(rc.name << " " << af::to_string(t) << " shape " << af::to_string(s) << " axes "
                           << af::to_string(axes) << " keepdims " << keepdims << " reversed " << reversed);
              REQUIRE(got);
              CHECK(got->type() == t);
              CHECK(got->shape() == ref.out_shape);
              const auto g = got->to_vector<double>();
              REQUIRE(g.size() == ref.groups.size());
              for (std::size_t o = 0; o < g.size(); ++o) {
                double want = ref.groups[o].empty() ? (rc.ref == ref_sum ? 0.0 : rc.ref == ref_mean
                                                                                ? std::nan("")
                                                                                : -INFINITY)
                                                    : rc.ref(ref.groups[o]);
                if (af::is_integral(t) && rc.ref == ref_sum) {
                  // the sum wraps in the input dtype
                  const double m = std::ldexp(1.0, static_cast<int>(af::size_of(t)) * 8);
                  if (af::size_of(t) < 8) {
                    want = std::fmod(want, m);
                    if (want < 0) want += m;
                    if (t != dtype::u8 && want >= m / 2) want -= m;
                  }
                }
                if (t == dtype::boolean) want = want != 0;
                if (std::isnan(want)) {
                  CHECK(std::isnan(g[o]));
                } else if (std::fabs(g[o] - want) > tolerance(t) * (1 + std::fabs(want))) {
                  INFO("output " << o << ": got " << g[o] << ", want " << want);
                  CHECK(false);
                  break;
                }
              }
            }
      }
    }
}

TEST_CASE("reduce_sum of many f32 values is accurate", "[cpu][reduce]") {
  const int64_t n = 10'000'000;
  std::vector<float> v(static_cast<std::size_t>(n));
  double want = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = 0.1f + static_cast<float>(i % 3);
    want += v[i];
  }
  auto s = af::reduce_sum(tensor::from_vector(v));
  REQUIRE(s);
  // A naive float running sum is off by percents here; a double accumulator is exact to f32 rounding.
  CHECK(std::fabs(s->item<double>() - want) <= 1e-7 * want);
  auto mean = af::reduce_mean(tensor::from_vector(v));
  CHECK(std::fabs(mean->item<double>() - want / n) <= 1e-7 * want / n);
}

TEST_CASE("reductions give the same bits for one and two threads", "[cpu][reduce]") {
  std::mt19937 rng(12);
  std::normal_distribution<double> normal;
  std::vector<double> v(3'000'000);
  for (auto& x : v) x = normal(rng);
  const tensor x = *tensor::from_vector(v).reshape({1000, 3000});
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{}, {0}, {1}}) {
    af::set_thread_budget(1);
    auto one = af::reduce_sum(x, axes);
    auto lse1 = af::reduce_logsumexp(x, axes);
    af::set_thread_budget(2);
    auto two = af::reduce_sum(x, axes);
    auto lse2 = af::reduce_logsumexp(x, axes);
    CHECK(af::all_equal(*one, *two));
    CHECK(af::all_equal(*lse1, *lse2));
  }
}

TEST_CASE("reduce_logsumexp is stable for large, infinite and NaN inputs", "[cpu][reduce]") {
  const double inf = std::numeric_limits<double>::infinity();
  auto big = af::reduce_logsumexp(tensor::from_vector<float>({1000, 1000}));
  REQUIRE(big);
  CHECK(big->item<double>() == Approx(1000 + std::log(2.0)));
  auto small = af::reduce_logsumexp(tensor::from_vector<double>({-1000, -1000, -1001}));
  CHECK(small->item<double>() == Approx(-1000 + std::log(2 + std::exp(-1.0))));
  CHECK(af::reduce_logsumexp(tensor::from_vector<double>({-inf, -inf}))->item<double>() == -inf);
  CHECK(af::reduce_logsumexp(tensor::from_vector<double>({1, inf, 3}))->item<double>() == inf);
  CHECK(std::isnan(af::reduce_logsumexp(tensor::from_vector<double>({1, std::nan(""), inf}))->item<double>()));
  auto rows = af::reduce_logsumexp(tensor::from_vector<float>({0, 0, 500, 500}, {2, 2}), {1});
  CHECK(rows->to_vector<double>()[0] == Approx(std::log(2.0)));
  CHECK(rows->to_vector<double>()[1] == Approx(500 + std::log(2.0)));
}

TEST_CASE("reduce_max and reduce_min propagate NaN", "[cpu][reduce]") {
  auto x = tensor::from_vector<float>({1, std::nanf(""), 3, 4, 5, 6}, {2, 3});
  auto mx = af::reduce_max(x, {1})->to_vector<float>();
  CHECK(std::isnan(mx[0]));
  CHECK(mx[1] == 6);
  auto mn = af::reduce_min(x, {0})->to_vector<float>();
  CHECK(mn[0] == 1);
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 3);
}

TEST_CASE("empty reductions: sum is 0, mean is NaN, max and min are errors", "[cpu][reduce]") {
  auto e = *tensor::zeros({2, 0}, dtype::f32);
  CHECK(af::reduce_sum(e, {1})->to_vector<float>() == std::vector<float>{0, 0});
  auto mean = af::reduce_mean(e, {1})->to_vector<float>();
  CHECK(std::isnan(mean[0]));
  CHECK(std::isnan(mean[1]));
  CHECK(af::reduce_logsumexp(e)->item<double>() == -INFINITY);
  CHECK(af::reduce_sum(e, {0})->shape() == shape{0});  // nothing to reduce into: an empty result
  CHECK(af::reduce_max(e, {0})->shape() == shape{0});
  for (auto r : {af::reduce_max(e, {1}), af::reduce_min(e), af::argmax(e, 1)}) {
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::invalid_argument);
    CHECK(r.error_value().message.find("empty dimension of shape [2,0]") != std::string::npos);
  }
  CHECK(af::reduce_max(e, {1}).error_value().message ==
        "reduce_max: cannot reduce an empty dimension of shape [2,0] over axes [1]");
}

TEST_CASE("reduction axis errors name the op and the shape", "[cpu][reduce]") {
  auto x = *tensor::zeros({2, 3}, dtype::f32);
  auto r = af::reduce_sum(x, {2});
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "out_of_range: reduce_sum: axis 2 is out of range for shape [2,3]");
  r = af::reduce_mean(x, {-3});
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::out_of_range);
  r = af::reduce_max(x, {1, -1});
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "invalid_argument: reduce_max: axis -1 is repeated in [1,-1]");
  r = af::argmax(x, 2);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "out_of_range: argmax: axis 2 is out of range for shape [2,3]");
  r = af::reduce_mean(*tensor::zeros({2}, dtype::i32));
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "unsupported: reduce_mean: i32 is not a floating dtype");
  r = af::reduce_sum(*tensor::zeros({2}, dtype::boolean));
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::unsupported);
  CHECK_FALSE(af::reduce_logsumexp(*tensor::zeros({2}, dtype::i64)).has_value());
  CHECK_FALSE(af::reduce_sum(tensor{}).has_value());
}

TEST_CASE("argmax returns the first index of the largest element along an axis", "[cpu][reduce]") {
  auto x = tensor::from_vector<float>({1, 5, 5, 2, 7, 0, 7, 1}, {2, 4});
  auto a1 = af::argmax(x, 1);
  REQUIRE(a1);
  CHECK(a1->type() == dtype::i64);
  CHECK(a1->to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(af::argmax(x, -2)->to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 0});
  CHECK(af::argmin(x, 1)->to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  auto kept = af::argmax(x, 0, true);
  REQUIRE(kept);
  CHECK(kept->shape() == shape{1, 4});
  auto t = *x.transpose();
  CHECK(af::argmax(t, 0)->to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  auto nan = tensor::from_vector<double>({1, std::nan(""), 9, std::nan("")});
  CHECK(af::argmax(nan, 0)->item<int64_t>() == 1);
  CHECK(af::argmin(nan, 0)->item<int64_t>() == 1);
  CHECK(af::argmax(tensor::from_vector<int8_t>({-3, 4, 4}), 0)->item<int64_t>() == 1);
  // against a reference on a bigger random tensor with ties
  std::mt19937 rng(13);
  std::vector<int32_t> v(60 * 70);
  for (auto& e : v) e = static_cast<int32_t>(rng() % 9);
  const tensor big = *tensor::from_vector(v).reshape({60, 70});
  auto am = af::argmax(big, 0);
  REQUIRE(am);
  for (int64_t c = 0; c < 70; ++c) {
    int64_t best = 0;
    for (int64_t r = 1; r < 60; ++r)
      if (v[r * 70 + c] > v[best * 70 + c]) best = r;
    CHECK(am->to_vector<int64_t>()[c] == best);
  }
}
