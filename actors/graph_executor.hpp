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

#include <chrono>
#include <memory>
#include <vector>

#include "ops/graph/graph.hpp"

namespace af {

class runtime;

class graph_executor {
 public:
  /// Spawns the graph's actors; invalid_argument when the graph does not verify.
  static expected<graph_executor> launch(runtime& rt, graph::graph g);

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
