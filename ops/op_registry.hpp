#pragma once

// Ops by name: what a device actor (or a graph interpreter) calls when a message names an op.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// One attribute value: an integer, a float, a list of integers, a string or a list of floats.
/// (Indices are part of the wire format of device messages: new kinds go at the end.)
using attr_value = std::variant<int64_t, double, std::vector<int64_t>, std::string, std::vector<double>>;

/// Named attributes of one op call ("axis" -> 1, "padding" -> "same"), in insertion order.
class op_attrs {
 public:
  using entry = std::pair<std::string, attr_value>;

  op_attrs() = default;
  op_attrs(std::initializer_list<entry> init);

  /// Sets or replaces `name`.
  op_attrs& set(std::string name, attr_value value);
  const attr_value* find(std::string_view name) const noexcept;
  const std::vector<entry>& entries() const noexcept { return entries_; }
  std::vector<entry>& entries() noexcept { return entries_; }

  /// The attribute as a given kind; `fallback` when absent (invalid_argument naming the attribute
  /// when absent without fallback or of another kind). An int is accepted where a float is asked.
  expected<int64_t> get_int(std::string_view name, std::optional<int64_t> fallback = {}) const;
  expected<double> get_float(std::string_view name, std::optional<double> fallback = {}) const;
  expected<std::vector<int64_t>> get_ints(std::string_view name,
                                          std::optional<std::vector<int64_t>> fallback = {}) const;
  /// A list of floats; a list of integers is accepted and converted.
  expected<std::vector<double>> get_floats(std::string_view name,
                                           std::optional<std::vector<double>> fallback = {}) const;
  expected<std::string> get_string(std::string_view name,
                                   std::optional<std::string> fallback = {}) const;

  friend bool operator==(const op_attrs&, const op_attrs&) = default;

 private:
  std::vector<entry> entries_;
};

/// A kernel: input tensors and attributes to output tensors, or an error.
using op_fn = std::function<expected<std::vector<tensor>>(const std::vector<tensor>&, const op_attrs&)>;

/// Name -> kernel. Copyable: a device takes a snapshot of the table it runs.
class op_registry {
 public:
  /// Adds `name`, replacing an op of that name.
  void add(std::string name, op_fn fn);
  bool contains(std::string_view name) const;
  /// Sorted names of every op.
  std::vector<std::string> names() const;
  /// Runs `name`. invalid_argument naming an unknown op; a kernel's error comes back with the op's
  /// name in its message; an exception from a kernel becomes invalid_argument (never a crash).
  expected<std::vector<tensor>> run(std::string_view name, const std::vector<tensor>& inputs,
                                    const op_attrs& attrs) const;

 private:
  std::map<std::string, op_fn, std::less<>> ops_;
};

/// Adds the CPU kernel of every op definition (ops/graph/op_def.hpp): each entry checks the arity
/// and the attributes against the op's schema (filling in defaults) before it calls the kernel.
void register_cpu_kernels(op_registry& registry);
/// A shared registry holding the CPU kernels, built on first use.
std::shared_ptr<const op_registry> default_op_registry();

/// invalid_argument "op 'name' takes n inputs, got m" unless inputs.size() == n.
expected<void> expect_inputs(std::string_view op, const std::vector<tensor>& inputs, std::size_t n);

}  // namespace af
