#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "ops/dtype.hpp"
#include "ops/shape.hpp"

TEST_CASE("dtype names parse back to the same dtype and unknown names are errors", "[cpu][dtype]") {
  for (int code = 0; code < af::dtype_count; ++code) {
    auto type = static_cast<af::dtype>(code);
    auto parsed = af::parse_dtype(af::to_string(type));
    REQUIRE(parsed);
    CHECK(*parsed == type);
  }
  CHECK(*af::parse_dtype("float32") == af::dtype::f32);
  auto bad = af::parse_dtype("complex64");
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == af::errc::unknown_dtype);
  CHECK(bad.error_value().message.find("complex64") != std::string::npos);
  CHECK_FALSE(af::dtype_from_code(9));
}

TEST_CASE("half round-trips every finite binary16 value exactly", "[cpu][dtype]") {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    af::half h;
    h.bits = static_cast<uint16_t>(bits);
    float f = h;
    if (std::isnan(f)) continue;
    CHECK(af::half(f).bits == h.bits);
  }
}

TEST_CASE("half rounds to nearest even, saturates to infinity and keeps subnormals", "[cpu][dtype]") {
  CHECK(static_cast<float>(af::half(1.0f)) == 1.0f);
  CHECK(static_cast<float>(af::half(65504.0f)) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(af::half(70000.0f))));
  CHECK(static_cast<float>(af::half(1.0f + 1.0f / 4096)) == 1.0f);  // halfway, rounds to even
  CHECK(static_cast<float>(af::half(5.9604645e-8f)) == 5.9604645e-8f);  // smallest subnormal
  CHECK(std::isnan(static_cast<float>(af::half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("bfloat16 keeps the float exponent and rounds the mantissa to nearest even", "[cpu][dtype]") {
  CHECK(static_cast<float>(af::bfloat16(3.0e38f)) == Approx(3.0e38f).epsilon(0.01));
  CHECK(static_cast<float>(af::bfloat16(1.0f)) == 1.0f);
  CHECK(static_cast<float>(af::bfloat16(1.00390625f)) == 1.0f);  // halfway between 1 and 1+2^-7
  CHECK(std::isnan(static_cast<float>(af::bfloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("broadcast_shapes follows NumPy rules and names the op on failure", "[cpu][shape]") {
  CHECK(*af::broadcast_shapes({2, 1, 3}, {4, 1}, "add") == af::shape{2, 4, 3});
  CHECK(*af::broadcast_shapes({}, {5}, "add") == af::shape{5});
  CHECK(*af::broadcast_shapes({0, 3}, {1, 3}, "add") == af::shape{0, 3});
  auto bad = af::broadcast_shapes({2, 3}, {4}, "mul");
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().to_string() == "shape_mismatch: mul: cannot broadcast shapes [2,3] and [4]");
}
