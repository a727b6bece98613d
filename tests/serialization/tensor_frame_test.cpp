#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "serialization/tensor_codec.hpp"
#include "serialization/tensor_frame.hpp"

using af::dtype;
using af::errc;

TEST_CASE("a tensor frame head carries the prefix and a header that decodes to the tensor", "[cpu]") {
  auto t = af::tensor::empty({16, 3}, dtype::f16);
  REQUIRE(t);
  std::string head = af::encode_tensor_frame_head(*t);
  REQUIRE(head.size() > af::frame_prefix_bytes);
  unsigned char prefix[af::frame_prefix_bytes];
  std::memcpy(prefix, head.data(), sizeof prefix);
  auto p = af::decode_frame_prefix(prefix);
  REQUIRE(p.has_value());
  CHECK(p->kind == af::frame_kind::tensor);
  REQUIRE(p->value == head.size() - af::frame_prefix_bytes);
  auto h = af::decode_tensor_header(head.data() + af::frame_prefix_bytes, p->value);
  REQUIRE(h.has_value());
  CHECK(h->dims == af::shape{16, 3});
  CHECK(h->payload_bytes == 96);

  auto end = af::encode_end_frame(12345);
  std::memcpy(prefix, end.data(), sizeof prefix);
  auto e = af::decode_frame_prefix(prefix);
  REQUIRE(e.has_value());
  CHECK(e->kind == af::frame_kind::end);
  CHECK(e->value == 12345);
}

TEST_CASE("a frame prefix with a bad magic, kind or header size is malformed input", "[cpu]") {
  std::string head = af::encode_tensor_frame_head(*af::tensor::empty({2}, dtype::f32));
  auto with = [&](std::size_t at, unsigned char value) {
    unsigned char prefix[af::frame_prefix_bytes];
    std::memcpy(prefix, head.data(), sizeof prefix);
    prefix[at] = value;
    return af::decode_frame_prefix(prefix);
  };
  auto magic = with(0, 'X');
  REQUIRE_FALSE(magic.has_value());
  CHECK(magic.error_value().code == errc::malformed_input);
  CHECK(magic.error_value().message.find("magic") != std::string::npos);
  auto kind = with(4, 7);
  REQUIRE_FALSE(kind.has_value());
  CHECK(kind.error_value().message.find("kind 7") != std::string::npos);
  auto unaligned = with(8, 13);
  REQUIRE_FALSE(unaligned.has_value());
  CHECK(unaligned.error_value().code == errc::malformed_input);
  auto huge = with(13, 1);  // header size 2^40 + ...: far beyond any real header
  REQUIRE_FALSE(huge.has_value());
  CHECK(huge.error_value().message.find("header size") != std::string::npos);
}
