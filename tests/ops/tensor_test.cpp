#include <catch2/catch.hpp>

#include <limits>

#include "ops/allocator.hpp"
#include "ops/tensor.hpp"

using af::tensor;

TEST_CASE("a tensor built from a vector reports its shape, dtype and elements", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.type() == af::dtype::f32);
  CHECK(t.shape() == af::shape{2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.is_contiguous());
  CHECK(t.at({1, 2}) == 6.0);
  CHECK(t.to_string() == "tensor(f32, [2,3], [[1, 2, 3], [4, 5, 6]])");
}

TEST_CASE("copying a tensor shares its storage", "[cpu][tensor]") {
  auto a = tensor::from_vector<int32_t>({1, 2, 3});
  tensor b = a;
  CHECK(b.buffer() == a.buffer());
  CHECK_FALSE(a.is_unique());
  auto c = a.clone();
  REQUIRE(c);
  CHECK(c->buffer() != a.buffer());
  CHECK(af::all_equal(a, *c));
}

TEST_CASE("slice and transpose and permute and expand return views of the same storage", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  auto sliced = t.slice(1, 1, 3);
  auto transposed = t.transpose();
  auto permuted = t.permute({1, 0});
  auto row = tensor::from_vector<float>({7, 8, 9}, {1, 3});
  auto expanded = row.expand({4, 3});
  REQUIRE(sliced);
  REQUIRE(transposed);
  REQUIRE(permuted);
  REQUIRE(expanded);
  CHECK(sliced->buffer() == t.buffer());
  CHECK(sliced->to_vector<float>() == std::vector<float>{1, 2, 4, 5});
  CHECK(transposed->buffer() == t.buffer());
  CHECK(permuted->buffer() == t.buffer());
  CHECK(expanded->buffer() == row.buffer());
  CHECK(expanded->to_vector<float>() == std::vector<float>{7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9});
}

TEST_CASE("reshape of a contiguous tensor is a view and infers one dimension", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  auto r = t.reshape({3, -1});
  REQUIRE(r);
  CHECK(r->shape() == af::shape{3, 2});
  CHECK(r->buffer() == t.buffer());
  CHECK(r->to_vector<float>() == t.to_vector<float>());
}

TEST_CASE("reshape of a transposed tensor materialises the permuted order", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  auto tt = t.transpose();
  REQUIRE(tt);
  CHECK_FALSE(tt->is_contiguous());
  auto flat = tt->reshape({6});
  REQUIRE(flat);
  CHECK(flat->buffer() != t.buffer());
  CHECK(flat->to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("reshape to a different element count is a shape_mismatch naming both shapes", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  auto r = t.reshape({4, 2});
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == af::errc::shape_mismatch);
  CHECK(r.error_value().message.find("[2,3]") != std::string::npos);
  CHECK(r.error_value().message.find("[4,2]") != std::string::npos);
  CHECK_FALSE(t.reshape({-1, -1}));
  CHECK_FALSE(t.reshape({-1, 4}));
}

TEST_CASE("slice with a step selects every step-th element along an axis", "[cpu][tensor]") {
  auto t = *tensor::arange(10, af::dtype::i64);
  auto s = t.slice(0, 1, 9, 3);
  REQUIRE(s);
  CHECK(s->to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
  auto tail = t.slice(0, -3, 10);
  REQUIRE(tail);
  CHECK(tail->to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});
  auto empty = t.slice(0, 5, 2);
  REQUIRE(empty);
  CHECK(empty->numel() == 0);
  CHECK(t.slice(0, 0, 3, 0).error_value().code == af::errc::invalid_argument);
  CHECK(t.slice(2, 0, 3).error_value().code == af::errc::out_of_range);
}

TEST_CASE("permute reorders dimensions without copying and rejects repeated axes", "[cpu][tensor]") {
  auto t = *tensor::arange(24, af::dtype::f32);
  auto cube = *t.reshape({2, 3, 4});
  auto p = cube.permute({2, 0, 1});
  REQUIRE(p);
  CHECK(p->shape() == af::shape{4, 2, 3});
  CHECK(p->buffer() == t.buffer());
  CHECK(p->at({3, 1, 2}) == cube.at({1, 2, 3}));
  CHECK_FALSE(cube.permute({0, 0, 1}));
  CHECK_FALSE(cube.permute({0, 1}));
}

TEST_CASE("expand broadcasts size-1 dimensions with stride zero", "[cpu][tensor]") {
  auto row = tensor::from_vector<int32_t>({1, 2, 3}, {1, 3});
  auto e = row.expand({2, 3});
  REQUIRE(e);
  CHECK(e->strides() == af::strides{0, 1});
  CHECK(e->to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 1, 2, 3});
  CHECK(row.expand({2, 4}).error_value().code == af::errc::shape_mismatch);
}

TEST_CASE("full, zeros and item convert values to the requested dtype", "[cpu][tensor]") {
  for (auto type : {af::dtype::f32, af::dtype::f64, af::dtype::f16, af::dtype::bf16, af::dtype::i8,
                    af::dtype::u8, af::dtype::i32, af::dtype::i64, af::dtype::boolean}) {
    auto t = tensor::full({3, 2}, 1.0, type);
    REQUIRE(t);
    CHECK(t->type() == type);
    for (double v : t->to_vector<double>()) CHECK(v == 1.0);
    auto z = tensor::zeros({0, 4}, type);
    REQUIRE(z);
    CHECK(z->numel() == 0);
  }
  CHECK(tensor::scalar<int64_t>(int64_t{1} << 60).item<int64_t>() == (int64_t{1} << 60));
  CHECK(tensor::empty({2, -1}, af::dtype::f32).error_value().code == af::errc::invalid_argument);
}

TEST_CASE("all_close tolerates rounding and all_equal does not", "[cpu][tensor]") {
  auto a = tensor::from_vector<float>({1.0f, 2.0f, NAN});
  auto b = tensor::from_vector<float>({1.0f, 2.000001f, NAN});
  CHECK(af::all_close(a, b));
  CHECK_FALSE(af::all_equal(a, b));
  CHECK(af::all_equal(a, a));
  auto c = tensor::from_vector<float>({1.0f, 2.1f, NAN});
  CHECK_FALSE(af::all_close(a, c));
}

TEST_CASE("copy_into converts dtype and gathers strided sources", "[cpu][tensor]") {
  auto t = tensor::from_vector<float>({1.5f, -2.5f, 3.0f, 4.0f}, {2, 2});
  auto dst = *tensor::empty({2, 2}, af::dtype::i32);
  auto tt = *t.transpose();
  REQUIRE(af::copy_into(tt, dst));
  CHECK(dst.to_vector<int32_t>() == std::vector<int32_t>{1, 3, -2, 4});
  auto wrong = *tensor::empty({4}, af::dtype::i32);
  CHECK(af::copy_into(t, wrong).error_value().code == af::errc::shape_mismatch);
}

TEST_CASE("an empty tensor of any shape counts as contiguous and clones", "[cpu][tensor]") {
  auto t = tensor::zeros({4, 0}, af::dtype::f32);
  REQUIRE(t);
  CHECK(t->is_contiguous());
  auto tt = t->transpose();
  REQUIRE(tt);
  auto dense = tt->contiguous();
  REQUIRE(dense);
  CHECK(dense->shape() == af::shape{0, 4});
}

TEST_CASE("a shape whose size does not fit in 64 bits is refused, not wrapped around", "[cpu][tensor]") {
  CHECK(af::numel({int64_t{1} << 40, int64_t{1} << 40}) == std::numeric_limits<int64_t>::max());
  auto huge = af::tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, af::dtype::f32);
  REQUIRE_FALSE(huge);
  CHECK(huge.error_value().code == af::errc::out_of_memory);
  auto just_over = af::tensor::empty({int64_t{1} << 62}, af::dtype::f64);  // 2^65 bytes
  REQUIRE_FALSE(just_over);
  CHECK_THAT(just_over.error_value().message, Catch::Contains("f64"));
}

TEST_CASE("from_vector and scalar take their values without an allocator, so a full device cannot make them abort",
          "[cpu][tensor]") {
  auto tiny = af::make_cpu_allocator({.memory_limit = 64, .name = "tiny"}).value();
  af::allocator_scope on_tiny{tiny};
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const tensor t = tensor::from_vector(values, {10, 100});
  CHECK(t.to_vector<float>() == values);
  CHECK(tensor::scalar(2.5).item<double>() == 2.5);
  CHECK(tensor::from_vector(std::vector<bool>{true, false, true}).type() == af::dtype::boolean);
  CHECK(tensor::from_vector(std::vector<bool>{true, false, true}).to_vector<int>() == std::vector<int>{1, 0, 1});
  CHECK(tensor::from_vector(std::vector<int64_t>{}).numel() == 0);
  CHECK(tiny->stats().bytes_in_use == 0);
  CHECK_FALSE(tensor::empty({1000}, af::dtype::f32));  // what the allocator hands out is still bounded
}
