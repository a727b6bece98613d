#include "ops/error.hpp"

namespace af {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::none: return "none";
    case errc::invalid_argument: return "invalid_argument";
    case errc::shape_mismatch: return "shape_mismatch";
    case errc::dtype_mismatch: return "dtype_mismatch";
    case errc::unknown_dtype: return "unknown_dtype";
    case errc::out_of_memory: return "out_of_memory";
    case errc::out_of_range: return "out_of_range";
    case errc::malformed_input: return "malformed_input";
    case errc::io_error: return "io_error";
    case errc::peer_down: return "peer_down";
    case errc::timeout: return "timeout";
    case errc::cancelled: return "cancelled";
    case errc::protocol_violation: return "protocol_violation";
    case errc::unsupported: return "unsupported";
    case errc::resource_exhausted: return "resource_exhausted";
    case errc::not_found: return "not_found";
    case errc::internal: return "internal";
    case errc::failed_precondition: return "failed_precondition";
  }
  return "unknown_error";
}

std::string error::to_string() const {
  std::string out = af::to_string(code);
  if (!message.empty()) {
    out += ": ";
    out += message;
  }
  return out;
}

error with_context(error err, std::string_view context) {
  if (!context.empty()) err.message = std::string{context} + ": " + err.message;
  return err;
}

}  // namespace af
