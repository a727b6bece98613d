#pragma once

// Layers as tf.keras.layers shapes them: a layer is built once from the shapes of its first inputs
// (that is when it declares its weights), then called on traced values (af::sym) each time a
// model's step is traced. Weights are not stored in the layer: a model owns their values and
// feeds them to the traced step as inputs, so one graph holds forward, backward and update.
//
// Applying layers to `layer_output`s records a model graph (the functional API):
//
//   auto image = af::nn::input({8, 8, 1}, af::dtype::f32, "image");
//   auto x = af::nn::conv2d(16, 3, {.activation = "relu"})(image);
//   auto logits = af::nn::dense(10)(af::nn::flatten()(x));
//   auto m = af::nn::model::functional({image}, {logits});
//
// A layer applied to inputs it does not fit records the error in its output (naming the layer and
// the shapes); building the model reports it, so chains of calls need no checks in between.

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/runtime/function.hpp"

namespace af::nn {

using value_spec = graph::value_type;  ///< dtype and dims of one sample (no batch axis)

/// A weight's starting value for its dims and a seed.
using initializer = std::function<expected<tensor>(const shape& dims, uint64_t seed)>;
initializer zeros_initializer();
initializer ones_initializer();
/// By name: "glorot_uniform", "glorot_normal", "he_uniform", "he_normal", "uniform" (+-0.05),
/// "zeros", "ones";
/// an unknown name is an error listing the known ones.
expected<initializer> initializer_named(const std::string& name);

struct weight {
  std::string name;  ///< "<layer>/<weight>", unique in a model
  value_spec spec;   ///< full dims (a weight has no batch axis)
  initializer init;
  bool trainable = true;
};

/// What a layer sees while a model's step is traced.
class call_context {
 public:
  call_context(bool training, const std::vector<sym>* weights, const sym* seed);
  bool training() const noexcept { return training_; }
  /// This layer's weight `i` (add_weight order) as a traced value.
  const sym& weight(int i) const;
  /// Uniform [0, 1) noise of `dims`, new on every step (dropout). Calls differ by a salt.
  sym uniform(std::vector<int64_t> dims);
  /// The value this layer's non-trainable weight `i` takes after the step (moving statistics).
  void assign(int i, const sym& value);

  // -- for the model that drives the trace ---------------------------------------------------
  void enter_layer(int first_weight) noexcept { first_weight_ = first_weight; }
  const std::vector<std::pair<int, sym>>& assignments() const noexcept { return assignments_; }

 private:
  bool training_;
  const std::vector<sym>* weights_;
  const sym* seed_;
  int first_weight_ = 0;
  int64_t salt_ = 0;
  std::vector<std::pair<int, sym>> assignments_;
};

class layer;
struct model_node;

/// A layer's name as its factory got it: `given` by the user, or (when empty) made from `base`
/// ("dense", "dense_1", ... counting per base in this process).
struct layer_name {
  std::string base;
  std::string given;
};

/// A value of a model being defined: output `index` of a layer application (or a model input).
struct layer_output {
  std::shared_ptr<const model_node> node;
  int index = 0;
  /// Its per-sample dtype and dims; empty dims and f32 when the application failed.
  const value_spec& spec() const;
  /// The error of the application that made it (or of one before it), errc::none when fine.
  const error& status() const;
};

/// One application of a layer (or a model input when `applied` is null).
struct model_node {
  std::shared_ptr<layer> applied;
  std::vector<layer_output> inputs;
  std::vector<value_spec> outputs;
  std::string input_name;  ///< for model inputs: the element field that feeds it
  error failure;           ///< why the application failed (errc::none when it did not)
};

/// A model input of per-sample `dims`: the element field `name` feeds it.
layer_output input(shape dims, dtype type = dtype::f32, std::string name = "input");

class layer : public std::enable_shared_from_this<layer> {
 public:
  layer(std::string kind, layer_name name);
  virtual ~layer() = default;
  layer(const layer&) = delete;
  layer& operator=(const layer&) = delete;

  /// "Dense", "Conv2D", ...
  const std::string& kind() const noexcept { return kind_; }
  /// Unique per kind in a process unless given ("dense_3"): what logs and errors show. A model
  /// names the layers in its weights itself (model-local, see model.hpp).
  const std::string& name() const noexcept { return name_; }
  /// The base of an automatic name ("dense"); empty when the user gave the name.
  const std::string& automatic_base() const noexcept { return automatic_base_; }
  const std::vector<weight>& weights() const noexcept { return weights_; }
  bool built() const noexcept { return built_; }

  /// Records an application on `inputs` (builds the layer on its first one).
  layer_output operator()(const layer_output& x);
  std::vector<layer_output> operator()(const std::vector<layer_output>& xs);

  /// Per-sample output specs for per-sample input specs; declares the weights (add_weight) on
  /// the first build. Errors name the layer and what does not fit.
  virtual expected<std::vector<value_spec>> build(const std::vector<value_spec>& inputs) = 0;
  /// The layer on traced values (with the batch axis first).
  virtual std::vector<sym> call(const std::vector<sym>& inputs, call_context& ctx) const = 0;
  /// How many outputs an application has (1 for most layers).
  virtual int output_count() const { return 1; }

 protected:
  /// Declares a weight; returns its index for call_context::weight.
  int add_weight(const std::string& short_name, shape dims, initializer init, bool trainable = true);
  /// An error naming this layer: "Dense 'dense_1': <what>".
  error fail(errc code, const std::string& what) const;

 private:
  std::string kind_;
  std::string name_;
  std::string automatic_base_;
  std::vector<weight> weights_;
  bool built_ = false;
  std::vector<value_spec> built_for_;
  std::vector<value_spec> built_outputs_;
};

/// What the layer factories return: a shared layer that can be applied by calling it, as in
/// `nn::dense(10)(x)` or `nn::concatenate()({a, b})`.
class layer_ptr {
 public:
  layer_ptr() = default;
  template <class L>
    requires std::derived_from<L, layer>
  layer_ptr(std::shared_ptr<L> l) : layer_(std::move(l)) {}  // NOLINT: a handle converts freely
  layer_output operator()(const layer_output& x) const { return (*layer_)(x); }
  /// Several inputs (add, concatenate): the application's first output.
  layer_output operator()(const std::vector<layer_output>& xs) const { return (*layer_)(xs).front(); }
  layer* operator->() const noexcept { return layer_.get(); }
  layer& operator*() const noexcept { return *layer_; }
  explicit operator bool() const noexcept { return layer_ != nullptr; }
  const std::shared_ptr<layer>& shared() const noexcept { return layer_; }

 private:
  std::shared_ptr<layer> layer_;
};


/// Applies an activation by name ("relu", "sigmoid", "tanh", "gelu", "softmax", "linear" or "");
/// an unknown name fails the trace.
sym activate(const std::string& activation, const sym& x);
/// Whether `activate` knows the name.
bool known_activation(const std::string& activation);

}  // namespace af::nn
