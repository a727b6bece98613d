#pragma once

// What the mirrored tests and their peer program (peer/mirrored_peer.cpp) share: the digits MLP and
// CNN less their dropout (each replica would draw its own masks), deterministic batches, and the
// distance between two models' weights. Failures throw, so Catch reports them and the peer dies
// with the message.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "ops/train/model.hpp"

namespace af::testing {

inline nn::model compiled(expected<nn::model> m, optimizers::optimizer opt) {
  if (!m) throw std::runtime_error(m.error_value().message);
  if (auto c = m->compile({.optimizer = std::move(opt), .loss = {nn::sparse_categorical_crossentropy()}, .metrics = {"accuracy"}}); !c)
    throw std::runtime_error(c.error_value().message);
  return std::move(*m);
}

inline nn::model digits_like_mlp(optimizers::optimizer opt) {
  return compiled(nn::model::sequential(nn::input({8, 8, 1}, dtype::f32, "image"),
                                        {nn::flatten(), nn::dense(128, {.activation = "relu"}), nn::dense(10)}, {.seed = 3}),
                  std::move(opt));
}

inline nn::model digits_like_cnn(optimizers::optimizer opt) {
  const nn::conv_options same_relu{.padding = padding_mode::same, .activation = "relu"};
  return compiled(nn::model::sequential(nn::input({8, 8, 1}, dtype::f32, "image"),
                                        {nn::conv2d(32, {3, 3}, same_relu), nn::max_pool2d(), nn::conv2d(64, {3, 3}, same_relu),
                                         nn::max_pool2d(), nn::flatten(), nn::dense(128, {.activation = "relu"}), nn::dense(10)},
                                        {.seed = 5}),
                  std::move(opt));
}

/// The MLP with a batch normalization: moving statistics each replica keeps for itself.
inline nn::model digits_like_bn_mlp(optimizers::optimizer opt) {
  return compiled(nn::model::sequential(nn::input({8, 8, 1}, dtype::f32, "image"),
                                        {nn::flatten(), nn::dense(64), nn::batch_normalization(), nn::activation("relu"), nn::dense(10)},
                                        {.seed = 7}),
                  std::move(opt));
}

struct batch {
  tensor images, labels;
};

inline batch make_batch(int64_t rows, uint64_t seed) {
  auto images = random_uniform({rows, 8, 8, 1}, seed).value();
  std::vector<int64_t> labels(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + seed) % 10);
  return {images, tensor::from_vector(labels)};
}

/// The largest relative difference (Frobenius) between two sets of weights, weight by weight.
inline double weight_distance(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = a.size() == b.size() ? 0.0 : 1e300;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i].size() != b[i].size()) return 1e300;
    double diff = 0, norm = 0;
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      diff += (a[i][k] - b[i][k]) * (a[i][k] - b[i][k]);
      norm += b[i][k] * b[i][k];
    }
    worst = std::max(worst, std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30));
  }
  return worst;
}

inline std::vector<std::vector<double>> weights_of(const nn::model& m) {
  std::vector<std::vector<double>> out;
  for (const auto& w : m.weight_values()) out.push_back(w.to_vector<double>());
  return out;
}

inline double weight_distance(const nn::model& a, const nn::model& b) { return weight_distance(weights_of(a), weights_of(b)); }

}  // namespace af::testing
