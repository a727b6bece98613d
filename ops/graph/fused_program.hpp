#pragma once

// The program of a "fused" node: the elementwise ops the fusion pass (ops/passes/fusion.hpp) put
// into one kernel, in the order they run. Code generators (ops/codegen/) turn it into a CPU loop
// or CUDA C; graphs carry it as the node's payload.

#include <string>
#include <vector>

#include "ops/graph/op_def.hpp"

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

}  // namespace af::graph
