// Structural nodes: graph inputs (parameter), constants and the fused kernels the
// fusion pass makes. Their types come from where they are made and executors run them themselves,
// so they have neither inference nor a kernel.

#include "ops/graph/defs/families.hpp"

namespace af::graph::defs {

namespace {

op_def structural(std::string name, op_category category, int arity, gradient_spec gradient) {
  op_def d = basic_def(std::move(name), category, arity);
  d.gradient = std::move(gradient);
  return d;
}

}  // namespace

void define_sources(std::vector<op_def>& out) {
  out.push_back(structural("parameter", op_category::source, 0, no_gradient_flows("it has no inputs")));
  out.push_back(structural("constant", op_category::source, 0, no_gradient_flows("it has no inputs")));
  // Fusion runs after differentiation: a fused group never needs a gradient of its own.
  out.push_back(structural("fused", op_category::fused, -1,
                           not_differentiable("fused kernels are made after differentiation; differentiate the graph "
                                              "before the fusion pass")));
}

}  // namespace af::graph::defs
