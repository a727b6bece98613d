#pragma once

// A module: named functions (graphs) and the signatures that call them. It is what a graph file
// holds (serialization/graph_codec.hpp) and what a SavedModel's graphs are: a signature
// ("serving_default") names a function and the names, dtypes and shapes of what it takes and
// returns, and they must match the function's named parameters and outputs.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af::graph {

/// The version of the op set this build defines (ops/graph/defs/). It grows when an op is added or
/// an op's meaning or attributes change; a graph written for a newer op set is refused, since it may
/// use an op or an attribute this build would misread.
inline constexpr uint32_t op_set_version = 1;

struct tensor_spec {
  std::string name;
  value_type type;  ///< -1 in dims: any size fits (the batch)
  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

struct signature {
  std::string name;      ///< "serving_default"
  std::string function;  ///< the function it calls
  std::vector<tensor_spec> inputs;
  std::vector<tensor_spec> outputs;
  /// The function's parameters after `inputs`, by name: values the caller does not pass, bound
  /// to saved variables of the same name (a SavedModel's weights).
  std::vector<std::string> captures;
  /// What a server may call it as (TF's SignatureDef method_name): empty or predict_method for any
  /// inputs and outputs; classify_method for outputs "scores" (f32 [batch, classes]) and/or
  /// "classes" (integers, the same shape); regress_method for one output "outputs" (f32 [batch] or
  /// [batch, 1]). Classify and regress signatures take each input from the feature of its name of
  /// every tf.Example, so their inputs have the batch as their first dimension.
  std::string method_name;
  friend bool operator==(const signature&, const signature&) = default;
};

inline constexpr std::string_view predict_method = "tensorflow/serving/predict";
inline constexpr std::string_view classify_method = "tensorflow/serving/classify";
inline constexpr std::string_view regress_method = "tensorflow/serving/regress";

struct named_function {
  std::string name;
  graph body;
};

struct module {
  std::vector<named_function> functions;
  std::vector<signature> signatures;

  const graph* find_function(std::string_view name) const noexcept;
  const signature* find_signature(std::string_view name) const noexcept;
  /// Names unique; every function verified (graph::verify) with unique input and output names;
  /// every signature names a function whose inputs (then captures) and outputs it lists by name,
  /// in order, with the same dtypes and shapes that fit. invalid_argument naming the function or
  /// signature.
  expected<void> verify() const;
};

/// The signature `name` of `function`: its parameters (by label) and outputs (by name) as they are.
signature signature_of(std::string name, std::string function, const graph& g);
/// The same with only the first `inputs` parameters as inputs, the rest captured by name.
signature signature_of(std::string name, std::string function, const graph& g, std::size_t inputs);

}  // namespace af::graph
