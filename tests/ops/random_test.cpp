#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/parallel.hpp"
#include "ops/random.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

struct moments {
  double mean = 0, variance = 0;
};

moments moments_of(const std::vector<double>& v) {
  moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size() - 1);
  return m;
}

}  // namespace

TEST_CASE("philox4x32-10 reproduces the published known-answer vectors", "[cpu][random]") {
  using words = std::array<uint32_t, 4>;
  CHECK(af::philox4x32_10({0, 0, 0, 0}, {0, 0}) == words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(af::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(af::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("random tensors are identical for one and two threads", "[cpu][random]") {
  const shape dims{1000, 1001};
  for (dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16}) {
    af::set_thread_budget(1);
    auto u1 = af::random_uniform(dims, 42, t);
    auto n1 = af::random_normal(dims, 42, t);
    auto b1 = af::random_bernoulli(dims, 42, 0.3);
    af::set_thread_budget(2);
    auto u2 = af::random_uniform(dims, 42, t);
    auto n2 = af::random_normal(dims, 42, t);
    auto b2 = af::random_bernoulli(dims, 42, 0.3);
    REQUIRE(u1);
    REQUIRE(n1);
    REQUIRE(b1);
    CHECK(af::all_equal(*u1, *u2));
    CHECK(af::all_equal(*n1, *n2));
    CHECK(af::all_equal(*b1, *b2));
  }
}

TEST_CASE("element i depends only on the seed, the offset and i", "[cpu][random]") {
  auto big = af::random_normal({10, 100}, 7);
  auto flat = af::random_normal({1000}, 7);
  auto prefix = af::random_normal({13}, 7);
  REQUIRE(big);
  REQUIRE(flat);
  REQUIRE(prefix);
  CHECK(big->to_vector<float>() == flat->to_vector<float>());
  const auto all = flat->to_vector<float>();
  CHECK(prefix->to_vector<float>() == std::vector<float>(all.begin(), all.begin() + 13));
  auto u = af::random_uniform({5}, 7, dtype::f64)->to_vector<double>();
  auto u_long = af::random_uniform({9}, 7, dtype::f64)->to_vector<double>();
  CHECK(u == std::vector<double>(u_long.begin(), u_long.begin() + 5));
}

TEST_CASE("different seeds and successive generator calls give different values", "[cpu][random]") {
  auto a = af::random_uniform({1000}, 1)->to_vector<float>();
  auto b = af::random_uniform({1000}, 2)->to_vector<float>();
  int same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  CHECK(same < 5);

  af::philox_generator gen{1234, 0};
  const af::philox_generator saved = gen;
  auto first = gen.uniform({1000});
  auto second = gen.uniform({1000});
  REQUIRE(first);
  REQUIRE(second);
  CHECK(gen.offset == 2);
  CHECK_FALSE(af::all_equal(*first, *second));
  CHECK(af::all_equal(*first, *af::random_uniform({1000}, 1234)));  // stream 0 is the free function

  gen = saved;  // restoring two integers replays the same tensors
  CHECK(af::all_equal(*gen.uniform({1000}), *first));
  CHECK(af::all_equal(*gen.uniform({1000}), *second));
  auto normal = gen.normal({10});
  auto coin = gen.bernoulli({10}, 0.5);
  REQUIRE(normal);
  REQUIRE(coin);
  CHECK(gen == af::philox_generator{1234, 4});
  CHECK_FALSE(gen.uniform({-1}).has_value());
  CHECK(gen.offset == 4);  // a failed call does not use up a stream
}

TEST_CASE("uniform values have the right mean and variance and pass a chi-square test", "[cpu][random]") {
  const int64_t n = 1'000'000;
  auto u = af::random_uniform({n}, 99);
  REQUIRE(u);
  const auto v = u->to_vector<double>();
  const auto m = moments_of(v);
  CHECK(std::fabs(m.mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::fabs(m.variance - 1.0 / 12) < 0.002);
  constexpr int buckets = 100;
  std::vector<int64_t> counts(buckets, 0);
  CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
  for (double x : v) ++counts[std::min<std::size_t>(static_cast<std::size_t>(x * buckets), buckets - 1)];
  double chi2 = 0;
  const double expect = static_cast<double>(n) / buckets;
  for (auto c : counts) chi2 += (c - expect) * (c - expect) / expect;
  // 99 degrees of freedom: mean 99, standard deviation 14; 180 is beyond the 99.999th percentile.
  CHECK(chi2 < 180);
}

TEST_CASE("uniform stays within low inclusive and high exclusive for every floating dtype, also when rounding would reach high",
          "[cpu][random]") {
  for (dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16}) {
    auto u = af::random_uniform({100000}, 5, t, -3, 5);
    REQUIRE(u);
    CHECK(u->type() == t);
    const auto v = u->to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= -3);
    CHECK(*std::max_element(v.begin(), v.end()) < 5);
    // [1, 1 + 2^-7) holds a single bf16 value: values near the top must not round up to high.
    auto narrow = af::random_uniform({10000}, 6, t, 1.0, 1.0 + 1.0 / 128);
    REQUIRE(narrow);
    const auto w = narrow->to_vector<double>();
    CHECK(*std::min_element(w.begin(), w.end()) >= 1.0);
    CHECK(*std::max_element(w.begin(), w.end()) < 1.0 + 1.0 / 128);
  }
  auto point = af::random_uniform({3}, 1, dtype::f32, 2, 2);
  REQUIRE(point);
  CHECK(point->to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("normal values have the requested mean and standard deviation", "[cpu][random]") {
  for (dtype t : {dtype::f32, dtype::f64, dtype::bf16}) {
    const int64_t n = 1'000'000;
    auto x = af::random_normal({n}, 3, t, 2.0, 3.0);
    REQUIRE(x);
    const auto v = x->to_vector<double>();
    const auto m = moments_of(v);
    INFO(af::to_string(t));
    CHECK(std::fabs(m.mean - 2.0) < 5 * 3.0 / std::sqrt(double(n)) + (t == dtype::bf16 ? 0.01 : 0));
    CHECK(std::fabs(std::sqrt(m.variance) - 3.0) < 0.02);
    int64_t within = 0;
    for (double e : v) within += std::fabs(e - 2.0) < 3.0;
    CHECK(std::fabs(static_cast<double>(within) / n - 0.6827) < 0.005);
  }
}

TEST_CASE("bernoulli is true with probability p", "[cpu][random]") {
  auto b = af::random_bernoulli({200000}, 8, 0.25);
  REQUIRE(b);
  CHECK(b->type() == dtype::boolean);
  int64_t ones = 0;
  for (bool e : b->to_vector<bool>()) ones += e;
  CHECK(std::fabs(static_cast<double>(ones) / 200000 - 0.25) < 5 * std::sqrt(0.25 * 0.75 / 200000));
  const auto never = af::random_bernoulli({1000}, 8, 0.0)->to_vector<bool>();
  const auto always = af::random_bernoulli({1000}, 8, 1.0)->to_vector<bool>();
  CHECK(std::count(never.begin(), never.end(), true) == 0);
  CHECK(std::count(always.begin(), always.end(), true) == 1000);
}

TEST_CASE("random ops reject bad shapes, dtypes and parameters with the op's name", "[cpu][random]") {
  auto r = af::random_uniform({2, -1}, 1);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "invalid_argument: random_uniform: negative dimension in shape [2,-1]");
  r = af::random_uniform({2}, 1, dtype::i32);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().to_string() == "unsupported: random_uniform: i32 is not a floating dtype");
  r = af::random_uniform({2}, 1, dtype::f32, 1, 0);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::invalid_argument);
  CHECK(r.error_value().message.rfind("random_uniform:", 0) == 0);
  r = af::random_normal({2}, 1, dtype::f32, 0, -1);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::invalid_argument);
  CHECK(r.error_value().message.rfind("random_normal:", 0) == 0);
  CHECK(af::random_normal({2}, 1, dtype::u8).error_value().code == errc::unsupported);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    r = af::random_bernoulli({2}, 1, p);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::invalid_argument);
    CHECK(r.error_value().message.rfind("random_bernoulli: p must be in [0, 1]", 0) == 0);
  }
  auto empty = af::random_normal({0, 5}, 1);
  REQUIRE(empty);
  CHECK(empty->numel() == 0);
}
