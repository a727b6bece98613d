#pragma once

// Keras 3 models (`.keras` archives) as our models: the architecture from config.json (Sequential
// or Functional) rebuilt with our layers, the weights from model.weights.h5 set in Keras' own
// layouts (ours are the same). Layers: InputLayer, Dense, Conv2D, DepthwiseConv2D,
// SeparableConv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, Reshape,
// Dropout, BatchNormalization, LayerNormalization, Embedding, LSTM, GRU, Activation, Add,
// Concatenate. A layer, or an option of one, that we lack is an error naming the layer, the
// option and its value; nothing is silently approximated.
//
//   auto model = af::keras::import_model("classifier.keras").value();
//   af::saved_model::save(model, "export/classifier/1");
//
// `actorflow import keras model.keras OUT_DIR` does both.

#include <string>

#include "ops/train/model.hpp"

namespace af::keras {

/// The model in `path`; errors name the file, the layer and what is wrong.
expected<nn::model> import_model(const std::string& path);

}  // namespace af::keras
