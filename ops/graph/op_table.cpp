#include "ops/graph/op_table.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "ops/nn.hpp"

namespace af::graph {

namespace {

using enum op_category;

constexpr std::array table{
    op_info{"parameter", source, 0},       op_info{"constant", source, 0},
    op_info{"variable", source, 0},
    // elementwise
    op_info{"add", elementwise, 2},        op_info{"sub", elementwise, 2},
    op_info{"mul", elementwise, 2},        op_info{"div", elementwise, 2},
    op_info{"pow", elementwise, 2},        op_info{"maximum", elementwise, 2},
    op_info{"minimum", elementwise, 2},    op_info{"equal", elementwise, 2},
    op_info{"not_equal", elementwise, 2},  op_info{"less", elementwise, 2},
    op_info{"less_equal", elementwise, 2}, op_info{"greater", elementwise, 2},
    op_info{"greater_equal", elementwise, 2},
    op_info{"neg", elementwise, 1},        op_info{"abs", elementwise, 1},
    op_info{"relu", elementwise, 1},       op_info{"exp", elementwise, 1},
    op_info{"log", elementwise, 1},        op_info{"sqrt", elementwise, 1},
    op_info{"rsqrt", elementwise, 1},      op_info{"tanh", elementwise, 1},
    op_info{"sigmoid", elementwise, 1},    op_info{"gelu", elementwise, 1},
    op_info{"erf", elementwise, 1},
    op_info{"where", elementwise, 3},      op_info{"cast", elementwise, 1},
    // reductions
    op_info{"reduce_sum", reduce, 1},      op_info{"reduce_mean", reduce, 1},
    op_info{"reduce_max", reduce, 1},      op_info{"reduce_min", reduce, 1},
    op_info{"reduce_logsumexp", reduce, 1}, op_info{"argmax", reduce, 1},
    op_info{"argmin", reduce, 1},          op_info{"softmax", reduce, 1},
    op_info{"log_softmax", reduce, 1},
    // movement
    op_info{"reshape", movement, 1},       op_info{"transpose", movement, 1},
    op_info{"broadcast_to", movement, 1},  op_info{"slice", movement, 1},
    // indexing
    op_info{"concat", indexing, -1},       op_info{"stack", indexing, -1},
    op_info{"gather", indexing, 2},        op_info{"one_hot", indexing, 1},
    op_info{"slice_backprop", indexing, 1}, op_info{"gather_backprop", indexing, 2},
    // contraction
    op_info{"matmul", contraction, 2},     op_info{"conv2d", contraction, 2},
    op_info{"max_pool2d", contraction, 1}, op_info{"avg_pool2d", contraction, 1},
    op_info{"conv2d_backprop_input", contraction, 2}, op_info{"conv2d_backprop_filter", contraction, 2},
    op_info{"max_pool2d_backprop", contraction, 2}, op_info{"avg_pool2d_backprop", contraction, 1},
    // stateful
    op_info{"random_uniform", stateful, 0}, op_info{"random_normal", stateful, 0},
    // deterministic in its seed input (dropout masks: a new seed per step, no retrace)
    op_info{"stateless_random_uniform", stateful, 1},
    op_info{"fused", fused, -1},
};

bool is_comparison(std::string_view op) {
  return op == "equal" || op == "not_equal" || op == "less" || op == "less_equal" || op == "greater" ||
         op == "greater_equal";
}

std::string describe(std::string_view op, const std::vector<value_type>& in) {
  std::string out = std::string{op} + " of ";
  for (std::size_t i = 0; i < in.size(); ++i) out += (i ? ", " : "") + to_string(in[i]);
  return out;
}

error mismatch(errc code, std::string_view op, const std::vector<value_type>& in, const std::string& why) {
  return make_error(code, describe(op, in) + ": " + why);
}

// NumPy broadcasting where -1 is a dimension known only at run time: -1 against 1 or -1 stays
// unknown, -1 against n > 1 becomes n (anything else would fail at run time).
expected<shape> broadcast_known(const shape& a, const shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  shape out(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) {
    const int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x == y || y == 1) out[i] = x;
    else if (x == 1) out[i] = y;
    else if (x == -1) out[i] = y;
    else if (y == -1) out[i] = x;
    else return make_error(errc::shape_mismatch, "cannot broadcast " + to_string(a) + " with " + to_string(b));
  }
  return out;
}

expected<value_type> infer_elementwise(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs) {
  if (op == "cast") {
    AF_TRY_ASSIGN(auto name, attrs.get_string("dtype"));
    AF_TRY_ASSIGN(auto to, parse_dtype(name));
    return value_type{to, in[0].dims};
  }
  if (in.size() == 1) return in[0];
  const std::size_t first_value = op == "where" ? 1 : 0;
  if (op == "where" && in[0].type != dtype::boolean)
    return mismatch(errc::dtype_mismatch, op, in, "the condition must be bool");
  for (std::size_t i = first_value + 1; i < in.size(); ++i)
    if (in[i].type != in[first_value].type)
      return mismatch(errc::dtype_mismatch, op, in, "dtypes differ (no implicit promotion)");
  shape dims = in[0].dims;
  for (std::size_t i = 1; i < in.size(); ++i) {
    auto joined = broadcast_known(dims, in[i].dims);
    if (!joined) return mismatch(errc::shape_mismatch, op, in, joined.error_value().message);
    dims = std::move(*joined);
  }
  return value_type{is_comparison(op) ? dtype::boolean : in[first_value].type, std::move(dims)};
}

expected<value_type> infer_reduce(std::string_view op, const value_type& x, const op_attrs& attrs) {
  const auto rank = static_cast<int64_t>(x.dims.size());
  if (op == "softmax" || op == "log_softmax") {
    AF_TRY_ASSIGN(auto axis, attrs.get_int("axis", -1));
    AF_TRY(normalize_axis(axis, rank, std::string{op}.c_str()));
    return x;
  }
  AF_TRY_ASSIGN(const int64_t keepdims, attrs.get_int("keepdims", 0));
  std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
  if (op == "argmax" || op == "argmin") {
    AF_TRY_ASSIGN(auto axis, attrs.get_int("axis"));
    AF_TRY_ASSIGN(auto a, normalize_axis(axis, rank, std::string{op}.c_str()));
    reduced[static_cast<std::size_t>(a)] = true;
  } else {
    AF_TRY_ASSIGN(auto axes, attrs.get_ints("axes", std::vector<int64_t>{}));
    if (axes.empty()) std::fill(reduced.begin(), reduced.end(), true);
    for (auto axis : axes) {
      AF_TRY_ASSIGN(auto a, normalize_axis(axis, rank, std::string{op}.c_str()));
      reduced[static_cast<std::size_t>(a)] = true;
    }
  }
  value_type out{op == "argmax" || op == "argmin" ? dtype::i64 : x.type, {}};
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[static_cast<std::size_t>(i)]) out.dims.push_back(x.dims[static_cast<std::size_t>(i)]);
    else if (keepdims) out.dims.push_back(1);
  }
  return out;
}

// Python-like slice bounds along one dimension of length n (known), as tensor::slice applies them.
int64_t slice_length(int64_t n, int64_t start, int64_t stop, int64_t step) {
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<int64_t>(start, 0, n);
  stop = std::clamp<int64_t>(stop, start, n);
  return (stop - start + step - 1) / step;
}

expected<value_type> infer_movement(std::string_view op, const value_type& x, const op_attrs& attrs) {
  if (op == "slice") {
    AF_TRY_ASSIGN(auto axis, attrs.get_int("axis"));
    AF_TRY_ASSIGN(auto start, attrs.get_int("start"));
    AF_TRY_ASSIGN(auto stop, attrs.get_int("stop"));
    AF_TRY_ASSIGN(auto step, attrs.get_int("step", 1));
    AF_TRY_ASSIGN(auto a, normalize_axis(axis, static_cast<int64_t>(x.dims.size()), "slice"));
    if (step <= 0) return mismatch(errc::invalid_argument, op, {x}, "step must be positive");
    value_type out = x;
    auto& d = out.dims[static_cast<std::size_t>(a)];
    if (d >= 0) d = slice_length(d, start, stop, step);
    return out;
  }
  if (op == "transpose") {
    AF_TRY_ASSIGN(auto perm, attrs.get_ints("perm"));
    if (perm.size() != x.dims.size()) return mismatch(errc::invalid_argument, op, {x}, "perm must name every axis once");
    value_type out{x.type, {}};
    std::vector<bool> used(perm.size(), false);
    for (auto p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || used[static_cast<std::size_t>(p)])
        return mismatch(errc::invalid_argument, op, {x}, "perm must name every axis once");
      used[static_cast<std::size_t>(p)] = true;
      out.dims.push_back(x.dims[static_cast<std::size_t>(p)]);
    }
    return out;
  }
  AF_TRY_ASSIGN(auto target, attrs.get_ints("shape"));
  shape dims(target);
  if (op == "broadcast_to") {
    auto joined = broadcast_known(x.dims, dims);
    if (!joined || *joined != dims) return mismatch(errc::shape_mismatch, op, {x}, "cannot broadcast to " + to_string(dims));
    return value_type{x.type, dims};
  }
  // reshape: at most one -1, inferred from the element count when that is known.
  const auto unknown = std::count(dims.begin(), dims.end(), -1);
  if (unknown > 1) return mismatch(errc::invalid_argument, op, {x}, "at most one -1 in " + to_string(dims));
  const bool input_known = std::none_of(x.dims.begin(), x.dims.end(), [](int64_t d) { return d < 0; });
  if (input_known) {
    int64_t known = 1;
    for (auto d : dims)
      if (d >= 0) known *= d;
    const int64_t count = numel(x.dims);
    if (unknown == 1) {
      if (known == 0 || count % known != 0)
        return mismatch(errc::shape_mismatch, op, {x}, "cannot reshape to " + to_string(dims));
      *std::find(dims.begin(), dims.end(), -1) = count / known;
    } else if (known != count) {
      return mismatch(errc::shape_mismatch, op, {x}, "cannot reshape to " + to_string(dims));
    }
  }
  return value_type{x.type, dims};
}

expected<value_type> infer_indexing(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs) {
  if (op == "concat" || op == "stack") {
    if (in.empty()) return mismatch(errc::invalid_argument, op, in, "needs at least one input");
    AF_TRY_ASSIGN(auto axis, attrs.get_int("axis", 0));
    const auto rank = static_cast<int64_t>(in[0].dims.size());
    AF_TRY_ASSIGN(auto a, normalize_axis(axis, op == "stack" ? rank + 1 : rank, std::string{op}.c_str()));
    value_type out = in[0];
    for (const auto& t : in) {
      if (t.type != in[0].type) return mismatch(errc::dtype_mismatch, op, in, "dtypes differ");
      if (t.dims.size() != in[0].dims.size()) return mismatch(errc::shape_mismatch, op, in, "ranks differ");
      for (std::size_t d = 0; d < t.dims.size(); ++d)
        if ((op == "stack" || static_cast<int>(d) != a) && t.dims[d] != in[0].dims[d])
          return mismatch(errc::shape_mismatch, op, in, "dimension " + std::to_string(d) + " differs");
    }
    if (op == "stack") {
      out.dims.insert(out.dims.begin() + a, static_cast<int64_t>(in.size()));
      return out;
    }
    int64_t total = 0;
    for (const auto& t : in) total = (total < 0 || t.dims[static_cast<std::size_t>(a)] < 0) ? -1 : total + t.dims[static_cast<std::size_t>(a)];
    out.dims[static_cast<std::size_t>(a)] = total;
    return out;
  }
  if (op == "gather") {
    if (in[1].type != dtype::i32 && in[1].type != dtype::i64) return mismatch(errc::dtype_mismatch, op, in, "indices must be i32 or i64");
    AF_TRY_ASSIGN(auto axis, attrs.get_int("axis", 0));
    AF_TRY_ASSIGN(auto a, normalize_axis(axis, static_cast<int64_t>(in[0].dims.size()), "gather"));
    value_type out{in[0].type, {}};
    for (int i = 0; i < a; ++i) out.dims.push_back(in[0].dims[static_cast<std::size_t>(i)]);
    for (auto d : in[1].dims) out.dims.push_back(d);
    for (std::size_t i = static_cast<std::size_t>(a) + 1; i < in[0].dims.size(); ++i) out.dims.push_back(in[0].dims[i]);
    return out;
  }
  if (op == "one_hot") {
    if (!is_integral(in[0].type)) return mismatch(errc::dtype_mismatch, op, in, "indices must be integers");
    AF_TRY_ASSIGN(auto depth, attrs.get_int("depth"));
    AF_TRY_ASSIGN(auto type_name, attrs.get_string("dtype", std::string{"f32"}));
    AF_TRY_ASSIGN(auto type, parse_dtype(type_name));
    value_type out{type, in[0].dims};
    out.dims.push_back(depth);
    return out;
  }
  // slice_backprop, gather_backprop: the forward input's shape, given as an attribute.
  AF_TRY_ASSIGN(auto dims, attrs.get_ints(op == "slice_backprop" ? "input_shape" : "params_shape"));
  return value_type{in[0].type, shape(dims)};
}

expected<value_type> infer_matmul(const std::vector<value_type>& in, const op_attrs& attrs) {
  if (in[0].type != in[1].type) return mismatch(errc::dtype_mismatch, "matmul", in, "dtypes differ");
  if (in[0].dims.empty() || in[1].dims.empty()) return mismatch(errc::invalid_argument, "matmul", in, "rank-0 operand");
  AF_TRY_ASSIGN(auto ta, attrs.get_int("transpose_a", 0));
  AF_TRY_ASSIGN(auto tb, attrs.get_int("transpose_b", 0));
  shape a = in[0].dims, b = in[1].dims;
  const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a = shape{1, a[0]};
  if (b_vector) b = shape{b[0], 1};
  if (ta && !a_vector) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb && !b_vector) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const int64_t m = a[a.size() - 2], k = a[a.size() - 1], k2 = b[b.size() - 2], n = b[b.size() - 1];
  if (k != k2 && k >= 0 && k2 >= 0) return mismatch(errc::shape_mismatch, "matmul", in, "inner dimensions differ");
  auto batch = broadcast_known(shape(a.begin(), a.end() - 2), shape(b.begin(), b.end() - 2));
  if (!batch) return mismatch(errc::shape_mismatch, "matmul", in, batch.error_value().message);
  shape out = *batch;
  if (!a_vector) out.push_back(m);
  if (!b_vector) out.push_back(n);
  return value_type{in[0].type, out};
}

expected<padding_mode> padding_attr(const op_attrs& attrs) {
  const auto name = attrs.get_string("padding", std::string{"valid"});
  if (!name) return name.error_value();
  if (*name == "same" || *name == "SAME") return padding_mode::same;
  if (*name == "valid" || *name == "VALID") return padding_mode::valid;
  return make_error(errc::invalid_argument, "padding must be 'valid' or 'same', not '" + *name + "'");
}

int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t dilation, padding_mode padding) {
  return in < 0 ? -1 : compute_window(in, k, stride, dilation, padding).out;
}

expected<value_type> infer_spatial(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs) {
  const auto& x = in[0].dims;
  if (x.size() != 4) return mismatch(errc::shape_mismatch, op, in, "the input must be NHWC (rank 4)");
  AF_TRY_ASSIGN(auto padding, padding_attr(attrs));
  if (op == "conv2d") {
    const auto& f = in[1].dims;
    if (in[0].type != in[1].type) return mismatch(errc::dtype_mismatch, op, in, "dtypes differ");
    if (f.size() != 4) return mismatch(errc::shape_mismatch, op, in, "the filter must be HWIO (rank 4)");
    AF_TRY_ASSIGN(auto s, attrs.get_ints("strides", std::vector<int64_t>{1, 1}));
    AF_TRY_ASSIGN(auto d, attrs.get_ints("dilations", std::vector<int64_t>{1, 1}));
    AF_TRY_ASSIGN(auto groups, attrs.get_int("groups", 1));
    if (s.size() != 2 || d.size() != 2) return mismatch(errc::invalid_argument, op, in, "strides and dilations need 2 values");
    if (x[3] >= 0 && f[2] * groups != x[3]) return mismatch(errc::shape_mismatch, op, in, "input channels differ from the filter's");
    return value_type{in[0].type,
                      {x[0], window_out(x[1], f[0], s[0], d[0], padding), window_out(x[2], f[1], s[1], d[1], padding), f[3]}};
  }
  AF_TRY_ASSIGN(auto k, attrs.get_ints("ksize", std::vector<int64_t>{2, 2}));
  AF_TRY_ASSIGN(auto s, attrs.get_ints("strides", std::vector<int64_t>{2, 2}));
  if (k.size() != 2 || s.size() != 2) return mismatch(errc::invalid_argument, op, in, "ksize and strides need 2 values");
  return value_type{in[0].type,
                    {x[0], window_out(x[1], k[0], s[0], 1, padding), window_out(x[2], k[1], s[1], 1, padding), x[3]}};
}

}  // namespace

const op_info* find_op(std::string_view name) noexcept {
  for (const auto& op : table)
    if (op.name == name) return &op;
  return nullptr;
}

std::span<const op_info> all_ops() noexcept { return table; }

std::string to_string(const value_type& t) { return std::string{af::to_string(t.type)} + af::to_string(t.dims); }

expected<value_type> infer_output(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs) {
  const op_info* info = find_op(op);
  if (!info) return make_error(errc::unsupported, "op '" + std::string{op} + "' is not available in graphs");
  if (info->arity >= 0 && static_cast<int>(in.size()) != info->arity)
    return mismatch(errc::invalid_argument, op, in,
                    "takes " + std::to_string(info->arity) + " inputs, got " + std::to_string(in.size()));
  switch (info->category) {
    case op_category::elementwise: return infer_elementwise(op, in, attrs);
    case op_category::reduce: return infer_reduce(op, in[0], attrs);
    case op_category::movement: return infer_movement(op, in[0], attrs);
    case op_category::indexing: return infer_indexing(op, in, attrs);
    case op_category::contraction:
      if (op == "matmul") return infer_matmul(in, attrs);
      if (op == "conv2d_backprop_input" || op == "avg_pool2d_backprop" || op == "conv2d_backprop_filter") {
        // The gradient has the forward input's (or filter's) shape, given as an attribute.
        AF_TRY_ASSIGN(auto dims, attrs.get_ints(op == "conv2d_backprop_filter" ? "filter_shape" : "input_shape"));
        return value_type{in[0].type, shape(dims)};
      }
      if (op == "max_pool2d_backprop") return in[0];
      return infer_spatial(op, in, attrs);
    case op_category::stateful: {
      AF_TRY_ASSIGN(auto dims, attrs.get_ints("shape"));
      AF_TRY_ASSIGN(auto name, attrs.get_string("dtype", std::string{"f32"}));
      AF_TRY_ASSIGN(auto type, parse_dtype(name));
      return value_type{type, shape(dims)};
    }
    case op_category::source:
    case op_category::fused:
      break;
  }
  return make_error(errc::invalid_argument, "op '" + std::string{op} + "' takes its type from where it is made");
}

}  // namespace af::graph
