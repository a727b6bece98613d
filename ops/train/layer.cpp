#include "ops/train/layer.hpp"

#include <atomic>
#include <map>
#include <mutex>

#include "ops/random.hpp"
#include "ops/train/initializers.hpp"

namespace af::nn {

initializer zeros_initializer() {
  return [](const shape& dims, uint64_t) { return tensor::zeros(dims, dtype::f32); };
}
initializer ones_initializer() {
  return [](const shape& dims, uint64_t) { return tensor::full(dims, 1.0, dtype::f32); };
}

expected<initializer> initializer_named(const std::string& name) {
  using sampler = expected<tensor> (*)(const shape&, uint64_t, dtype);
  static const std::map<std::string, sampler, std::less<>> samplers{
      {"glorot_uniform", &initializers::glorot_uniform},
      {"glorot_normal", &initializers::glorot_normal},
      {"he_uniform", &initializers::he_uniform},
      {"he_normal", &initializers::he_normal}};
  if (name == "zeros") return zeros_initializer();
  if (name == "ones") return ones_initializer();
  if (name == "uniform")  // Keras' RandomUniform default, its embeddings' initializer
    return initializer{[](const shape& dims, uint64_t seed) { return random_uniform(dims, seed, dtype::f32, -0.05, 0.05); }};
  if (auto it = samplers.find(name); it != samplers.end()) {
    const sampler sample = it->second;
    return initializer{[sample](const shape& dims, uint64_t seed) { return sample(dims, seed, dtype::f32); }};
  }
  return make_error(errc::invalid_argument, "unknown initializer '" + name +
                                                "' (known: glorot_uniform, glorot_normal, he_uniform, he_normal, uniform, zeros, ones)");
}

// -- call_context ----------------------------------------------------------------------------------

call_context::call_context(bool training, const std::vector<sym>* weights, const sym* seed)
    : training_(training), weights_(weights), seed_(seed) {}

const sym& call_context::weight(int i) const { return weights_->at(static_cast<std::size_t>(first_weight_ + i)); }

sym call_context::uniform(std::vector<int64_t> dims) {
  if (seed_ == nullptr) fail_trace(errc::invalid_argument, "random numbers asked for outside training", where_from::current());
  return stateless_random_uniform(*seed_, std::move(dims), ++salt_);
}

void call_context::assign(int i, const sym& value) { assignments_.emplace_back(first_weight_ + i, value); }

// -- model values ----------------------------------------------------------------------------------

const value_spec& layer_output::spec() const {
  static const value_spec none{};
  if (!node || static_cast<std::size_t>(index) >= node->outputs.size()) return none;
  return node->outputs[static_cast<std::size_t>(index)];
}

const error& layer_output::status() const {
  static const error missing = make_error(errc::invalid_argument, "a layer_output that no layer or input made");
  return node ? node->failure : missing;
}

layer_output input(shape dims, dtype type, std::string name) {
  auto node = std::make_shared<model_node>();
  node->outputs.push_back(value_spec{type, std::move(dims)});
  node->input_name = std::move(name);
  return layer_output{std::move(node), 0};
}

// -- layer -----------------------------------------------------------------------------------------

namespace {

std::string process_unique(const std::string& base) {
  static std::mutex mtx;
  static std::map<std::string, int> counts;
  std::lock_guard lock{mtx};
  const int n = ++counts[base];
  return n == 1 ? base : base + "_" + std::to_string(n - 1);
}

}  // namespace

layer::layer(std::string kind, layer_name name)
    : kind_(std::move(kind)),
      name_(name.given.empty() ? process_unique(name.base) : name.given),
      automatic_base_(name.given.empty() ? std::move(name.base) : std::string{}) {}

layer_output layer::operator()(const layer_output& x) {
  auto outs = (*this)(std::vector<layer_output>{x});
  return outs.front();
}

std::vector<layer_output> layer::operator()(const std::vector<layer_output>& xs) {
  auto node = std::make_shared<model_node>();
  node->applied = shared_from_this();
  node->inputs = xs;
  std::vector<value_spec> specs;
  for (const auto& x : xs) {
    if (x.status() && !node->failure) node->failure = x.status();
    specs.push_back(x.spec());
  }
  if (!node->failure) {
    if (built_ && specs != built_for_) {
      std::string got, want;
      for (const auto& s : specs) got += (got.empty() ? "" : ", ") + graph::to_string(s);
      for (const auto& s : built_for_) want += (want.empty() ? "" : ", ") + graph::to_string(s);
      node->failure = fail(errc::shape_mismatch, "built for " + want + ", applied to " + got);
    } else if (built_) {
      node->outputs = built_outputs_;  // a shared layer: same weights, same shapes
    } else if (auto out = build(specs); !out) {
      node->failure = out.error_value();
      weights_.clear();  // the next application builds afresh
    } else {
      node->outputs = std::move(*out);
      built_ = true;
      built_for_ = specs;
      built_outputs_ = node->outputs;
    }
  }
  const int count = node->failure ? 1 : static_cast<int>(node->outputs.size());
  if (node->failure) node->outputs.assign(1, value_spec{});
  std::shared_ptr<const model_node> shared = node;
  std::vector<layer_output> outs;
  for (int i = 0; i < count; ++i) outs.push_back(layer_output{shared, i});
  return outs;
}

int layer::add_weight(const std::string& short_name, shape dims, initializer init, bool trainable) {
  weights_.push_back(weight{name_ + "/" + short_name, value_spec{dtype::f32, std::move(dims)}, std::move(init), trainable});
  return static_cast<int>(weights_.size()) - 1;
}

error layer::fail(errc code, const std::string& what) const { return make_error(code, kind_ + " '" + name_ + "': " + what); }

// -- activations -----------------------------------------------------------------------------------

bool known_activation(const std::string& a) {
  return a.empty() || a == "linear" || a == "relu" || a == "sigmoid" || a == "tanh" || a == "gelu" || a == "softmax";
}

sym activate(const std::string& a, const sym& x) {
  if (a.empty() || a == "linear") return x;
  if (a == "relu") return relu(x);
  if (a == "sigmoid") return sigmoid(x);
  if (a == "tanh") return tanh(x);
  if (a == "gelu") return gelu(x);
  if (a == "softmax") return softmax(x, -1);
  fail_trace(errc::invalid_argument, "unknown activation '" + a + "' (known: relu, sigmoid, tanh, gelu, softmax, linear)",
             where_from::current());
}

}  // namespace af::nn
