#pragma once

// One definition per op. Everything the runtime knows about an op is declared once, in one of the
// family files under ops/graph/defs/: its name, category, arity, attribute schema (names, kinds,
// defaults), shape/dtype inference, gradient rule (or why there is none), CPU kernel, and for
// fusible ops the scalar formula behind its fused CPU loop and its CUDA expression. Autodiff, the
// fusion pass, both code generators, the interpreter, the verifier and the device kernel tables all
// read these definitions; none keeps a list of op names of its own. tests/ops/op_def_test.cpp walks
// every definition and fails when a part is missing, so an op cannot be half-added.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/kernels/cpu/step_loops.hpp"
#include "ops/op_registry.hpp"
#include "ops/shape.hpp"

namespace af::graph {

/// What passes need to know about an op, by what it computes.
enum class op_category : uint8_t {
  source,              ///< parameter, constant: no inputs, values come from outside
  elementwise_unary,   ///< out[i] = f(x[i]) on floating (or numeric) values: fusible
  elementwise_binary,  ///< out[i] = f(a[i], b[i]) with broadcasting, same dtype out: fusible
  comparison,          ///< elementwise, bool out
  selection,           ///< where(cond, a, b)
  conversion,          ///< cast
  reduction,           ///< sums, maxima, arg-extrema, softmax along axes
  movement,            ///< reshape, transpose, broadcast_to, slice: views of the same numbers
  transfer,            ///< copy: a value brought into another device's memory
  indexing,            ///< concat, stack, gather, one_hot and the gradients of slicing and gathering
  contraction,         ///< matmul, convolutions and their gradients
  pooling,             ///< windowed max/average and their gradients
  random,              ///< samplers (stateful ones are never merged or folded)
  fused,               ///< a group of elementwise ops made into one kernel by the fusion pass
};
std::string_view to_string(op_category c) noexcept;

/// A value's type: dtype and shape; -1 marks a dimension unknown until run time.
struct value_type {
  dtype type = dtype::f32;
  shape dims;
  friend bool operator==(const value_type&, const value_type&) = default;
};

/// "f32[2,-1]"
std::string to_string(const value_type& t);

// -- attributes -----------------------------------------------------------------------------------

enum class attr_kind : uint8_t { integer, number, integers, numbers, string };
std::string_view to_string(attr_kind k) noexcept;

/// One attribute an op takes. Without a default it is required.
struct attr_spec {
  std::string name;
  attr_kind kind;
  std::optional<attr_value> fallback;
};

// -- gradients --------------------------------------------------------------------------------------

using node_id = int32_t;
struct node;
class gradient_emitter;  // ops/graph/gradient_emitter.hpp

/// The gradients of a node's inputs given g, the gradient of its output (nullopt: none flows to
/// that input, e.g. a condition or an integer index).
using input_gradients = std::vector<std::optional<node_id>>;
using gradient_rule = std::function<input_gradients(gradient_emitter& e, const node& n, node_id self, node_id g)>;

/// How an op is differentiated: by a rule; with no gradient flowing to any input (its output is
/// piecewise constant or not floating: comparisons, argmax, one_hot, samplers); or not at all yet,
/// which fails add_gradients naming the op and the reason.
struct gradient_spec {
  enum class kind : uint8_t { missing, rule, none_flows, unsupported };
  kind what = kind::missing;
  gradient_rule rule;
  std::string why;  ///< for none_flows and unsupported
};
gradient_spec differentiable(gradient_rule rule);
gradient_spec no_gradient_flows(std::string why);
gradient_spec not_differentiable(std::string why);

// -- fusion -----------------------------------------------------------------------------------------

/// How multiplies and adds by a single value fold into the loop of a neighbouring unary step (the
/// CPU code generator's affine folding). Only exact forms fold.
enum class affine_role : uint8_t { none, add, sub, mul };

/// What a fused kernel runs for one step of this op, given the step's attributes.
struct fused_form {
  /// The loops over a chunk, instantiated from the op's scalar formula (the eager kernel's).
  cpu::step_loops cpu;
  /// The CUDA C expression: {0}, {1} are the operands, {T} the value type ("float"/"double"), {f}
  /// the float suffix of math functions ("f" or "").
  std::string cuda;
  affine_role affine = affine_role::none;
};
using fused_form_fn = std::function<expected<fused_form>(const op_attrs&)>;

// -- the definition -----------------------------------------------------------------------------------

using infer_fn = std::function<expected<value_type>(const std::vector<value_type>& in, const op_attrs& attrs)>;

struct op_def {
  std::string name;
  op_category category = op_category::source;
  int arity = 0;          ///< inputs; -1 for any number (at least one)
  bool stateful = false;  ///< two calls differ: never merged, folded or deduplicated
  std::vector<attr_spec> attrs;
  /// The output type from the input types and (complete, checked) attributes. Absent only for
  /// sources and fused nodes, whose type comes from where they are made.
  infer_fn infer;
  gradient_spec gradient;
  /// The CPU kernel; it receives complete, checked attributes. Absent only for sources and fused
  /// nodes, which executors run themselves.
  op_fn cpu_kernel;
  /// Set for ops the fusion pass may put into a fused kernel (the elementwise categories).
  fused_form_fn fusion;

  const attr_spec* find_attr(std::string_view attr) const noexcept;
};

/// The definition of `name`; nullptr for an op graphs do not know.
const op_def* find_op(std::string_view name) noexcept;
/// Every definition, sorted by name.
std::span<const op_def* const> all_ops() noexcept;

/// `attrs` with every attribute of `def` present: unknown names, values of the wrong kind and
/// missing required attributes are invalid_argument naming the op and the attribute.
expected<op_attrs> complete_attrs(const op_def& def, const op_attrs& attrs);

/// The output type of `op` on inputs of types `in` (attrs checked against its schema).
/// shape_mismatch or dtype_mismatch naming the op and the input types when they do not fit together.
expected<value_type> infer_output(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs);

/// True when the fusion pass may put `op` with `attrs` into a fused kernel on `type` values.
bool fusible(const op_def& def, const op_attrs& attrs, dtype type);

}  // namespace af::graph
