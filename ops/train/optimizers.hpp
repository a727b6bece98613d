#pragma once

// Optimizers as update rules inside a traced training step: the step takes the variables, their
// gradients, the optimizer's slots (momenta, second moments), the learning rate and the update
// count as graph inputs and returns the new variables and slots, so that one graph holds forward,
// backward and update, and a learning-rate schedule changes nothing in the graph. The rules are
// Keras' (tf.keras.optimizers), including where epsilon sits.
//
//   auto opt = af::optimizers::optimizer::adam({.learning_rate = 1e-3});
//   af::function step{[&](const std::vector<af::sym>& in) {   // w, x, y, slots..., lr, count
//     auto loss = ...;
//     auto g = af::gradients(loss, {in[0]});
//     auto next = opt.apply({in[0]}, g, {in[3], in[4]}, in[5], in[6]);
//     return std::vector<af::sym>{loss, next.variables[0], next.slots[0], next.slots[1]};
//   }};

#include <cstddef>
#include <string>
#include <vector>

#include "ops/runtime/function.hpp"
#include "ops/tensor.hpp"

namespace af::optimizers {

/// Gradient clipping before the update (0 = off), as Keras' clipvalue, clipnorm, global_clipnorm.
struct clipping {
  double value = 0;        ///< each element into [-value, value]
  double norm = 0;         ///< each gradient scaled down to this L2 norm
  double global_norm = 0;  ///< all gradients scaled down together to this joint L2 norm
};

struct sgd_options {
  double learning_rate = 0.01;  ///< the default when no learning-rate input is given
  double momentum = 0.0;
  bool nesterov = false;
  clipping clip;
};

/// Adam, or AdamW when weight_decay > 0 (decoupled: w -= lr * weight_decay * w before the step).
struct adam_options {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  clipping clip;
};

/// LAMB: Adam's bias-corrected direction plus weight decay, scaled per variable by the trust ratio
/// ||w|| / ||direction||.
struct lamb_options {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-6;
  double weight_decay = 0.0;
  clipping clip;
};

class optimizer {
 public:
  static optimizer sgd(sgd_options options = {});
  static optimizer adam(adam_options options = {});
  static optimizer adamw(adam_options options = {.weight_decay = 0.004});
  static optimizer lamb(lamb_options options = {});

  const std::string& name() const noexcept { return name_; }
  /// The learning rate the options gave (what a schedule starts from).
  double learning_rate() const noexcept { return learning_rate_; }
  /// Slots per variable: 0 (plain SGD), 1 (momentum) or 2 (Adam, AdamW, LAMB).
  std::size_t slots_per_variable() const noexcept { return slots_per_variable_; }
  /// Zero slots for `variables`, variable by variable (slot 0 of every variable first, then slot 1).
  expected<std::vector<tensor>> initial_slots(const std::vector<tensor>& variables) const;

  struct update {
    std::vector<sym> variables;
    std::vector<sym> slots;  ///< in initial_slots' order
  };
  /// The update inside a trace. `slots` in initial_slots' order; `learning_rate` a scalar;
  /// `updates_done` the scalar count of earlier updates (Adam's bias correction uses it + 1).
  /// A count or shape that does not fit fails the trace naming the optimizer and the variable.
  update apply(const std::vector<sym>& variables, const std::vector<sym>& gradients, const std::vector<sym>& slots,
               const sym& learning_rate, const sym& updates_done, where_from from = where_from::current()) const;

 private:
  enum class kind { sgd, adam, lamb };
  kind kind_ = kind::sgd;
  std::string name_;
  double learning_rate_ = 0;
  std::size_t slots_per_variable_ = 0;
  sgd_options sgd_;
  adam_options adam_;
  lamb_options lamb_;
  clipping clip_;
};

}  // namespace af::optimizers
