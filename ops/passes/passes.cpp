#include "ops/passes/passes.hpp"

#include <functional>

#include "ops/passes/fusion.hpp"

namespace af::graph {

namespace {

// Rebuilds `g` node by node in a fresh builder; `rewrite` may return a replacement for a node (an
// id in the new graph) given its already mapped inputs, or nullopt to copy it.
using rewrite_fn = std::function<std::optional<node_id>(graph_builder&, const graph&, node_id, const std::vector<node_id>&)>;

graph rebuild(const graph& g, const std::vector<bool>& keep, const rewrite_fn& rewrite) {
  graph_builder b;
  std::vector<node_id> mapped(g.size(), -1);
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!keep[i]) continue;
    const auto id = static_cast<node_id>(i);
    std::vector<node_id> inputs;
    for (auto in : g.at(id).inputs) inputs.push_back(mapped[static_cast<std::size_t>(in)]);
    b.place_on(g.at(id).device);  // a replacement runs where the node it replaces ran
    if (rewrite)
      if (auto replaced = rewrite(b, g, id, inputs)) {
        mapped[i] = *replaced;
        continue;
      }
    auto copied = b.copy(g, id, std::move(inputs));
    AF_ASSERT(copied.has_value());  // valid in `g`, so valid here
    mapped[i] = *copied;
  }
  std::vector<node_id> outputs;
  for (auto out : g.outputs()) outputs.push_back(mapped[static_cast<std::size_t>(out)]);
  return std::move(b).finish(std::move(outputs), g.output_names());
}

std::vector<bool> keep_all(const graph& g) { return std::vector<bool>(g.size(), true); }

// The single value of a constant whose elements are all equal; nullopt otherwise.
std::optional<double> uniform_constant(const graph& g, node_id id) {
  if (g.at(id).kind != node_kind::constant) return std::nullopt;
  const tensor& t = g.constant_value(id);
  if (t.numel() == 0 || t.numel() > 4096) return std::nullopt;
  const auto values = t.to_vector<double>();
  for (double v : values)
    if (v != values.front()) return std::nullopt;
  return values.front();
}

bool is_stateful(const std::string& op) {
  const op_def* def = find_op(op);
  return def && (def->stateful || def->category == op_category::source);
}

}  // namespace

graph fold_constants(const graph& g, int64_t max_elements) {
  return rebuild(g, keep_all(g), [max_elements](graph_builder& b, const graph& src, node_id id,
                                                const std::vector<node_id>& inputs) -> std::optional<node_id> {
    const node& n = src.at(id);
    if (n.inputs.empty() || is_stateful(n.op) || n.kind == node_kind::fused) return std::nullopt;
    for (auto in : inputs)  // as folded so far: chains of constant ops fold one after another
      if (b.at(in).kind != node_kind::constant) return std::nullopt;
    const auto& dims = n.out.dims;
    for (auto d : dims)
      if (d < 0) return std::nullopt;
    if (numel(dims) > max_elements) return std::nullopt;
    // The node's own CPU kernel on the constants (nodes carry complete attributes).
    const op_def* def = find_op(n.op);
    if (!def || !def->cpu_kernel) return std::nullopt;
    std::vector<tensor> args;
    for (auto in : inputs) args.push_back(b.constant_value(in));
    auto value = def->cpu_kernel(args, n.attrs);
    if (!value || value->size() != 1 || value->front().type() != n.out.type || value->front().shape() != n.out.dims)
      return std::nullopt;
    return b.constant(value->front());
  });
}

graph eliminate_common_subexpressions(const graph& g) {
  // The builder merges equal nodes as they are added, so copying is the whole pass.
  return rebuild(g, keep_all(g), nullptr);
}

graph eliminate_dead_code(const graph& g) {
  std::vector<bool> live(g.size(), false);
  for (auto out : g.outputs()) live[static_cast<std::size_t>(out)] = true;
  for (auto p : g.parameters()) live[static_cast<std::size_t>(p)] = true;
  for (std::size_t i = g.size(); i-- > 0;)
    if (live[i])
      for (auto in : g.nodes()[i].inputs) live[static_cast<std::size_t>(in)] = true;
  return rebuild(g, live, nullptr);
}

graph simplify_algebra(const graph& g) {
  return rebuild(g, keep_all(g), [](graph_builder& b, const graph& src, node_id id,
                                    const std::vector<node_id>& in) -> std::optional<node_id> {
    const node& n = src.at(id);
    auto same_type = [&](node_id candidate) { return b.type_of(candidate) == n.out; };
    auto is = [&](std::size_t k, double v) { return uniform_constant(src, src.at(id).inputs[k]) == std::optional<double>{v}; };
    if (n.op == "mul") {
      if (is(1, 1.0) && same_type(in[0])) return in[0];
      if (is(0, 1.0) && same_type(in[1])) return in[1];
    } else if (n.op == "div") {
      if (is(1, 1.0) && same_type(in[0])) return in[0];
    } else if (n.op == "add") {
      if (is(1, 0.0) && same_type(in[0])) return in[0];
      if (is(0, 0.0) && same_type(in[1])) return in[1];
    } else if (n.op == "sub") {
      if (is(1, 0.0) && same_type(in[0])) return in[0];
    } else if (n.op == "neg") {
      const node& inner = b.at(in[0]);
      if (inner.op == "neg") return inner.inputs[0];
    } else if (n.op == "transpose") {
      const node inner = b.at(in[0]);
      if (inner.op != "transpose") return std::nullopt;
      const auto p = inner.attrs.get_ints("perm"), q = n.attrs.get_ints("perm");
      if (!p || !q || p->size() != q->size()) return std::nullopt;
      std::vector<int64_t> composed(q->size());
      bool identity = true;
      for (std::size_t i = 0; i < q->size(); ++i) {
        composed[i] = (*p)[static_cast<std::size_t>((*q)[i])];
        identity = identity && composed[i] == static_cast<int64_t>(i);
      }
      if (identity) return inner.inputs[0];
      auto once = b.add("transpose", {inner.inputs[0]}, {{"perm", composed}}, n.label);
      return once ? std::optional<node_id>{*once} : std::nullopt;
    } else if (n.op == "reshape") {
      const node inner = b.at(in[0]);
      if (inner.op != "reshape") return std::nullopt;
      auto once = b.add("reshape", {inner.inputs[0]}, n.attrs, n.label);
      return once && same_type(*once) ? std::optional<node_id>{*once} : std::nullopt;
    }
    return std::nullopt;
  });
}

expected<graph> optimize(const graph& g) {
  const std::pair<const char*, graph (*)(const graph&)> pipeline[] = {
      {"constant folding", [](const graph& x) { return fold_constants(x); }},
      {"algebraic simplification", &simplify_algebra},
      {"common-subexpression elimination", &eliminate_common_subexpressions},
      {"dead-code elimination", &eliminate_dead_code},
      {"elementwise fusion", &fuse_elementwise},
  };
  graph current = g;
  for (const auto& [name, pass] : pipeline) {
    current = pass(current);
    auto checked = current.verify();
    if (!checked) return with_context(checked.error_value(), std::string{"after "} + name);
  }
  return current;
}

}  // namespace af::graph
