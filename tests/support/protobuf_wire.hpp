#pragma once

// Protobuf wire bytes written by hand, for tests and fuzz seeds that check our decoders against
// protobuf's rules themselves rather than against our own encoder.

#include <cstdint>
#include <string>
#include <string_view>

namespace af::testing::wire {

inline std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}

inline std::string tag(uint32_t field, unsigned wire_type) { return varint((uint64_t{field} << 3) | wire_type); }

inline std::string len_field(uint32_t field, std::string_view payload) {
  return tag(field, 2) + varint(payload.size()) + std::string(payload);
}

}  // namespace af::testing::wire
