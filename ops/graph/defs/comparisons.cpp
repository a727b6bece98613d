// Comparisons (bool out), where and cast: elementwise, but neither fusible nor differentiable in
// the usual sense: comparisons pass no gradient, where passes g to the branch it took, cast converts
// it back.

#include "ops/elementwise.hpp"
#include "ops/graph/defs/families.hpp"
#include "ops/kernels/cpu/elementwise_apply.hpp"

namespace af {

namespace {

struct equal_formula { template <class C> bool operator()(C x, C y) const { return x == y; } };
struct not_equal_formula { template <class C> bool operator()(C x, C y) const { return x != y; } };
struct less_formula { template <class C> bool operator()(C x, C y) const { return x < y; } };
struct less_equal_formula { template <class C> bool operator()(C x, C y) const { return x <= y; } };
struct greater_formula { template <class C> bool operator()(C x, C y) const { return x > y; } };
struct greater_equal_formula { template <class C> bool operator()(C x, C y) const { return x >= y; } };

using cpu::binary_operands;
using graph::gradient_emitter;
using graph::input_gradients;
using graph::node;
using graph::node_id;
using graph::op_def;
using graph::value_type;

template <class F>
op_def comparison_def(std::string name) {
  op_def d = graph::defs::basic_def(name, graph::op_category::comparison, 2);
  d.infer = [name](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> {
    if (in[0].type != in[1].type)
      return graph::defs::mismatch(errc::dtype_mismatch, name, in, "dtypes differ (no implicit promotion)");
    auto joined = graph::defs::broadcast_known(in[0].dims, in[1].dims);
    if (!joined) return graph::defs::mismatch(errc::shape_mismatch, name, in, joined.error_value().message);
    return value_type{dtype::boolean, std::move(*joined)};
  };
  d.cpu_kernel = [name](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    return graph::defs::one(cpu::apply_binary<bool, F, binary_operands::any>(name.c_str(), in[0], in[1]));
  };
  d.gradient = graph::no_gradient_flows("its output is bool");
  return d;
}

}  // namespace

namespace graph::defs {

void define_comparisons(std::vector<op_def>& out) {
  out.push_back(comparison_def<equal_formula>("equal"));
  out.push_back(comparison_def<not_equal_formula>("not_equal"));
  out.push_back(comparison_def<less_formula>("less"));
  out.push_back(comparison_def<less_equal_formula>("less_equal"));
  out.push_back(comparison_def<greater_formula>("greater"));
  out.push_back(comparison_def<greater_equal_formula>("greater_equal"));

  op_def where = basic_def("where", op_category::selection, 3);
  where.infer = [](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> {
    if (in[0].type != dtype::boolean) return mismatch(errc::dtype_mismatch, "where", in, "the condition must be bool");
    if (in[1].type != in[2].type) return mismatch(errc::dtype_mismatch, "where", in, "dtypes differ (no implicit promotion)");
    shape dims = in[0].dims;
    for (std::size_t i = 1; i < 3; ++i) {
      auto joined = broadcast_known(dims, in[i].dims);
      if (!joined) return mismatch(errc::shape_mismatch, "where", in, joined.error_value().message);
      dims = std::move(*joined);
    }
    return value_type{in[1].type, std::move(dims)};
  };
  where.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    return one(af::where(in[0], in[1], in[2]));
  };
  where.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const node_id zero = e.scalar(0, n.out.type);
    return {std::nullopt, e.unbroadcast(e.where(n.inputs[0], g, zero), e.dims(n.inputs[1])),
            e.unbroadcast(e.where(n.inputs[0], zero, g), e.dims(n.inputs[2]))};
  });
  out.push_back(std::move(where));

  op_def cast = basic_def("cast", op_category::conversion, 1);
  cast.attrs = {string_attr("dtype")};
  cast.infer = [](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    AF_TRY_ASSIGN(auto to, parse_dtype(string_of(a, "dtype")));
    return value_type{to, in[0].dims};
  };
  cast.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto to, parse_dtype(string_of(a, "dtype")));
    return one(af::cast(in[0], to));
  };
  cast.gradient = differentiable([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const dtype from = e.type(n.inputs[0]).type;
    if (!is_floating(from)) return {std::nullopt};
    return {e.op("cast", {g}, {{"dtype", std::string{to_string(from)}}})};
  });
  out.push_back(std::move(cast));
}

}  // namespace graph::defs

// -- the eager functions (ops/elementwise.hpp) -----------------------------------------------------

expected<tensor> equal(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, equal_formula, binary_operands::any>("equal", a, b);
}
expected<tensor> not_equal(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, not_equal_formula, binary_operands::any>("not_equal", a, b);
}
expected<tensor> less(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, less_formula, binary_operands::any>("less", a, b);
}
expected<tensor> less_equal(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, less_equal_formula, binary_operands::any>("less_equal", a, b);
}
expected<tensor> greater(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, greater_formula, binary_operands::any>("greater", a, b);
}
expected<tensor> greater_equal(const tensor& a, const tensor& b) {
  return cpu::apply_binary<bool, greater_equal_formula, binary_operands::any>("greater_equal", a, b);
}

}  // namespace af
