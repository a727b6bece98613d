// What the op definitions share: error texts, broadcasting of partly known shapes, attribute reads.
#include <algorithm>

#include "ops/graph/defs/families.hpp"

namespace af::graph::defs {

op_def basic_def(std::string name, op_category category, int arity) {
  op_def d;
  d.name = std::move(name);
  d.category = category;
  d.arity = arity;
  return d;
}

std::string describe(std::string_view op, const std::vector<value_type>& in) {
  std::string out = std::string{op} + " of ";
  for (std::size_t i = 0; i < in.size(); ++i) out += (i ? ", " : "") + to_string(in[i]);
  return out;
}

error mismatch(errc code, std::string_view op, const std::vector<value_type>& in, const std::string& why) {
  return make_error(code, describe(op, in) + ": " + why);
}

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

expected<std::vector<tensor>> one(expected<tensor> t) {
  if (!t) return std::move(t).error_value();
  return std::vector<tensor>{std::move(*t)};
}

expected<void> arity(const op_def& def, const std::vector<tensor>& in) {
  if (def.arity < 0 ? !in.empty() : in.size() == static_cast<std::size_t>(def.arity)) return {};
  return make_error(errc::invalid_argument, "op '" + def.name + "' takes " +
                                                (def.arity < 0 ? std::string{"at least one"} : std::to_string(def.arity)) +
                                                " inputs, got " + std::to_string(in.size()));
}

// complete_attrs checked presence and kind, so these reads cannot fail; value() would throw on a
// definition that reads an attribute its schema lacks (a bug the op_def test catches).
int64_t int_attr(const op_attrs& a, std::string_view name) { return a.get_int(name).value(); }
double number_of(const op_attrs& a, std::string_view name) { return a.get_float(name).value(); }
std::vector<int64_t> ints_attr(const op_attrs& a, std::string_view name) { return a.get_ints(name).value(); }
std::string string_of(const op_attrs& a, std::string_view name) { return a.get_string(name).value(); }
shape shape_attr(const op_attrs& a, std::string_view name) { return shape(ints_attr(a, name)); }

}  // namespace af::graph::defs
