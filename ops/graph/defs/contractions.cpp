// Contractions: matmul (BLAS), conv2d (NHWC input, HWIO filter, TensorFlow's padding rule) and
// conv2d's gradients; and the windowed pooling ops with theirs.

#include "ops/graph/defs/families.hpp"
#include "ops/linalg.hpp"
#include "ops/nn.hpp"

namespace af::graph::defs {

namespace {

// -- attributes shared by the spatial ops ---------------------------------------------------------

expected<padding_mode> padding_of(const op_attrs& a) {
  const std::string name = string_of(a, "padding");
  if (name == "valid" || name == "VALID") return padding_mode::valid;
  if (name == "same" || name == "SAME") return padding_mode::same;
  return make_error(errc::invalid_argument, "padding must be 'valid' or 'same', not '" + name + "'");
}

expected<std::array<int64_t, 2>> pair_of(const op_attrs& a, const char* name) {
  const auto v = ints_attr(a, name);
  if (v.size() != 2) return make_error(errc::invalid_argument, std::string{"attribute '"} + name + "' needs 2 values");
  return std::array<int64_t, 2>{v[0], v[1]};
}

std::vector<attr_spec> conv_attrs() {
  return {integers_attr("strides", std::vector<int64_t>{1, 1}), integers_attr("dilations", std::vector<int64_t>{1, 1}),
          string_attr("padding", std::string{"valid"}), integer_attr("groups", 1)};
}
std::vector<attr_spec> pool_attrs() {
  return {integers_attr("ksize", std::vector<int64_t>{2, 2}), integers_attr("strides", std::vector<int64_t>{2, 2}),
          string_attr("padding", std::string{"valid"})};
}
std::vector<attr_spec> with(std::vector<attr_spec> attrs, attr_spec more) {
  attrs.push_back(std::move(more));
  return attrs;
}

expected<conv2d_options> conv_options(const op_attrs& a) {
  conv2d_options o;
  AF_TRY_ASSIGN(o.strides, pair_of(a, "strides"));
  AF_TRY_ASSIGN(o.dilations, pair_of(a, "dilations"));
  AF_TRY_ASSIGN(o.padding, padding_of(a));
  o.groups = static_cast<int>(int_attr(a, "groups"));
  return o;
}
expected<pool_options> pool_options_of(const op_attrs& a) {
  pool_options o;
  AF_TRY_ASSIGN(o.ksize, pair_of(a, "ksize"));
  AF_TRY_ASSIGN(o.strides, pair_of(a, "strides"));
  AF_TRY_ASSIGN(o.padding, padding_of(a));
  return o;
}

int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding) {
  return in < 0 ? -1 : compute_window(in, k, stride, dilation, padding).out;
}

/// The op's output is the forward input's (or filter's) shape, given as the attribute `from`.
infer_fn shape_from(const char* from) {
  return [from](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    return value_type{in[0].type, shape_attr(a, from)};
  };
}

op_def spatial_def(std::string name, op_category category, int arity, std::vector<attr_spec> attrs) {
  op_def d = basic_def(std::move(name), category, arity);
  d.attrs = std::move(attrs);
  return d;
}

// -- matmul -----------------------------------------------------------------------------------------

op_def matmul() {
  op_def d = spatial_def("matmul", op_category::contraction, 2,
                         {integer_attr("transpose_a", 0), integer_attr("transpose_b", 0)});
  d.infer = [](const std::vector<value_type>& in, const op_attrs& attrs) -> expected<value_type> {
    if (in[0].type != in[1].type) return mismatch(errc::dtype_mismatch, "matmul", in, "dtypes differ");
    if (in[0].dims.empty() || in[1].dims.empty()) return mismatch(errc::invalid_argument, "matmul", in, "rank-0 operand");
    shape a = in[0].dims, b = in[1].dims;
    const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
    if (a_vector) a = shape{1, a[0]};
    if (b_vector) b = shape{b[0], 1};
    if (int_attr(attrs, "transpose_a") && !a_vector) std::swap(a[a.size() - 1], a[a.size() - 2]);
    if (int_attr(attrs, "transpose_b") && !b_vector) std::swap(b[b.size() - 1], b[b.size() - 2]);
    const int64_t m = a[a.size() - 2], k = a[a.size() - 1], k2 = b[b.size() - 2], n = b[b.size() - 1];
    if (k != k2 && k >= 0 && k2 >= 0) return mismatch(errc::shape_mismatch, "matmul", in, "inner dimensions differ");
    auto batch = broadcast_known(shape(a.begin(), a.end() - 2), shape(b.begin(), b.end() - 2));
    if (!batch) return mismatch(errc::shape_mismatch, "matmul", in, batch.error_value().message);
    shape out = *batch;
    if (!a_vector) out.push_back(m);
    if (!b_vector) out.push_back(n);
    return value_type{in[0].type, out};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(af::matmul(in[0], in[1], int_attr(a, "transpose_a") != 0, int_attr(a, "transpose_b") != 0));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const auto& in = n.inputs;
    if (e.dims(in[0]).size() < 2 || e.dims(in[1]).size() < 2)
      gradient_emitter::fail(errc::unsupported, "no gradient for matmul of a 1-D operand yet (" + to_string(e.type(in[0])) +
                                                    ", " + to_string(e.type(in[1])) + ")");
    const bool ta = int_attr(n.attrs, "transpose_a") != 0, tb = int_attr(n.attrs, "transpose_b") != 0;
    auto mm = [&](node_id a, node_id b, bool x, bool y) {
      return e.op("matmul", {a, b}, {{"transpose_a", int64_t{x}}, {"transpose_b", int64_t{y}}});
    };
    node_id ga, gb;
    if (!ta && !tb) ga = mm(g, in[1], false, true), gb = mm(in[0], g, true, false);
    else if (ta && !tb) ga = mm(in[1], g, false, true), gb = mm(in[0], g, false, false);
    else if (!ta && tb) ga = mm(g, in[1], false, false), gb = mm(g, in[0], true, false);
    else ga = mm(in[1], g, true, true), gb = mm(g, in[0], true, true);
    return {e.unbroadcast(ga, e.dims(in[0])), e.unbroadcast(gb, e.dims(in[1]))};
  });
  return d;
}

// -- conv2d and its gradients -------------------------------------------------------------------

op_def conv2d() {
  op_def d = spatial_def("conv2d", op_category::contraction, 2, conv_attrs());
  d.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    const auto& x = in[0].dims;
    const auto& f = in[1].dims;
    if (x.size() != 4) return mismatch(errc::shape_mismatch, "conv2d", in, "the input must be NHWC (rank 4)");
    if (in[0].type != in[1].type) return mismatch(errc::dtype_mismatch, "conv2d", in, "dtypes differ");
    if (f.size() != 4) return mismatch(errc::shape_mismatch, "conv2d", in, "the filter must be HWIO (rank 4)");
    AF_TRY_ASSIGN(auto padding, padding_of(a));
    const auto s = ints_attr(a, "strides"), dl = ints_attr(a, "dilations");
    if (s.size() != 2 || dl.size() != 2)
      return mismatch(errc::invalid_argument, "conv2d", in, "strides and dilations need 2 values");
    if (x[3] >= 0 && f[2] * int_attr(a, "groups") != x[3])
      return mismatch(errc::shape_mismatch, "conv2d", in, "input channels differ from the filter's");
    return value_type{in[0].type, {x[0], window_out(x[1], f[0], s[0], dl[0], padding),
                                   window_out(x[2], f[1], s[1], dl[1], padding), f[3]}};
  };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, conv_options(a));
    return one(af::conv2d(in[0], in[1], o));
  };
  d.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const shape x_dims = e.dims(n.inputs[0]), f_dims = e.dims(n.inputs[1]);
    op_attrs in_attrs = n.attrs, f_attrs = n.attrs;
    in_attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    f_attrs.set("filter_shape", std::vector<int64_t>(f_dims.begin(), f_dims.end()));
    return {e.op("conv2d_backprop_input", {g, n.inputs[1]}, in_attrs),
            e.op("conv2d_backprop_filter", {n.inputs[0], g}, f_attrs)};
  });
  return d;
}

op_def conv2d_backprop_input() {  // (grad_out, filter) -> d input
  op_def d = spatial_def("conv2d_backprop_input", op_category::contraction, 2,
                         with(conv_attrs(), integers_attr("input_shape")));
  d.infer = shape_from("input_shape");
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, conv_options(a));
    return one(af::conv2d_backprop_input(in[0], in[1], shape_attr(a, "input_shape"), o));
  };
  d.gradient = not_differentiable("second derivatives of conv2d are not implemented");
  return d;
}

op_def conv2d_backprop_filter() {  // (input, grad_out) -> d filter
  op_def d = spatial_def("conv2d_backprop_filter", op_category::contraction, 2,
                         with(conv_attrs(), integers_attr("filter_shape")));
  d.infer = shape_from("filter_shape");
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, conv_options(a));
    return one(af::conv2d_backprop_filter(in[0], in[1], shape_attr(a, "filter_shape"), o));
  };
  d.gradient = not_differentiable("second derivatives of conv2d are not implemented");
  return d;
}

// -- pooling --------------------------------------------------------------------------------------

op_def pool(std::string name, expected<tensor> (*kernel)(const tensor&, const pool_options&), gradient_rule rule) {
  op_def d = spatial_def(name, op_category::pooling, 1, pool_attrs());
  d.infer = [name](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    const auto& x = in[0].dims;
    if (x.size() != 4) return mismatch(errc::shape_mismatch, name, in, "the input must be NHWC (rank 4)");
    AF_TRY_ASSIGN(auto padding, padding_of(a));
    const auto k = ints_attr(a, "ksize"), s = ints_attr(a, "strides");
    if (k.size() != 2 || s.size() != 2) return mismatch(errc::invalid_argument, name, in, "ksize and strides need 2 values");
    return value_type{in[0].type,
                      {x[0], window_out(x[1], k[0], s[0], 1, padding), window_out(x[2], k[1], s[1], 1, padding), x[3]}};
  };
  d.cpu_kernel = [kernel](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, pool_options_of(a));
    return one(kernel(in[0], o));
  };
  d.gradient = differentiable(std::move(rule));
  return d;
}

op_def max_pool2d_backprop() {  // (input, grad_out) -> d input
  op_def d = spatial_def("max_pool2d_backprop", op_category::pooling, 2, pool_attrs());
  d.infer = [](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> { return in[0]; };
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, pool_options_of(a));
    return one(af::max_pool2d_backprop(in[0], in[1], o));
  };
  d.gradient = not_differentiable("second derivatives of max pooling are not implemented");
  return d;
}

op_def avg_pool2d_backprop() {  // (grad_out) -> d input
  op_def d = spatial_def("avg_pool2d_backprop", op_category::pooling, 1, with(pool_attrs(), integers_attr("input_shape")));
  d.infer = shape_from("input_shape");
  d.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto o, pool_options_of(a));
    return one(af::avg_pool2d_backprop(in[0], shape_attr(a, "input_shape"), o));
  };
  d.gradient = not_differentiable("second derivatives of average pooling are not implemented");
  return d;
}

}  // namespace

void define_contractions(std::vector<op_def>& out) {
  out.push_back(matmul());
  out.push_back(conv2d());
  out.push_back(conv2d_backprop_input());
  out.push_back(conv2d_backprop_filter());
}

void define_pooling(std::vector<op_def>& out) {
  out.push_back(pool("max_pool2d", &af::max_pool2d, [](gradient_emitter& e, const node& n, node_id, node_id g) {
    return input_gradients{e.op("max_pool2d_backprop", {n.inputs[0], g}, n.attrs)};
  }));
  out.push_back(pool("avg_pool2d", &af::avg_pool2d, [](gradient_emitter& e, const node& n, node_id, node_id g) {
    const shape x_dims = e.dims(n.inputs[0]);
    op_attrs attrs = n.attrs;
    attrs.set("input_shape", std::vector<int64_t>(x_dims.begin(), x_dims.end()));
    return input_gradients{e.op("avg_pool2d_backprop", {g}, attrs)};
  }));
  out.push_back(max_pool2d_backprop());
  out.push_back(avg_pool2d_backprop());
}

}  // namespace af::graph::defs
