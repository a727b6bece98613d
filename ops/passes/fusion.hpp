#pragma once

// Elementwise fusion: chains of elementwise nodes become one "fused" node whose program codegen
// turns into a single pass over memory (ops/codegen: a CPU loop, or CUDA C for NVRTC).

#include <string>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af::graph {

/// One op of a fused program. Values 0..inputs-1 are the group's inputs; step k makes value
/// inputs + k from earlier values. The last step's value is the group's output.
struct fused_step {
  std::string op;
  std::vector<int> args;
  op_attrs attrs;
  value_type out;
};

struct fused_program {
  std::vector<value_type> inputs;
  std::vector<fused_step> steps;

  const value_type& out() const { return steps.back().out; }
  /// Each step's type from infer_output, the inputs as given, the output as `out`.
  expected<void> verify(const std::vector<value_type>& in, const value_type& out) const;
  /// "v2 = mul(v0, v1); v3 = gelu(v2)" — also the cache key's readable half.
  std::string to_string() const;
};

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
