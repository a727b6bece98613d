#include "ops/runtime/tape.hpp"

#include "ops/graph/autodiff.hpp"
#include "ops/runtime/interpreter.hpp"

namespace af {

gradient_tape::gradient_tape() : builder_(std::make_unique<graph::graph_builder>()) {
  builder_->observe([this](const graph::graph_builder& b, graph::node_id id) -> expected<void> {
    const graph::node& n = b.at(id);
    if (n.kind == graph::node_kind::constant) {
      values_[id] = b.constant_value(id);
      return {};
    }
    std::vector<tensor> inputs;
    for (auto in : n.inputs) inputs.push_back(values_.at(in));
    AF_TRY_ASSIGN(auto made, default_cpu_backend().run_node(n, nullptr, inputs));
    values_[id] = std::move(made);
    return {};
  });
}

sym gradient_tape::watch(const tensor& value, std::string name) {
  const auto id = builder_->parameter({value.type(), value.shape()}, std::move(name));
  values_[id] = value;
  return sym{builder_.get(), id};
}

sym gradient_tape::constant(const tensor& value) { return sym{builder_.get(), builder_->constant(value)}; }

const tensor& gradient_tape::value(const sym& s) const { return values_.at(s.id()); }

expected<std::vector<tensor>> gradient_tape::gradient(const sym& y, const std::vector<sym>& xs) {
  std::vector<graph::node_id> ids;
  for (const auto& x : xs) {
    if (x.builder() != builder_.get() || y.builder() != builder_.get())
      return make_error(errc::invalid_argument, "gradient: values written on another tape or trace");
    ids.push_back(x.id());
  }
  AF_TRY_ASSIGN(auto grads, graph::add_gradients(*builder_, y.id(), ids));
  std::vector<tensor> out;
  for (auto id : grads) out.push_back(values_.at(id));
  return out;
}

graph::graph gradient_tape::recorded(const std::vector<sym>& outputs) const {
  std::vector<graph::node_id> ids;
  for (const auto& o : outputs) ids.push_back(o.id());
  graph::graph_builder snapshot{*builder_};
  snapshot.observe(nullptr);
  return std::move(snapshot).finish(std::move(ids));
}

}  // namespace af
