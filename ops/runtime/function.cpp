#include "ops/runtime/function.hpp"

#include <filesystem>

#include "ops/graph/autodiff.hpp"
#include "ops/runtime/backend.hpp"
#include "ops/runtime/executor.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/passes/passes.hpp"

namespace af {

namespace {

std::string site(const where_from& from) {
  return std::filesystem::path(from.file_name()).filename().string() + ":" + std::to_string(from.line());
}

// Operators cannot take the caller's source location; their errors name the op and the shapes.
sym apply_at(const std::string& op, const std::vector<sym>& inputs, op_attrs attrs, const std::string& at) {
  const std::string where = at.empty() ? "" : " (at " + at + ")";
  if (inputs.empty()) throw trace_error(make_error(errc::invalid_argument, op + ": no inputs" + where));
  auto* b = inputs.front().builder();
  std::vector<graph::node_id> ids;
  for (const auto& s : inputs) {
    if (s.builder() != b) throw trace_error(make_error(errc::invalid_argument, op + ": inputs come from different traces" + where));
    ids.push_back(s.id());
  }
  auto made = b->add(op, std::move(ids), std::move(attrs), at);
  if (!made) throw trace_error(make_error(made.error_value().code, made.error_value().message + where));
  auto placed = check_placement(b->placement(), *graph::find_op(op));  // add() knows the op
  if (!placed) throw trace_error(make_error(placed.error_value().code, placed.error_value().message + where));
  return sym{b, *made};
}

sym binary(const char* op, const sym& a, const sym& b) { return apply_at(op, {a, b}, {}, ""); }

std::string padding_name(padding_mode p) { return p == padding_mode::same ? "same" : "valid"; }

// A signature fits a cached one when dtypes and ranks agree and each fixed dim matches.
bool fits(const std::vector<graph::value_type>& pattern, const std::vector<graph::value_type>& actual) {
  if (pattern.size() != actual.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i].type != actual[i].type || pattern[i].dims.size() != actual[i].dims.size()) return false;
    for (std::size_t d = 0; d < pattern[i].dims.size(); ++d)
      if (pattern[i].dims[d] >= 0 && pattern[i].dims[d] != actual[i].dims[d]) return false;
  }
  return true;
}

std::string signature_text(const std::vector<graph::value_type>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + graph::to_string(s[i]);
  return out + ")";
}

}  // namespace

void fail_trace(errc code, const std::string& message, const where_from& from) {
  throw trace_error(make_error(code, message + " (at " + site(from) + ")"));
}

sym apply(const std::string& op, const std::vector<sym>& inputs, op_attrs attrs, where_from from) {
  return apply_at(op, inputs, std::move(attrs), site(from));
}

sym constant_like(const sym& like, double value) {
  auto t = tensor::full({}, value, like.dtype_of());
  if (!t) throw trace_error(t.error_value());
  return sym{like.builder(), like.builder()->constant(*t)};
}

sym constant(const sym& in_trace_of, const tensor& value) {
  return sym{in_trace_of.builder(), in_trace_of.builder()->constant(value)};
}

sym operator+(const sym& a, const sym& b) { return binary("add", a, b); }
sym operator-(const sym& a, const sym& b) { return binary("sub", a, b); }
sym operator*(const sym& a, const sym& b) { return binary("mul", a, b); }
sym operator/(const sym& a, const sym& b) { return binary("div", a, b); }
sym operator-(const sym& a) { return apply_at("neg", {a}, {}, ""); }
sym operator+(const sym& a, double b) { return a + constant_like(a, b); }
sym operator-(const sym& a, double b) { return a - constant_like(a, b); }
sym operator*(const sym& a, double b) { return a * constant_like(a, b); }
sym operator/(const sym& a, double b) { return a / constant_like(a, b); }
sym operator+(double a, const sym& b) { return constant_like(b, a) + b; }
sym operator-(double a, const sym& b) { return constant_like(b, a) - b; }
sym operator*(double a, const sym& b) { return constant_like(b, a) * b; }
sym operator/(double a, const sym& b) { return constant_like(b, a) / b; }

sym maximum(const sym& a, const sym& b, where_from from) { return apply("maximum", {a, b}, {}, from); }
sym minimum(const sym& a, const sym& b, where_from from) { return apply("minimum", {a, b}, {}, from); }
sym pow(const sym& a, const sym& b, where_from from) { return apply("pow", {a, b}, {}, from); }
sym abs(const sym& x, where_from from) { return apply("abs", {x}, {}, from); }
sym relu(const sym& x, where_from from) { return apply("relu", {x}, {}, from); }
sym exp(const sym& x, where_from from) { return apply("exp", {x}, {}, from); }
sym log(const sym& x, where_from from) { return apply("log", {x}, {}, from); }
sym sqrt(const sym& x, where_from from) { return apply("sqrt", {x}, {}, from); }
sym rsqrt(const sym& x, where_from from) { return apply("rsqrt", {x}, {}, from); }
sym tanh(const sym& x, where_from from) { return apply("tanh", {x}, {}, from); }
sym sigmoid(const sym& x, where_from from) { return apply("sigmoid", {x}, {}, from); }
sym erf(const sym& x, where_from from) { return apply("erf", {x}, {}, from); }
sym where(const sym& condition, const sym& a, const sym& b, where_from from) {
  return apply("where", {condition, a, b}, {}, from);
}
sym greater(const sym& a, const sym& b, where_from from) { return apply("greater", {a, b}, {}, from); }
sym less(const sym& a, const sym& b, where_from from) { return apply("less", {a, b}, {}, from); }

device_scope::device_scope(const sym& in_trace_of, std::string device)
    : builder_(in_trace_of.builder()), previous_(builder_->placement()) {
  auto known = check_device_kind(device);
  if (!known) throw trace_error(known.error_value());
  builder_->place_on(std::move(device));
}

device_scope::~device_scope() { builder_->place_on(std::move(previous_)); }

std::vector<sym> gradients(const sym& y, const std::vector<sym>& xs, where_from from) {
  std::vector<graph::node_id> ids;
  for (const auto& x : xs) {
    if (x.builder() != y.builder())
      throw trace_error(make_error(errc::invalid_argument, "gradients at " + site(from) + ": values from different traces"));
    ids.push_back(x.id());
  }
  auto grads = graph::add_gradients(*y.builder(), y.id(), ids);
  if (!grads) throw trace_error(with_context(grads.error_value(), "gradients at " + site(from)));
  std::vector<sym> out;
  for (auto id : *grads) out.emplace_back(y.builder(), id);
  return out;
}
sym gelu(const sym& x, bool approximate, where_from from) {
  return apply("gelu", {x}, {{"approximate", int64_t{approximate ? 1 : 0}}}, from);
}
sym cast(const sym& x, dtype to, where_from from) { return apply("cast", {x}, {{"dtype", std::string{to_string(to)}}}, from); }
sym matmul(const sym& a, const sym& b, bool transpose_a, bool transpose_b, where_from from) {
  return apply("matmul", {a, b}, {{"transpose_a", int64_t{transpose_a}}, {"transpose_b", int64_t{transpose_b}}}, from);
}
sym conv2d(const sym& input, const sym& filter, const conv2d_options& o, where_from from) {
  return apply("conv2d", {input, filter},
               {{"strides", std::vector<int64_t>{o.strides[0], o.strides[1]}},
                {"dilations", std::vector<int64_t>{o.dilations[0], o.dilations[1]}},
                {"padding", padding_name(o.padding)},
                {"groups", int64_t{o.groups}}},
               from);
}
static op_attrs pool_attrs(const pool_options& o) {
  return {{"ksize", std::vector<int64_t>{o.ksize[0], o.ksize[1]}},
          {"strides", std::vector<int64_t>{o.strides[0], o.strides[1]}},
          {"padding", padding_name(o.padding)}};
}
sym max_pool2d(const sym& x, const pool_options& o, where_from from) { return apply("max_pool2d", {x}, pool_attrs(o), from); }
sym avg_pool2d(const sym& x, const pool_options& o, where_from from) { return apply("avg_pool2d", {x}, pool_attrs(o), from); }
sym reduce_sum(const sym& x, std::vector<int64_t> axes, bool keepdims, where_from from) {
  return apply("reduce_sum", {x}, {{"axes", std::move(axes)}, {"keepdims", int64_t{keepdims}}}, from);
}
sym reduce_mean(const sym& x, std::vector<int64_t> axes, bool keepdims, where_from from) {
  return apply("reduce_mean", {x}, {{"axes", std::move(axes)}, {"keepdims", int64_t{keepdims}}}, from);
}
sym reduce_max(const sym& x, std::vector<int64_t> axes, bool keepdims, where_from from) {
  return apply("reduce_max", {x}, {{"axes", std::move(axes)}, {"keepdims", int64_t{keepdims}}}, from);
}
sym softmax(const sym& x, int64_t axis, where_from from) { return apply("softmax", {x}, {{"axis", axis}}, from); }
sym log_softmax(const sym& x, int64_t axis, where_from from) { return apply("log_softmax", {x}, {{"axis", axis}}, from); }
sym reshape(const sym& x, std::vector<int64_t> dims, where_from from) {
  return apply("reshape", {x}, {{"shape", std::move(dims)}}, from);
}
sym slice(const sym& x, int64_t axis, int64_t start, int64_t stop, int64_t step, where_from from) {
  return apply("slice", {x}, {{"axis", axis}, {"start", start}, {"stop", stop}, {"step", step}}, from);
}
sym concat(const std::vector<sym>& parts, int64_t axis, where_from from) { return apply("concat", parts, {{"axis", axis}}, from); }
sym stack(const std::vector<sym>& parts, int64_t axis, where_from from) { return apply("stack", parts, {{"axis", axis}}, from); }
sym gather(const sym& params, const sym& indices, int64_t axis, where_from from) {
  return apply("gather", {params, indices}, {{"axis", axis}}, from);
}
sym one_hot(const sym& indices, int64_t depth, dtype type, where_from from) {
  return apply("one_hot", {indices}, {{"depth", depth}, {"dtype", std::string{to_string(type)}}}, from);
}
sym stateless_random_uniform(const sym& seed, std::vector<int64_t> dims, int64_t salt, dtype type, where_from from) {
  return apply("stateless_random_uniform", {seed},
               {{"shape", std::move(dims)}, {"salt", salt}, {"dtype", std::string{to_string(type)}}}, from);
}
sym transpose(const sym& x, std::vector<int64_t> perm, where_from from) {
  return apply("transpose", {x}, {{"perm", std::move(perm)}}, from);
}
sym broadcast_to(const sym& x, std::vector<int64_t> dims, where_from from) {
  return apply("broadcast_to", {x}, {{"shape", std::move(dims)}}, from);
}

expected<graph::graph> trace_graph(const function::body& fn, const std::vector<graph::value_type>& signature,
                                   const std::vector<std::string>& input_names,
                                   const std::vector<std::string>& output_names) {
  if (!input_names.empty() && input_names.size() != signature.size())
    return make_error(errc::invalid_argument, std::to_string(input_names.size()) + " input names for " +
                                                  std::to_string(signature.size()) + " arguments");
  graph::graph_builder b;
  std::vector<sym> args;
  for (std::size_t i = 0; i < signature.size(); ++i)
    args.emplace_back(&b, b.parameter(signature[i], input_names.empty() ? "arg" + std::to_string(i) : input_names[i]));
  std::vector<sym> results;
  try {
    results = fn(args);
  } catch (const trace_error& e) {
    return e.err();
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument, std::string{"the traced function threw: "} + e.what());
  } catch (...) {
    return make_error(errc::invalid_argument, "the traced function threw a non-standard exception");
  }
  std::vector<graph::node_id> outputs;
  for (const auto& r : results) {
    if (r.builder() != &b) return make_error(errc::invalid_argument, "the traced function returned a value of another trace");
    outputs.push_back(r.id());
  }
  if (!output_names.empty() && output_names.size() != outputs.size())
    return make_error(errc::invalid_argument, std::to_string(output_names.size()) + " output names for " +
                                                  std::to_string(outputs.size()) + " results");
  return std::move(b).finish(std::move(outputs), output_names);
}

function::function(body fn, function_options options) : fn_(std::move(fn)), options_(std::move(options)) {}

int64_t function::trace_count() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return traces_;
}

expected<std::shared_ptr<const concrete_function>> function::concrete(const std::vector<graph::value_type>& signature) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (const auto& c : cache_)
    if (fits(c->signature, signature)) return c;
  std::vector<graph::value_type> traced_signature = signature;
  if (options_.input_signature) {
    if (!fits(*options_.input_signature, signature))
      return make_error(errc::invalid_argument, "arguments " + signature_text(signature) +
                                                    " do not fit the function's input signature " +
                                                    signature_text(*options_.input_signature));
    traced_signature = *options_.input_signature;
  }
  ++traces_;
  AF_TRY_ASSIGN(auto traced, trace_graph(fn_, traced_signature, options_.input_names, options_.output_names));
  AF_TRY(traced.verify());
  graph::graph optimized = traced;
  if (options_.optimize) {
    AF_TRY_ASSIGN(optimized, graph::optimize(traced));
  }
  auto made = std::make_shared<const concrete_function>(
      concrete_function{std::move(traced_signature), std::move(traced), std::move(optimized)});
  cache_.push_back(made);
  return made;
}

expected<std::vector<tensor>> function::operator()(const std::vector<tensor>& args) { return call(args, {}); }

expected<std::vector<tensor>> function::call(const std::vector<tensor>& args, const graph::output_ready& on_output) {
  std::vector<graph::value_type> signature;
  for (const auto& a : args) {
    if (!a.defined()) return make_error(errc::invalid_argument, "argument " + std::to_string(signature.size()) + " is undefined");
    signature.push_back({a.type(), a.shape()});
  }
  AF_TRY_ASSIGN(auto c, concrete(signature));
  return execute(c->optimized, args, on_output);
}

}  // namespace af
