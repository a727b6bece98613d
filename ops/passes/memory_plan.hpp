#pragma once

// Memory planning: which intermediate values can share a buffer, from their lifetimes.

#include <cstddef>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af::graph {

struct memory_plan {
  /// Per node: the buffer its output lives in; -1 for parameters, constants and movement ops
  /// (views of their input).
  std::vector<int> buffer_of;
  std::vector<std::size_t> buffer_bytes;
  /// Bytes of all buffers together: the most intermediate memory one run of the graph holds.
  std::size_t planned_bytes = 0;
  /// Bytes if every node had its own buffer.
  std::size_t unshared_bytes = 0;
};

/// Rule: nodes are visited in execution order; a node's output takes the smallest free buffer at
/// least as large as it (a new one when none is free), and its buffer becomes free once the last
/// node reading it (through any chain of views) has run. Graph outputs are never freed. Needs
/// known shapes: unsupported naming the first node whose size is unknown.
expected<memory_plan> plan_memory(const graph& g);

}  // namespace af::graph
