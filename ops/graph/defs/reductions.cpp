// Reductions along axes (sum, mean, max, min, logsumexp), arg-extrema, and softmax / log_softmax
// (normalisations along one axis, which reduce inside).

#include "ops/graph/defs/families.hpp"
#include "ops/nn.hpp"
#include "ops/reduce.hpp"

namespace af::graph::defs {

namespace {

using reduce_kernel = expected<tensor> (*)(const tensor&, const std::vector<int64_t>&, bool);
using arg_kernel = expected<tensor> (*)(const tensor&, int64_t, bool);
using axis_kernel = expected<tensor> (*)(const tensor&, int64_t);

// The output of reducing x over `reduced` (true per reduced axis).
value_type reduced_type(const value_type& x, const std::vector<bool>& reduced, bool keepdims, dtype out_type) {
  value_type out{out_type, {}};
  for (std::size_t i = 0; i < x.dims.size(); ++i) {
    if (!reduced[i]) out.dims.push_back(x.dims[i]);
    else if (keepdims) out.dims.push_back(1);
  }
  return out;
}

expected<value_type> infer_over_axes(const std::string& op, const value_type& x, const op_attrs& a) {
  const auto rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> reduced(x.dims.size(), false);
  const auto axes = ints_attr(a, "axes");
  if (axes.empty()) std::fill(reduced.begin(), reduced.end(), true);
  for (auto axis : axes) {
    AF_TRY_ASSIGN(auto k, normalize_axis(axis, rank, op.c_str()));
    reduced[static_cast<std::size_t>(k)] = true;
  }
  return reduced_type(x, reduced, int_attr(a, "keepdims") != 0, x.type);
}

// sum, mean, max, min, logsumexp: g broadcast back over the reduced axes, times d out / d x.
input_gradients reduction_gradient(const std::string& op, gradient_emitter& e, const node& n, node_id self, node_id g) {
  const node_id x = n.inputs[0];
  const shape x_dims = e.dims(x);
  const auto axes = ints_attr(n.attrs, "axes");
  const shape kept = gradient_emitter::kept(x_dims, axes);
  const node_id g_kept = e.broadcast(e.reshape(g, kept), x_dims);
  if (op == "reduce_sum") return {g_kept};
  if (op == "reduce_mean") return {e.mul(g_kept, 1.0 / static_cast<double>(numel(x_dims) / numel(kept)))};
  const node_id y_kept = e.broadcast(e.reshape(self, kept), x_dims);
  if (op == "reduce_logsumexp") return {e.mul(g_kept, e.op("exp", {e.sub(x, y_kept)}))};
  // max/min: ties share g equally, like TensorFlow.
  const std::string t{to_string(n.out.type)};
  const node_id hit = e.op("cast", {e.op("equal", {x, y_kept})}, {{"dtype", t}});
  const node_id ties = e.broadcast(e.op("reduce_sum", {hit}, {{"axes", axes}, {"keepdims", int64_t{1}}}), x_dims);
  return {e.div(e.mul(g_kept, hit), ties)};
}

op_def over_axes(const std::string& name, reduce_kernel kernel) {
  op_def d = basic_def(name, op_category::reduction, 1);
  d.attrs = {integers_attr("axes", std::vector<int64_t>{}), integer_attr("keepdims", 0)};
  d.infer = [name](const std::vector<value_type>& in, const op_attrs& a) { return infer_over_axes(name, in[0], a); };
  d.cpu_kernel = [kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(kernel(in[0], ints_attr(a, "axes"), int_attr(a, "keepdims") != 0));
  };
  d.gradient = differentiable([name](gradient_emitter& e, const node& n, node_id self, node_id g) {
    return reduction_gradient(name, e, n, self, g);
  });
  return d;
}

op_def arg_extremum(const std::string& name, arg_kernel kernel) {
  op_def d = basic_def(name, op_category::reduction, 1);
  d.attrs = {integer_attr("axis"), integer_attr("keepdims", 0)};
  d.infer = [name](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    std::vector<bool> reduced(in[0].dims.size(), false);
    AF_TRY_ASSIGN(auto k, normalize_axis(int_attr(a, "axis"), static_cast<int64_t>(in[0].dims.size()), name.c_str()));
    reduced[static_cast<std::size_t>(k)] = true;
    return reduced_type(in[0], reduced, int_attr(a, "keepdims") != 0, dtype::i64);
  };
  d.cpu_kernel = [kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(kernel(in[0], int_attr(a, "axis"), int_attr(a, "keepdims") != 0));
  };
  d.gradient = no_gradient_flows("its output is an integer index");
  return d;
}

op_def along_axis(const std::string& name, axis_kernel kernel, gradient_rule rule) {
  op_def d = basic_def(name, op_category::reduction, 1);
  d.attrs = {integer_attr("axis", -1)};
  d.infer = [name](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    AF_TRY(normalize_axis(int_attr(a, "axis"), static_cast<int64_t>(in[0].dims.size()), name.c_str()));
    return in[0];
  };
  d.cpu_kernel = [kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(kernel(in[0], int_attr(a, "axis")));
  };
  d.gradient = differentiable(std::move(rule));
  return d;
}

}  // namespace

void define_reductions(std::vector<op_def>& out) {
  out.push_back(over_axes("reduce_sum", &af::reduce_sum));
  out.push_back(over_axes("reduce_mean", &af::reduce_mean));
  out.push_back(over_axes("reduce_max", &af::reduce_max));
  out.push_back(over_axes("reduce_min", &af::reduce_min));
  out.push_back(over_axes("reduce_logsumexp", &af::reduce_logsumexp));
  out.push_back(arg_extremum("argmax", &af::argmax));
  out.push_back(arg_extremum("argmin", &af::argmin));
  out.push_back(along_axis("softmax", &af::softmax, [](gradient_emitter& e, const node& n, node_id self, node_id g) {
    // y (g - sum(g y))
    const node_id s = e.op("reduce_sum", {e.mul(g, self)},
                           {{"axes", std::vector<int64_t>{int_attr(n.attrs, "axis")}}, {"keepdims", int64_t{1}}});
    return input_gradients{e.mul(self, e.sub(g, s))};
  }));
  out.push_back(along_axis("log_softmax", &af::log_softmax, [](gradient_emitter& e, const node& n, node_id self, node_id g) {
    // g - softmax * sum(g)
    const node_id s =
        e.op("reduce_sum", {g}, {{"axes", std::vector<int64_t>{int_attr(n.attrs, "axis")}}, {"keepdims", int64_t{1}}});
    return input_gradients{e.sub(g, e.mul(e.op("exp", {self}), s))};
  }));
}

}  // namespace af::graph::defs
