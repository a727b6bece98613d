#pragma once

// Parsing the records of a TFRecord dataset: a map function from the raw "record" field to the
// tensors a feature spec describes.

#include <string>

#include "pipeline/dataset.hpp"
#include "serialization/feature_spec.hpp"

namespace af::data {

/// A map function (thread-safe: use it with any parallelism) that parses the serialized
/// tf.train.Example in field `field` with `spec`. Errors name the feature; the map stage adds the
/// record's file, index and byte offset.
map_fn parse_example_fn(feature_spec spec, std::string field = "record");

}  // namespace af::data
