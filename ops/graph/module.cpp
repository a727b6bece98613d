#include "ops/graph/module.hpp"

#include <algorithm>
#include <set>

namespace af::graph {

namespace {

error invalid(std::string what) { return make_error(errc::invalid_argument, std::move(what)); }

// A spec fits a value the function takes or returns when each of its dims is the function's, or
// the function's is -1 (the signature may promise less than the function accepts, never more).
bool fits(const value_type& spec, const value_type& actual) {
  if (spec.type != actual.type || spec.dims.size() != actual.dims.size()) return false;
  for (std::size_t i = 0; i < spec.dims.size(); ++i)
    if (spec.dims[i] != actual.dims[i] && actual.dims[i] != -1) return false;
  return true;
}

std::vector<tensor_spec> inputs_of(const graph& g) {
  std::vector<tensor_spec> out;
  for (node_id p : g.parameters()) out.push_back({g.at(p).label, g.at(p).out});
  return out;
}

std::vector<tensor_spec> outputs_of(const graph& g) {
  std::vector<tensor_spec> out;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) out.push_back({g.output_names()[i], g.at(g.outputs()[i]).out});
  return out;
}

expected<void> unique_names(const std::vector<tensor_spec>& specs, const std::string& where) {
  std::set<std::string_view> seen;
  for (const auto& s : specs) {
    if (s.name.empty()) return invalid(where + ": a value has no name");
    if (!seen.insert(s.name).second) return invalid(where + ": the name '" + s.name + "' is used twice");
  }
  return {};
}

expected<void> matches(const std::vector<tensor_spec>& promised, const std::vector<tensor_spec>& actual,
                       const std::string& where) {
  if (promised.size() != actual.size())
    return invalid(where + ": " + std::to_string(promised.size()) + " listed, the function has " + std::to_string(actual.size()));
  for (std::size_t i = 0; i < promised.size(); ++i) {
    if (promised[i].name != actual[i].name)
      return invalid(where + " " + std::to_string(i) + ": '" + promised[i].name + "' listed, the function's is '" +
                     actual[i].name + "'");
    if (!fits(promised[i].type, actual[i].type))
      return invalid(where + " '" + promised[i].name + "': " + to_string(promised[i].type) + " listed, the function's is " +
                     to_string(actual[i].type));
  }
  return {};
}

}  // namespace

const graph* module::find_function(std::string_view name) const noexcept {
  for (const auto& f : functions)
    if (f.name == name) return &f.body;
  return nullptr;
}

namespace {

bool batch_first(const value_type& t) { return !t.dims.empty() && t.dims[0] == -1; }

const tensor_spec* output_named(const signature& s, std::string_view name) {
  for (const auto& o : s.outputs)
    if (o.name == name) return &o;
  return nullptr;
}

template <typename Invalid>
expected<void> check_regression(const signature& s, const Invalid& invalid) {
  const auto* out = output_named(s, "outputs");
  if (s.outputs.size() != 1 || !out) return invalid("a regression has one output, named 'outputs'");
  const auto& dims = out->type.dims;
  if (out->type.type != dtype::f32 || !batch_first(out->type) || dims.size() > 2 || (dims.size() == 2 && dims[1] != 1))
    return invalid("'outputs' must be f32 [-1] or [-1, 1], not " + to_string(out->type));
  return {};
}

template <typename Invalid>
expected<void> check_classification(const signature& s, const Invalid& invalid) {
  const auto* scores = output_named(s, "scores");
  const auto* classes = output_named(s, "classes");
  if (!scores && !classes) return invalid("a classification has an output 'scores', 'classes' or both");
  if (s.outputs.size() != static_cast<std::size_t>(scores != nullptr) + static_cast<std::size_t>(classes != nullptr))
    return invalid("a classification's outputs are 'scores' and 'classes' only");
  if (scores && (scores->type.type != dtype::f32 || scores->type.dims.size() != 2 || !batch_first(scores->type)))
    return invalid("'scores' must be f32 [-1, classes], not " + to_string(scores->type));
  if (classes && (!(is_integral(classes->type.type) || is_string(classes->type.type)) || classes->type.dims.size() != 2 ||
                  !batch_first(classes->type)))
    return invalid("'classes' must be integers or strings [-1, classes], not " + to_string(classes->type));
  if (scores && classes && scores->type.dims[1] != classes->type.dims[1]) return invalid("'scores' and 'classes' must have the same shape");
  return {};
}

// What a classify or regress signature promises, so that a server can turn its outputs into TF
// Serving's results without guessing.
expected<void> check_method(const signature& s, const std::string& where) {
  const std::string_view method = s.method_name;
  if (method.empty() || method == predict_method) return {};
  auto invalid = [&](const std::string& what) { return make_error(errc::invalid_argument, where + " (" + s.method_name + "): " + what); };
  if (method != classify_method && method != regress_method)
    return make_error(errc::invalid_argument, where + ": method '" + s.method_name + "' is none of " + std::string{predict_method} + ", " +
                                                  std::string{classify_method} + ", " + std::string{regress_method});
  AF_TRY(method == regress_method ? check_regression(s, invalid) : check_classification(s, invalid));
  if (s.inputs.empty()) return invalid("no inputs: each is a feature of the examples");
  for (const auto& in : s.inputs)
    if (!batch_first(in.type)) return invalid("input '" + in.name + "' must have the batch (-1) as its first dimension");
  return {};
}

}  // namespace

const signature* module::find_signature(std::string_view name) const noexcept {
  for (const auto& s : signatures)
    if (s.name == name) return &s;
  return nullptr;
}

expected<void> module::verify() const {
  std::set<std::string_view> names;
  for (const auto& f : functions) {
    const std::string where = "function '" + f.name + "'";
    if (f.name.empty()) return invalid("a function has no name");
    if (!names.insert(f.name).second) return invalid(where + " is defined twice");
    auto checked = f.body.verify();
    if (!checked) return invalid(where + ": " + checked.error_value().message);
    AF_TRY(unique_names(inputs_of(f.body), where + " inputs"));
    AF_TRY(unique_names(outputs_of(f.body), where + " outputs"));
  }
  names.clear();
  for (const auto& s : signatures) {
    const std::string where = "signature '" + s.name + "'";
    if (s.name.empty()) return invalid("a signature has no name");
    if (!names.insert(s.name).second) return invalid(where + " is defined twice");
    const graph* body = find_function(s.function);
    if (!body) return invalid(where + " calls function '" + s.function + "', which the module lacks");
    auto params = inputs_of(*body);
    if (s.inputs.size() + s.captures.size() != params.size())
      return invalid(where + ": " + std::to_string(s.inputs.size()) + " inputs and " + std::to_string(s.captures.size()) +
                     " captures listed, the function has " + std::to_string(params.size()) + " parameters");
    for (std::size_t i = 0; i < s.captures.size(); ++i)
      if (s.captures[i] != params[s.inputs.size() + i].name)
        return invalid(where + " capture " + std::to_string(i) + ": '" + s.captures[i] + "' listed, the function's is '" +
                       params[s.inputs.size() + i].name + "'");
    params.resize(s.inputs.size());
    AF_TRY(matches(s.inputs, params, where + " input"));
    AF_TRY(matches(s.outputs, outputs_of(*body), where + " output"));
    AF_TRY(check_method(s, where));
  }
  return {};
}

signature signature_of(std::string name, std::string function, const graph& g) {
  return {std::move(name), std::move(function), inputs_of(g), outputs_of(g), {}};
}

signature signature_of(std::string name, std::string function, const graph& g, std::size_t inputs) {
  auto s = signature_of(std::move(name), std::move(function), g);
  inputs = std::min(inputs, s.inputs.size());
  for (std::size_t i = inputs; i < s.inputs.size(); ++i) s.captures.push_back(s.inputs[i].name);
  s.inputs.resize(inputs);
  return s;
}

}  // namespace af::graph
