#include "ops/op_registry.hpp"

#include <exception>
#include <type_traits>


namespace af {

// -- attributes ---------------------------------------------------------------------------------

op_attrs::op_attrs(std::initializer_list<entry> init) {
  for (const auto& e : init) set(e.first, e.second);
}

op_attrs& op_attrs::set(std::string name, attr_value value) {
  for (auto& e : entries_)
    if (e.first == name) {
      e.second = std::move(value);
      return *this;
    }
  entries_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const attr_value* op_attrs::find(std::string_view name) const noexcept {
  for (const auto& e : entries_)
    if (e.first == name) return &e.second;
  return nullptr;
}

namespace {

template <class T>
expected<T> get_as(const op_attrs& attrs, std::string_view name, std::optional<T> fallback,
                   const char* kind) {
  const attr_value* v = attrs.find(name);
  if (!v) {
    if (fallback) return std::move(*fallback);
    return make_error(errc::invalid_argument, "missing attribute '" + std::string{name} + "'");
  }
  if (const T* x = std::get_if<T>(v)) return *x;
  if constexpr (std::is_same_v<T, double>)
    if (const int64_t* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return make_error(errc::invalid_argument,
                    "attribute '" + std::string{name} + "' is not " + kind);
}

}  // namespace

expected<int64_t> op_attrs::get_int(std::string_view name, std::optional<int64_t> fallback) const {
  return get_as<int64_t>(*this, name, fallback, "an integer");
}
expected<double> op_attrs::get_float(std::string_view name, std::optional<double> fallback) const {
  return get_as<double>(*this, name, fallback, "a number");
}
expected<std::vector<int64_t>> op_attrs::get_ints(std::string_view name,
                                                  std::optional<std::vector<int64_t>> fallback) const {
  return get_as<std::vector<int64_t>>(*this, name, std::move(fallback), "a list of integers");
}
expected<std::vector<double>> op_attrs::get_floats(std::string_view name,
                                                   std::optional<std::vector<double>> fallback) const {
  if (const attr_value* v = find(name))
    if (const auto* ints = std::get_if<std::vector<int64_t>>(v)) return std::vector<double>(ints->begin(), ints->end());
  return get_as<std::vector<double>>(*this, name, std::move(fallback), "a list of numbers");
}
expected<std::string> op_attrs::get_string(std::string_view name,
                                           std::optional<std::string> fallback) const {
  return get_as<std::string>(*this, name, std::move(fallback), "a string");
}

// -- registry -----------------------------------------------------------------------------------

void op_registry::add(std::string name, op_fn fn) { ops_[std::move(name)] = std::move(fn); }

bool op_registry::contains(std::string_view name) const { return ops_.find(name) != ops_.end(); }

std::vector<std::string> op_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, fn] : ops_) out.push_back(name);
  return out;
}

expected<std::vector<tensor>> op_registry::run(std::string_view name,
                                               const std::vector<tensor>& inputs,
                                               const op_attrs& attrs) const {
  auto it = ops_.find(name);
  if (it == ops_.end())
    return make_error(errc::invalid_argument, "unknown op '" + std::string{name} + "'");
  // Every registered kernel is numeric, as every graph op is (op_def.cpp's infer_output).
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (is_string(inputs[k].type()))
      return make_error(errc::dtype_mismatch, "op '" + std::string{name} + "' takes no string inputs (input " + std::to_string(k) + ")");
  auto result = guarded("kernel", [&] { return it->second(inputs, attrs); });
  if (result) return result;
  // Kernels usually name themselves already ("matmul: ..."); make sure every error does.
  error err = std::move(result).error_value();
  return err.message.find(name) == std::string::npos ? with_context(std::move(err), name) : err;
}

expected<void> expect_inputs(std::string_view op, const std::vector<tensor>& inputs, std::size_t n) {
  if (inputs.size() == n) return {};
  return make_error(errc::invalid_argument, "op '" + std::string{op} + "' takes " + std::to_string(n) +
                                                " inputs, got " + std::to_string(inputs.size()));
}

}  // namespace af
