#pragma once

// Training losses on traced values (af::sym), as tf.keras.losses computes them with its default
// reduction: the mean over the batch (over every element for the elementwise losses). The
// cross-entropies take logits (from_logits=True) and are computed in the stable forms
// (log_softmax; max(z, 0) - z*y + log(1 + e^-|z|)). Their gradients come from the graph's
// reverse mode like any other op's.
//
//   af::function step{[](const std::vector<af::sym>& in) {
//     auto logits = af::matmul(in[0], in[2]);
//     auto loss = af::losses::sparse_categorical_crossentropy(in[1], logits);
//     ...
//   }};

#include "ops/runtime/function.hpp"

namespace af::losses {

/// Integer class ids `labels` [N] (any integer dtype) against `logits` [N, C]: mean over N of
/// -log softmax(logits)[label]. The class count C must be known when traced. A label outside
/// [0, C) contributes 0 here: check labels where the data comes in (fit does).
sym sparse_categorical_crossentropy(const sym& labels, const sym& logits, where_from from = where_from::current());

/// Class distributions `targets` [N, C] (one-hot or soft) against `logits` [N, C]. With label
/// smoothing s the targets become t*(1 - s) + s/C, as in Keras.
sym categorical_crossentropy(const sym& targets, const sym& logits, double label_smoothing = 0.0,
                             where_from from = where_from::current());

/// Targets in [0, 1] against logits of the same shape: mean of the elementwise binary cross-entropy.
sym binary_crossentropy(const sym& targets, const sym& logits, where_from from = where_from::current());

/// Binary focal cross-entropy (Lin et al.) from logits: alpha_t * (1 - p_t)^gamma * cross-entropy,
/// alpha_t = alpha for positives and 1 - alpha for negatives (Keras' apply_class_balancing).
sym binary_focal_crossentropy(const sym& targets, const sym& logits, double gamma = 2.0, double alpha = 0.25,
                              where_from from = where_from::current());

/// mean((targets - predictions)^2).
sym mean_squared_error(const sym& targets, const sym& predictions, where_from from = where_from::current());

/// mean(|targets - predictions|).
sym mean_absolute_error(const sym& targets, const sym& predictions, where_from from = where_from::current());

/// Huber loss: 0.5 e^2 where |e| <= delta, delta (|e| - 0.5 delta) beyond; mean over elements.
sym huber(const sym& targets, const sym& predictions, double delta = 1.0, where_from from = where_from::current());

}  // namespace af::losses
