#include "ops/passes/placement.hpp"

#include "ops/assert.hpp"

namespace af::graph {

graph insert_copies(const graph& g, const copy_rule& needs_copy) {
  graph_builder b;
  std::vector<node_id> mapped(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const node& n = g.nodes()[i];
    std::vector<node_id> inputs;
    for (node_id in : n.inputs) {
      const node_id made = mapped[static_cast<std::size_t>(in)];
      const std::string& from = g.at(in).device;
      if (g.at(in).kind == node_kind::constant || from == n.device || !needs_copy(from, n.device)) {
        inputs.push_back(made);
        continue;
      }
      // The builder merges equal nodes: every reader on this device shares one copy of the value.
      b.place_on(n.device);
      auto copied = b.add("copy", {made}, {}, "copy of node " + std::to_string(in) + " to " + (n.device.empty() ? "the default device" : n.device));
      AF_ASSERT(copied.has_value());  // copy takes any value
      inputs.push_back(*copied);
    }
    auto kept = b.copy(g, static_cast<node_id>(i), std::move(inputs));
    AF_ASSERT(kept.has_value());  // valid in `g`, so valid here
    mapped[i] = *kept;
  }
  std::vector<node_id> outputs;
  for (node_id out : g.outputs()) outputs.push_back(mapped[static_cast<std::size_t>(out)]);
  return std::move(b).finish(std::move(outputs), g.output_names());
}

}  // namespace af::graph
