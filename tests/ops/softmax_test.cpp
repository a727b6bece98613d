#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "ops/nn.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

tensor random_tensor(const shape& dims, dtype type, std::mt19937& rng, double scale = 5.0) {
  std::uniform_real_distribution<double> dist(-scale, scale);
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (int64_t i = 0; i < t->numel(); ++i) af::store_from_double(p + i * af::size_of(type), type, dist(rng));
  return *t;
}

// Softmax along `axis` in long double, the textbook formula on shifted values.
tensor reference_softmax(const tensor& x, int axis, bool is_log) {
  const auto v = x.to_vector<double>();
  const auto& dims = x.shape();
  int64_t outer = 1, len = dims[axis], inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (int d = axis + 1; d < x.ndim(); ++d) inner *= dims[d];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + i; };
      long double peak = -INFINITY, sum = 0;
      for (int64_t k = 0; k < len; ++k) peak = std::max<long double>(peak, v[at(k)]);
      for (int64_t k = 0; k < len; ++k) sum += std::exp(v[at(k)] - peak);
      for (int64_t k = 0; k < len; ++k)
        out[at(k)] = static_cast<double>(is_log ? v[at(k)] - peak - std::log(sum) : std::exp(v[at(k)] - peak) / sum);
    }
  return tensor::from_vector(out, dims);
}

}  // namespace

TEST_CASE("softmax and log_softmax match the textbook formula along every axis", "[cpu][softmax]") {
  std::mt19937 rng(31);
  for (dtype type : {dtype::f32, dtype::f64}) {
    auto x = random_tensor({3, 4, 5}, type, rng);
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      INFO(af::to_string(type) << " axis " << axis);
      const int a = static_cast<int>(axis < 0 ? axis + 3 : axis);
      auto s = af::softmax(x, axis);
      auto l = af::log_softmax(x, axis);
      REQUIRE(s);
      REQUIRE(l);
      CHECK(s->type() == type);
      CHECK(af::all_close(*s, reference_softmax(x, a, false), 1e-5, 1e-7));
      CHECK(af::all_close(*l, reference_softmax(x, a, true), 1e-5, 1e-6));
    }
  }
}

TEST_CASE("softmax rows sum to one and log_softmax is the log of softmax", "[cpu][softmax]") {
  std::mt19937 rng(5);
  auto x = random_tensor({17, 33}, dtype::f64, rng);
  auto s = af::softmax(x);
  auto l = af::log_softmax(x);
  REQUIRE(s);
  REQUIRE(l);
  const auto sv = s->to_vector<double>();
  const auto lv = l->to_vector<double>();
  for (int r = 0; r < 17; ++r) {
    double sum = 0;
    for (int c = 0; c < 33; ++c) {
      sum += sv[r * 33 + c];
      CHECK(std::log(sv[r * 33 + c]) == Approx(lv[r * 33 + c]).epsilon(1e-12));
    }
    CHECK(sum == Approx(1.0).epsilon(1e-12));
  }
}

TEST_CASE("softmax of huge logits neither overflows nor underflows to NaN", "[cpu][softmax]") {
  auto x = tensor::from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  auto s = af::softmax(x);
  auto l = af::log_softmax(x);
  REQUIRE(s);
  REQUIRE(l);
  auto want = tensor::from_vector<double>({0.09003057, 0.24472847, 0.66524096, 0.66524096, 0.24472847, 0.09003057}, {2, 3});
  CHECK(af::all_close(*s, want, 1e-5, 1e-7));
  auto want_log = tensor::from_vector<double>({-2.40760596, -1.40760596, -0.40760596, -0.40760596, -1.40760596, -2.40760596}, {2, 3});
  CHECK(af::all_close(*l, want_log, 1e-5, 1e-6));
  auto one = af::softmax(tensor::from_vector<float>({-std::numeric_limits<float>::infinity(), 0.0f}));
  REQUIRE(one);
  CHECK(one->to_vector<float>() == std::vector<float>{0.0f, 1.0f});
}

TEST_CASE("softmax reads non-contiguous views and computes f16/bf16 in f32", "[cpu][softmax]") {
  std::mt19937 rng(12);
  auto base = random_tensor({6, 5}, dtype::f32, rng);
  auto view = *base.transpose();  // [5,6]
  auto s = af::softmax(view, 1);
  REQUIRE(s);
  CHECK(af::all_close(*s, reference_softmax(view, 1, false), 1e-5, 1e-7));
  auto strided = *base.slice(1, 0, 5, 2);  // [6,3]
  auto l = af::log_softmax(strided, 0);
  REQUIRE(l);
  CHECK(af::all_close(*l, reference_softmax(strided, 0, true), 1e-5, 1e-6));
  for (dtype type : {dtype::f16, dtype::bf16}) {
    auto x = random_tensor({4, 7}, type, rng);
    auto y = af::softmax(x);
    REQUIRE(y);
    CHECK(y->type() == type);
    CHECK(af::all_close(*y, reference_softmax(x, 1, false), 1e-2, 1e-3));
  }
}

TEST_CASE("softmax handles size-1 axes, scalars and empty tensors", "[cpu][softmax]") {
  auto col = af::softmax(tensor::from_vector<float>({3, -2, 7}, {3, 1}));
  REQUIRE(col);
  CHECK(col->to_vector<float>() == std::vector<float>{1, 1, 1});
  auto lcol = af::log_softmax(tensor::from_vector<float>({3, -2, 7}, {3, 1}));
  REQUIRE(lcol);
  CHECK(lcol->to_vector<float>() == std::vector<float>{0, 0, 0});
  auto scalar = af::softmax(tensor::scalar(4.0));
  REQUIRE(scalar);
  CHECK(scalar->item<double>() == 1.0);
  auto empty = af::softmax(*tensor::zeros({0, 4}, dtype::f32));
  REQUIRE(empty);
  CHECK(empty->shape() == shape{0, 4});
  auto empty_axis = af::log_softmax(*tensor::zeros({3, 0}, dtype::f32), 1);
  REQUIRE(empty_axis);
  CHECK(empty_axis->shape() == shape{3, 0});
}

TEST_CASE("softmax reports bad dtypes, axes and devices with the op name and the shape", "[cpu][softmax]") {
  check_error(af::softmax(*tensor::zeros({2, 3}, dtype::i32)), errc::dtype_mismatch,
              "softmax: needs a floating dtype, got i32 [2,3]");
  check_error(af::log_softmax(*tensor::zeros({2, 3}, dtype::f32), 2), errc::out_of_range,
              "log_softmax: axis 2 is out of range for shape [2,3]");
  check_error(af::softmax(*tensor::zeros({2, 3}, dtype::f32), -3), errc::out_of_range,
              "softmax: axis -3 is out of range for shape [2,3]");
  check_error(af::softmax(tensor{}), errc::invalid_argument, "softmax");
  auto buf = std::make_shared<af::storage>(new char[24], 24, af::device::cuda(1),
                                           [](void* p) { delete[] static_cast<char*>(p); });
  check_error(af::softmax(tensor{dtype::f32, {2, 3}, {3, 1}, 0, buf}), errc::unsupported,
              "softmax: CPU kernel got a tensor on cuda:1");
}
