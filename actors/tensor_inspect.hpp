#pragma once

// CAF serialisation of af::tensor. Include only from translation units that register or send
// tensors (it pulls in CAF headers).
//
// Wire layout: the Cap'n Proto header from serialization/ (as a length-prefixed byte string), then
// the payload as raw bytes in one apply_raw call, never element by element. In one process CAF does
// not serialise at all: the message shares the tensor, and the tensor shares its storage.

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include <string>
#include <type_traits>

#include "ops/tensor.hpp"
#include "actors/tsan_handoff.hpp"
#include "serialization/tensor_codec.hpp"

namespace af {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& t) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    // A string tensor's storage holds objects; the receiver's header decoder refuses the dtype too.
    if (is_string(t.type())) return caf::make_error(caf::sec::invalid_argument, "string tensors do not cross processes yet");
    std::string header = encode_tensor_header(t);
    if (auto err = f(header)) return err;
    if (t.nbytes() == 0) return caf::none;
    auto dense = t.contiguous();
    if (!dense) return caf::make_error(caf::sec::invalid_argument, dense.error_value().to_string());
    detail::tsan_acquire_payload(*dense);
    return f.apply_raw(dense->nbytes(), dense->raw_data());
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    std::string header_bytes;
    if (auto err = f(header_bytes)) return err;
    auto header = decode_tensor_header(header_bytes.data(), header_bytes.size());
    if (!header) return caf::make_error(caf::sec::invalid_argument, header.error_value().to_string());
    auto fresh = tensor::empty(header->dims, header->type);
    if (!fresh) return caf::make_error(caf::sec::invalid_argument, fresh.error_value().to_string());
    if (header->payload_bytes > 0)
      if (auto err = f.apply_raw(header->payload_bytes, fresh->raw_data())) return err;
    detail::tsan_release_payload(*fresh);
    t = std::move(*fresh);
    return caf::none;
  } else {
    // Stringification (to_string, logging): a short summary, never the whole payload.
    std::string summary = t.to_string(8);
    return f(summary);
  }
}

}  // namespace af
