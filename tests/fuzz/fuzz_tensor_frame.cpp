// Fuzzes the tensor frame decoder (tensor_frame.hpp) and the Cap'n Proto tensor header decoder
// (tensor_codec.hpp) the way a receiver uses them: the input is a byte stream of frames, each a
// 16-byte prefix, then for a tensor frame its header and its payload, until an end frame.
//
// Invariants: errors are malformed_input or unknown_dtype with a message, never an exception; a
// decoded header has at most max_tensor_rank dimensions, none negative, and a payload size equal
// to numel * size_of(dtype); encoding a decoded header gives bytes that decode to the same header;
// a tensor made from it encodes (encode_tensor_frame_head) to a prefix and header that decode to
// the same again.

#include <cstring>
#include <string>

#include "fuzz_support.hpp"
#include "ops/tensor.hpp"
#include "serialization/tensor_codec.hpp"
#include "serialization/tensor_frame.hpp"

namespace {

using af::fuzz::fail;

bool same_header(const af::tensor_header& a, const af::tensor_header& b) {
  return a.type == b.type && a.dims == b.dims && a.payload_bytes == b.payload_bytes && a.origin == b.origin;
}

std::string describe(const af::tensor_header& h) {
  return std::string(af::to_string(h.type)) + " " + af::to_string(h.dims) + ", " + std::to_string(h.payload_bytes) +
         " payload bytes";
}

void check_header_error(const af::error& e) {
  AF_FUZZ_CHECK(e.code == af::errc::malformed_input || e.code == af::errc::unknown_dtype,
        "decode_tensor_header failed with " + e.to_string());
  AF_FUZZ_CHECK(e.message.rfind("tensor header: ", 0) == 0, "a header error does not say so: " + e.message);
}

af::frame_prefix decode_prefix_or_fail(std::string_view bytes) {
  unsigned char prefix[af::frame_prefix_bytes];
  std::memcpy(prefix, bytes.data(), sizeof prefix);
  auto decoded = af::decode_frame_prefix(prefix);
  if (!decoded) fail("an encoded frame prefix does not decode: " + decoded.error_value().to_string());
  return *decoded;
}

void check_header(const af::tensor_header& h, std::string_view payload, bool payload_arrived) {
  AF_FUZZ_CHECK(h.dims.size() <= af::max_tensor_rank, "decoded rank " + std::to_string(h.dims.size()));
  uint64_t count = 1;
  for (int64_t d : h.dims) {
    AF_FUZZ_CHECK(d >= 0, "negative dimension in " + describe(h));
    count *= static_cast<uint64_t>(d);
  }
  AF_FUZZ_CHECK(h.payload_bytes == count * af::size_of(h.type), "payload size disagrees with the shape: " + describe(h));

  const std::string again = af::encode_tensor_header(h);
  auto redecoded = af::decode_tensor_header(again.data(), again.size());
  if (!redecoded) fail("a re-encoded header does not decode: " + redecoded.error_value().to_string());
  AF_FUZZ_CHECK(same_header(*redecoded, h), "a re-encoded header decodes to " + describe(*redecoded) + ", not " + describe(h));

  if (!payload_arrived) return;  // a receiver allocates only for bytes that are there
  auto t = af::tensor::empty(h.dims, h.type);
  if (!t) fail("no tensor for a valid header " + describe(h) + ": " + t.error_value().to_string());
  AF_FUZZ_CHECK(t->nbytes() == h.payload_bytes, "a tensor for " + describe(h) + " holds " + std::to_string(t->nbytes()));
  if (!payload.empty()) std::memcpy(t->raw_data(), payload.data(), payload.size());
  const std::string head = af::encode_tensor_frame_head(*t);
  const af::frame_prefix p = decode_prefix_or_fail(head);
  AF_FUZZ_CHECK(p.kind == af::frame_kind::tensor && p.value == head.size() - af::frame_prefix_bytes,
        "encode_tensor_frame_head's prefix does not announce its header");
  auto decoded = af::decode_tensor_header(head.data() + af::frame_prefix_bytes, p.value);
  if (!decoded) fail("encode_tensor_frame_head's header does not decode: " + decoded.error_value().to_string());
  af::tensor_header from_tensor = h;
  from_tensor.origin = af::device::cpu();  // a tensor made here lives on the CPU
  AF_FUZZ_CHECK(same_header(*decoded, from_tensor), "a tensor's frame head decodes to " + describe(*decoded));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  af::fuzz::input_reader in{af::fuzz::as_chars(data, size)};
  while (in.rest.size() >= af::frame_prefix_bytes) {
    unsigned char prefix_bytes[af::frame_prefix_bytes];
    std::memcpy(prefix_bytes, in.take(af::frame_prefix_bytes).data(), sizeof prefix_bytes);
    auto prefix = af::decode_frame_prefix(prefix_bytes);
    if (!prefix) {
      AF_FUZZ_CHECK(prefix.error_value().code == af::errc::malformed_input &&
                prefix.error_value().message.rfind("tensor frame: ", 0) == 0,
            "decode_frame_prefix failed with " + prefix.error_value().to_string());
      return 0;
    }
    if (prefix->kind == af::frame_kind::end) {
      const auto end = af::encode_end_frame(prefix->value);
      AF_FUZZ_CHECK(std::memcmp(end.data(), prefix_bytes, end.size()) == 0, "an end frame does not re-encode to itself");
      return 0;  // a receiver compares the count with the tensors it received and stops
    }
    AF_FUZZ_CHECK(prefix->value > 0 && prefix->value <= af::max_frame_header_bytes && prefix->value % 8 == 0,
          "decode_frame_prefix accepted header size " + std::to_string(prefix->value));
    if (in.rest.size() < prefix->value) return 0;  // the stream ends inside the header
    const std::string_view header_bytes = in.take(static_cast<std::size_t>(prefix->value));
    auto header = af::decode_tensor_header(header_bytes.data(), header_bytes.size());
    if (!header) {
      check_header_error(header.error_value());
      return 0;
    }
    const bool arrived = header->payload_bytes <= in.rest.size();
    const std::string_view payload = arrived ? in.take(static_cast<std::size_t>(header->payload_bytes)) : in.rest;
    check_header(*header, payload, arrived);
    if (!arrived) return 0;
  }
  return 0;
}
