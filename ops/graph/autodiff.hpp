#pragma once

// Reverse-mode differentiation on graphs: the gradient of a value with respect to others becomes
// more nodes of the same graph, so one traced training step holds forward, backward and update.
// Each op's rule (its vector-Jacobian product) is part of its definition (ops/graph/defs/).

#include <vector>

#include "ops/graph/graph.hpp"

namespace af::graph {

/// Nodes computing d sum(y) / d x for each x in `xs`, added to `b` (y of any shape: its seed is
/// ones). An x that y does not depend on gets zeros. Gradients flow through floating values only;
/// unsupported naming the op when y depends on x through an op without a gradient rule.
expected<std::vector<node_id>> add_gradients(graph_builder& b, node_id y, const std::vector<node_id>& xs);

}  // namespace af::graph
