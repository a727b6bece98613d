#include "ops/train/losses.hpp"

#include <string>

namespace af::losses {

namespace {

[[noreturn]] void fail(const std::string& loss, const std::string& why, const where_from& from) {
  fail_trace(errc::shape_mismatch, loss + ": " + why, from);
}

// Targets and predictions of one elementwise loss must have the same shape: broadcasting [N]
// against [N, 1] would silently make an [N, N] loss.
void check_same_shape(const char* loss, const sym& targets, const sym& predictions, const where_from& from) {
  const shape t = targets.dims(), p = predictions.dims();
  bool same = t.size() == p.size();
  for (std::size_t i = 0; same && i < t.size(); ++i) same = t[i] < 0 || p[i] < 0 || t[i] == p[i];
  if (!same)
    fail(loss, "targets " + graph::to_string(targets.type()) + " and predictions " +
                   graph::to_string(predictions.type()) + " differ in shape",
         from);
  if (!is_floating(predictions.dtype_of()))
    fail(loss, "predictions must be floating, got " + graph::to_string(predictions.type()), from);
}

// Targets as the predictions' dtype (integer 0/1 labels are common for the binary losses).
sym as_type_of(const sym& targets, const sym& like, const where_from& from) {
  return targets.dtype_of() == like.dtype_of() ? targets : cast(targets, like.dtype_of(), from);
}

// Elementwise binary cross-entropy from logits, in the form that never overflows.
sym binary_crossentropy_elements(const sym& y, const sym& z, const where_from& from) {
  return maximum(z, constant_like(z, 0.0), from) - z * y + log(exp(-abs(z, from), from) + 1.0, from);
}

}  // namespace

sym sparse_categorical_crossentropy(const sym& labels, const sym& logits, where_from from) {
  const char* name = "sparse_categorical_crossentropy";
  const shape l = logits.dims(), y = labels.dims();
  if (l.size() != 2) fail(name, "logits must be [batch, classes], got " + graph::to_string(logits.type()), from);
  if (y.size() != 1) fail(name, "labels must be [batch] class ids, got " + graph::to_string(labels.type()), from);
  if (!is_integral(labels.dtype_of()))
    fail(name, "labels must be integer class ids, got " + graph::to_string(labels.type()), from);
  if (!is_floating(logits.dtype_of())) fail(name, "logits must be floating, got " + graph::to_string(logits.type()), from);
  if (l[1] < 0) fail(name, "the class count of logits " + graph::to_string(logits.type()) + " must be known", from);
  if (y[0] >= 0 && l[0] >= 0 && y[0] != l[0])
    fail(name, "labels " + graph::to_string(labels.type()) + " and logits " + graph::to_string(logits.type()) +
                   " differ in batch size",
         from);
  auto picked = reduce_sum(one_hot(labels, l[1], logits.dtype_of(), from) * log_softmax(logits, -1, from), {1}, false, from);
  return -reduce_mean(picked, {}, false, from);
}

sym categorical_crossentropy(const sym& targets, const sym& logits, double label_smoothing, where_from from) {
  const char* name = "categorical_crossentropy";
  check_same_shape(name, targets, logits, from);
  const shape l = logits.dims();
  if (l.size() != 2) fail(name, "logits must be [batch, classes], got " + graph::to_string(logits.type()), from);
  if (label_smoothing < 0 || label_smoothing > 1)
    fail(name, "label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing), from);
  sym t = as_type_of(targets, logits, from);
  if (label_smoothing > 0) {
    if (l[1] < 0) fail(name, "label smoothing needs the class count of " + graph::to_string(logits.type()), from);
    t = t * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(l[1]);
  }
  return -reduce_mean(reduce_sum(t * log_softmax(logits, -1, from), {1}, false, from), {}, false, from);
}

sym binary_crossentropy(const sym& targets, const sym& logits, where_from from) {
  check_same_shape("binary_crossentropy", targets, logits, from);
  return reduce_mean(binary_crossentropy_elements(as_type_of(targets, logits, from), logits, from), {}, false, from);
}

sym binary_focal_crossentropy(const sym& targets, const sym& logits, double gamma, double alpha, where_from from) {
  const char* name = "binary_focal_crossentropy";
  check_same_shape(name, targets, logits, from);
  if (gamma < 0) fail(name, "gamma must be >= 0, got " + std::to_string(gamma), from);
  if (alpha < 0 || alpha > 1) fail(name, "alpha must be in [0, 1], got " + std::to_string(alpha), from);
  const sym y = as_type_of(targets, logits, from);
  const sym p = sigmoid(logits, from);
  const sym p_t = y * p + (1.0 - y) * (1.0 - p);  // the probability given to the true class
  const sym alpha_t = y * alpha + (1.0 - y) * (1.0 - alpha);
  const sym modulation = pow(1.0 - p_t, constant_like(p_t, gamma), from);
  return reduce_mean(alpha_t * modulation * binary_crossentropy_elements(y, logits, from), {}, false, from);
}

sym mean_squared_error(const sym& targets, const sym& predictions, where_from from) {
  check_same_shape("mean_squared_error", targets, predictions, from);
  const sym e = predictions - as_type_of(targets, predictions, from);
  return reduce_mean(e * e, {}, false, from);
}

sym mean_absolute_error(const sym& targets, const sym& predictions, where_from from) {
  check_same_shape("mean_absolute_error", targets, predictions, from);
  return reduce_mean(abs(predictions - as_type_of(targets, predictions, from), from), {}, false, from);
}

sym huber(const sym& targets, const sym& predictions, double delta, where_from from) {
  check_same_shape("huber", targets, predictions, from);
  if (!(delta > 0)) fail("huber", "delta must be > 0, got " + std::to_string(delta), from);
  const sym a = abs(predictions - as_type_of(targets, predictions, from), from);
  const sym quadratic = minimum(a, constant_like(a, delta), from);  // |e| up to delta
  const sym linear = a - quadratic;                                  // the rest beyond delta
  return reduce_mean(quadratic * quadratic * 0.5 + linear * delta, {}, false, from);
}

}  // namespace af::losses
