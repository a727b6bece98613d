#include "ops/graph/autodiff.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace af::graph {

namespace {

struct rule_error {
  error err;
};

// Adds nodes to the builder; a failure (which would be a bug in a rule) unwinds to add_gradients.
class emitter {
 public:
  explicit emitter(graph_builder& b) : b_(b) {}

  node_id op(const std::string& name, std::vector<node_id> in, op_attrs attrs = {}) {
    auto made = b_.add(name, std::move(in), std::move(attrs), "gradient");
    if (!made) throw rule_error{made.error_value()};
    return *made;
  }
  // A copy: adding nodes may move the builder's storage, and with it a reference.
  value_type type(node_id id) const { return b_.type_of(id); }
  node_id scalar(double v, dtype t) {
    auto c = tensor::full({}, v, t);
    if (!c) throw rule_error{c.error_value()};
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
  node_id broadcast(node_id x, shape dims) {
    if (type(x).dims == dims) return x;
    known(dims);
    return op("broadcast_to", {x}, {{"shape", std::vector<int64_t>(dims.begin(), dims.end())}});
  }
  node_id reshape(node_id x, shape dims) {
    if (type(x).dims == dims) return x;
    known(dims);
    return op("reshape", {x}, {{"shape", std::vector<int64_t>(dims.begin(), dims.end())}});
  }
  // Sums g over the dimensions broadcasting added to reach it from `target`.
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
  // The shape of x reduced over `axes` with keepdims, so a reduced gradient broadcasts back.
  shape kept(const shape& dims, const std::vector<int64_t>& axes) const {
    shape out = dims;
    if (axes.empty()) std::fill(out.begin(), out.end(), 1);
    for (auto a : axes) out[static_cast<std::size_t>(a < 0 ? a + static_cast<int64_t>(dims.size()) : a)] = 1;
    return out;
  }

 private:
  static void known(const shape& dims) {
    if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; }))
      throw rule_error{make_error(errc::unsupported, "gradients need known shapes, got " + to_string(dims))};
  }
  graph_builder& b_;
};

std::vector<int64_t> reduced_axes(const node& n) {
  if (n.op == "argmax" || n.op == "argmin" || n.op == "softmax" || n.op == "log_softmax")
    return {n.attrs.get_int("axis", -1).value()};
  return n.attrs.get_ints("axes", std::vector<int64_t>{}).value();
}

// The gradients of one node's inputs given the gradient g of its output (nullopt: no gradient to
// that input, e.g. a condition or an integer index).
std::vector<std::optional<node_id>> input_gradients(emitter& e, const node& n, node_id self, node_id g) {
  const auto& in = n.inputs;
  auto shape_of = [&](std::size_t k) { return e.type(in[k]).dims; };
  const dtype t = n.out.type;
  const std::string& op = n.op;
  // -- elementwise: each rule is d out / d in times g, then summed back over broadcast dims --------
  if (op == "add") return {e.unbroadcast(g, shape_of(0)), e.unbroadcast(g, shape_of(1))};
  if (op == "sub") return {e.unbroadcast(g, shape_of(0)), e.unbroadcast(e.neg(g), shape_of(1))};
  if (op == "mul") return {e.unbroadcast(e.mul(g, in[1]), shape_of(0)), e.unbroadcast(e.mul(g, in[0]), shape_of(1))};
  if (op == "div") {  // a/b: g/b, -g a / b^2
    const node_id ga = e.div(g, in[1]);
    const node_id gb = e.neg(e.mul(ga, self));  // g/b * a/b
    return {e.unbroadcast(ga, shape_of(0)), e.unbroadcast(gb, shape_of(1))};
  }
  if (op == "pow") {  // a^b: g b a^(b-1) = g b out / a, and g out log(a)
    const node_id ga = e.mul(g, e.mul(in[1], e.op("pow", {in[0], e.sub(in[1], e.scalar(1, t))})));
    const node_id gb = e.mul(g, e.mul(self, e.op("log", {in[0]})));
    return {e.unbroadcast(ga, shape_of(0)), e.unbroadcast(gb, shape_of(1))};
  }
  if (op == "maximum" || op == "minimum") {  // the winner takes g (the first operand on ties)
    const node_id first_wins = e.op(op == "maximum" ? "greater_equal" : "less_equal", {in[0], in[1]});
    const node_id zero = e.scalar(0, t);
    return {e.unbroadcast(e.where(first_wins, g, zero), shape_of(0)),
            e.unbroadcast(e.where(first_wins, zero, g), shape_of(1))};
  }
  if (op == "neg") return {e.neg(g)};
  if (op == "abs") return {e.where(e.op("less", {in[0], e.scalar(0, t)}), e.neg(g), g)};
  // From the output (y > 0 exactly where x > 0): the input then often has no other use, and a bias add
  // before the ReLU fuses into its loop instead of being written out for the backward pass.
  if (op == "relu") return {e.where(e.op("greater", {self, e.scalar(0, t)}), g, e.scalar(0, t))};
  if (op == "exp") return {e.mul(g, self)};
  if (op == "log") return {e.div(g, in[0])};
  if (op == "sqrt") return {e.div(e.mul(g, 0.5), self)};
  if (op == "rsqrt") return {e.mul(e.mul(g, -0.5), e.div(self, in[0]))};                 // -x^-3/2 / 2
  if (op == "tanh") return {e.mul(g, e.sub(e.scalar(1, t), e.mul(self, self)))};
  if (op == "sigmoid") return {e.mul(g, e.mul(self, e.sub(e.scalar(1, t), self)))};
  if (op == "erf") {  // 2/sqrt(pi) e^(-x^2)
    const node_id x2 = e.mul(in[0], in[0]);
    return {e.mul(e.mul(g, 1.1283791670955126), e.op("exp", {e.neg(x2)}))};
  }
  if (op == "gelu") {
    const node_id x = in[0];
    if (n.attrs.get_int("approximate", 0).value() == 0) {  // Phi(x) + x phi(x)
      const node_id cdf = e.mul(e.add(e.scalar(1, t), e.op("erf", {e.mul(x, 0.70710678118654752440)})), 0.5);
      const node_id pdf = e.mul(e.op("exp", {e.mul(e.mul(x, x), -0.5)}), 0.39894228040143267794);
      return {e.mul(g, e.add(cdf, e.mul(x, pdf)))};
    }
    // u = c (x + k x^3), y = x (1 + tanh u) / 2: dy/dx = (1 + t)/2 + x (1 - t^2) c (1 + 3k x^2) / 2
    const double c = 0.79788456080286535588, k = 0.044715;
    const node_id x2 = e.mul(x, x);
    const node_id u = e.mul(e.add(x, e.mul(e.mul(x2, x), k)), c);
    const node_id th = e.op("tanh", {u});
    const node_id one = e.scalar(1, t);
    const node_id du = e.mul(e.add(one, e.mul(x2, 3 * k)), c);
    const node_id d = e.add(e.mul(e.add(one, th), 0.5), e.mul(e.mul(e.mul(x, e.sub(one, e.mul(th, th))), du), 0.5));
    return {e.mul(g, d)};
  }
  if (op == "where") {
    const node_id zero = e.scalar(0, t);
    return {std::nullopt, e.unbroadcast(e.where(in[0], g, zero), shape_of(1)),
            e.unbroadcast(e.where(in[0], zero, g), shape_of(2))};
  }
  if (op == "cast") {
    if (!is_floating(e.type(in[0]).type)) return {std::nullopt};
    return {e.op("cast", {g}, {{"dtype", std::string{to_string(e.type(in[0]).type)}}})};
  }
  // -- reductions ----------------------------------------------------------------------------------
  if (op == "reduce_sum" || op == "reduce_mean" || op == "reduce_max" || op == "reduce_min" || op == "reduce_logsumexp") {
    const shape x_dims = shape_of(0);
    const auto axes = reduced_axes(n);
    const shape kept = e.kept(x_dims, axes);
    const node_id g_kept = e.broadcast(e.reshape(g, kept), x_dims);
    if (op == "reduce_sum") return {g_kept};
    if (op == "reduce_mean") return {e.mul(g_kept, 1.0 / static_cast<double>(numel(x_dims) / numel(kept)))};
    const node_id y_kept = e.broadcast(e.reshape(self, kept), x_dims);
    if (op == "reduce_logsumexp") return {e.mul(g_kept, e.op("exp", {e.sub(in[0], y_kept)}))};
    // max/min: ties share g equally, like TensorFlow.
    const node_id hit = e.op("cast", {e.op("equal", {in[0], y_kept})}, {{"dtype", std::string{to_string(t)}}});
    const node_id ties = e.broadcast(e.op("reduce_sum", {hit}, {{"axes", axes}, {"keepdims", int64_t{1}}}), x_dims);
    return {e.div(e.mul(g_kept, hit), ties)};
  }
  if (op == "softmax") {  // y (g - sum(g y))
    const auto axis = reduced_axes(n);
    const node_id s = e.op("reduce_sum", {e.mul(g, self)}, {{"axes", axis}, {"keepdims", int64_t{1}}});
    return {e.mul(self, e.sub(g, s))};
  }
  if (op == "log_softmax") {  // g - softmax * sum(g)
    const auto axis = reduced_axes(n);
    const node_id s = e.op("reduce_sum", {g}, {{"axes", axis}, {"keepdims", int64_t{1}}});
    return {e.sub(g, e.mul(e.op("exp", {self}), s))};
  }
  if (op == "argmax" || op == "argmin") return {std::nullopt};
  // -- movement --------------------------------------------------------------------------------------
  if (op == "reshape") return {e.reshape(g, shape_of(0))};
  if (op == "broadcast_to") return {e.unbroadcast(g, shape_of(0))};
  if (op == "transpose") {
    const auto perm = n.attrs.get_ints("perm").value();
    std::vector<int64_t> inverse(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int64_t>(i);
    return {e.op("transpose", {g}, {{"perm", inverse}})};
  }
  // -- contraction -----------------------------------------------------------------------------------
  if (op == "matmul") {
    if (shape_of(0).size() < 2 || shape_of(1).size() < 2)
      throw rule_error{make_error(errc::unsupported, "no gradient for matmul of a 1-D operand yet (" +
                                                         to_string(e.type(in[0])) + ", " + to_string(e.type(in[1])) + ")")};
    const bool ta = n.attrs.get_int("transpose_a", 0).value() != 0, tb = n.attrs.get_int("transpose_b", 0).value() != 0;
    auto mm = [&](node_id a, node_id b, bool x, bool y) {
      return e.op("matmul", {a, b}, {{"transpose_a", int64_t{x}}, {"transpose_b", int64_t{y}}});
    };
    node_id ga, gb;
    if (!ta && !tb) ga = mm(g, in[1], false, true), gb = mm(in[0], g, true, false);
    else if (ta && !tb) ga = mm(in[1], g, false, true), gb = mm(in[0], g, false, false);
    else if (!ta && tb) ga = mm(g, in[1], false, false), gb = mm(g, in[0], true, false);
    else ga = mm(in[1], g, true, true), gb = mm(g, in[0], true, true);
    return {e.unbroadcast(ga, shape_of(0)), e.unbroadcast(gb, shape_of(1))};
  }
  // -- indexing -------------------------------------------------------------------------------------
  if (op == "slice") {
    const shape x_dims = shape_of(0);
    op_attrs attrs = n.attrs;
    attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    return {e.op("slice_backprop", {g}, attrs)};
  }
  if (op == "concat" || op == "stack") {  // each input's extent of g (stack: then drop the axis)
    const int64_t rank = static_cast<int64_t>(n.out.dims.size());
    int64_t axis = n.attrs.get_int("axis", 0).value();
    if (axis < 0) axis += rank;
    std::vector<std::optional<node_id>> out;
    int64_t offset = 0;
    for (std::size_t k = 0; k < in.size(); ++k) {
      const shape dims = shape_of(k);
      const int64_t extent = op == "stack" ? 1 : dims[static_cast<std::size_t>(axis)];
      const node_id part = e.op("slice", {g}, {{"axis", axis}, {"start", offset}, {"stop", offset + extent}, {"step", int64_t{1}}});
      out.push_back(e.reshape(part, dims));
      offset += extent;
    }
    return out;
  }
  if (op == "gather") {
    const shape p_dims = shape_of(0);
    op_attrs attrs = n.attrs;
    attrs.set("params_shape", std::vector<int64_t>(p_dims.begin(), p_dims.end()));
    return {e.op("gather_backprop", {g, in[1]}, attrs), std::nullopt};
  }
  if (op == "one_hot" || op == "stateless_random_uniform") return {std::nullopt};
  if (op == "conv2d") {
    const shape x_dims = shape_of(0), f_dims = shape_of(1);
    op_attrs in_attrs = n.attrs, f_attrs = n.attrs;
    in_attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    f_attrs.set("filter_shape", std::vector<int64_t>(f_dims.begin(), f_dims.end()));
    return {e.op("conv2d_backprop_input", {g, in[1]}, in_attrs), e.op("conv2d_backprop_filter", {in[0], g}, f_attrs)};
  }
  if (op == "max_pool2d") return {e.op("max_pool2d_backprop", {in[0], g}, n.attrs)};
  if (op == "avg_pool2d") {
    const shape x_dims = shape_of(0);
    op_attrs attrs = n.attrs;
    attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    return {e.op("avg_pool2d_backprop", {g}, attrs)};
  }
  throw rule_error{make_error(errc::unsupported, "no gradient rule for op '" + op + "'" +
                                                     (n.label.empty() ? "" : " (made at " + n.label + ")"))};
}

}  // namespace

expected<std::vector<node_id>> add_gradients(graph_builder& b, node_id y, const std::vector<node_id>& xs) {
  emitter e{b};
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
      const auto gs = input_gradients(e, n, id, found->second);
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
  } catch (const rule_error& failure) {
    return failure.err;
  }
}

}  // namespace af::graph
