#pragma once

// A graph as a topology of actors: one actor per op or fused group. An actor fires when every
// input of a step has arrived and sends its output straight to the actors that read it, so
// independent branches run in parallel on the scheduler and nothing waits on a central loop.
// Parameters go from the caller to the actors that read them; constants live in their readers.
//
//   auto concrete = fn.concrete(signature).value();
//   auto exec = af::graph_executor::launch(rt, concrete->optimized).value();
//   auto outputs = exec.run({x, w});
//
// One step at a time per executor (run() blocks until every output is in, or the first error).
//
// Each node runs on a device: the one its placement names (af::device_scope while tracing), or the
// first device when it has none, and every node, fused or not, runs through that device's backend
// (ops/runtime/backend.hpp). A CPU device's allocator holds the outputs of its nodes (so its
// memory_limit bounds them, and exceeding it fails the step naming the node) and its op table
// runs their kernels. Where a value crosses to a device whose memory its producer's cannot share,
// a copy node is inserted (ops/passes/placement.hpp). With tracing on, every node records its
// kernels' spans under "<device>/<op>#<node>"; log_device_placement prints where each node runs.

#include <chrono>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af {

class allocator;
class backend;
class op_registry;
class runtime;

/// A device nodes are placed on.
struct executor_device {
  std::string name = "cpu:0";
  /// Holds the device's node outputs; null: the CPU allocator current at launch.
  std::shared_ptr<allocator> memory;
  /// Runs the device's kernels; null: default_op_registry().
  std::shared_ptr<const op_registry> ops;
  /// The device's own backend (a GPU's); null: a CPU backend named `name` over `memory` and `ops`.
  std::shared_ptr<backend> device;
};

struct executor_options {
  /// The devices placements may name; unplaced nodes run on the first. Empty: one "cpu:0".
  std::vector<executor_device> devices;
  /// Where to print each node's device at launch, as TensorFlow's log_device_placement does
  /// ("node 7 (matmul, model.cpp:12): cpu:0"); null prints nothing.
  std::ostream* log_device_placement = nullptr;
};

class graph_executor {
 public:
  /// Spawns the graph's actors; invalid_argument when the graph does not verify or a node is
  /// placed on a device the options do not name (the error names the node and the devices);
  /// unsupported when a node's device has no kernel for its op.
  static expected<graph_executor> launch(runtime& rt, graph::graph g, executor_options options = {});

  graph_executor(graph_executor&&) noexcept;
  graph_executor& operator=(graph_executor&&) noexcept;
  ~graph_executor();  // stops the actors

  /// One step: the graph's outputs for `parameters`. An op's error comes back naming the node;
  /// timeout when the outputs do not all arrive within `timeout`.
  expected<std::vector<tensor>> run(const std::vector<tensor>& parameters,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Actors running the graph (one per op or fused node).
  std::size_t actor_count() const noexcept;

 private:
  struct impl;
  explicit graph_executor(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af
