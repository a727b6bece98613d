#include "serialization/tensor_frame.hpp"

#include <cstdio>
#include <cstring>

#include "serialization/tensor_codec.hpp"

namespace af {

namespace {

void put_u32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

std::string encode_tensor_frame_head(const tensor& t) {
  std::string header = encode_tensor_header(t);
  std::string out(frame_prefix_bytes, '\0');
  auto* p = reinterpret_cast<unsigned char*>(out.data());
  put_u32(p, frame_magic);
  put_u32(p + 4, static_cast<uint32_t>(frame_kind::tensor));
  put_u64(p + 8, header.size());
  out += header;
  return out;
}

std::array<unsigned char, frame_prefix_bytes> encode_end_frame(uint64_t count) {
  std::array<unsigned char, frame_prefix_bytes> out{};
  put_u32(out.data(), frame_magic);
  put_u32(out.data() + 4, static_cast<uint32_t>(frame_kind::end));
  put_u64(out.data() + 8, count);
  return out;
}

expected<frame_prefix> decode_frame_prefix(const unsigned char (&bytes)[frame_prefix_bytes]) {
  const uint32_t magic = get_u32(bytes);
  if (magic != frame_magic)
    return make_error(errc::malformed_input, "tensor frame: bad magic 0x" + [&] {
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08x", magic);
      return std::string(hex);
    }() + " (expected AFT1)");
  const uint32_t kind = get_u32(bytes + 4);
  const uint64_t value = get_u64(bytes + 8);
  if (kind == static_cast<uint32_t>(frame_kind::end)) return frame_prefix{frame_kind::end, value};
  if (kind != static_cast<uint32_t>(frame_kind::tensor))
    return make_error(errc::malformed_input, "tensor frame: unknown frame kind " + std::to_string(kind));
  if (value == 0 || value > max_frame_header_bytes || value % 8 != 0)
    return make_error(errc::malformed_input, "tensor frame: header size " + std::to_string(value) +
                                                 " is not a multiple of 8 in (0, " +
                                                 std::to_string(max_frame_header_bytes) + "]");
  return frame_prefix{frame_kind::tensor, value};
}

}  // namespace af
