#include "ops/passes/fusion.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>

namespace af::graph {

namespace {

// Fusibility comes from each op's definition (its category and fused form), never from a list here.
bool fusible_node(const node& n) {
  const op_def* def = find_op(n.op);
  return def && fusible(*def, n.attrs, n.out.type);
}

// Union-find over groups of node ids.
struct groups {
  std::vector<int> parent;
  explicit groups(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) x = parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    return x;
  }
  void join(int a, int b) { parent[static_cast<std::size_t>(find(b))] = find(a); }
};

}  // namespace

graph fuse_elementwise(const graph& g) {
  const auto& nodes = g.nodes();
  const std::size_t n = nodes.size();
  std::vector<int> consumers(n, 0);
  for (const auto& x : nodes)
    for (auto in : x.inputs) ++consumers[static_cast<std::size_t>(in)];
  for (auto out : g.outputs()) consumers[static_cast<std::size_t>(out)] += 2;  // an output is never inside a group

  groups grouping(n);
  std::vector<bool> in_group(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (!fusible_node(nodes[i])) continue;
    in_group[i] = true;
    for (auto in : nodes[i].inputs) {
      const auto p = static_cast<std::size_t>(in);
      if (in_group[p] && consumers[p] == 1 && nodes[p].out.dims == nodes[i].out.dims &&
          nodes[p].device == nodes[i].device)
        grouping.join(static_cast<int>(i), static_cast<int>(p));
    }
  }
  // Members per group root, in node order; the last member is the group's output.
  std::map<int, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < n; ++i)
    if (in_group[i]) members[grouping.find(static_cast<int>(i))].push_back(i);

  graph_builder b;
  std::vector<node_id> mapped(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& x = nodes[i];
    const auto* group = in_group[i] ? &members[grouping.find(static_cast<int>(i))] : nullptr;
    if (group && group->size() > 1) {
      if (group->back() != i) continue;  // emitted with the group's output node
      auto program = std::make_shared<fused_program>();
      std::vector<node_id> inputs;
      std::map<std::size_t, int> value_of;  // original node -> program value
      auto value_for = [&](std::size_t original) {
        auto found = value_of.find(original);
        if (found != value_of.end()) return found->second;
        const int v = static_cast<int>(program->inputs.size());
        program->inputs.push_back(nodes[original].out);
        inputs.push_back(mapped[original]);
        value_of.emplace(original, v);
        return v;
      };
      // Inputs first (values 0..k-1), then the steps: collect external inputs in member order.
      std::vector<std::vector<std::size_t>> args_of;
      for (auto m : *group) {
        std::vector<std::size_t> args;
        for (auto in : nodes[m].inputs) args.push_back(static_cast<std::size_t>(in));
        for (auto a : args)
          if (std::find(group->begin(), group->end(), a) == group->end()) value_for(a);
        args_of.push_back(std::move(args));
      }
      const int first_step = static_cast<int>(program->inputs.size());
      for (std::size_t k = 0; k < group->size(); ++k) {
        const auto m = (*group)[k];
        fused_step step{nodes[m].op, {}, nodes[m].attrs, nodes[m].out};
        for (auto a : args_of[k]) step.args.push_back(value_for(a));
        program->steps.push_back(std::move(step));
        value_of[m] = first_step + static_cast<int>(k);
      }
      mapped[i] = b.add_fused(std::move(inputs), std::move(program), x.out, x.label, x.device);
      continue;
    }
    std::vector<node_id> inputs;
    for (auto in : x.inputs) inputs.push_back(mapped[static_cast<std::size_t>(in)]);
    auto copied = b.copy(g, static_cast<node_id>(i), std::move(inputs));
    AF_ASSERT(copied.has_value());  // the node was valid in `g`, so it is valid here
    mapped[i] = *copied;
  }
  std::vector<node_id> outputs;
  for (auto out : g.outputs()) outputs.push_back(mapped[static_cast<std::size_t>(out)]);
  return std::move(b).finish(std::move(outputs), g.output_names());
}

}  // namespace af::graph
