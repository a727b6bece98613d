// Movement ops: reshape, transpose, broadcast_to and slice. Their kernels return views of the same
// storage (no copy); the memory planner knows that from the category.

#include <algorithm>

#include "ops/graph/defs/families.hpp"

namespace af::graph::defs {

namespace {

// Python-like slice bounds along one dimension of length n (known), as tensor::slice applies them.
int64_t slice_length(int64_t n, int64_t start, int64_t stop, int64_t step) {
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  return (stop - start + step - 1) / step;
}

op_def movement_def(std::string name) {
  op_def d = basic_def(std::move(name), op_category::movement, 1);
  return d;
}

op_def reshape() {
  op_def d = movement_def("reshape");
  d.attrs = {integers_attr("shape")};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    const value_type& x = in[0];
    shape dims = shape_attr(a, "shape");
    const auto unknown = std::count(dims.begin(), dims.end(), -1);
    if (unknown > 1) return mismatch(errc::invalid_argument, "reshape", in, "at most one -1 in " + to_string(dims));
    const bool input_known = std::none_of(x.dims.begin(), x.dims.end(), [](int64_t extent) { return extent < 0; });
    if (input_known) {  // the -1 is inferred from the element count when that is known
      int64_t known = 1;
      for (auto extent : dims)
        if (extent >= 0) known *= extent;
      const int64_t count = numel(x.dims);
      if (unknown == 1) {
        if (known == 0 || count % known != 0)
          return mismatch(errc::shape_mismatch, "reshape", in, "cannot reshape to " + to_string(dims));
        *std::find(dims.begin(), dims.end(), -1) = count / known;
      } else if (known != count) {
        return mismatch(errc::shape_mismatch, "reshape", in, "cannot reshape to " + to_string(dims));
      }
    }
    return value_type{x.type, dims};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(in[0].reshape(shape_attr(a, "shape")));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    return {e.reshape(g, e.dims(n.inputs[0]))};
  });
  return d;
}

op_def broadcast_to() {
  op_def d = movement_def("broadcast_to");
  d.attrs = {integers_attr("shape")};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    const shape dims = shape_attr(a, "shape");
    auto joined = broadcast_known(in[0].dims, dims);
    if (!joined || *joined != dims)
      return mismatch(errc::shape_mismatch, "broadcast_to", in, "cannot broadcast to " + to_string(dims));
    return value_type{in[0].type, dims};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(in[0].expand(shape_attr(a, "shape")));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    return {e.unbroadcast(g, e.dims(n.inputs[0]))};
  });
  return d;
}

op_def transpose() {
  op_def d = movement_def("transpose");
  d.attrs = {integers_attr("perm")};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    const value_type& x = in[0];
    const auto perm = ints_attr(a, "perm");
    if (perm.size() != x.dims.size()) return mismatch(errc::invalid_argument, "transpose", in, "perm must name every axis once");
    value_type out{x.type, {}};
    std::vector<bool> used(perm.size(), false);
    for (auto p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || used[static_cast<std::size_t>(p)])
        return mismatch(errc::invalid_argument, "transpose", in, "perm must name every axis once");
      used[static_cast<std::size_t>(p)] = true;
      out.dims.push_back(x.dims[static_cast<std::size_t>(p)]);
    }
    return out;
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    const auto perm = ints_attr(a, "perm");
    return one(in[0].permute(std::vector<int>(perm.begin(), perm.end())));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const auto perm = ints_attr(n.attrs, "perm");
    std::vector<int64_t> inverse(perm.size());
    for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int64_t>(i);
    return {e.op("transpose", {g}, {{"perm", inverse}})};
  });
  return d;
}

op_def slice() {
  op_def d = movement_def("slice");
  d.attrs = {integer_attr("axis"), integer_attr("start"), integer_attr("stop"), integer_attr("step", 1)};
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    AF_TRY_ASSIGN(auto axis, normalize_axis(int_attr(a, "axis"), static_cast<int64_t>(in[0].dims.size()), "slice"));
    const int64_t step = int_attr(a, "step");
    if (step <= 0) return mismatch(errc::invalid_argument, "slice", in, "step must be positive");
    value_type out = in[0];
    auto& extent = out.dims[static_cast<std::size_t>(axis)];
    if (extent >= 0) extent = slice_length(extent, int_attr(a, "start"), int_attr(a, "stop"), step);
    return out;
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(in[0].slice(int_attr(a, "axis"), int_attr(a, "start"), int_attr(a, "stop"), int_attr(a, "step")));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const shape x_dims = e.dims(n.inputs[0]);
    op_attrs attrs = n.attrs;
    attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    return {e.op("slice_backprop", {g}, attrs)};
  });
  return d;
}

// Inserted by the placement pass (ops/passes/placement.hpp) where a value crosses to a device whose
// memory its producer's cannot share; it runs on the reading device, so its output is allocated
// there. (A CPU kernel copies host memory into the current allocator.)
op_def copy() {
  op_def d = basic_def("copy", op_category::transfer, 1);
  d.infer = [](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> { return in[0]; };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    return one(in[0].clone());
  };
  d.gradient = differentiable([](gradient_emitter&, const node&, node_id, node_id g) -> input_gradients { return {g}; });
  return d;
}

}  // namespace

void define_movement(std::vector<op_def>& out) {
  out.push_back(copy());
  out.push_back(reshape());
  out.push_back(broadcast_to());
  out.push_back(transpose());
  out.push_back(slice());
}

}  // namespace af::graph::defs
