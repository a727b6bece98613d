#include "ops/graph/graph.hpp"

#include <cstring>
#include <functional>
#include <string_view>
#include <utility>

#include "ops/graph/fused_program.hpp"

namespace af::graph {

namespace {

void mix(std::size_t& seed, std::size_t value) { seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); }

std::size_t hash_attr(const attr_value& v) {
  return std::visit(
      [](const auto& x) -> std::size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
          std::size_t h = x.size();
          for (auto i : x) mix(h, std::hash<typename T::value_type>{}(i));
          return h;
        } else {
          return std::hash<T>{}(x);
        }
      },
      v);
}

std::size_t hash_node(const node& n) {
  std::size_t h = std::hash<std::string>{}(n.op);
  mix(h, static_cast<std::size_t>(n.out.type));
  for (auto d : n.out.dims) mix(h, std::hash<int64_t>{}(d));
  for (auto i : n.inputs) mix(h, std::hash<node_id>{}(i));
  for (const auto& [name, value] : n.attrs.entries()) {
    mix(h, std::hash<std::string>{}(name));
    mix(h, hash_attr(value));
  }
  mix(h, std::hash<std::string>{}(n.device));
  return h;
}

bool same_node(const node& a, const node& b) {
  return a.op == b.op && a.out == b.out && a.inputs == b.inputs && a.attrs == b.attrs && a.device == b.device;
}

bool same_constant(const tensor& a, const tensor& b) {
  if (a.type() != b.type() || a.shape() != b.shape()) return false;
  const auto ca = a.contiguous(), cb = b.contiguous();
  return ca && cb && std::memcmp(ca->raw_data(), cb->raw_data(), ca->nbytes()) == 0;
}

std::size_t hash_bytes(const tensor& t) {
  const auto c = t.contiguous();
  if (!c) return 0;  // out of memory: every such constant lands in one bucket, compared in full
  return std::hash<std::string_view>{}(std::string_view{static_cast<const char*>(c->raw_data()), c->nbytes()});
}

bool never_merged(const std::string& op) {
  const op_def* def = find_op(op);
  return !def || def->stateful || def->category == op_category::source;
}

}  // namespace

const tensor& graph::constant_value(node_id id) const { return constants_.at(id); }

const fused_program& graph::program(node_id id) const { return *programs_.at(id); }

std::size_t graph::count(std::string_view op) const {
  std::size_t n = 0;
  for (const auto& x : nodes_) n += x.op == op ? 1 : 0;
  return n;
}

std::string graph::to_dot(const std::string& name) const {
  std::string out = "digraph \"" + name + "\" {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    std::string text = n.op;
    if (n.kind == node_kind::fused) text += " (" + std::to_string(programs_.at(static_cast<node_id>(i))->steps.size()) + " ops)";
    if (!n.label.empty()) text += "\\n" + n.label;
    text += "\\n" + to_string(n.out);
    out += "  n" + std::to_string(i) + " [label=\"" + text + "\"];\n";
    for (auto in : n.inputs) out += "  n" + std::to_string(in) + " -> n" + std::to_string(i) + ";\n";
  }
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    out += "  out" + std::to_string(k) + " [shape=plaintext, label=\"output " + std::to_string(k) + "\"];\n";
    out += "  n" + std::to_string(outputs_[k]) + " -> out" + std::to_string(k) + ";\n";
  }
  return out + "}\n";
}

expected<void> graph::verify() const {
  auto bad = [](std::size_t i, const node& n, const std::string& why) {
    return make_error(errc::invalid_argument, "graph node " + std::to_string(i) + " (" + n.op + "): " + why);
  };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& n = nodes_[i];
    const op_def* info = find_op(n.op);
    if (!info) return bad(i, n, "unknown op");
    std::vector<value_type> in;
    for (auto id : n.inputs) {
      if (id < 0 || static_cast<std::size_t>(id) >= i) return bad(i, n, "input " + std::to_string(id) + " does not come before it");
      in.push_back(nodes_[static_cast<std::size_t>(id)].out);
    }
    if (info->category == op_category::source) {
      if (!n.inputs.empty()) return bad(i, n, "a source takes no inputs");
      if (n.kind == node_kind::constant) {
        auto c = constants_.find(static_cast<node_id>(i));
        if (c == constants_.end()) return bad(i, n, "no value");
        if (c->second.type() != n.out.type || c->second.shape() != n.out.dims) return bad(i, n, "value and type differ");
      }
      continue;
    }
    if (info->category == op_category::fused) {
      auto p = programs_.find(static_cast<node_id>(i));
      if (p == programs_.end()) return bad(i, n, "no program");
      auto checked = p->second->verify(in, n.out);
      if (!checked) return bad(i, n, checked.error_value().message);
      continue;
    }
    auto inferred = infer_output(n.op, in, n.attrs);
    if (!inferred) return bad(i, n, inferred.error_value().message);
    if (!(*inferred == n.out)) return bad(i, n, "recorded " + to_string(n.out) + " but inputs give " + to_string(*inferred));
  }
  for (auto id : outputs_)
    if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size())
      return make_error(errc::invalid_argument, "graph output names node " + std::to_string(id) + " of " + std::to_string(nodes_.size()));
  return {};
}

// -- builder --------------------------------------------------------------------------------------

node_id graph_builder::append(node n) {
  g_.nodes_.push_back(std::move(n));
  return static_cast<node_id>(g_.nodes_.size() - 1);
}

expected<node_id> graph_builder::observed(node_id id) {
  if (observer_) AF_TRY(observer_(*this, id));
  return id;
}

node_id graph_builder::parameter(value_type type, std::string label) {
  static const op_def* const def = find_op("parameter");
  const node_id id = append(node{"parameter", std::move(type), {}, {}, {}, std::move(label), node_kind::parameter, def});
  g_.parameters_.push_back(id);
  return id;
}

node_id graph_builder::constant(const tensor& value) {
  // Constants are hashed, compared and saved as bytes; a string's bytes are a pointer.
  AF_ASSERT(!is_string(value.type()));
  std::size_t h = hash_bytes(value);
  mix(h, std::hash<std::string>{}("constant"));
  auto& same_hash = by_hash_[h];
  for (auto id : same_hash)
    if (same_constant(g_.constants_.at(id), value)) return id;
  static const op_def* const def = find_op("constant");
  const node_id id = append(node{"constant", value_type{value.type(), value.shape()}, {}, {}, {}, {}, node_kind::constant, def});
  g_.constants_.emplace(id, value);
  same_hash.push_back(id);
  (void)observed(id);  // a constant's value is known: nothing to fail
  return id;
}

expected<node_id> graph_builder::add(const std::string& op, std::vector<node_id> inputs, op_attrs attrs,
                                     std::string label) {
  std::vector<value_type> in;
  for (auto id : inputs) {
    if (id < 0 || static_cast<std::size_t>(id) >= g_.size())
      return make_error(errc::invalid_argument, op + ": input " + std::to_string(id) + " is not a node of this graph");
    in.push_back(g_.at(id).out);
  }
  // Nodes carry every attribute of their op (defaults filled in): kernels, code generators and
  // serialisation then read one complete set, and equal calls hash equally however written.
  const op_def* def = find_op(op);
  if (!def) return make_error(errc::unsupported, "op '" + op + "' is not available in graphs");
  if (op == "parameter" || op == "constant" || op == "fused")
    return make_error(errc::invalid_argument, "'" + op + "' nodes are made by graph_builder::" + (op == "fused" ? "add_fused" : op) +
                                                  ", not add");
  AF_TRY_ASSIGN(auto complete, complete_attrs(*def, attrs));
  AF_TRY_ASSIGN(auto out, infer_output(op, in, complete));
  node n{op, std::move(out), std::move(inputs), std::move(complete), device_, std::move(label), node_kind::op, def};
  if (never_merged(op)) return observed(append(std::move(n)));
  const std::size_t h = hash_node(n);
  for (auto id : by_hash_[h])
    if (same_node(g_.at(id), n)) return id;
  const node_id id = append(std::move(n));
  by_hash_[h].push_back(id);
  return observed(id);
}

node_id graph_builder::add_fused(std::vector<node_id> inputs, std::shared_ptr<const fused_program> program,
                                 value_type out, std::string label, std::string device) {
  static const op_def* const def = find_op("fused");
  const node_id id =
      append(node{"fused", std::move(out), std::move(inputs), {}, std::move(device), std::move(label), node_kind::fused, def});
  g_.programs_.emplace(id, std::move(program));
  return id;
}

expected<node_id> graph_builder::copy(const graph& from, node_id id, std::vector<node_id> inputs) {
  const node& n = from.at(id);
  switch (n.kind) {
    case node_kind::parameter: return parameter(n.out, n.label);
    case node_kind::constant: return constant(from.constant_value(id));
    case node_kind::fused: return add_fused(std::move(inputs), from.programs_.at(id), n.out, n.label, n.device);
    case node_kind::op: break;
  }
  // On the node's own device, so that it merges only with equal nodes there.
  std::string placed = std::exchange(device_, n.device);
  auto copied = add(n.op, std::move(inputs), n.attrs, n.label);
  device_ = std::move(placed);
  return copied;
}

graph graph_builder::finish(std::vector<node_id> outputs, std::vector<std::string> names) && {
  if (names.size() != outputs.size()) {
    names.clear();
    for (std::size_t i = 0; i < outputs.size(); ++i) names.push_back("output_" + std::to_string(i));
  }
  g_.outputs_ = std::move(outputs);
  g_.output_names_ = std::move(names);
  return std::move(g_);
}

}  // namespace af::graph
