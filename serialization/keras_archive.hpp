#pragma once

// The contents of a Keras 3 `.keras` archive: a zip (read with libzip) holding `config.json` (the
// model's architecture), `metadata.json` and `model.weights.h5` (the weights, an HDF5 file read
// with libhdf5 from memory: one dataset per variable at `<object path>/vars/<index>`, e.g.
// `layers/dense/vars/0`, `layers/lstm/cell/vars/1`). serialization/keras_import.hpp builds a
// model from them.

#include <map>
#include <string>

#include "ops/tensor.hpp"

namespace af::keras {

struct archive {
  std::string config_json;
  std::string metadata_json;
  /// Every variable, by its path in model.weights.h5 ("layers/dense/vars/0"), as f32.
  std::map<std::string, tensor> variables;
};

/// Reads `path`. Errors name the file and the member: io_error when it cannot be read,
/// malformed_input for a damaged zip or HDF5 file, a missing member, or a variable that is not a
/// numeric array.
expected<archive> read_archive(const std::string& path);

}  // namespace af::keras
