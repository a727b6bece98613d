#pragma once

// TensorFlow Serving's recorded warmup requests: a TFRecord file whose records are PredictionLog
// protos, each holding a PredictRequest.

#include <string>
#include <vector>

#include "ops/graph/module.hpp"
#include "ops/tensor.hpp"

namespace af::serving {

/// The inputs of every PredictRequest in the file that names `signature` (or names none and the
/// signature is serving_default), in the signature's input order. malformed_input naming the
/// file and record for a record that does not parse or lacks an input; invalid_argument for an
/// input whose dtype or dims do not fit the signature.
expected<std::vector<std::vector<tensor>>> read_warmup_requests(const std::string& path, const graph::signature& signature);

}  // namespace af::serving
