// af::nn::model: compile, the three traced steps (train, test, predict) and the checks of a
// batch before it runs.

#include <cmath>

#include "ops/elementwise.hpp"
#include "ops/train/losses.hpp"
#include "ops/train/model_impl.hpp"

namespace af::nn {

// -- losses by name ----------------------------------------------------------------------------------

loss_spec sparse_categorical_crossentropy() {
  return {"sparse_categorical_crossentropy",
          [](const sym& t, const sym& p) { return losses::sparse_categorical_crossentropy(t, p); }, true};
}
loss_spec categorical_crossentropy(double smoothing) {
  return {"categorical_crossentropy", [smoothing](const sym& t, const sym& p) { return losses::categorical_crossentropy(t, p, smoothing); }};
}
loss_spec binary_crossentropy() {
  return {"binary_crossentropy", [](const sym& t, const sym& p) { return losses::binary_crossentropy(t, p); }};
}
loss_spec binary_focal_crossentropy(double gamma, double alpha) {
  return {"binary_focal_crossentropy",
          [gamma, alpha](const sym& t, const sym& p) { return losses::binary_focal_crossentropy(t, p, gamma, alpha); }};
}
loss_spec mean_squared_error() {
  return {"mean_squared_error", [](const sym& t, const sym& p) { return losses::mean_squared_error(t, p); }};
}
loss_spec mean_absolute_error() {
  return {"mean_absolute_error", [](const sym& t, const sym& p) { return losses::mean_absolute_error(t, p); }};
}
loss_spec huber(double delta) {
  return {"huber", [delta](const sym& t, const sym& p) { return losses::huber(t, p, delta); }};
}

namespace {

// Binary losses take logits; the binary metrics want probabilities.
class on_probabilities final : public metrics::metric {
 public:
  explicit on_probabilities(std::unique_ptr<metrics::metric> inner) : metric(inner->name()), inner_(std::move(inner)) {}
  expected<void> update(const tensor& targets, const tensor& logits) override {
    AF_TRY_ASSIGN(auto p, af::sigmoid(logits));
    return inner_->update(targets, p);
  }
  double result() const override { return inner_->result(); }
  void reset() override { inner_->reset(); }

 private:
  std::unique_ptr<metrics::metric> inner_;
};

const loss_spec& loss_of(const compile_options& o, std::size_t output) {
  return o.loss.size() == 1 ? o.loss.front() : o.loss.at(output);
}

std::string type_text(const tensor& t) { return std::string{to_string(t.type())} + to_string(t.shape()); }

std::string spec_with_batch(const value_spec& s, int64_t batch) {
  shape dims{batch};
  for (auto d : s.dims) dims.push_back(d);
  return std::string{to_string(s.type)} + to_string(dims);
}

/// Inputs against the model's specs, one batch size throughout.
expected<int64_t> check_inputs(const model::impl& m, const std::vector<tensor>& x) {
  if (x.size() != m.inputs.size())
    return make_error(errc::invalid_argument, "model '" + m.name + "' takes " + std::to_string(m.inputs.size()) + " inputs, got " +
                                                  std::to_string(x.size()));
  const int64_t batch = x.empty() || x[0].ndim() == 0 ? 0 : x[0].dim(0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const value_spec& want = m.inputs[i].spec();
    bool fits = x[i].type() == want.type && x[i].ndim() == static_cast<int>(want.dims.size()) + 1 && x[i].dim(0) == batch;
    for (std::size_t d = 0; fits && d < want.dims.size(); ++d) fits = x[i].dim(static_cast<int>(d) + 1) == want.dims[d];
    if (!fits)
      return make_error(errc::shape_mismatch, "input '" + m.inputs[i].node->input_name + "' must be " +
                                                  spec_with_batch(want, batch) + ", got " + type_text(x[i]));
  }
  if (batch <= 0) return make_error(errc::invalid_argument, "model '" + m.name + "': an empty batch");
  return batch;
}

/// Targets against the outputs and their losses: class ids in range, or the output's shape.
expected<void> check_targets(const model::impl& m, const std::vector<tensor>& y, int64_t batch) {
  if (y.size() != m.outputs.size())
    return make_error(errc::invalid_argument, "model '" + m.name + "' has " + std::to_string(m.outputs.size()) + " outputs, got " +
                                                  std::to_string(y.size()) + " targets");
  for (std::size_t i = 0; i < y.size(); ++i) {
    const value_spec& out = m.outputs[i].spec();
    const std::string what = m.outputs.size() == 1 ? std::string{"target"} : "target " + std::to_string(i);
    if (loss_of(*m.compiled, i).sparse_labels) {
      if (!is_integral(y[i].type()) || y[i].ndim() != 1 || y[i].dim(0) != batch)
        return make_error(errc::shape_mismatch, what + " must be integer class ids [" + std::to_string(batch) + "], got " + type_text(y[i]));
      const int64_t classes = out.dims.empty() ? 1 : out.dims.back();
      const auto ids = y[i].to_vector<int64_t>();
      for (std::size_t r = 0; r < ids.size(); ++r)
        if (ids[r] < 0 || ids[r] >= classes)
          return make_error(errc::out_of_range, what + " row " + std::to_string(r) + ": class id " + std::to_string(ids[r]) +
                                                    " is outside [0, " + std::to_string(classes) + ")");
      continue;
    }
    bool fits = y[i].ndim() == static_cast<int>(out.dims.size()) + 1 && y[i].dim(0) == batch;
    for (std::size_t d = 0; fits && d < out.dims.size(); ++d) fits = y[i].dim(static_cast<int>(d) + 1) == out.dims[d];
    if (!fits) return make_error(errc::shape_mismatch, what + " must be " + spec_with_batch(out, batch) + ", got " + type_text(y[i]));
  }
  return {};
}

/// Targets in the dtype the loss computes in (float targets of an integer dataset field, say).
std::vector<tensor> loss_ready(const model::impl& m, const std::vector<tensor>& y) {
  std::vector<tensor> out = y;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (!loss_of(*m.compiled, i).sparse_labels && y[i].type() != dtype::f32) {
      if (auto cast_value = af::cast(y[i], dtype::f32)) out[i] = std::move(*cast_value);
    }
  return out;
}

/// The weighted total and the per-output losses inside a trace.
std::pair<sym, std::vector<sym>> total_loss(const model::impl& m, const std::vector<sym>& targets, const std::vector<sym>& predictions) {
  std::vector<sym> each;
  std::optional<sym> total;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    each.push_back(loss_of(*m.compiled, i).fn(targets[i], predictions[i]));
    const double w = m.compiled->loss_weights.empty() ? 1.0 : m.compiled->loss_weights[i];
    sym term = w == 1.0 ? each.back() : each.back() * w;
    total = total ? *total + term : term;
  }
  return {*total, each};
}

/// The leading step arguments of a batch the model can take: inputs, then targets as the losses
/// compute them. Errors name what does not fit; nothing has run yet.
expected<std::vector<tensor>> checked_batch(const model::impl& m, const std::vector<tensor>& inputs,
                                            const std::vector<tensor>& targets, const char* doing) {
  if (!m.compiled) {
    std::string what = "model '" + m.name + "': compile it before ";
    what += doing;
    return make_error(errc::invalid_argument, what);
  }
  AF_TRY_ASSIGN(auto batch, check_inputs(m, inputs));
  AF_TRY(check_targets(m, targets, batch));
  std::vector<tensor> args = inputs;
  for (auto& y : loss_ready(m, targets)) args.push_back(std::move(y));
  return args;
}

// -- the names of the steps' arguments and results ---------------------------------------------------
// A saved or exported step shows what each position holds ("seed", "dense_1/kernel"), not "arg7".

std::string output_name(const model::impl& m, std::size_t i) {
  const auto& out = m.outputs[i];
  if (!out.node->applied) return out.node->input_name;
  std::string name = m.local_names.at(out.node->applied.get());
  if (out.index) name.append(":").append(std::to_string(out.index));  // append: GCC 12 -Wrestrict misfires on "x" + s
  return name;
}

std::vector<std::string> prefixed(const std::string& prefix, std::vector<std::string> names) {
  for (auto& n : names) n = prefix + n;
  return names;
}

struct step_names {
  std::vector<std::string> features, targets, outputs, losses, weights, slots;
};

step_names names_of(const model::impl& m) {
  step_names n;
  for (const auto& in : m.inputs) n.features.push_back(in.node->input_name);
  for (std::size_t i = 0; i < m.outputs.size(); ++i) n.outputs.push_back(output_name(m, i));
  n.targets = prefixed("target/", n.outputs);
  n.losses = prefixed("loss/", n.outputs);
  for (const auto& w : m.weights) n.weights.push_back(w.name);
  for (std::size_t s = 0; s < m.slots.size(); ++s) n.slots.push_back("optimizer_slot_" + std::to_string(s));
  return n;
}

template <class... Lists>
std::vector<std::string> joined(const Lists&... lists) {
  std::vector<std::string> out;
  (out.insert(out.end(), lists.begin(), lists.end()), ...);
  return out;
}

expected<batch_result> unpack(const model::impl& m, std::vector<tensor>& out) {
  batch_result r;
  const std::size_t outputs = m.outputs.size();
  r.loss = out[0].item<double>();
  for (std::size_t i = 0; i < outputs; ++i) r.output_loss.push_back(out[1 + i].item<double>());
  for (std::size_t i = 0; i < outputs; ++i) r.predictions.push_back(out[1 + outputs + i]);
  if (m.compiled->check_numerics && !std::isfinite(r.loss))
    return make_error(errc::invalid_argument, std::string{"the loss is "} + (std::isnan(r.loss) ? "NaN" : "infinite") +
                                                  " (weights left as they were before this batch)");
  return r;
}

}  // namespace

expected<void> model::compile(compile_options options) {
  auto& m = *impl_;
  if (options.loss.empty()) return make_error(errc::invalid_argument, "compile '" + m.name + "': no loss given");
  if (options.loss.size() != 1 && options.loss.size() != m.outputs.size())
    return make_error(errc::invalid_argument, "compile '" + m.name + "': " + std::to_string(options.loss.size()) + " losses for " +
                                                  std::to_string(m.outputs.size()) + " outputs");
  if (!options.loss_weights.empty() && options.loss_weights.size() != m.outputs.size())
    return make_error(errc::invalid_argument, "compile '" + m.name + "': " + std::to_string(options.loss_weights.size()) +
                                                  " loss weights for " + std::to_string(m.outputs.size()) + " outputs");
  m.compiled = std::move(options);
  for (std::size_t i = 0; i < m.outputs.size(); ++i) {
    auto metrics = make_metrics(i);
    if (!metrics) {
      m.compiled.reset();
      return metrics.error_value();
    }
  }
  m.trainable.clear();
  m.non_trainable.clear();
  std::vector<tensor> trainable_values;
  for (std::size_t i = 0; i < m.weights.size(); ++i)
    if (m.weights[i].trainable) {
      m.trainable.push_back(static_cast<int>(i));
      trainable_values.push_back(m.values[i]);
    } else {
      m.non_trainable.push_back(static_cast<int>(i));
    }
  m.gradient_step.reset();
  m.apply_step.reset();
  AF_TRY_ASSIGN(m.slots, m.compiled->optimizer.initial_slots(trainable_values));
  m.updates = 0;
  m.learning_rate_override.reset();

  // Train inputs: x..., y..., seed, learning rate, count, weights..., slots...
  // Train outputs: loss, per-output losses, predictions..., weights..., slots...
  const std::size_t nx = m.inputs.size(), ny = m.outputs.size(), nw = m.weights.size();
  const step_names n = names_of(m);
  function_options train_options, test_options;
  train_options.input_names = joined(n.features, n.targets, std::vector<std::string>{"seed", "learning_rate", "step"},
                                     n.weights, n.slots);
  train_options.output_names = joined(std::vector<std::string>{"loss"}, n.losses, prefixed("prediction/", n.outputs),
                                      prefixed("updated/", n.weights), prefixed("updated/", n.slots));
  test_options.input_names = joined(n.features, n.targets, n.weights);
  test_options.output_names = joined(std::vector<std::string>{"loss"}, n.losses, prefixed("prediction/", n.outputs));
  m.train_step = std::make_unique<function>([&m, nx, ny, nw](const std::vector<sym>& in) {
    const std::vector<sym> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nx));
    const std::vector<sym> y(in.begin() + static_cast<std::ptrdiff_t>(nx), in.begin() + static_cast<std::ptrdiff_t>(nx + ny));
    const sym& seed = in[nx + ny];
    const sym& lr = in[nx + ny + 1];
    const sym& count = in[nx + ny + 2];
    const auto w_begin = in.begin() + static_cast<std::ptrdiff_t>(nx + ny + 3);
    const std::vector<sym> w(w_begin, w_begin + static_cast<std::ptrdiff_t>(nw));
    const std::vector<sym> slots(w_begin + static_cast<std::ptrdiff_t>(nw), in.end());
    std::vector<std::pair<int, sym>> assigned;
    auto predictions = m.forward(x, w, &seed, true, &assigned);
    auto [loss, each] = total_loss(m, y, predictions);
    std::vector<sym> trainable;
    for (int i : m.trainable) trainable.push_back(w[static_cast<std::size_t>(i)]);
    auto update = m.compiled->optimizer.apply(trainable, gradients(loss, trainable), slots, lr, count);
    std::vector<sym> next_w = w;
    for (std::size_t k = 0; k < m.trainable.size(); ++k) next_w[static_cast<std::size_t>(m.trainable[k])] = update.variables[k];
    for (const auto& [i, value] : assigned) next_w[static_cast<std::size_t>(i)] = value;
    std::vector<sym> out{loss};
    out.insert(out.end(), each.begin(), each.end());
    out.insert(out.end(), predictions.begin(), predictions.end());
    out.insert(out.end(), next_w.begin(), next_w.end());
    out.insert(out.end(), update.slots.begin(), update.slots.end());
    return out;
  }, std::move(train_options));
  // Test inputs: x..., y..., weights...; outputs: loss, per-output losses, predictions...
  m.test_step = std::make_unique<function>([&m, nx, ny](const std::vector<sym>& in) {
    const std::vector<sym> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nx));
    const std::vector<sym> y(in.begin() + static_cast<std::ptrdiff_t>(nx), in.begin() + static_cast<std::ptrdiff_t>(nx + ny));
    const std::vector<sym> w(in.begin() + static_cast<std::ptrdiff_t>(nx + ny), in.end());
    auto predictions = m.forward(x, w, nullptr, false, nullptr);
    auto [loss, each] = total_loss(m, y, predictions);
    std::vector<sym> out{loss};
    out.insert(out.end(), each.begin(), each.end());
    out.insert(out.end(), predictions.begin(), predictions.end());
    return out;
  }, std::move(test_options));
  return {};
}

bool model::compiled() const { return impl_->compiled.has_value(); }

const compile_options& model::compiled_with() const { return impl_->compiled.value(); }

int64_t model::train_traces() const { return impl_->train_step ? impl_->train_step->trace_count() : 0; }

expected<batch_result> model::train_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets, uint64_t seed) {
  auto& m = *impl_;
  AF_TRY_ASSIGN(auto args, checked_batch(m, inputs, targets, "training"));
  args.push_back(tensor::scalar(static_cast<int64_t>(seed)));
  args.push_back(tensor::scalar(static_cast<float>(learning_rate())));
  args.push_back(tensor::scalar(static_cast<float>(m.updates)));
  args.insert(args.end(), m.values.begin(), m.values.end());
  args.insert(args.end(), m.slots.begin(), m.slots.end());
  AF_TRY_ASSIGN(auto out, (*m.train_step)(args));
  AF_TRY_ASSIGN(auto result, unpack(m, out));
  const std::size_t first_w = 1 + 2 * m.outputs.size();
  for (std::size_t i = 0; i < m.values.size(); ++i) m.values[i] = std::move(out[first_w + i]);
  for (std::size_t s = 0; s < m.slots.size(); ++s) m.slots[s] = std::move(out[first_w + m.values.size() + s]);
  ++m.updates;
  return result;
}

const std::vector<int>& model::trainable_indices() const { return impl_->trainable; }

const std::vector<int>& model::non_trainable_indices() const { return impl_->non_trainable; }

namespace {

// Gradient inputs: x..., y..., seed, share, weights...; outputs: loss, per-output losses,
// predictions..., gradients (per trainable weight, times the share), non-trainable next values...
std::unique_ptr<function> make_gradient_step(model::impl& m) {
  const std::size_t nx = m.inputs.size(), ny = m.outputs.size();
  const step_names n = names_of(m);
  std::vector<std::string> trainable_names, frozen_names;
  for (int i : m.trainable) trainable_names.push_back(n.weights[static_cast<std::size_t>(i)]);
  for (int i : m.non_trainable) frozen_names.push_back(n.weights[static_cast<std::size_t>(i)]);
  function_options options;
  options.input_names = joined(n.features, n.targets, std::vector<std::string>{"seed", "share"}, n.weights);
  options.output_names = joined(std::vector<std::string>{"loss"}, n.losses, prefixed("prediction/", n.outputs),
                                prefixed("gradient/", trainable_names), prefixed("updated/", frozen_names));
  return std::make_unique<function>([&m, nx, ny](const std::vector<sym>& in) {
    const std::vector<sym> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nx));
    const std::vector<sym> y(in.begin() + static_cast<std::ptrdiff_t>(nx), in.begin() + static_cast<std::ptrdiff_t>(nx + ny));
    const sym& seed = in[nx + ny];
    const sym& share = in[nx + ny + 1];
    const std::vector<sym> w(in.begin() + static_cast<std::ptrdiff_t>(nx + ny + 2), in.end());
    std::vector<std::pair<int, sym>> assigned;
    auto predictions = m.forward(x, w, &seed, true, &assigned);
    auto [loss, each] = total_loss(m, y, predictions);
    std::vector<sym> trainable;
    for (int i : m.trainable) trainable.push_back(w[static_cast<std::size_t>(i)]);
    std::vector<sym> out{loss};
    out.insert(out.end(), each.begin(), each.end());
    out.insert(out.end(), predictions.begin(), predictions.end());
    const sym scaled = loss.dtype_of() == share.dtype_of() ? loss * share : loss * cast(share, loss.dtype_of());
    for (auto& g : gradients(scaled, trainable)) out.push_back(g);
    std::vector<sym> next_w = w;
    for (const auto& [i, value] : assigned) next_w[static_cast<std::size_t>(i)] = value;
    for (int i : m.non_trainable) out.push_back(next_w[static_cast<std::size_t>(i)]);
    return out;
  }, std::move(options));
}

// Apply inputs: trainable weights..., gradients..., slots..., learning rate, count; outputs: the
// updated trainable weights..., slots...
std::unique_ptr<function> make_apply_step(model::impl& m) {
  const std::size_t nt = m.trainable.size();
  const step_names n = names_of(m);
  std::vector<std::string> trainable_names;
  for (int i : m.trainable) trainable_names.push_back(n.weights[static_cast<std::size_t>(i)]);
  function_options options;
  options.input_names = joined(trainable_names, prefixed("gradient/", trainable_names), n.slots,
                               std::vector<std::string>{"learning_rate", "step"});
  options.output_names = joined(prefixed("updated/", trainable_names), prefixed("updated/", n.slots));
  return std::make_unique<function>([&m, nt](const std::vector<sym>& in) {
    const auto at = [&](std::size_t k) { return in.begin() + static_cast<std::ptrdiff_t>(k); };
    const std::vector<sym> w(at(0), at(nt));
    const std::vector<sym> g(at(nt), at(2 * nt));
    const std::vector<sym> slots(at(2 * nt), at(in.size() - 2));
    auto update = m.compiled->optimizer.apply(w, g, slots, in[in.size() - 2], in[in.size() - 1]);
    std::vector<sym> out = update.variables;
    out.insert(out.end(), update.slots.begin(), update.slots.end());
    return out;
  }, std::move(options));
}

}  // namespace

expected<replica_gradients> model::compute_gradients(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                                     uint64_t seed, double share,
                                                     const std::function<void(std::size_t, const tensor&)>& on_gradient) {
  auto& m = *impl_;
  AF_TRY_ASSIGN(auto args, checked_batch(m, inputs, targets, "training"));
  if (!m.gradient_step) m.gradient_step = make_gradient_step(m);
  args.push_back(tensor::scalar(static_cast<int64_t>(seed)));
  args.push_back(tensor::scalar(static_cast<float>(share)));
  args.insert(args.end(), m.values.begin(), m.values.end());
  const std::size_t first_gradient = 1 + 2 * m.outputs.size(), gradients = m.trainable.size();
  graph::output_ready ready;
  if (on_gradient)
    ready = [&](std::size_t output, const tensor& value) {
      if (output >= first_gradient && output < first_gradient + gradients) on_gradient(output - first_gradient, value);
    };
  AF_TRY_ASSIGN(auto out, m.gradient_step->call(args, ready));
  replica_gradients r;
  AF_TRY_ASSIGN(r.batch, unpack(m, out));
  const std::size_t first = 1 + 2 * m.outputs.size();
  for (std::size_t k = 0; k < m.trainable.size(); ++k) r.gradients.push_back(std::move(out[first + k]));
  for (std::size_t k = 0; k < m.non_trainable.size(); ++k) r.non_trainable.push_back(std::move(out[first + m.trainable.size() + k]));
  return r;
}

expected<void> model::apply_gradients(std::vector<tensor> gradients, std::vector<tensor> non_trainable, double learning_rate) {
  auto& m = *impl_;
  if (!m.compiled) return make_error(errc::invalid_argument, "model '" + m.name + "': compile it before applying gradients");
  if (gradients.size() != m.trainable.size() || non_trainable.size() != m.non_trainable.size())
    return make_error(errc::invalid_argument, "model '" + m.name + "': " + std::to_string(gradients.size()) + " gradients and " +
                                                  std::to_string(non_trainable.size()) + " non-trainable values for " +
                                                  std::to_string(m.trainable.size()) + " trainable and " +
                                                  std::to_string(m.non_trainable.size()) + " non-trainable weights");
  const auto check = [&](const tensor& t, int index, const char* what) -> expected<void> {
    const tensor& w = m.values[static_cast<std::size_t>(index)];
    if (t.type() == w.type() && t.shape() == w.shape()) return {};
    return make_error(errc::shape_mismatch, std::string{what} + " of '" + m.weights[static_cast<std::size_t>(index)].name + "' must be " +
                                                type_text(w) + ", got " + type_text(t));
  };
  for (std::size_t k = 0; k < gradients.size(); ++k) AF_TRY(check(gradients[k], m.trainable[k], "the gradient"));
  for (std::size_t k = 0; k < non_trainable.size(); ++k) AF_TRY(check(non_trainable[k], m.non_trainable[k], "the new value"));
  if (!m.apply_step) m.apply_step = make_apply_step(m);
  std::vector<tensor> args;
  for (int i : m.trainable) args.push_back(m.values[static_cast<std::size_t>(i)]);
  for (auto& g : gradients) args.push_back(std::move(g));
  args.insert(args.end(), m.slots.begin(), m.slots.end());
  args.push_back(tensor::scalar(static_cast<float>(learning_rate)));
  args.push_back(tensor::scalar(static_cast<float>(m.updates)));
  AF_TRY_ASSIGN(auto out, (*m.apply_step)(args));
  for (std::size_t k = 0; k < m.trainable.size(); ++k) m.values[static_cast<std::size_t>(m.trainable[k])] = std::move(out[k]);
  for (std::size_t s = 0; s < m.slots.size(); ++s) m.slots[s] = std::move(out[m.trainable.size() + s]);
  for (std::size_t k = 0; k < m.non_trainable.size(); ++k)
    m.values[static_cast<std::size_t>(m.non_trainable[k])] = std::move(non_trainable[k]);
  ++m.updates;
  return {};
}

expected<batch_result> model::test_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets) {
  auto& m = *impl_;
  AF_TRY_ASSIGN(auto args, checked_batch(m, inputs, targets, "evaluating"));
  args.insert(args.end(), m.values.begin(), m.values.end());
  AF_TRY_ASSIGN(auto out, (*m.test_step)(args));
  return unpack(m, out);
}

expected<std::vector<tensor>> model::predict_on_batch(const std::vector<tensor>& inputs) {
  auto& m = *impl_;
  AF_TRY(check_inputs(m, inputs));
  if (!m.predict_step) {
    const std::size_t nx = m.inputs.size();
    const step_names n = names_of(m);
    function_options options;
    options.input_names = joined(n.features, n.weights);
    options.output_names = n.outputs;
    m.predict_step = std::make_unique<function>([&m, nx](const std::vector<sym>& in) {
      const std::vector<sym> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nx));
      const std::vector<sym> w(in.begin() + static_cast<std::ptrdiff_t>(nx), in.end());
      return m.forward(x, w, nullptr, false, nullptr);
    }, std::move(options));
  }
  std::vector<tensor> args = inputs;
  args.insert(args.end(), m.values.begin(), m.values.end());
  return (*m.predict_step)(args);
}

expected<graph::graph> model::inference_graph() const {
  const auto& m = *impl_;
  const std::size_t nx = m.inputs.size();
  const step_names n = names_of(m);
  std::vector<graph::value_type> signature;
  for (const auto& spec : input_specs()) {
    graph::value_type batched = spec;
    batched.dims.insert(batched.dims.begin(), -1);
    signature.push_back(std::move(batched));
  }
  for (const auto& v : m.values) signature.push_back({v.type(), v.shape()});
  return trace_graph([&m, nx](const std::vector<sym>& in) {
    const std::vector<sym> x(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nx));
    const std::vector<sym> w(in.begin() + static_cast<std::ptrdiff_t>(nx), in.end());
    return m.forward(x, w, nullptr, false, nullptr);
  }, signature, joined(n.features, n.weights), n.outputs);
}

expected<std::vector<std::unique_ptr<metrics::metric>>> model::make_metrics(std::size_t output) const {
  const auto& m = *impl_;
  std::vector<std::unique_ptr<metrics::metric>> out;
  if (!m.compiled) return out;
  const bool binary = loss_of(*m.compiled, output).name.starts_with("binary");
  for (const auto& name : m.compiled->metrics) {
    if (name == "accuracy" && !binary) out.push_back(metrics::sparse_categorical_accuracy());
    else if (name == "accuracy" || name == "binary_accuracy")
      out.push_back(std::make_unique<on_probabilities>(metrics::binary_accuracy(0.5, name)));
    else if (name == "top_k_accuracy") out.push_back(metrics::sparse_top_k_accuracy(5));
    else if (name == "auc") out.push_back(std::make_unique<on_probabilities>(metrics::auc()));
    else
      return make_error(errc::invalid_argument, "compile '" + m.name + "': unknown metric '" + name +
                                                    "' (known: accuracy, binary_accuracy, top_k_accuracy, auc)");
  }
  return out;
}

}  // namespace af::nn
