#include "ops/runtime/interpreter.hpp"

#include <algorithm>
#include <atomic>
#include <string>

#include "ops/runtime/executor.hpp"

namespace af::detail {
std::atomic<uint64_t> interpreted_outside_device_actor{0};
}  // namespace af::detail

namespace af::graph {

namespace {

std::string where(std::size_t i, const node& n) {
  return "node " + std::to_string(i) + " (" + n.op + (n.label.empty() ? "" : ", " + n.label) + ")";
}

}  // namespace

expected<void> check_parameters(const graph& g, const std::vector<tensor>& values) {
  const auto& params = g.parameters();
  if (values.size() != params.size())
    return make_error(errc::invalid_argument, "the graph takes " + std::to_string(params.size()) + " arguments, got " +
                                                  std::to_string(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto& want = g.at(params[i]).out;
    const auto& got = values[i];
    bool fits = got.defined() && got.type() == want.type && got.shape().size() == want.dims.size();
    for (std::size_t d = 0; fits && d < want.dims.size(); ++d)
      fits = want.dims[d] < 0 || want.dims[d] == got.shape()[d];
    if (!fits)
      return make_error(errc::invalid_argument,
                        "argument " + std::to_string(i) + (g.at(params[i]).label.empty() ? "" : " '" + g.at(params[i]).label + "'") +
                            ": expected " + to_string(want) + ", got " +
                            (got.defined() ? std::string{to_string(got.type())} + to_string(got.shape()) : "an undefined tensor"));
  }
  return {};
}

expected<std::vector<tensor>> interpret(const graph& g, const std::vector<tensor>& parameters, backend& device) {
  return interpret(g, parameters, device, {});
}

expected<std::vector<tensor>> interpret(const graph& g, const std::vector<tensor>& parameters, backend& device,
                                        const output_ready& on_output) {
  if (!current_device_actor()) detail::interpreted_outside_device_actor.fetch_add(1, std::memory_order_relaxed);
  AF_TRY(check_parameters(g, parameters));
  const auto& nodes = g.nodes();
  std::vector<std::vector<std::size_t>> outputs_of(on_output ? nodes.size() : 0);
  if (on_output)
    for (std::size_t k = 0; k < g.outputs().size(); ++k) outputs_of[static_cast<std::size_t>(g.outputs()[k])].push_back(k);
  std::vector<std::size_t> last_use(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (auto in : nodes[i].inputs) last_use[static_cast<std::size_t>(in)] = i;
  for (auto out : g.outputs()) last_use[static_cast<std::size_t>(out)] = nodes.size();

  std::vector<tensor> values(nodes.size());
  std::size_t next_parameter = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const node& n = nodes[i];
    std::vector<tensor> in;
    in.reserve(n.inputs.size());
    for (auto id : n.inputs) in.push_back(values[static_cast<std::size_t>(id)]);
    expected<tensor> made = tensor{};
    switch (n.kind) {
      case node_kind::parameter: made = parameters[next_parameter++]; break;
      case node_kind::constant: made = g.constant_value(static_cast<node_id>(i)); break;
      case node_kind::fused: {
        // An input read for the last time here, held by nobody else, takes the output in place.
        const tensor* reuse = nullptr;
        for (std::size_t k = 0; k < n.inputs.size(); ++k) {
          const auto id = static_cast<std::size_t>(n.inputs[k]);
          if (last_use[id] != i || std::count(n.inputs.begin(), n.inputs.end(), n.inputs[k]) > 1) continue;
          values[id] = tensor{};
          if (!reuse && in[k].is_unique()) reuse = &in[k];
        }
        made = device.run_node(n, &g.program(static_cast<node_id>(i)), in, reuse);
        break;
      }
      case node_kind::op: made = device.run_node(n, nullptr, in); break;
    }
    if (!made) return with_context(made.error_value(), where(i, n));
    values[i] = std::move(*made);
    if (on_output)
      for (std::size_t k : outputs_of[i]) on_output(k, values[i]);
    for (auto id : n.inputs)
      if (last_use[static_cast<std::size_t>(id)] == i) values[static_cast<std::size_t>(id)] = tensor{};
  }
  std::vector<tensor> out;
  for (auto id : g.outputs()) out.push_back(values[static_cast<std::size_t>(id)]);
  return out;
}

}  // namespace af::graph
