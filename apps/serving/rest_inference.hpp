#pragma once

// TF Serving's REST bodies for :classify and :regress.
//
//   {"signature_name": "...", "context": {"f": 1.5}, "examples": [{"x": [1.0, 2.0], "id": 7}, ...]}
//
// Each feature is a value or a list of values of one kind: numbers with a fraction or exponent are
// floats, whole numbers (and booleans, as 0/1) int64, strings and {"b64": ...} bytes.
// Answers: {"results": [[["label", score], ...], ...]} (classify), {"results": [v, ...]} (regress).

#include <string>
#include <string_view>

#include "apps/serving/inference.hpp"

namespace af::serving {

struct rest_inference_request {
  std::string signature_name;  ///< as given (empty: the default)
  example_batch batch;
};

/// invalid_argument naming the example and feature for a body that is not that (nesting deeper
/// than rest_codec's max_json_depth included).
expected<rest_inference_request> decode_inference(std::string_view body);

std::string encode_classification(const inference_answer& answer);
std::string encode_regression(const inference_answer& answer);

}  // namespace af::serving
