#pragma once

// Streaming metrics as tf.keras.metrics keeps them: state accumulated batch by batch from the
// training step's outputs, a result at any time, reset between epochs. They run on the step's
// output tensors (labels and logits or probabilities), outside the traced graph.

#include <memory>
#include <string>
#include <vector>

#include "ops/tensor.hpp"

namespace af::metrics {

class metric {
 public:
  virtual ~metric() = default;
  const std::string& name() const noexcept { return name_; }
  /// Adds one batch. A shape, dtype or label that does not fit is an error naming the metric and
  /// what was wrong; the state is then unchanged.
  virtual expected<void> update(const tensor& targets, const tensor& predictions) = 0;
  virtual double result() const = 0;
  virtual void reset() = 0;

 protected:
  explicit metric(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

/// The mean of every value passed as `predictions` (a loss per batch, say; `targets` is ignored),
/// each batch weighted by its number of elements.
std::unique_ptr<metric> mean(std::string name = "loss");

/// Integer labels [N] against scores [N, C] (logits or probabilities): the fraction whose label has
/// the highest score (ties go to the lowest class index, as argmax).
std::unique_ptr<metric> sparse_categorical_accuracy(std::string name = "accuracy");

/// The fraction whose label is among the k highest scores.
std::unique_ptr<metric> sparse_top_k_accuracy(int k, std::string name = "top_k_accuracy");

/// Targets in {0, 1} against probabilities of the same shape: the fraction on the right side of
/// `threshold`.
std::unique_ptr<metric> binary_accuracy(double threshold = 0.5, std::string name = "binary_accuracy");

/// Area under the ROC curve of probabilities against {0, 1} targets, from counts at
/// `thresholds` evenly spaced cut points in [0, 1] (trapezoids between them), as Keras' AUC.
std::unique_ptr<metric> auc(int thresholds = 200, std::string name = "auc");

}  // namespace af::metrics
