#pragma once

// Classify, Regress and MultiInference: TF Serving's tf.Example APIs on actorflow signatures.
//
// A signature saved with method_name classify or regress (ops/graph/module.hpp) takes each of its
// inputs from the feature of the same name of every example: one row per example, the context's
// features standing in for those an example lacks. Float features fill floating inputs, int64
// features integer and bool inputs, each with exactly the values one row holds; bytes features
// fill nothing (no actorflow input takes strings) and are refused by name. The answers are TF
// Serving's: per example the classes (label: the "classes" output as decimal text, or empty
// without one; score: "scores", or 0 without one), or the one regressed value.
//
// Both front ends decode their request into an example_batch (gRPC from the Input proto, REST from
// its JSON) and run it here, so that they answer alike.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/serving/model_server.hpp"

namespace af::serving {

/// One feature of an example, as sent.
struct feature_values {
  enum class kind { none, bytes, floats, ints };
  kind what = kind::none;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::size_t bytes = 0;  ///< how many strings a bytes feature held (their content is not kept)
};

using example = std::map<std::string, feature_values, std::less<>>;

/// "bytes", "float", "int64" (as TF names a feature's list), "empty" for none.
const char* kind_name(feature_values::kind k) noexcept;

struct example_batch {
  std::vector<example> examples;
  example context;  ///< merged into every example; the example's own feature wins
};

enum class inference_method { classify, regress };

/// "tensorflow/serving/classify", "tensorflow/serving/regress".
std::string_view method_name(inference_method method) noexcept;
/// The method a TF Serving method name names; invalid_argument for any other.
expected<inference_method> parse_method_name(std::string_view name);

/// invalid_argument, as TF Serving words it, unless `signature` was saved as `method`.
expected<void> check_method(const graph::signature& signature, inference_method method);

/// The signature's inputs, one row per example, in its order. invalid_argument naming the example
/// and the feature for an empty batch, a missing feature, one of the wrong kind or count, or an
/// integer the input's dtype cannot hold.
/// The most one input filled from examples may hold (a shared context feature multiplies by the
/// example count).
inline constexpr uint64_t max_example_input_bytes = uint64_t{256} << 20;

expected<std::vector<named_tensor>> inputs_from_examples(const example_batch& batch, const graph::signature& signature);

struct class_score {
  std::string label;
  float score = 0;
};
/// Per example, its classes in the order of the signature's outputs' last dimension.
using classifications = std::vector<std::vector<class_score>>;

/// One task's answer: the version and signature that ran it, and its results.
struct inference_answer {
  std::string model;
  int64_t version = 0;
  std::string signature_name;
  inference_method method = inference_method::classify;
  classifications classes;    ///< classify
  std::vector<float> values;  ///< regress
};

/// A classify or regress prediction's outputs as TF Serving's results.
expected<inference_answer> answer_of(const prediction& done, inference_method method);

/// Runs one task: the spec's signature (empty: serving_default), checked against `method`, on the
/// examples. `done` is called once, possibly on another thread.
void infer_async(model_server& models, const model_spec& spec, inference_method method, std::shared_ptr<const example_batch> batch,
                 std::optional<clock_type::time_point> deadline, std::function<void(expected<inference_answer>)> done);

/// MultiInference: several tasks of one model on the same examples, each signature at most once;
/// the answers in the tasks' order, or the first error (TF Serving fails the whole request).
struct inference_task {
  model_spec spec;
  inference_method method = inference_method::classify;
};
void multi_infer_async(model_server& models, std::vector<inference_task> tasks, std::shared_ptr<const example_batch> batch,
                       std::optional<clock_type::time_point> deadline,
                       std::function<void(expected<std::vector<inference_answer>>)> done);

}  // namespace af::serving
