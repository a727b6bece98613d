#pragma once

// Every op a graph node can hold, grouped by what passes need to know about it: elementwise ops
// may fuse, reductions may end a fused group, movement ops only re-view memory, contractions go to
// BLAS, stateful ops are never merged or folded. Shapes and dtypes of a node's output come from
// infer_output (the verifier recomputes them after every pass).

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/op_registry.hpp"
#include "ops/shape.hpp"

namespace af::graph {

enum class op_category : uint8_t {
  source,       ///< parameter, constant, variable: no inputs, values come from outside
  elementwise,  ///< out[i] depends on in[i] of each (broadcast) input only
  reduce,       ///< sums, maxima, softmax along axes
  movement,     ///< reshape, transpose, broadcast_to, slice: views of the same numbers
  indexing,     ///< concat, stack, gather, one_hot and the gradients of slicing and gathering
  contraction,  ///< matmul, conv2d
  stateful,     ///< random ops: two calls differ, so never merged or folded
  fused,        ///< a group of elementwise ops made into one kernel by the fusion pass
};

struct op_info {
  std::string_view name;
  op_category category;
  int arity;  ///< inputs; -1 for any number (fused)
};

/// The table entry of `name`; nullptr for an op graphs do not know.
const op_info* find_op(std::string_view name) noexcept;
/// Every op in the table, grouped by category.
std::span<const op_info> all_ops() noexcept;

/// A value's type: dtype and shape; -1 marks a dimension unknown until run time.
struct value_type {
  dtype type = dtype::f32;
  shape dims;
  friend bool operator==(const value_type&, const value_type&) = default;
};

/// "f32[2,-1]"
std::string to_string(const value_type& t);

/// The output type of `op` on inputs of types `in` (attrs as in the op registry). shape_mismatch or
/// dtype_mismatch naming the op and the input types when they do not fit together.
expected<value_type> infer_output(std::string_view op, const std::vector<value_type>& in, const op_attrs& attrs);

}  // namespace af::graph
