// Fuzzes npy::decode, the reader of NumPy .npy files (`actorflow saved_model run --inputs`).
// Invariants: an error is malformed_input or unsupported with a message naming the source; an
// array that decodes encodes again and decodes back to the same dtype, shape and bytes.

#include <cstring>

#include "fuzz_support.hpp"
#include "serialization/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes{reinterpret_cast<const char*>(data), size};
  auto t = af::npy::decode(bytes, "input.npy");
  if (!t) {
    const auto& e = t.error_value();
    AF_FUZZ_CHECK(e.code == af::errc::malformed_input || e.code == af::errc::unsupported,
                  "npy::decode failed with an unexpected error code: " + e.to_string());
    AF_FUZZ_CHECK(e.message.rfind("input.npy: ", 0) == 0, "npy::decode's error does not name the file: " + e.message);
    return 0;
  }
  auto again = af::npy::encode(*t);
  AF_FUZZ_CHECK(again.has_value(), "a decoded array does not encode: " + again.error_value().to_string());
  auto back = af::npy::decode(*again, "again.npy");
  AF_FUZZ_CHECK(back.has_value(), "an encoded array does not decode: " + back.error_value().to_string());
  AF_FUZZ_CHECK(back->type() == t->type() && back->shape() == t->shape(), "the round trip changed dtype or shape");
  AF_FUZZ_CHECK(t->nbytes() == 0 || std::memcmp(back->raw_data(), t->raw_data(), t->nbytes()) == 0,
                "the round trip changed the bytes");
  return 0;
}
