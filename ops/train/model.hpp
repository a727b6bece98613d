#pragma once

// Models as tf.keras.Model: a graph of layer applications from inputs to outputs, the values of
// its weights, and once compiled, an optimizer with its slots and one traced step each for
// training, evaluation and prediction (af::function: traced on the first batch of a shape, then
// reused). The step takes inputs, targets, weights, slots, the learning rate and a seed for
// dropout as graph inputs, so forward, backward and update are one graph and nothing retraces
// when the learning rate or the masks change.
//
//   auto m = af::nn::model::sequential(af::nn::input({64}, af::dtype::f32, "image"),
//                                      {af::nn::dense(64, {.activation = "relu"}), af::nn::dense(10)}).value();
//   m.compile({.optimizer = af::optimizers::optimizer::adam(), .loss = {af::nn::sparse_categorical_crossentropy()},
//              .metrics = {"accuracy"}});
//   auto r = m.train_on_batch({images}, {labels});   // r->loss, r->predictions
//
// fit/evaluate/predict over datasets live in training/trainer.hpp.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/element.hpp"
#include "ops/train/layer.hpp"
#include "ops/train/optimizers.hpp"
#include "ops/train/schedules.hpp"

namespace af::metrics {
class metric;
}

namespace af::nn {

/// A loss on (targets, predictions) of one output, by its Keras name.
struct loss_spec {
  std::string name;
  std::function<sym(const sym& targets, const sym& predictions)> fn;
  /// Targets are class ids into the predictions' last axis (checked per batch before the step).
  bool sparse_labels = false;
};
loss_spec sparse_categorical_crossentropy();
loss_spec categorical_crossentropy(double label_smoothing = 0.0);
loss_spec binary_crossentropy();
loss_spec binary_focal_crossentropy(double gamma = 2.0, double alpha = 0.25);
loss_spec mean_squared_error();
loss_spec mean_absolute_error();
loss_spec huber(double delta = 1.0);

struct compile_options {
  optimizers::optimizer optimizer = optimizers::optimizer::sgd();
  /// The learning rate per update count; empty: the optimizer's own, constant.
  schedules::schedule learning_rate;
  /// One per output, or one for every output.
  std::vector<loss_spec> loss;
  /// The total loss is the weighted sum of the outputs' losses (empty: weight 1 each).
  std::vector<double> loss_weights;
  /// Per output: "accuracy" (sparse, or binary for a binary loss), "top_k_accuracy" (k = 5),
  /// "auc", "binary_accuracy".
  std::vector<std::string> metrics;
  /// A non-finite loss fails the batch (and leaves every weight as it was).
  bool check_numerics = true;
};

struct model_options {
  std::string name = "model";
  /// Weight i starts from its initializer seeded by (seed, i): the same seed, the same model.
  uint64_t seed = 0;
};

struct batch_result {
  double loss = 0;                  ///< the total loss of the batch
  std::vector<double> output_loss;  ///< per output (before weighting)
  std::vector<tensor> predictions;  ///< per output
};

/// What a replica computes for an update (model::compute_gradients).
struct replica_gradients {
  batch_result batch;               ///< the slice's loss and predictions
  std::vector<tensor> gradients;    ///< per trainable weight, times the share
  std::vector<tensor> non_trainable;  ///< per non-trainable weight: its next value
};

class model {
 public:
  /// Inputs (from nn::input) and outputs of layer applications. Errors: a failed application
  /// (naming the layer and shapes), an output that depends on an input not listed, a duplicate
  /// input name, or a weight initializer that fails.
  static expected<model> functional(std::vector<layer_output> inputs, std::vector<layer_output> outputs,
                                    model_options options = {});
  /// `layers` applied one after the other to `input`.
  static expected<model> sequential(layer_output input, std::vector<layer_ptr> layers, model_options options = {});

  model(model&&) noexcept;
  model& operator=(model&&) noexcept;
  ~model();

  const std::string& name() const;
  /// Keras' table: each layer application, its output shape and parameter count; totals.
  std::string summary() const;
  int64_t parameter_count() const;
  int64_t trainable_parameter_count() const;

  /// The element fields that feed the inputs, in order, and the per-sample input/output specs.
  std::vector<std::string> input_names() const;
  std::vector<value_spec> input_specs() const;
  std::vector<value_spec> output_specs() const;

  /// Every weight (trainable and not), in layer order, and their current values.
  const std::vector<weight>& weights() const;
  const std::vector<tensor>& weight_values() const;
  /// Replaces the values; a count, dtype or shape that differs is an error naming the weight.
  expected<void> set_weight_values(std::vector<tensor> values);

  /// Sets optimizer, losses and metrics, and resets the optimizer's state. Errors name what does
  /// not fit (no loss, more losses than outputs, unknown metric).
  expected<void> compile(compile_options options);
  bool compiled() const;
  const compile_options& compiled_with() const;

  /// One update on a batch (first axis). Inputs and targets are checked first: a dtype or shape
  /// that does not fit the model, or a class id out of range, is an error naming the input or
  /// target, the row and the value; the model is then unchanged. `seed` draws the dropout masks.
  expected<batch_result> train_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                        uint64_t seed = 0);
  /// A replica's half of a training step (tf.distribute's replica function): forward and backward
  /// on its slice of the global batch, without an update. `share` (the slice's rows over the global
  /// batch's) scales the gradients, so that their sum over the replicas is the gradient of the global
  /// batch's mean loss. The non-trainable weights' next values (moving statistics) come unscaled:
  /// each replica keeps its own, as tf.distribute's on-read variables do. Checks the batch as
  /// train_on_batch does; the model is unchanged.
  /// `on_gradient`, when given, receives each gradient (its index among the trainable weights, its
  /// value) as soon as the backward pass has computed it, while the rest of the pass goes on.
  expected<replica_gradients> compute_gradients(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                                uint64_t seed = 0, double share = 1.0,
                                                const std::function<void(std::size_t, const tensor&)>& on_gradient = {});
  /// The other half: one optimizer update at `learning_rate` with `gradients` (one per trainable
  /// weight, as compute_gradients orders them), and `non_trainable` as those weights' new values.
  /// Counts as an update. Errors name a gradient whose dtype or shape is not its weight's; the
  /// model is then unchanged.
  expected<void> apply_gradients(std::vector<tensor> gradients, std::vector<tensor> non_trainable, double learning_rate);
  /// The trainable and the non-trainable weights' indices into weights(), in order: how
  /// compute_gradients lists its gradients and new values.
  const std::vector<int>& trainable_indices() const;
  const std::vector<int>& non_trainable_indices() const;
  /// An independent copy: the same layers (shared, never written), its own weight values,
  /// optimizer slots, update count and learning-rate override, compiled alike with its own steps.
  expected<model> clone() const;

  /// Loss and predictions without an update (dropout off, moving statistics used).
  expected<batch_result> test_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets);
  expected<std::vector<tensor>> predict_on_batch(const std::vector<tensor>& inputs);

  /// The inference computation (dropout off, moving statistics used) as a graph, for saving it
  /// (serialization/saved_model.hpp): parameters are the inputs, any batch size, named as
  /// input_names(), then every weight named as weights() has it; outputs are named as the
  /// model's. Needs no compile.
  expected<graph::graph> inference_graph() const;

  /// Fresh streaming metrics for output `index` as compiled ("accuracy", ...).
  expected<std::vector<std::unique_ptr<metrics::metric>>> make_metrics(std::size_t output) const;

  /// Updates done so far (the optimizer's iterations).
  int64_t updates_done() const;
  /// The learning rate the next update uses (the override, else the schedule, else the optimizer's).
  double learning_rate() const;
  /// A fixed learning rate from now on (LearningRateScheduler); nullopt returns to the schedule.
  void set_learning_rate(std::optional<double> rate);
  /// How many times the train step was traced (a new batch shape traces again).
  int64_t train_traces() const;

  /// Everything a checkpoint needs to continue training exactly: weights by name, the optimizer's
  /// slots ("optimizer/<weight>/slot_<k>") and the update count ("optimizer/iterations").
  std::vector<named_tensor> state() const;
  /// The inverse of state(); every expected tensor must be present with its saved dtype and shape
  /// (errors name it). Nothing changes unless all fit.
  expected<void> load_state(const std::vector<named_tensor>& saved);

  /// The state behind the model (ops/train/model_impl.hpp; for the model's own sources).
  struct impl;

 private:
  explicit model(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::nn
