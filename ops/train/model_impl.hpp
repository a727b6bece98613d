#pragma once

// The inside of af::nn::model, shared by model.cpp (structure, weights, state) and
// model_steps.cpp (compile and the traced steps). Not installed; include only from those.

#include <map>
#include <memory>
#include <optional>

#include "ops/train/metrics.hpp"
#include "ops/train/model.hpp"

namespace af::nn {

struct model::impl {
  std::string name;
  std::vector<layer_output> inputs;
  std::vector<layer_output> outputs;
  /// Every layer application, inputs before users.
  std::vector<const model_node*> order;
  /// Each distinct layer once, in order of first application, and its first weight's index.
  std::vector<layer_ptr> layers;
  std::map<const layer*, int> first_weight;
  /// Each layer's name in this model (model.cpp: name_layers).
  std::map<const layer*, std::string> local_names;
  std::vector<weight> weights;
  std::vector<tensor> values;

  // -- once compiled ---------------------------------------------------------------------------
  std::optional<compile_options> compiled;
  std::vector<int> trainable;  ///< indices into weights
  std::vector<int> non_trainable;
  std::vector<tensor> slots;   ///< the optimizer's, in initial_slots order over `trainable`
  int64_t updates = 0;
  std::optional<double> learning_rate_override;
  std::unique_ptr<function> train_step;
  std::unique_ptr<function> test_step;
  std::unique_ptr<function> gradient_step;  ///< compute_gradients' graph, traced on first use
  std::unique_ptr<function> apply_step;     ///< apply_gradients' graph
  std::unique_ptr<function> predict_step;

  /// The model on traced inputs: every output. `seed` is null unless training.
  std::vector<sym> forward(const std::vector<sym>& x, const std::vector<sym>& w, const sym* seed, bool training,
                           std::vector<std::pair<int, sym>>* assignments) const;
};

}  // namespace af::nn
