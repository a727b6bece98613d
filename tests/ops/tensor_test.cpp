#include <catch2/catch.hpp>

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
