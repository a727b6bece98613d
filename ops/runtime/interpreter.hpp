#pragma once

// Runs a graph node by node, in its stored order, on one backend (the CPU by default; placements are
// ignored): the reference semantics of a graph, and the runner a device actor uses. Everything
// else runs graphs through af::execute (ops/runtime/executor.hpp), which brings them to a device
// actor; a call here from outside one is counted (executor_statistics), so a test can tell. Each
// intermediate tensor is released after its last use.

#include <functional>
#include <vector>

#include "ops/graph/graph.hpp"
#include "ops/runtime/backend.hpp"

namespace af::graph {

/// The graph's outputs for `parameters` (in parameters() order; dtypes must match, dims where the
/// graph says -1 may be anything). Errors name the node's op and its label.
expected<std::vector<tensor>> interpret(const graph& g, const std::vector<tensor>& parameters,
                                        backend& device = default_cpu_backend());

/// Called with each output (its position, its value) as soon as its node has run, while the rest
/// of the graph still runs: a replica starts summing a bucket of gradients with the other replicas'
/// while its backward pass goes on. On the interpreting thread; it must not throw.
using output_ready = std::function<void(std::size_t output, const tensor& value)>;
expected<std::vector<tensor>> interpret(const graph& g, const std::vector<tensor>& parameters, backend& device,
                                        const output_ready& on_output);

/// Checks `values` against the graph's parameter types; invalid_argument naming the first that
/// differs.
expected<void> check_parameters(const graph& g, const std::vector<tensor>& values);

}  // namespace af::graph
