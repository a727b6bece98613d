#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "ops/array_ops.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

// Distinct values per element (element i holds i + base), so a misplaced copy cannot go unnoticed.
tensor numbered(const shape& dims, dtype type, double base = 0) {
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (int64_t i = 0; i < t->numel(); ++i) {
    const double v = type == dtype::boolean ? (i + static_cast<int64_t>(base)) % 2 : static_cast<double>((i + static_cast<int64_t>(base)) % 100);
    af::store_from_double(p + i * af::size_of(type), type, v);
  }
  return *t;
}

// Concatenation by coordinates: each output element found by walking the parts along `axis`.
std::vector<double> reference_concat(const std::vector<tensor>& parts, int axis, shape& out_shape) {
  out_shape = parts[0].shape();
  out_shape[axis] = 0;
  for (const auto& p : parts) out_shape[axis] += p.shape()[axis];
  std::vector<double> out;
  std::vector<int64_t> idx(out_shape.size(), 0);
  for (int64_t n = 0; n < af::numel(out_shape); ++n) {
    std::vector<int64_t> local = idx;
    std::size_t part = 0;
    while (local[axis] >= parts[part].shape()[axis]) local[axis] -= parts[part++].shape()[axis];
    out.push_back(parts[part].at(local));
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

tensor on_gpu(const shape& dims) {
  const auto bytes = static_cast<std::size_t>(af::numel(dims)) * 4;
  auto buf = std::make_shared<af::storage>(new char[bytes], bytes, af::device::cuda(0),
                                           [](void* p) { delete[] static_cast<char*>(p); });
  return tensor{dtype::f32, dims, af::contiguous_strides(dims), 0, buf};
}

}  // namespace

TEST_CASE("concat along every axis of random shapes matches concatenation by coordinates", "[cpu][array]") {
  std::mt19937 rng(21);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const std::vector<dtype> types = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16, dtype::i8,
                                    dtype::u8, dtype::i32, dtype::i64, dtype::boolean};
  for (int trial = 0; trial < 60; ++trial) {
    const dtype type = types[static_cast<std::size_t>(trial) % types.size()];
    const shape base{pick(1, 4), pick(1, 4), pick(1, 4)};
    const int axis = static_cast<int>(pick(0, 2));
    std::vector<tensor> parts;
    for (int64_t i = 0, n = pick(1, 4); i < n; ++i) {
      shape dims = base;
      dims[axis] = pick(0, 3);  // zero-length parts included
      parts.push_back(numbered(dims, type, static_cast<double>(i * 7)));
    }
    INFO(af::to_string(type) << " axis " << axis << " first part " << af::to_string(parts[0].shape()));
    auto got = af::concat(parts, trial % 2 ? axis : axis - 3);
    REQUIRE(got);
    shape want_shape;
    auto want = reference_concat(parts, axis, want_shape);
    CHECK(got->type() == type);
    CHECK(got->shape() == want_shape);
    CHECK(got->to_vector<double>() == want);
  }
}

TEST_CASE("concat and stack read non-contiguous views", "[cpu][array]") {
  auto m = numbered({4, 6}, dtype::i32);
  auto t = *m.transpose();           // [6,4]
  auto s = *m.slice(1, 1, 6, 2);     // [4,3]
  auto cat = af::concat({*s.transpose(), t}, 0);
  REQUIRE(cat);
  shape want_shape;
  CHECK(cat->to_vector<double>() == reference_concat({*s.transpose(), t}, 0, want_shape));
  CHECK(cat->shape() == shape{9, 4});
  auto st = af::stack({s, s, *m.slice(1, 0, 3)}, 1);
  REQUIRE(st);
  CHECK(st->shape() == shape{4, 3, 3});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      CHECK(st->at({i, 0, j}) == s.at({i, j}));
      CHECK(st->at({i, 2, j}) == m.at({i, j}));
    }
}

TEST_CASE("stack adds a new axis at any position, negative positions counting from the end", "[cpu][array]") {
  auto a = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = tensor::from_vector<float>({7, 8, 9, 10, 11, 12}, {2, 3});
  auto s0 = af::stack({a, b}, 0);
  REQUIRE(s0);
  CHECK(s0->shape() == shape{2, 2, 3});
  CHECK(s0->to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  auto s1 = af::stack({a, b}, 1);
  REQUIRE(s1);
  CHECK(s1->shape() == shape{2, 2, 3});
  CHECK(s1->to_vector<float>() == std::vector<float>{1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12});
  auto s2 = af::stack({a, b}, -1);
  REQUIRE(s2);
  CHECK(s2->shape() == shape{2, 3, 2});
  CHECK(s2->to_vector<float>() == std::vector<float>{1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12});
  auto scalars = af::stack({tensor::scalar<int64_t>(4), tensor::scalar<int64_t>(5)}, 0);
  REQUIRE(scalars);
  CHECK(scalars->to_vector<int64_t>() == std::vector<int64_t>{4, 5});
  auto empty = af::stack({*tensor::zeros({0, 3}, dtype::f32), *tensor::zeros({0, 3}, dtype::f32)}, 1);
  REQUIRE(empty);
  CHECK(empty->shape() == shape{0, 2, 3});
}

TEST_CASE("gather picks slices along any axis with indices of any shape", "[cpu][array]") {
  auto params = numbered({3, 4, 2}, dtype::f64);
  SECTION("axis 0 with 2-D i64 indices") {
    auto idx = tensor::from_vector<int64_t>({2, 0, 2, 1}, {2, 2});
    auto g = af::gather(params, idx, 0);
    REQUIRE(g);
    CHECK(g->shape() == shape{2, 2, 4, 2});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t k = 0; k < 4; ++k)
          for (int64_t l = 0; l < 2; ++l)
            CHECK(g->at({i, j, k, l}) == params.at({static_cast<int64_t>(idx.at({i, j})), k, l}));
  }
  SECTION("axis 1 and -1 with i32 indices, repeats allowed") {
    auto idx = tensor::from_vector<int32_t>({3, 3, 0});
    auto g = af::gather(params, idx, 1);
    REQUIRE(g);
    CHECK(g->shape() == shape{3, 3, 2});
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t l = 0; l < 2; ++l) CHECK(g->at({i, j, l}) == params.at({i, static_cast<int64_t>(idx.at({j})), l}));
    auto last = af::gather(params, tensor::from_vector<int32_t>({1}), -1);
    REQUIRE(last);
    CHECK(last->shape() == shape{3, 4, 1});
    CHECK(last->at({2, 3, 0}) == params.at({2, 3, 1}));
  }
  SECTION("a scalar index removes the axis, empty indices give an empty result") {
    auto g = af::gather(params, tensor::scalar<int64_t>(1), 0);
    REQUIRE(g);
    CHECK(g->shape() == shape{4, 2});
    CHECK(af::all_equal(*g, *params.slice(0, 1, 2)->reshape({4, 2})));
    auto none = af::gather(params, *tensor::zeros({0}, dtype::i32), 2);
    REQUIRE(none);
    CHECK(none->shape() == shape{3, 4, 0});
  }
  SECTION("strided params and indices, every dtype") {
    for (dtype type : {dtype::boolean, dtype::i8, dtype::bf16, dtype::i64}) {
      auto p = *numbered({6, 5}, type).transpose();  // [5,6]
      auto idx = *tensor::from_vector<int64_t>({4, 9, 1, 9, 0, 9}).slice(0, 0, 6, 2);  // {4, 1, 0}
      auto g = af::gather(p, idx, 0);
      REQUIRE(g);
      CHECK(g->type() == type);
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 6; ++k) CHECK(g->at({j, k}) == p.at({static_cast<int64_t>(idx.at({j})), k}));
    }
  }
}

TEST_CASE("gather names a bad index, its position and the shapes", "[cpu][array]") {
  auto params = numbered({5, 2}, dtype::f32);
  check_error(af::gather(params, tensor::from_vector<int64_t>({0, 1, 4, 7}), 0), errc::out_of_range,
              "gather: index 7 out of range [0,5) at position 3 (params [5,2], indices [4], axis 0)");
  check_error(af::gather(params, tensor::from_vector<int32_t>({1, -1}), 0), errc::out_of_range,
              "gather: index -1 out of range [0,5) at position 1");
  check_error(af::gather(params, tensor::from_vector<int32_t>({2}), 1), errc::out_of_range,
              "gather: index 2 out of range [0,2) at position 0");
  check_error(af::gather(params, tensor::from_vector<float>({1}), 0), errc::dtype_mismatch,
              "gather: indices must be i32 or i64, got f32");
  check_error(af::gather(params, tensor::from_vector<int32_t>({1}), 2), errc::out_of_range,
              "gather: axis 2 is out of range (params [5,2], indices [1], axis 2)");
  check_error(af::gather(tensor::scalar(1.0f), tensor::from_vector<int32_t>({0}), 0), errc::invalid_argument,
              "gather: params must have rank >= 1");
  check_error(af::gather(on_gpu({5, 2}), tensor::from_vector<int32_t>({0}), 0), errc::unsupported,
              "gather: CPU kernel got tensor 0 on cuda:0");
}

TEST_CASE("one_hot sets on_value at each index and gives all-off rows for out-of-range indices", "[cpu][array]") {
  auto idx = tensor::from_vector<int32_t>({0, 2, -1, 3, 1, 1}, {2, 3});
  auto oh = af::one_hot(idx, 3);
  REQUIRE(oh);
  CHECK(oh->type() == dtype::f32);
  CHECK(oh->shape() == shape{2, 3, 3});
  CHECK(oh->to_vector<float>() ==
        std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0, /**/ 0, 0, 0, 0, 1, 0, 0, 1, 0});
  auto custom = af::one_hot(tensor::from_vector<int64_t>({1, 0}), 2, 5, -1, dtype::i32);
  REQUIRE(custom);
  CHECK(custom->type() == dtype::i32);
  CHECK(custom->to_vector<int32_t>() == std::vector<int32_t>{-1, 5, 5, -1});
  auto flags = af::one_hot(*tensor::from_vector<uint8_t>({2, 0, 1, 9}).slice(0, 0, 4, 2), 3, 1, 0, dtype::boolean);
  REQUIRE(flags);
  CHECK(flags->to_vector<bool>() == std::vector<bool>{false, false, true, false, true, false});
  auto zero_depth = af::one_hot(idx, 0);
  REQUIRE(zero_depth);
  CHECK(zero_depth->shape() == shape{2, 3, 0});
}

TEST_CASE("one_hot reports a negative depth and non-integer indices", "[cpu][array]") {
  check_error(af::one_hot(tensor::from_vector<int32_t>({1}), -2), errc::invalid_argument,
              "one_hot: depth must be >= 0, got -2 for indices [1]");
  check_error(af::one_hot(tensor::from_vector<float>({1}), 2), errc::dtype_mismatch,
              "one_hot: indices must be integers, got f32 [1]");
}

TEST_CASE("concat and stack report mismatched parts with the op name and all shapes", "[cpu][array]") {
  auto a = *tensor::zeros({2, 3}, dtype::f32);
  check_error(af::concat({}, 0), errc::invalid_argument, "concat: no tensors to join");
  check_error(af::concat({a, *tensor::zeros({2, 3}, dtype::f64)}, 0), errc::dtype_mismatch,
              "concat: tensor 1 is f64 but tensor 0 is f32 (shapes [2,3], [2,3])");
  check_error(af::concat({a, *tensor::zeros({3, 3}, dtype::f32)}, 1), errc::shape_mismatch,
              "concat: shapes differ outside axis 1: [2,3], [3,3]");
  check_error(af::concat({a, *tensor::zeros({2, 3, 1}, dtype::f32)}, 0), errc::shape_mismatch, "[2,3], [2,3,1]");
  check_error(af::concat({a, a}, 2), errc::out_of_range, "concat: axis 2 is out of range for shapes [2,3], [2,3]");
  check_error(af::concat({tensor::scalar(1.0f)}, 0), errc::invalid_argument, "concat: cannot join scalars");
  check_error(af::concat({a, on_gpu({2, 3})}, 0), errc::unsupported, "concat: CPU kernel got tensor 1 on cuda:0");
  check_error(af::stack({}, 0), errc::invalid_argument, "stack: no tensors to join");
  check_error(af::stack({a, *tensor::zeros({3, 2}, dtype::f32)}, 0), errc::shape_mismatch,
              "stack: shapes differ: [2,3], [3,2]");
  check_error(af::stack({a, a}, 3), errc::out_of_range, "stack: axis 3 is out of range for shapes [2,3], [2,3]");
  check_error(af::stack({a, *tensor::zeros({2, 3}, dtype::i8)}, 0), errc::dtype_mismatch, "stack: tensor 1 is i8");
  check_error(af::stack({a, tensor{}}, 0), errc::invalid_argument, "stack: tensor 1 is undefined");
}
