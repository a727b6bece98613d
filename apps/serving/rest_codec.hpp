#pragma once

// TensorFlow Serving's REST bodies: the predict request in its row ("instances") and columnar
// ("inputs") formats, the predict answer ("predictions" / "outputs"), model status and metadata.
//
// Values are JSON numbers, booleans and nested arrays in the input's shape. A `{"b64": "..."}`
// object stands for the bytes of a whole value (a row, or the rest of one): its decoded bytes are
// the elements in the input's dtype (little-endian), so `{"b64": ...}` of 784 bytes fills one row
// of a u8[-1,784] input.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/serving/model_server.hpp"

namespace af::serving {

struct rest_predict_request {
  std::string signature_name;  ///< as given (empty: the default)
  bool row_format = true;      ///< "instances" (true) or "inputs"
  std::vector<named_tensor> inputs;
};

/// Finds a signature by name (empty: the default); what decode_predict needs from the server.
using signature_lookup = std::function<expected<std::shared_ptr<const graph::signature>>(const std::string& signature_name)>;

/// How deep a request body may nest arrays and objects (the body's own object is the first
/// level). TF Serving's inputs have a rank of at most a few dozen; a body nested deeper is refused
/// before it is parsed, so that no decoder recurses or allocates by the depth a client chooses.
inline constexpr int max_json_depth = 64;

/// invalid_argument naming the byte offset when `body` nests deeper than max_json_depth (brackets
/// inside strings do not count).
error check_json_nesting(std::string_view body);

/// Parses a predict body against the signature it names. invalid_argument naming the field and
/// position ("instances[3]['x'] has 63 values where instances[0] has 64") for anything that does
/// not fit (a number outside its dtype's range, a shape larger than the body could carry, nesting
/// deeper than max_json_depth); the lookup's error when the signature does not exist.
expected<rest_predict_request> decode_predict(std::string_view body, const signature_lookup& lookup);

/// The answer to a predict request: {"predictions": [...]} for the row format (each row the single
/// output's value, or an object of every output), {"outputs": ...} for the columnar one.
std::string encode_predict(const prediction& answer, bool row_format);

/// GET /v1/models/NAME[/versions/V].
std::string encode_status(const std::vector<version_status>& versions);
/// GET /v1/models/NAME[/versions/V]/metadata.
std::string encode_metadata(const std::string& model, int64_t version, const std::vector<graph::signature>& signatures);
/// {"error": "..."}.
std::string encode_error(const std::string& message);

/// TensorFlow's DataType name of a dtype ("DT_FLOAT").
const char* tf_dtype_name(dtype t) noexcept;
/// Standard base64 (RFC 4648, padding optional); nullopt for a character outside the alphabet.
std::optional<std::string> base64_decode(std::string_view text);
std::string base64_encode(std::string_view bytes);

}  // namespace af::serving
