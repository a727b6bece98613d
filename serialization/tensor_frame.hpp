#pragma once

// Framing of tensors on a plain byte stream (the bulk data connection between two nodes):
//
//   prefix (16 bytes, little-endian): magic "AFT1" | kind u32 | value u64
//   kind tensor: value = size of the Cap'n Proto header that follows, then the raw payload
//                (header.payload_bytes, row-major) — written together with one writev
//   kind end:    value = number of tensor frames sent before it (the receiver checks the count)
//
// Nothing here allocates per element or touches the payload; readers validate every field before
// trusting it, so bad bytes from the network become malformed_input, never a crash.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

inline constexpr uint32_t frame_magic = 0x31544641;  // "AFT1" read as little-endian u32
inline constexpr std::size_t frame_prefix_bytes = 16;
/// Largest Cap'n Proto header a reader accepts (a rank-64 shape needs well under 1 KiB).
inline constexpr uint64_t max_frame_header_bytes = 64 * 1024;

enum class frame_kind : uint32_t { tensor = 1, end = 2 };

/// A decoded, validated frame prefix.
struct frame_prefix {
  frame_kind kind = frame_kind::tensor;
  uint64_t value = 0;  ///< header bytes (tensor) or tensor count (end)
};

/// Prefix and Cap'n Proto header of `t`; the payload (t.nbytes() bytes, contiguous) goes after it.
std::string encode_tensor_frame_head(const tensor& t);
/// The 16-byte frame that ends a stream of `count` tensors.
std::array<unsigned char, frame_prefix_bytes> encode_end_frame(uint64_t count);
/// Validates magic, kind and header size: malformed_input naming what was wrong.
expected<frame_prefix> decode_frame_prefix(const unsigned char (&bytes)[frame_prefix_bytes]);

}  // namespace af
