#pragma once

// Private to ops/graph: the op families (one file each under ops/graph/defs/) and what their
// definitions share. Adding an op to a family touches only that family's file; a new family also
// adds its define_ function here and to the op set in op_def.cpp.

#include <string>
#include <vector>

#include "ops/graph/gradient_emitter.hpp"
#include "ops/graph/op_def.hpp"

namespace af::graph::defs {

void define_sources(std::vector<op_def>& out);
void define_elementwise_unary(std::vector<op_def>& out);
void define_elementwise_binary(std::vector<op_def>& out);
void define_comparisons(std::vector<op_def>& out);  // and where, cast
void define_reductions(std::vector<op_def>& out);
void define_movement(std::vector<op_def>& out);  // and copy
void define_indexing(std::vector<op_def>& out);
void define_contractions(std::vector<op_def>& out);
void define_pooling(std::vector<op_def>& out);
void define_random(std::vector<op_def>& out);

// -- shared by the definitions ---------------------------------------------------------------------

/// A definition with its name, category and arity set; the family fills in the rest.
op_def basic_def(std::string name, op_category category, int arity);

/// "add of f32[2], f32[3]"
std::string describe(std::string_view op, const std::vector<value_type>& in);
error mismatch(errc code, std::string_view op, const std::vector<value_type>& in, const std::string& why);
/// NumPy broadcasting where -1 is a dimension known only at run time: -1 against 1 or -1 stays
/// unknown, -1 against n > 1 becomes n (anything else would fail at run time).
expected<shape> broadcast_known(const shape& a, const shape& b);

/// A kernel's single output as the kernel table's list.
expected<std::vector<tensor>> one(expected<tensor> t);
/// invalid_argument unless `in` holds `n` tensors (the kernel table checks arity before calling).
expected<void> arity(const op_def& def, const std::vector<tensor>& in);

inline attr_spec integer_attr(std::string name, std::optional<int64_t> fallback = {}) {
  return {std::move(name), attr_kind::integer, fallback ? std::optional<attr_value>{*fallback} : std::nullopt};
}
inline attr_spec number_attr(std::string name, std::optional<double> fallback = {}) {
  return {std::move(name), attr_kind::number, fallback ? std::optional<attr_value>{*fallback} : std::nullopt};
}
inline attr_spec integers_attr(std::string name, std::optional<std::vector<int64_t>> fallback = {}) {
  return {std::move(name), attr_kind::integers, fallback ? std::optional<attr_value>{*fallback} : std::nullopt};
}
inline attr_spec string_attr(std::string name, std::optional<std::string> fallback = {}) {
  return {std::move(name), attr_kind::string, fallback ? std::optional<attr_value>{*fallback} : std::nullopt};
}

/// Shape attributes as shapes ("input_shape", "shape", ...).
shape shape_attr(const op_attrs& a, std::string_view name);
/// Attributes of a complete set (complete_attrs ran): present and of the schema's kind.
int64_t int_attr(const op_attrs& a, std::string_view name);
double number_of(const op_attrs& a, std::string_view name);
std::vector<int64_t> ints_attr(const op_attrs& a, std::string_view name);
std::string string_of(const op_attrs& a, std::string_view name);

}  // namespace af::graph::defs
