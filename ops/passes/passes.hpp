#pragma once

// Graph passes other than fusion. Each takes a graph and returns a new one computing the same
// outputs from the same parameters; its rule is written above its declaration.

#include "ops/graph/graph.hpp"

namespace af::graph {

/// Constant folding: a node that is neither a source nor stateful, whose inputs are all constants
/// and whose output has at most `max_elements` elements, becomes a constant holding its value
/// (computed once, by the CPU kernels). A node whose kernel fails is left to fail at run time.
graph fold_constants(const graph& g, int64_t max_elements = int64_t{1} << 20);

/// Common-subexpression elimination: nodes with the same op, inputs, attributes and type are one
/// node (stateful ops and sources excepted); equal constants are one constant.
graph eliminate_common_subexpressions(const graph& g);

/// Dead-code elimination: only nodes an output depends on remain, and every parameter (the
/// signature does not change).
graph eliminate_dead_code(const graph& g);

/// Algebraic simplification, each rule only where the result keeps the node's exact type:
///   x * 1, 1 * x, x / 1, x + 0, 0 + x, x - 0  ->  x        (constants whose every element is 1 or 0)
///   neg(neg(x))                                ->  x
///   transpose(transpose(x, p), q)              ->  x when q after p is the identity, else one transpose
///   reshape(reshape(x))                        ->  one reshape
graph simplify_algebra(const graph& g);

/// The standard pipeline: fold, simplify, CSE, DCE, then fusion; the verifier runs after each
/// pass and an error names the pass that broke the graph.
expected<graph> optimize(const graph& g);

}  // namespace af::graph
