#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "serialization/tensor_codec.hpp"

using af::dtype;
using af::errc;
using af::tensor_header;

namespace {

constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16, dtype::i8,
                                dtype::u8,  dtype::i32, dtype::i64, dtype::boolean};

af::expected<tensor_header> decode(const std::string& bytes) {
  return af::decode_tensor_header(bytes.data(), bytes.size());
}

uint64_t payload_of(dtype t, const af::shape& dims) {
  return static_cast<uint64_t>(af::numel(dims)) * af::size_of(t);
}

// An error that says what was wrong: the right code and a message naming the header.
void check_rejected(const af::expected<tensor_header>& got, errc expected_code) {
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error_value().code == expected_code);
  CHECK(got.error_value().message.find("tensor header") != std::string::npos);
}

}  // namespace

TEST_CASE("a tensor header round-trips for every dtype and rank, scalars and zero-size dims included",
          "[cpu]") {
  const std::vector<af::shape> shapes = {{},        {1},          {0},           {7},
                                         {3, 0, 2}, {2, 3},       {1, 1, 1, 1},  {5, 4, 3, 2, 1},
                                         {0, 0},    {1 << 20, 3}, {2, 2, 2, 2, 2, 2, 2, 2}};
  for (dtype t : all_dtypes) {
    for (const auto& dims : shapes) {
      auto made = af::tensor::empty(dims, t);
      REQUIRE(made);
      std::string bytes = af::encode_tensor_header(*made);
      auto back = decode(bytes);
      INFO(af::to_string(t) << " " << af::to_string(dims));
      REQUIRE(back.has_value());
      CHECK(back->type == t);
      CHECK(back->dims == dims);
      CHECK(back->payload_bytes == made->nbytes());
      CHECK(back->origin == af::device::cpu());
    }
  }
}

TEST_CASE("a header records a CUDA origin and the dtype code is the wire code", "[cpu]") {
  tensor_header h{dtype::bf16, {4, 8}, payload_of(dtype::bf16, {4, 8}), af::device::cuda(3)};
  auto back = decode(af::encode_tensor_header(h));
  REQUIRE(back.has_value());
  CHECK(back->origin == af::device::cuda(3));
  CHECK(back->type == dtype::bf16);
}

TEST_CASE("an unknown dtype code is rejected as unknown_dtype", "[cpu]") {
  for (uint8_t code : {uint8_t{9}, uint8_t{42}, uint8_t{255}}) {
    tensor_header h{static_cast<dtype>(code), {2}, 8, af::device::cpu()};
    auto got = decode(af::encode_tensor_header(h));
    check_rejected(got, errc::unknown_dtype);
    CHECK(got.error_value().message.find(std::to_string(code)) != std::string::npos);
  }
}

TEST_CASE("negative dimensions, a wrong payload size and an absurd rank are malformed input", "[cpu]") {
  auto negative = decode(af::encode_tensor_header(tensor_header{dtype::f32, {2, -3}, 0, {}}));
  check_rejected(negative, errc::malformed_input);
  CHECK(negative.error_value().message.find("negative dimension -3") != std::string::npos);

  auto wrong_size = decode(af::encode_tensor_header(tensor_header{dtype::f32, {2, 3}, 25, {}}));
  check_rejected(wrong_size, errc::malformed_input);
  CHECK(wrong_size.error_value().message.find("expected 24") != std::string::npos);

  // A scalar has one element, so it carries size_of(dtype) bytes, not zero.
  check_rejected(decode(af::encode_tensor_header(tensor_header{dtype::f64, {}, 0, {}})),
                 errc::malformed_input);

  // Overflowing element counts must not wrap around to a small, "valid" payload.
  const int64_t big = int64_t{1} << 40;
  check_rejected(decode(af::encode_tensor_header(tensor_header{dtype::f32, {big, big, big}, 0, {}})),
                 errc::malformed_input);

  af::shape deep(af::max_tensor_rank + 1, 1);
  auto too_deep = decode(af::encode_tensor_header(tensor_header{dtype::u8, deep, 1, {}}));
  check_rejected(too_deep, errc::malformed_input);
  CHECK(too_deep.error_value().message.find("rank") != std::string::npos);
}

TEST_CASE("every truncation of a valid header is rejected without a crash", "[cpu]") {
  auto t = af::tensor::empty({3, 5, 7}, dtype::i64);
  REQUIRE(t);
  std::string bytes = af::encode_tensor_header(*t);
  REQUIRE(decode(bytes).has_value());
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    INFO("cut at " << cut << " of " << bytes.size());
    check_rejected(af::decode_tensor_header(bytes.data(), cut), errc::malformed_input);
  }
}

TEST_CASE("random bytes never crash the decoder and are reported as malformed input", "[cpu]") {
  std::mt19937_64 gen(20240611);
  for (int round = 0; round < 2000; ++round) {
    std::size_t words = 1 + gen() % 16;
    std::string bytes(words * 8, '\0');
    for (auto& c : bytes) c = static_cast<char>(gen());
    auto got = decode(bytes);
    INFO("round " << round);
    REQUIRE_FALSE(got.has_value());
    CHECK((got.error_value().code == errc::malformed_input || got.error_value().code == errc::unknown_dtype));
    CHECK_FALSE(got.error_value().message.empty());
  }
  // Bytes flipped inside a valid header: any outcome but a crash, and a success must be consistent.
  std::string valid = af::encode_tensor_header(*af::tensor::empty({4, 4}, dtype::f32));
  for (std::size_t i = 0; i < valid.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = valid;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      auto got = decode(flipped);
      if (got) CHECK(got->payload_bytes == payload_of(got->type, got->dims));
      else CHECK((got.error_value().code == errc::malformed_input || got.error_value().code == errc::unknown_dtype));
    }
  }
}

TEST_CASE("a header at an odd address inside a network buffer decodes", "[cpu]") {
  std::string bytes = af::encode_tensor_header(*af::tensor::empty({9}, dtype::u8));
  std::vector<char> buffer(bytes.size() + 1);
  std::memcpy(buffer.data() + 1, bytes.data(), bytes.size());
  auto back = af::decode_tensor_header(buffer.data() + 1, bytes.size());
  REQUIRE(back.has_value());
  CHECK(back->dims == af::shape{9});
}
