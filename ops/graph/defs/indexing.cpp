// Indexing ops: concat, stack, gather, one_hot, and the gradients of slicing and gathering
// (slice_backprop, gather_backprop), whose output shape is the forward input's, given as an
// attribute.

#include "ops/array_ops.hpp"
#include "ops/graph/defs/families.hpp"

namespace af::graph::defs {

namespace {

// concat and stack: the same dtype and rank everywhere, equal dims except concat's axis.
expected<value_type> infer_joined(const std::string& op, const std::vector<value_type>& in, const op_attrs& a) {
  const bool stacking = op == "stack";
  const auto rank = static_cast<int64_t>(in[0].dims.size());
  AF_TRY_ASSIGN(auto axis, normalize_axis(int_attr(a, "axis"), stacking ? rank + 1 : rank, op.c_str()));
  value_type out = in[0];
  for (const auto& t : in) {
    if (t.type != in[0].type) return mismatch(errc::dtype_mismatch, op, in, "dtypes differ");
    if (t.dims.size() != in[0].dims.size()) return mismatch(errc::shape_mismatch, op, in, "ranks differ");
    for (std::size_t d = 0; d < t.dims.size(); ++d)
      if ((stacking || static_cast<int>(d) != axis) && t.dims[d] != in[0].dims[d])
        return mismatch(errc::shape_mismatch, op, in, "dimension " + std::to_string(d) + " differs");
  }
  if (stacking) {
    out.dims.insert(out.dims.begin() + axis, static_cast<int64_t>(in.size()));
    return out;
  }
  int64_t total = 0;
  for (const auto& t : in) {
    const int64_t extent = t.dims[static_cast<std::size_t>(axis)];
    total = (total < 0 || extent < 0) ? -1 : total + extent;
  }
  out.dims[static_cast<std::size_t>(axis)] = total;
  return out;
}

// Each input's extent of g along the axis (stack: then without the axis).
input_gradients split_gradient(bool stacking, gradient_emitter& e, const node& n, node_id g) {
  const int64_t rank = static_cast<int64_t>(n.out.dims.size());
  int64_t axis = int_attr(n.attrs, "axis");
  if (axis < 0) axis += rank;
  input_gradients out;
  int64_t offset = 0;
  for (auto input : n.inputs) {
    const shape dims = e.dims(input);
    const int64_t extent = stacking ? 1 : dims[static_cast<std::size_t>(axis)];
    const node_id part =
        e.op("slice", {g}, {{"axis", axis}, {"start", offset}, {"stop", offset + extent}, {"step", int64_t{1}}});
    out.push_back(e.reshape(part, dims));
    offset += extent;
  }
  return out;
}

op_def joined(const std::string& name) {
  op_def d = basic_def(name, op_category::indexing, -1);
  d.attrs = {integer_attr("axis", 0)};
  d.infer = [name](const std::vector<value_type>& in, const op_attrs& a) { return infer_joined(name, in, a); };
  const bool stacking = name == "stack";
  d.cpu_kernel = [stacking](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(stacking ? af::stack(in, int_attr(a, "axis")) : af::concat(in, int_attr(a, "axis")));
  };
  d.gradient = differentiable([stacking](gradient_emitter& e, const node& n, node_id, node_id g) {
    return split_gradient(stacking, e, n, g);
  });
  return d;
}

op_def gather() {
  op_def d = basic_def("gather", op_category::indexing, 2);
  d.attrs = {integer_attr("axis", 0)};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    if (in[1].type != dtype::i32 && in[1].type != dtype::i64)
      return mismatch(errc::dtype_mismatch, "gather", in, "indices must be i32 or i64");
    AF_TRY_ASSIGN(auto axis, normalize_axis(int_attr(a, "axis"), static_cast<int64_t>(in[0].dims.size()), "gather"));
    value_type out{in[0].type, {}};
    for (int i = 0; i < axis; ++i) out.dims.push_back(in[0].dims[static_cast<std::size_t>(i)]);
    for (auto x : in[1].dims) out.dims.push_back(x);
    for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < in[0].dims.size(); ++i) out.dims.push_back(in[0].dims[i]);
    return out;
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(af::gather(in[0], in[1], int_attr(a, "axis")));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const shape p_dims = e.dims(n.inputs[0]);
    op_attrs attrs = n.attrs;
    attrs.set("params_shape", std::vector<int64_t>(p_dims.begin(), p_dims.end()));
    return {e.op("gather_backprop", {g, n.inputs[1]}, attrs), std::nullopt};
  });
  return d;
}

op_def one_hot() {
  op_def d = basic_def("one_hot", op_category::indexing, 1);
  d.attrs = {integer_attr("depth"), number_attr("on_value", 1.0), number_attr("off_value", 0.0),
             string_attr("dtype", std::string{"f32"})};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    if (!is_integral(in[0].type)) return mismatch(errc::dtype_mismatch, "one_hot", in, "indices must be integers");
    AF_TRY_ASSIGN(auto type, parse_dtype(string_of(a, "dtype")));
    value_type out{type, in[0].dims};
    out.dims.push_back(int_attr(a, "depth"));
    return out;
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto type, parse_dtype(string_of(a, "dtype")));
    return one(af::one_hot(in[0], int_attr(a, "depth"), number_of(a, "on_value"), number_of(a, "off_value"), type));
  };
  d.gradient = no_gradient_flows("its output is piecewise constant in the indices");
  return d;
}

// The gradients of slice and gather: g scattered back into zeros of the forward input's shape.
op_def slice_backprop() {
  op_def d = basic_def("slice_backprop", op_category::indexing, 1);
  d.attrs = {integers_attr("input_shape"), integer_attr("axis"), integer_attr("start"), integer_attr("stop"),
             integer_attr("step", 1)};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    return value_type{in[0].type, shape_attr(a, "input_shape")};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(af::slice_backprop(in[0], shape_attr(a, "input_shape"), int_attr(a, "axis"), int_attr(a, "start"),
                                  int_attr(a, "stop"), int_attr(a, "step")));
  };
  d.gradient = not_differentiable("second derivatives through slice are not implemented");
  return d;
}

op_def gather_backprop() {
  op_def d = basic_def("gather_backprop", op_category::indexing, 2);
  d.attrs = {integers_attr("params_shape"), integer_attr("axis", 0)};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    return value_type{in[0].type, shape_attr(a, "params_shape")};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(af::gather_backprop(in[0], in[1], shape_attr(a, "params_shape"), int_attr(a, "axis")));
  };
  d.gradient = not_differentiable("second derivatives through gather are not implemented");
  return d;
}

}  // namespace

void define_indexing(std::vector<op_def>& out) {
  out.push_back(joined("concat"));
  out.push_back(joined("stack"));
  out.push_back(gather());
  out.push_back(one_hot());
  out.push_back(slice_backprop());
  out.push_back(gather_backprop());
}

}  // namespace af::graph::defs
