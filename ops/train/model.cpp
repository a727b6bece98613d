// af::nn::model: structure (from inputs and outputs), summary, weights and checkpoint state.

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "ops/train/model_impl.hpp"

namespace af::nn {

namespace {

uint64_t weight_seed(uint64_t model_seed, std::size_t index) {
  uint64_t z = model_seed * 0x9E3779B97F4A7C15ull + index + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string shape_text(const value_spec& s) {
  std::string out = "(None";
  for (auto d : s.dims) out += ", " + std::to_string(d);
  return out + ")";
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

model::model(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
model::model(model&&) noexcept = default;
model& model::operator=(model&&) noexcept = default;
model::~model() = default;

namespace {

// Layer names in a model's weights, state and steps are the model's own: a name the user gave
// stays; an automatic one becomes its base numbered in order of appearance in this model
// ("dense", "dense_1", ...), skipping names the user took. Two models built alike in one process
// (or in two) then name their weights alike and load each other's checkpoints, as Keras' weight
// paths do, however many layers the process made before.
void name_layers(model::impl& m) {
  std::set<std::string> taken;
  for (const auto& l : m.layers)
    if (l->automatic_base().empty()) taken.insert(l->name());
  std::map<std::string, int> next;
  for (const auto& l : m.layers) {
    if (l->automatic_base().empty()) {
      m.local_names[&*l] = l->name();
      continue;
    }
    const std::string& base = l->automatic_base();
    std::string candidate;
    do {
      const int k = next[base]++;
      candidate = k == 0 ? base : base + "_" + std::to_string(k);
    } while (taken.count(candidate));
    taken.insert(candidate);
    m.local_names[&*l] = candidate;
  }
}

}  // namespace

expected<model> model::functional(std::vector<layer_output> inputs, std::vector<layer_output> outputs,
                                  model_options options) {
  auto m = std::make_unique<impl>();
  m->name = options.name;
  if (inputs.empty() || outputs.empty()) return make_error(errc::invalid_argument, "model '" + m->name + "': needs inputs and outputs");
  std::set<std::string> names;
  for (const auto& in : inputs) {
    if (!in.node || in.node->applied) return make_error(errc::invalid_argument, "model '" + m->name + "': an input that nn::input did not make");
    if (!names.insert(in.node->input_name).second)
      return make_error(errc::invalid_argument, "model '" + m->name + "': two inputs named '" + in.node->input_name + "'");
  }
  for (const auto& out : outputs)
    if (out.status()) return make_error(out.status().code, "model '" + m->name + "': " + out.status().message);

  // Depth-first from the outputs: every application after its inputs; leaves must be listed inputs.
  std::set<const model_node*> done, listed;
  for (const auto& in : inputs) listed.insert(in.node.get());
  error problem;
  std::function<void(const model_node*)> visit = [&](const model_node* n) {
    if (problem || done.count(n)) return;
    if (!n->applied) {
      if (!listed.count(n))
        problem = make_error(errc::invalid_argument, "model '" + m->name + "': an output depends on input '" + n->input_name +
                                                         "', which is not among the model's inputs");
      done.insert(n);
      return;
    }
    for (const auto& in : n->inputs) visit(in.node.get());
    done.insert(n);
    m->order.push_back(n);
  };
  for (const auto& out : outputs) visit(out.node.get());
  if (problem) return problem;

  std::set<const layer*> seen;
  for (const model_node* n : m->order)
    if (seen.insert(n->applied.get()).second) m->layers.push_back(n->applied);
  name_layers(*m);
  for (const auto& l : m->layers) {
    m->first_weight[&*l] = static_cast<int>(m->weights.size());
    for (auto w : l->weights()) {  // "<process name>/kernel" -> "<model-local name>/kernel"
      w.name = m->local_names.at(&*l) + w.name.substr(l->name().size());
      m->weights.push_back(std::move(w));
    }
  }
  std::set<std::string> weight_names;
  for (std::size_t i = 0; i < m->weights.size(); ++i) {
    const auto& w = m->weights[i];
    if (!weight_names.insert(w.name).second)
      return make_error(errc::invalid_argument, "model '" + m->name + "': two weights named '" + w.name + "' (give the layers distinct names)");
    auto value = w.init(w.spec.dims, weight_seed(options.seed, i));
    if (!value) return with_context(value.error_value(), "model '" + m->name + "': initializing " + w.name);
    m->values.push_back(std::move(*value));
  }
  m->inputs = std::move(inputs);
  m->outputs = std::move(outputs);
  return model{std::move(m)};
}

expected<model> model::clone() const {
  const auto& m = *impl_;
  auto copy = std::make_unique<impl>();
  copy->name = m.name;
  copy->inputs = m.inputs;
  copy->outputs = m.outputs;
  copy->order = m.order;
  copy->layers = m.layers;
  copy->first_weight = m.first_weight;
  copy->local_names = m.local_names;
  copy->weights = m.weights;
  copy->values = m.values;  // tensors are shared until a step replaces them; steps never write in place
  model out{std::move(copy)};
  if (m.compiled) {
    AF_TRY(out.compile(*m.compiled));
    out.impl_->slots = m.slots;
    out.impl_->updates = m.updates;
    out.impl_->learning_rate_override = m.learning_rate_override;
  }
  return out;
}

expected<model> model::sequential(layer_output input, std::vector<layer_ptr> layers, model_options options) {
  if (options.name == "model") options.name = "sequential";
  layer_output x = input;
  for (const auto& l : layers) {
    if (!l) return make_error(errc::invalid_argument, "model '" + options.name + "': a null layer");
    x = (*l)(x);
  }
  return functional({input}, {x}, std::move(options));
}

std::vector<sym> model::impl::forward(const std::vector<sym>& x, const std::vector<sym>& w, const sym* seed,
                                      bool training, std::vector<std::pair<int, sym>>* assignments) const {
  std::map<const model_node*, std::vector<sym>> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) values[inputs[i].node.get()] = {x[i]};
  call_context ctx{training, &w, seed};
  for (const model_node* n : order) {
    std::vector<sym> args;
    for (const auto& in : n->inputs) args.push_back(values.at(in.node.get()).at(static_cast<std::size_t>(in.index)));
    ctx.enter_layer(first_weight.at(n->applied.get()));
    values[n] = n->applied->call(args, ctx);
  }
  if (assignments) *assignments = ctx.assignments();
  std::vector<sym> out;
  for (const auto& o : outputs) out.push_back(values.at(o.node.get()).at(static_cast<std::size_t>(o.index)));
  return out;
}

const std::string& model::name() const { return impl_->name; }

int64_t model::parameter_count() const {
  int64_t n = 0;
  for (const auto& w : impl_->weights) n += numel(w.spec.dims);
  return n;
}

int64_t model::trainable_parameter_count() const {
  int64_t n = 0;
  for (const auto& w : impl_->weights)
    if (w.trainable) n += numel(w.spec.dims);
  return n;
}

std::string model::summary() const {
  const auto& m = *impl_;
  bool chain = m.inputs.size() == 1 && m.outputs.size() == 1;
  for (const model_node* n : m.order) chain = chain && n->inputs.size() == 1;
  // Rows first, so that each column is as wide as its longest entry.
  auto label = [this](const model_node* n) {
    return n->applied ? impl_->local_names.at(n->applied.get()) : n->input_name;
  };
  std::vector<std::array<std::string, 4>> rows{{"Layer (type)", "Output Shape", "Param #", "Connected to"}};
  for (const auto& in : m.inputs) rows.push_back({in.node->input_name + " (InputLayer)", shape_text(in.spec()), "0", ""});
  std::set<const layer*> counted;
  for (const model_node* n : m.order) {
    int64_t params = 0;
    if (counted.insert(n->applied.get()).second)
      for (const auto& w : n->applied->weights()) params += numel(w.spec.dims);
    std::string from;
    for (const auto& in : n->inputs) from += (from.empty() ? "" : ", ") + label(in.node.get());
    rows.push_back({impl_->local_names.at(n->applied.get()) + " (" + n->applied->kind() + ")", shape_text(n->outputs.front()), with_commas(params), from});
  }
  const std::size_t columns = chain ? 3 : 4;
  std::array<std::size_t, 4> width{};
  for (const auto& r : rows)
    for (std::size_t c = 0; c < columns; ++c) width[c] = std::max(width[c], r[c].size() + 3);
  std::size_t total = 1;
  for (std::size_t c = 0; c < columns; ++c) total += width[c];
  std::ostringstream os;
  const std::string rule(total, '_'), double_rule(total, '=');
  auto print_row = [&](const std::array<std::string, 4>& r) {
    std::string line = " ";
    for (std::size_t c = 0; c < columns; ++c) {
      line += r[c];
      if (c + 1 < columns) line.resize(line.size() + width[c] - r[c].size(), ' ');
    }
    os << line << "\n";
  };
  os << "Model: \"" << m.name << "\"\n" << rule << "\n";
  print_row(rows[0]);
  os << double_rule << "\n";
  for (std::size_t r = 1; r < rows.size(); ++r) print_row(rows[r]);
  os << double_rule << "\n";
  os << "Total params: " << with_commas(parameter_count()) << "\n";
  os << "Trainable params: " << with_commas(trainable_parameter_count()) << "\n";
  os << "Non-trainable params: " << with_commas(parameter_count() - trainable_parameter_count()) << "\n" << rule << "\n";
  return os.str();
}

std::vector<std::string> model::input_names() const {
  std::vector<std::string> out;
  for (const auto& in : impl_->inputs) out.push_back(in.node->input_name);
  return out;
}
std::vector<value_spec> model::input_specs() const {
  std::vector<value_spec> out;
  for (const auto& in : impl_->inputs) out.push_back(in.spec());
  return out;
}
std::vector<value_spec> model::output_specs() const {
  std::vector<value_spec> out;
  for (const auto& o : impl_->outputs) out.push_back(o.spec());
  return out;
}

const std::vector<weight>& model::weights() const { return impl_->weights; }
const std::vector<tensor>& model::weight_values() const { return impl_->values; }

expected<void> model::set_weight_values(std::vector<tensor> values) {
  const auto& w = impl_->weights;
  if (values.size() != w.size())
    return make_error(errc::invalid_argument, "model '" + impl_->name + "': " + std::to_string(w.size()) + " weights, got " +
                                                  std::to_string(values.size()) + " values");
  for (std::size_t i = 0; i < w.size(); ++i)
    if (values[i].type() != w[i].spec.type || values[i].shape() != w[i].spec.dims)
      return make_error(errc::shape_mismatch, "model '" + impl_->name + "': weight " + w[i].name + " is " +
                                                  graph::to_string(w[i].spec) + ", got " + std::string{to_string(values[i].type())} +
                                                  to_string(values[i].shape()));
  impl_->values = std::move(values);
  return {};
}

int64_t model::updates_done() const { return impl_->updates; }
void model::set_learning_rate(std::optional<double> rate) { impl_->learning_rate_override = rate; }

double model::learning_rate() const {
  const auto& m = *impl_;
  if (m.learning_rate_override) return *m.learning_rate_override;
  if (!m.compiled) return 0;
  if (m.compiled->learning_rate) return m.compiled->learning_rate(m.updates);
  return m.compiled->optimizer.learning_rate();
}

std::vector<named_tensor> model::state() const {
  const auto& m = *impl_;
  std::vector<named_tensor> out;
  for (std::size_t i = 0; i < m.weights.size(); ++i) out.push_back({m.weights[i].name, m.values[i]});
  const std::size_t n = m.trainable.size();
  for (std::size_t s = 0; s < m.slots.size(); ++s)
    out.push_back({"optimizer/" + m.weights[static_cast<std::size_t>(m.trainable[s % n])].name + "/slot_" + std::to_string(s / n),
                   m.slots[s]});
  out.push_back({"optimizer/iterations", tensor::scalar(m.updates)});
  return out;
}

expected<void> model::load_state(const std::vector<named_tensor>& saved) {
  auto& m = *impl_;
  auto expected_state = state();
  std::map<std::string, const tensor*> by_name;
  for (const auto& t : saved) by_name[t.name] = &t.value;
  for (const auto& want : expected_state) {
    auto it = by_name.find(want.name);
    if (it == by_name.end()) return make_error(errc::invalid_argument, "model '" + m.name + "': the saved state has no '" + want.name + "'");
    const tensor& got = *it->second;
    if (got.type() != want.value.type() || got.shape() != want.value.shape())
      return make_error(errc::shape_mismatch, "model '" + m.name + "': saved '" + want.name + "' is " +
                                                  std::string{to_string(got.type())} + to_string(got.shape()) + ", the model's is " +
                                                  std::string{to_string(want.value.type())} + to_string(want.value.shape()));
  }
  for (std::size_t i = 0; i < m.weights.size(); ++i) m.values[i] = *by_name.at(m.weights[i].name);
  const std::size_t n = m.trainable.size();
  for (std::size_t s = 0; s < m.slots.size(); ++s)
    m.slots[s] = *by_name.at("optimizer/" + m.weights[static_cast<std::size_t>(m.trainable[s % n])].name + "/slot_" + std::to_string(s / n));
  m.updates = by_name.at("optimizer/iterations")->data<int64_t>()[0];
  return {};
}

}  // namespace af::nn
