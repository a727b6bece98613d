#pragma once

// Elementwise fusion: chains of elementwise nodes become one "fused" node whose program codegen
// turns into a single pass over memory (ops/codegen: a CPU loop, or CUDA C for NVRTC).

#include <string>
#include <vector>

#include "ops/graph/fused_program.hpp"
#include "ops/graph/graph.hpp"

namespace af::graph {

/// Rule: a node joins a group when
///   - its op is fusible on its f32 or f64 output (graph::fusible: an elementwise definition with
///     a fused form for the node's attributes),
///   - one of its inputs is the output of a group whose result only this node uses (one consumer,
///     not a graph output), and
///   - its output shape equals that group's output shape, i.e. the other inputs broadcast into it.
/// Groups that feed the same node under these conditions merge. A group of one node stays a plain
/// node (nothing to save). Results are unchanged; the graph has fewer kernels and no intermediate
/// tensors inside a group.
graph fuse_elementwise(const graph& g);

}  // namespace af::graph
