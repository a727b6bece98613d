#include "ops/graph/autodiff.hpp"

#include <algorithm>
#include <map>

#include "ops/graph/gradient_emitter.hpp"

namespace af::graph {

namespace {

// The gradients of one node's inputs given g, the gradient of its output, from its definition.
input_gradients gradients_of_inputs(gradient_emitter& e, const node& n, node_id self, node_id g) {
  const op_def* def = find_op(n.op);
  const std::string where = n.label.empty() ? "" : " (made at " + n.label + ")";
  if (!def) gradient_emitter::fail(errc::unsupported, "no definition of op '" + n.op + "'" + where);
  switch (def->gradient.what) {
    case gradient_spec::kind::rule: return def->gradient.rule(e, n, self, g);
    case gradient_spec::kind::none_flows: return input_gradients(n.inputs.size());
    case gradient_spec::kind::unsupported:
      gradient_emitter::fail(errc::unsupported, "op '" + n.op + "' is not differentiable: " + def->gradient.why + where);
    case gradient_spec::kind::missing: break;
  }
  gradient_emitter::fail(errc::unsupported, "no gradient rule for op '" + n.op + "'" + where);
}

}  // namespace

expected<std::vector<node_id>> add_gradients(graph_builder& b, node_id y, const std::vector<node_id>& xs) {
  gradient_emitter e{b};
  // Each rule is placed on its op's device; the caller's placement holds again afterwards.
  struct restore_placement {
    graph_builder& b;
    std::string device;
    ~restore_placement() { b.place_on(std::move(device)); }
  } restore{b, b.placement()};
  try {
    if (!is_floating(b.type_of(y).type))
      return make_error(errc::dtype_mismatch, "gradients need a floating value, got " + to_string(b.type_of(y)));
    // Only nodes between the xs and y matter: y depends on them, and they depend on some x.
    const auto last = static_cast<std::size_t>(y);
    std::vector<bool> needed(last + 1, false), from_x(last + 1, false);
    for (auto x : xs)
      if (static_cast<std::size_t>(x) <= last) from_x[static_cast<std::size_t>(x)] = true;
    for (std::size_t i = 0; i <= last; ++i)
      for (auto in : b.at(static_cast<node_id>(i)).inputs)
        if (from_x[static_cast<std::size_t>(in)]) from_x[i] = true;
    needed[last] = true;
    for (std::size_t i = last + 1; i-- > 0;)
      if (needed[i])
        for (auto in : b.at(static_cast<node_id>(i)).inputs) needed[static_cast<std::size_t>(in)] = true;

    std::map<node_id, node_id> grad;
    const value_type y_type = b.type_of(y);
    grad[y] = e.broadcast(e.scalar(1.0, y_type.type), y_type.dims);
    for (std::size_t i = last + 1; i-- > 0;) {
      const auto id = static_cast<node_id>(i);
      auto found = grad.find(id);
      if (found == grad.end() || !from_x[i] || !needed[i]) continue;
      const node n = b.at(id);  // a copy: adding nodes may move the builder's storage
      if (n.inputs.empty()) continue;
      // An op's gradient runs where the op runs (its inputs and output live there).
      b.place_on(n.device);
      const auto gs = gradients_of_inputs(e, n, id, found->second);
      for (std::size_t k = 0; k < n.inputs.size() && k < gs.size(); ++k) {
        const node_id in = n.inputs[k];
        if (!gs[k] || !from_x[static_cast<std::size_t>(in)] || !is_floating(b.type_of(in).type)) continue;
        auto [slot, fresh] = grad.emplace(in, *gs[k]);
        if (!fresh) slot->second = e.add(slot->second, *gs[k]);
      }
    }
    b.place_on(restore.device);
    std::vector<node_id> out;
    for (auto x : xs) {
      auto found = grad.find(x);
      out.push_back(found != grad.end() ? found->second : e.zeros_like(x));
    }
    return out;
  } catch (const gradient_failure& failure) {
    return failure.err;
  }
}

}  // namespace af::graph
