// Fuzzes the graph codec (serialization/graph_codec.hpp) as a loader of graph files uses it.
//
// Invariants: an error is malformed_input, unsupported, unknown_dtype or out_of_memory, with a
// message that starts with the source's name; a decoded module verifies; encoding it and decoding
// that gives the same module (encode is a fixed point after one decode).

#include <string>

#include "fuzz_support.hpp"
#include "serialization/graph_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  auto decoded = af::decode_module(data, size, "fuzz.afg");
  if (!decoded) {
    const af::error& e = decoded.error_value();
    AF_FUZZ_CHECK(e.code == af::errc::malformed_input || e.code == af::errc::unsupported ||
                      e.code == af::errc::unknown_dtype || e.code == af::errc::out_of_memory,
                  "decode_module failed with " + e.to_string());
    AF_FUZZ_CHECK(e.message.rfind("fuzz.afg: ", 0) == 0, "an error does not name its source: " + e.message);
    return 0;
  }
  auto verified = decoded->verify();
  if (!verified) af::fuzz::fail("a decoded module does not verify: " + verified.error_value().to_string());
  const std::string once = af::encode_module(*decoded);
  auto again = af::decode_module(once.data(), once.size(), "re-encoded");
  if (!again) af::fuzz::fail("a re-encoded module does not decode: " + again.error_value().to_string());
  AF_FUZZ_CHECK(af::encode_module(*again) == once, "encoding a decoded module is not a fixed point");
  return 0;
}
