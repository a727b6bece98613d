#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// What a receiver needs to allocate a tensor before its payload bytes arrive.
struct tensor_header {
  dtype type = dtype::f32;
  shape dims;
  uint64_t payload_bytes = 0;
  device origin = device::cpu();
};

/// Largest rank a decoder accepts; deeper shapes are treated as malformed input.
inline constexpr std::size_t max_tensor_rank = 64;

/// Cap'n Proto encoding (flat, unpacked) of the header of `t`; the payload is not included.
std::string encode_tensor_header(const tensor& t);
/// Encodes `header` exactly as given, without validating it (writers of files and tests that
/// need headers no tensor could produce, such as an unknown dtype code or a wrong payload size).
std::string encode_tensor_header(const tensor_header& header);

/// Parses and validates a header: malformed_input or unknown_dtype with the reason, never throws.
/// Validation covers negative dimensions and a payload size that disagrees with dtype and shape.
expected<tensor_header> decode_tensor_header(const void* bytes, std::size_t size);

}  // namespace af
