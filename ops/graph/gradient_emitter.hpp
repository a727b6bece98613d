#pragma once

// What an op's gradient rule (its vector-Jacobian product, in its definition under
// ops/graph/defs/) writes with: nodes added to the graph being differentiated. A rule that cannot
// apply (unknown shapes, an unsupported form) throws gradient_failure, which add_gradients turns
// into its error; nothing escapes to callers.

#include <algorithm>
#include <string>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af::graph {

struct gradient_failure {
  error err;
};

class gradient_emitter {
 public:
  explicit gradient_emitter(graph_builder& b) : b_(b) {}

  node_id op(const std::string& name, std::vector<node_id> in, op_attrs attrs = {}) {
    auto made = b_.add(name, std::move(in), std::move(attrs), "gradient");
    if (!made) throw gradient_failure{made.error_value()};
    return *made;
  }
  /// A copy: adding nodes may move the builder's storage, and with it a reference.
  value_type type(node_id id) const { return b_.type_of(id); }
  shape dims(node_id id) const { return b_.type_of(id).dims; }
  node_id scalar(double v, dtype t) {
    auto c = tensor::full({}, v, t);
    if (!c) throw gradient_failure{c.error_value()};
    return b_.constant(*c);
  }
  node_id add(node_id a, node_id c) { return op("add", {a, c}); }
  node_id sub(node_id a, node_id c) { return op("sub", {a, c}); }
  node_id mul(node_id a, node_id c) { return op("mul", {a, c}); }
  node_id div(node_id a, node_id c) { return op("div", {a, c}); }
  node_id neg(node_id a) { return op("neg", {a}); }
  node_id mul(node_id a, double v) { return mul(a, scalar(v, type(a).type)); }
  node_id zeros_like(node_id like) { return broadcast(scalar(0.0, type(like).type), type(like).dims); }
  node_id where(node_id c, node_id a, node_id other) { return op("where", {c, a, other}); }
  node_id broadcast(node_id x, shape to) {
    if (type(x).dims == to) return x;
    known(to);
    return op("broadcast_to", {x}, {{"shape", std::vector<int64_t>(to.begin(), to.end())}});
  }
  node_id reshape(node_id x, shape to) {
    if (type(x).dims == to) return x;
    known(to);
    return op("reshape", {x}, {{"shape", std::vector<int64_t>(to.begin(), to.end())}});
  }
  /// Sums g over the dimensions broadcasting added to reach it from `target`.
  node_id unbroadcast(node_id g, shape target) {
    const shape have = type(g).dims;
    if (have == target) return g;
    known(have);
    known(target);
    std::vector<int64_t> axes;
    const std::size_t lead = have.size() - target.size();
    for (std::size_t i = 0; i < have.size(); ++i)
      if (i < lead || (target[i - lead] == 1 && have[i] != 1)) axes.push_back(static_cast<int64_t>(i));
    if (axes.empty()) return reshape(g, target);
    const node_id summed = op("reduce_sum", {g}, {{"axes", axes}, {"keepdims", int64_t{1}}});
    return reshape(summed, target);
  }
  /// The shape of x reduced over `axes` with keepdims, so a reduced gradient broadcasts back.
  static shape kept(const shape& from, const std::vector<int64_t>& axes) {
    shape out = from;
    if (axes.empty()) std::fill(out.begin(), out.end(), 1);
    for (auto a : axes) out[static_cast<std::size_t>(a < 0 ? a + static_cast<int64_t>(from.size()) : a)] = 1;
    return out;
  }
  [[noreturn]] static void fail(errc code, std::string message) { throw gradient_failure{make_error(code, std::move(message))}; }

 private:
  static void known(const shape& d) {
    if (std::any_of(d.begin(), d.end(), [](int64_t x) { return x < 0; }))
      fail(errc::unsupported, "gradients need known shapes, got " + to_string(d));
  }
  graph_builder& b_;
};

}  // namespace af::graph
