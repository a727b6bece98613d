#pragma once

// The common predict body, decoded without building a JSON document: {"instances": ...} or
// {"inputs": ...} holding one input's numbers as nested arrays, and at most a "signature_name".
// Such bodies are most of a server's traffic, and a document of one node per number costs more
// than the model's work for a small model.

#include <optional>
#include <string_view>

#include "apps/serving/rest_codec.hpp"

namespace af::serving {

/// The decoded request when `body` has that simple shape and fits the signature's single input;
/// nullopt otherwise (anything else, errors included, is left to decode_predict, which names them).
std::optional<rest_predict_request> decode_simple_predict(std::string_view body, const signature_lookup& lookup);

}  // namespace af::serving
