#include "ops/graph/op_def.hpp"

#include <algorithm>
#include <type_traits>
#include <variant>

#include "ops/graph/defs/families.hpp"

namespace af::graph {

std::string_view to_string(op_category c) noexcept {
  switch (c) {
    case op_category::source: return "source";
    case op_category::elementwise_unary: return "elementwise_unary";
    case op_category::elementwise_binary: return "elementwise_binary";
    case op_category::comparison: return "comparison";
    case op_category::selection: return "selection";
    case op_category::conversion: return "conversion";
    case op_category::reduction: return "reduction";
    case op_category::movement: return "movement";
    case op_category::transfer: return "transfer";
    case op_category::indexing: return "indexing";
    case op_category::contraction: return "contraction";
    case op_category::pooling: return "pooling";
    case op_category::random: return "random";
    case op_category::fused: return "fused";
  }
  return "?";
}

std::string_view to_string(attr_kind k) noexcept {
  switch (k) {
    case attr_kind::integer: return "an integer";
    case attr_kind::number: return "a number";
    case attr_kind::integers: return "a list of integers";
    case attr_kind::numbers: return "a list of numbers";
    case attr_kind::string: return "a string";
  }
  return "?";
}

std::string to_string(const value_type& t) { return std::string{af::to_string(t.type)} + af::to_string(t.dims); }

gradient_spec differentiable(gradient_rule rule) { return {gradient_spec::kind::rule, std::move(rule), {}}; }
gradient_spec no_gradient_flows(std::string why) { return {gradient_spec::kind::none_flows, {}, std::move(why)}; }
gradient_spec not_differentiable(std::string why) { return {gradient_spec::kind::unsupported, {}, std::move(why)}; }

const attr_spec* op_def::find_attr(std::string_view attr) const noexcept {
  for (const auto& a : attrs)
    if (a.name == attr) return &a;
  return nullptr;
}

namespace {

struct op_set {
  std::vector<op_def> defs;
  std::vector<const op_def*> sorted;

  op_set() {
    defs::define_sources(defs);
    defs::define_elementwise_unary(defs);
    defs::define_elementwise_binary(defs);
    defs::define_comparisons(defs);
    defs::define_reductions(defs);
    defs::define_movement(defs);
    defs::define_indexing(defs);
    defs::define_contractions(defs);
    defs::define_pooling(defs);
    defs::define_random(defs);
    for (const auto& d : defs) sorted.push_back(&d);
    std::sort(sorted.begin(), sorted.end(), [](const op_def* a, const op_def* b) { return a->name < b->name; });
  }
};

const op_set& ops() {
  static const op_set set;
  return set;
}

// Whether `v` holds `kind` (an integer is accepted where a number is asked, and a list of
// integers where a list of numbers is: attributes written in C++ as {1, 2} arrive as integers).
bool fits(const attr_value& v, attr_kind kind) {
  switch (kind) {
    case attr_kind::integer: return std::holds_alternative<int64_t>(v);
    case attr_kind::number: return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
    case attr_kind::integers: return std::holds_alternative<std::vector<int64_t>>(v);
    case attr_kind::numbers:
      return std::holds_alternative<std::vector<double>>(v) || std::holds_alternative<std::vector<int64_t>>(v);
    case attr_kind::string: return std::holds_alternative<std::string>(v);
  }
  return false;
}

}  // namespace

const op_def* find_op(std::string_view name) noexcept {
  const auto& sorted = ops().sorted;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), name,
                             [](const op_def* d, std::string_view n) { return d->name < n; });
  return it != sorted.end() && (*it)->name == name ? *it : nullptr;
}

std::span<const op_def* const> all_ops() noexcept { return ops().sorted; }

expected<op_attrs> complete_attrs(const op_def& def, const op_attrs& attrs) {
  for (const auto& [name, value] : attrs.entries()) {
    const attr_spec* spec = def.find_attr(name);
    if (!spec)
      return make_error(errc::invalid_argument, "op '" + def.name + "' has no attribute '" + name + "'");
    if (!fits(value, spec->kind))
      return make_error(errc::invalid_argument, "op '" + def.name + "': attribute '" + name + "' must be " +
                                                    std::string{to_string(spec->kind)});
  }
  op_attrs out = attrs;
  for (const auto& spec : def.attrs) {
    if (attrs.find(spec.name)) continue;
    if (!spec.fallback)
      return make_error(errc::invalid_argument, "op '" + def.name + "' needs attribute '" + spec.name + "'");
    out.set(spec.name, *spec.fallback);
  }
  return out;
}

expected<value_type> infer_output(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs) {
  const op_def* def = find_op(op);
  if (!def) return make_error(errc::unsupported, "op '" + std::string{op} + "' is not available in graphs");
  if (!def->infer)
    return make_error(errc::invalid_argument, "op '" + std::string{op} + "' takes its type from where it is made");
  if (def->arity >= 0 && static_cast<int>(in.size()) != def->arity)
    return make_error(errc::invalid_argument, "op '" + def->name + "' takes " + std::to_string(def->arity) +
                                                  " inputs, got " + std::to_string(in.size()));
  if (def->arity < 0 && in.empty())
    return make_error(errc::invalid_argument, "op '" + def->name + "' needs at least one input");
  // Strings pass through a graph (a parameter returned as an output) but no op computes on them:
  // every kernel here is numeric.
  for (std::size_t k = 0; k < in.size(); ++k)
    if (is_string(in[k].type))
      return make_error(errc::dtype_mismatch, "op '" + def->name + "' takes no string inputs (input " + std::to_string(k) +
                                                  " is " + to_string(in[k]) + ")");
  AF_TRY_ASSIGN(auto full, complete_attrs(*def, attrs));
  AF_TRY_ASSIGN(auto out, def->infer(in, full));
  if (is_string(out.type)) return make_error(errc::dtype_mismatch, "op '" + def->name + "' cannot make strings");
  return out;
}

bool fusible(const op_def& def, const op_attrs& attrs, dtype type) {
  if (!def.fusion || (type != dtype::f32 && type != dtype::f64)) return false;
  auto full = complete_attrs(def, attrs);  // fused forms read complete attributes
  return full && def.fusion(*full).has_value();
}

}  // namespace af::graph
