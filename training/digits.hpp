#pragma once

// The 8x8 handwritten digits (scikit-learn's copy, converted by `actorflow digits` into
// train.tfrecord and test.tfrecord; see serialization/digits.hpp) as batched pipelines, and the two
// reference models the demo, the example and the tests train on them.

#include <cstdint>
#include <string>

#include "ops/train/model.hpp"
#include "pipeline/dataset.hpp"

namespace af::train {

/// Examples {"image": 64 floats, "label": int64} of `tfrecord_file` parsed to "image" f32
/// [8, 8, 1] and "label" i64 [], in batches of `batch_size` (the last one smaller); with
/// `shuffle`, an unseeded shuffle over the whole set (fit seeds it per epoch).
data::dataset digits_dataset(const std::string& tfrecord_file, int64_t batch_size, bool shuffle);

/// 64 -> dense 128 relu -> dropout 0.1 -> dense 10 (logits); input "image" [8, 8, 1].
expected<nn::model> digits_mlp(uint64_t seed = 0);
/// conv 32 3x3 same relu -> max pool -> conv 64 3x3 same relu -> max pool -> dense 128 relu ->
/// dropout 0.25 -> dense 10 (logits); input "image" [8, 8, 1].
expected<nn::model> digits_cnn(uint64_t seed = 0);

}  // namespace af::train
