// Keras 3 config.json -> our layers, applied as the config's graph says; model.weights.h5's
// variables -> our weights, layer by layer.

#include "serialization/keras_import.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <regex>

#include "ops/train/layers.hpp"
#include "serialization/keras_archive.hpp"

namespace af::keras {

namespace {

using json = nlohmann::json;
using nn::layer_ptr;

// Thrown while a layer is read; import_model turns it into its error.
struct import_failure {
  errc code;
  std::string message;
};

[[noreturn]] void refuse(errc code, std::string message) { throw import_failure{code, std::move(message)}; }

// Keras' snake_case of a class name ("DepthwiseConv2D" -> "depthwise_conv2d"): the weights file
// names each layer's group by it, numbered "_1", "_2", ... in layer order.
std::string snake_case(const std::string& name) {
  std::string out = std::regex_replace(name, std::regex{"(.)([A-Z][a-z]+)"}, "$1_$2");
  out = std::regex_replace(out, std::regex{"([a-z])([A-Z])"}, "$1_$2");
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// One layer's entry of config.json, read with errors that name it.
class layer_config {
 public:
  explicit layer_config(const json& entry) : entry_(entry) {
    kind_ = entry.at("class_name").get<std::string>();
    config_ = &entry.at("config");
    name_ = config_->contains("name") ? config_->at("name").get<std::string>() : kind_;
  }
  const std::string& kind() const { return kind_; }
  const std::string& name() const { return name_; }
  const json& entry() const { return entry_; }
  std::string where() const { return "layer '" + name_ + "' (" + kind_ + ")"; }

  const json& at(const char* key) const {
    if (!config_->contains(key)) refuse(errc::malformed_input, where() + ": its config has no '" + key + "'");
    return config_->at(key);
  }
  bool has(const char* key) const { return config_->contains(key) && !config_->at(key).is_null(); }
  int64_t integer(const char* key) const { return typed<int64_t>(key, "an integer"); }
  double number(const char* key) const { return typed<double>(key, "a number"); }
  bool flag(const char* key, bool otherwise) const { return has(key) ? typed<bool>(key, "true or false") : otherwise; }
  std::string word(const char* key) const { return typed<std::string>(key, "a string"); }
  std::array<int64_t, 2> pair(const char* key) const {
    const json& v = at(key);
    if (v.is_number_integer()) return {v.get<int64_t>(), v.get<int64_t>()};
    if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
      return {v[0].get<int64_t>(), v[1].get<int64_t>()};
    refuse(errc::malformed_input, where() + ": '" + key + "' is not an integer or a pair of them");
  }
  /// An option we only support with one value (or absent/null).
  void require(const char* key, const json& supported) const {
    if (!has(key) || config_->at(key) == supported) return;
    refuse(errc::unsupported, where() + ": option " + key + " = " + config_->at(key).dump() + " is not supported (only " +
                                  supported.dump() + ")");
  }
  std::string activation(const char* key = "activation") const {
    if (!has(key)) return {};
    if (!config_->at(key).is_string())
      refuse(errc::unsupported, where() + ": a " + key + " that is not a built-in activation name");
    const std::string a = word(key);
    if (a == "linear") return {};
    if (a == "relu" || a == "sigmoid" || a == "tanh" || a == "gelu" || a == "softmax") return a;
    refuse(errc::unsupported, where() + ": activation '" + a + "' is not supported (linear, relu, sigmoid, tanh, gelu, softmax)");
  }
  padding_mode padding() const {
    const std::string p = has("padding") ? word("padding") : "valid";
    if (p == "valid") return padding_mode::valid;
    if (p == "same") return padding_mode::same;
    refuse(errc::unsupported, where() + ": padding '" + p + "' is not supported (valid, same)");
  }

 private:
  template <class T>
  T typed(const char* key, const char* what) const {
    const json& v = at(key);
    const bool fits = std::is_same_v<T, bool> ? v.is_boolean()
                      : std::is_same_v<T, std::string> ? v.is_string()
                      : std::is_same_v<T, int64_t> ? v.is_number_integer()
                                                   : v.is_number();
    if (!fits) refuse(errc::malformed_input, where() + ": '" + key + "' is not " + what);
    return v.get<T>();
  }
  const json& entry_;
  const json* config_ = nullptr;
  std::string kind_, name_;
};

// The per-sample axis of a Keras axis (which counts the batch), for an input of `rank` per-sample dims.
int64_t sample_axis(const layer_config& l, int64_t axis, std::size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < 0) axis += r + 1;
  if (axis < 1 || axis > r) refuse(errc::unsupported, l.where() + ": axis " + std::to_string(axis) + " is the batch or outside the input");
  return axis - 1;
}

// The axis option of a normalisation: the last one only.
void require_last_axis(const layer_config& l, std::size_t rank) {
  if (!l.has("axis")) return;
  json axis = l.at("axis");
  if (axis.is_array() && axis.size() == 1) axis = axis[0];
  if (!axis.is_number_integer() || sample_axis(l, axis.get<int64_t>(), rank) != static_cast<int64_t>(rank) - 1)
    refuse(errc::unsupported, l.where() + ": axis " + l.at("axis").dump() + " is not supported (only the last axis)");
}

layer_ptr make_layer(const layer_config& l, const std::vector<nn::layer_output>& inputs) {
  const std::string& k = l.kind();
  const std::size_t rank = inputs.empty() ? 0 : inputs[0].spec().dims.size();
  if (k == "Conv2D" || k == "DepthwiseConv2D" || k == "SeparableConv2D" || k == "MaxPooling2D" || k == "AveragePooling2D" ||
      k == "GlobalAveragePooling2D" || k == "Flatten")
    l.require("data_format", "channels_last");
  if (k == "Dense") return nn::dense(l.integer("units"), {.activation = l.activation(), .use_bias = l.flag("use_bias", true), .name = l.name()});
  if (k == "Conv2D") {
    l.require("groups", 1);
    return nn::conv2d(l.integer("filters"), l.pair("kernel_size"),
                      {.strides = l.pair("strides"), .padding = l.padding(), .dilations = l.pair("dilation_rate"),
                       .activation = l.activation(), .use_bias = l.flag("use_bias", true), .name = l.name()});
  }
  if (k == "DepthwiseConv2D")
    return nn::depthwise_conv2d(l.pair("kernel_size"),
                                {.depth_multiplier = l.integer("depth_multiplier"), .strides = l.pair("strides"),
                                 .padding = l.padding(), .dilations = l.pair("dilation_rate"), .activation = l.activation(),
                                 .use_bias = l.flag("use_bias", true), .name = l.name()});
  if (k == "SeparableConv2D")
    return nn::separable_conv2d(l.integer("filters"), l.pair("kernel_size"),
                                {.depth_multiplier = l.integer("depth_multiplier"), .strides = l.pair("strides"),
                                 .padding = l.padding(), .dilations = l.pair("dilation_rate"), .activation = l.activation(),
                                 .use_bias = l.flag("use_bias", true), .name = l.name()});
  if (k == "MaxPooling2D" || k == "AveragePooling2D") {
    const auto pool = l.pair("pool_size");
    nn::pooling_options o{.pool_size = pool, .strides = l.has("strides") ? l.pair("strides") : pool, .padding = l.padding(),
                          .name = l.name()};
    return k == "MaxPooling2D" ? nn::max_pool2d(o) : nn::avg_pool2d(o);
  }
  if (k == "GlobalAveragePooling2D") {
    l.require("keepdims", false);
    return nn::global_average_pooling2d(l.name());
  }
  if (k == "Flatten") return nn::flatten(l.name());
  if (k == "Reshape") {
    std::vector<int64_t> target;
    for (const auto& d : l.at("target_shape")) {
      if (!d.is_number_integer()) refuse(errc::malformed_input, l.where() + ": target_shape holds a non-integer");
      target.push_back(d.get<int64_t>());
    }
    return nn::reshape(target, l.name());
  }
  if (k == "Dropout") {
    l.require("noise_shape", nullptr);
    return nn::dropout(l.number("rate"), l.name());
  }
  if (k == "Activation") return nn::activation(l.activation(), l.name());
  if (k == "BatchNormalization") {
    require_last_axis(l, rank);
    l.require("renorm", false);
    return nn::batch_normalization({.momentum = l.number("momentum"), .epsilon = l.number("epsilon"),
                                    .center = l.flag("center", true), .scale = l.flag("scale", true), .name = l.name()});
  }
  if (k == "LayerNormalization") {
    require_last_axis(l, rank);
    l.require("rms_scaling", false);
    return nn::layer_normalization(
        {.epsilon = l.number("epsilon"), .center = l.flag("center", true), .scale = l.flag("scale", true), .name = l.name()});
  }
  if (k == "Embedding") {
    l.require("mask_zero", false);
    return nn::embedding(l.integer("input_dim"), l.integer("output_dim"), {.name = l.name()});
  }
  if (k == "LSTM" || k == "GRU") {
    for (const char* off : {"go_backwards", "stateful", "return_state"}) l.require(off, false);
    nn::recurrent_options o{.return_sequences = l.flag("return_sequences", false),
                            .activation = l.activation(),
                            .recurrent_activation = l.activation("recurrent_activation"),
                            .use_bias = l.flag("use_bias", true),
                            .name = l.name()};
    if (o.activation.empty() || o.recurrent_activation.empty())
      refuse(errc::unsupported, l.where() + ": a linear activation or recurrent_activation is not supported");
    if (k == "LSTM") {
      o.unit_forget_bias = l.flag("unit_forget_bias", true);
      return nn::lstm(l.integer("units"), o);
    }
    o.reset_after = l.flag("reset_after", true);
    return nn::gru(l.integer("units"), o);
  }
  if (k == "Add") return nn::add(l.name());
  if (k == "Concatenate") return nn::concatenate(sample_axis(l, l.has("axis") ? l.integer("axis") : -1, rank), l.name());
  refuse(errc::unsupported, l.where() + ": the layer kind " + k +
                                " is not supported (Dense, Conv2D, DepthwiseConv2D, SeparableConv2D, MaxPooling2D, "
                                "AveragePooling2D, GlobalAveragePooling2D, Flatten, Reshape, Dropout, BatchNormalization, "
                                "LayerNormalization, Embedding, LSTM, GRU, Activation, Add, Concatenate)");
}

nn::layer_output model_input(const layer_config& l) {
  const json& shape_entry = l.has("batch_shape") ? l.at("batch_shape") : l.at("batch_input_shape");
  if (!shape_entry.is_array() || shape_entry.empty()) refuse(errc::malformed_input, l.where() + ": batch_shape is not a list");
  shape dims;
  for (std::size_t i = 1; i < shape_entry.size(); ++i) {
    if (!shape_entry[i].is_number_integer() || shape_entry[i].get<int64_t>() < 0)
      refuse(errc::unsupported, l.where() + ": dimension " + std::to_string(i) + " of " + shape_entry.dump() +
                                    " is not fixed (only the batch may vary)");
    dims.push_back(shape_entry[i].get<int64_t>());
  }
  const std::string type = l.has("dtype") && l.at("dtype").is_string() ? l.word("dtype") : "float32";
  dtype t = dtype::f32;
  if (type == "int32") t = dtype::i32;
  else if (type == "int64") t = dtype::i64;
  else if (type != "float32") refuse(errc::unsupported, l.where() + ": input dtype '" + type + "' is not supported (float32, int32, int64)");
  return nn::input(dims, t, l.name());
}

// The value a Keras tensor reference ([layer, node, tensor] or a __keras_tensor__) names.
nn::layer_output lookup(const std::map<std::string, std::vector<nn::layer_output>>& made, const json& history,
                        const std::string& where) {
  if (!history.is_array() || history.size() != 3 || !history[0].is_string() || !history[1].is_number_integer() ||
      !history[2].is_number_integer())
    refuse(errc::malformed_input, where + ": a tensor reference that is not [layer, node, index]");
  const auto name = history[0].get<std::string>();
  const auto node = history[1].get<int64_t>();
  if (history[2].get<int64_t>() != 0) refuse(errc::unsupported, where + ": it uses output " + history[2].dump() + " of '" + name + "'");
  auto it = made.find(name);
  if (it == made.end() || node < 0 || node >= static_cast<int64_t>(it->second.size()))
    refuse(errc::malformed_input, where + ": it uses '" + name + "' (call " + std::to_string(node) + ") before it is made");
  return it->second[static_cast<std::size_t>(node)];
}

// The inputs of one call (inbound node) of a layer.
std::vector<nn::layer_output> call_inputs(const std::map<std::string, std::vector<nn::layer_output>>& made, const json& node,
                                          const std::string& where) {
  std::vector<nn::layer_output> out;
  const json& args = node.is_object() ? node.at("args") : node;
  std::vector<const json*> tensors;
  for (const auto& a : args) {
    if (a.is_array() && !a.empty() && a[0].is_object())
      for (const auto& inner : a) tensors.push_back(&inner);
    else
      tensors.push_back(&a);
  }
  for (const json* t : tensors) {
    if (!t->is_object() || t->value("class_name", "") != "__keras_tensor__")
      refuse(errc::unsupported, where + ": a call argument that is not a tensor");
    out.push_back(lookup(made, t->at("config").at("keras_history"), where));
  }
  if (out.empty()) refuse(errc::malformed_input, where + ": a call without inputs");
  return out;
}

std::vector<json> references(const json& list) {
  if (list.is_array() && !list.empty() && list[0].is_string()) return {list};  // a single [name, node, index]
  return std::vector<json>(list.begin(), list.end());
}

struct built {
  std::vector<nn::layer_output> inputs, outputs;
  std::vector<std::pair<layer_config, layer_ptr>> layers;  // with weights or not, in config order
  bool sequential = false;
};

built build_graph(const json& config) {
  built b;
  const std::string kind = config.at("class_name").get<std::string>();
  const json& layers = config.at("config").at("layers");
  std::map<std::string, std::vector<nn::layer_output>> made;
  if (kind == "Sequential") {
    b.sequential = true;
    std::optional<nn::layer_output> current;
    for (const auto& entry : layers) {
      layer_config l{entry};
      if (l.kind() == "InputLayer") {
        current = model_input(l);
        b.inputs = {*current};
        continue;
      }
      if (!current) {
        if (!entry.contains("build_config")) refuse(errc::malformed_input, l.where() + ": the model's input shape is unknown");
        json input = {{"class_name", "InputLayer"},
                      {"config", {{"name", "input_layer"}, {"batch_shape", entry.at("build_config").at("input_shape")}}}};
        current = model_input(layer_config{input});
        b.inputs = {*current};
      }
      auto layer = make_layer(l, {*current});
      current = layer(*current);
      b.layers.emplace_back(l, layer);
    }
    if (!current) refuse(errc::malformed_input, "a Sequential model without layers");
    b.outputs = {*current};
    return b;
  }
  if (kind != "Functional" && kind != "Model")
    refuse(errc::unsupported, "model class " + kind + " is not supported (Sequential, Functional)");
  for (const auto& entry : layers) {
    layer_config l{entry};
    if (l.kind() == "InputLayer") {
      made[l.name()] = {model_input(l)};
      b.layers.emplace_back(l, layer_ptr{});
      continue;
    }
    layer_ptr layer;
    for (const auto& node : entry.at("inbound_nodes")) {
      auto in = call_inputs(made, node, l.where());
      if (!layer) layer = make_layer(l, in);
      made[l.name()].push_back(in.size() == 1 ? layer(in[0]) : layer(in));
    }
    if (!layer) refuse(errc::malformed_input, l.where() + ": it is never called");
    b.layers.emplace_back(l, layer);
  }
  for (const auto& ref : references(config.at("config").at("input_layers")))
    b.inputs.push_back(lookup(made, ref, "the model's inputs"));
  for (const auto& ref : references(config.at("config").at("output_layers")))
    b.outputs.push_back(lookup(made, ref, "the model's outputs"));
  return b;
}

// Each layer's variables from the weights file, in its variable order; checked against our layer's
// weights (count and dims), which have Keras' layouts.
std::map<std::string, std::vector<tensor>> weights_by_layer(const built& b, const archive& a) {
  std::map<std::string, std::vector<tensor>> out;
  std::map<std::string, int> seen;  // snake_case name -> layers so far
  for (const auto& [l, layer] : b.layers) {
    if (b.sequential && l.kind() == "InputLayer") continue;
    const std::string base = snake_case(l.kind());
    const int n = seen[base]++;
    std::string group = "layers/" + base;
    if (n) group.append("_").append(std::to_string(n));  // append: GCC 12 -Wrestrict misfires on "_" + s
    if (!layer) continue;
    std::vector<std::pair<int64_t, tensor>> vars;
    for (const std::string& prefix : {group + "/vars/", group + "/cell/vars/"})
      for (auto it = a.variables.lower_bound(prefix); it != a.variables.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        const std::string index = it->first.substr(prefix.size());
        if (index.empty() || index.size() > 6 || !std::all_of(index.begin(), index.end(), ::isdigit)) continue;
        vars.emplace_back(std::stoll(index), it->second);
      }
    std::sort(vars.begin(), vars.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    const auto& ours = layer->weights();
    if (vars.size() != ours.size())
      refuse(errc::malformed_input, l.where() + ": the weights file has " + std::to_string(vars.size()) + " variables under '" +
                                        group + "', the layer has " + std::to_string(ours.size()) + " weights");
    for (std::size_t i = 0; i < ours.size(); ++i) {
      if (vars[i].second.shape() != ours[i].spec.dims)
        refuse(errc::malformed_input, l.where() + ": variable " + std::to_string(i) + " is " + to_string(vars[i].second.shape()) +
                                          ", its weight '" + ours[i].name + "' is " + to_string(ours[i].spec.dims));
      out[l.name()].push_back(vars[i].second);
    }
  }
  return out;
}

}  // namespace

expected<nn::model> import_model(const std::string& path) {
  AF_TRY_ASSIGN(auto a, read_archive(path));
  try {
    const json config = json::parse(a.config_json);
    built b = build_graph(config);
    const std::string name = config.at("config").value("name", std::string{"model"});
    auto model = nn::model::functional(b.inputs, b.outputs, {.name = name});
    if (!model) return with_context(model.error_value(), "Keras archive '" + path + "'");
    const auto values = weights_by_layer(b, a);
    std::map<std::string, std::size_t> next;  // per layer: its weights handed out so far
    std::vector<tensor> ordered;
    for (const auto& w : model->weights()) {
      const std::string layer = w.name.substr(0, w.name.find('/'));
      auto it = values.find(layer);
      if (it == values.end() || next[layer] >= it->second.size())
        return make_error(errc::malformed_input, "Keras archive '" + path + "': no value for weight '" + w.name + "'");
      ordered.push_back(it->second[next[layer]++]);
    }
    if (auto ok = model->set_weight_values(std::move(ordered)); !ok)
      return with_context(ok.error_value(), "Keras archive '" + path + "'");
    return std::move(*model);
  } catch (const import_failure& f) {
    return make_error(f.code, "Keras archive '" + path + "': " + f.message);
  } catch (const json::exception& e) {
    return make_error(errc::malformed_input, "Keras archive '" + path + "': config.json: " + e.what());
  }
}

}  // namespace af::keras
