#pragma once

// The one way a graph runs. A model's training, evaluation and prediction steps, af::function, a
// SavedModel signature and a served batch all call af::execute, which runs the graph on a device
// actor: the actor whose handler is running on this thread (a replica stepping a batch, serving's
// model worker, a device actor answering a request), or else the device actor of the live
// af::runtime, asked with a request while the caller waits. Inside a device actor the graph runs
// node by node through that actor's backend (graph::interpret, the backend-level runner).
//
//   af::device_actor_scope on{*cpu};          // only actors that own a backend do this
//   auto out = af::execute(graph, args);       // runs on `cpu`, on this thread
//
// A program that never starts an af::runtime (one linking only the ops layer) has no device actor;
// its graphs run on the calling thread through the default CPU backend, and executor_statistics()
// counts them as such.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ops/graph/graph.hpp"
#include "ops/runtime/backend.hpp"
#include "ops/runtime/interpreter.hpp"

namespace af {

/// Marks the calling thread, while alive, as running a device actor's handler: graphs it executes
/// run on `device`. Scopes nest; each restores the previous one.
class device_actor_scope {
 public:
  explicit device_actor_scope(backend& device) noexcept;
  ~device_actor_scope();
  device_actor_scope(const device_actor_scope&) = delete;
  device_actor_scope& operator=(const device_actor_scope&) = delete;

 private:
  backend* previous_;
};

/// The backend of the device actor running on this thread; null outside one.
backend* current_device_actor() noexcept;

/// Runs a graph for a thread that is not a device actor's: af::runtime installs one that asks its
/// device actor. Called on the requesting thread; returns when the graph has run.
using graph_request = std::function<expected<std::vector<tensor>>(const graph::graph&, const std::vector<tensor>&,
                                                                  const graph::output_ready&)>;

/// Installs `request` while alive; the newest installation answers, and removing it restores the
/// one before.
class graph_request_installation {
 public:
  explicit graph_request_installation(graph_request request);
  ~graph_request_installation();
  graph_request_installation(const graph_request_installation&) = delete;
  graph_request_installation& operator=(const graph_request_installation&) = delete;

 private:
  uint64_t id_;
};

/// The graph's outputs for `parameters` (graph::interpret's contract), computed on a device actor
/// as the header says. `on_output` sees each output as soon as it exists, on the device's thread.
/// On the calling thread a kernel's exception propagates to the caller, as any call's would; a
/// request turns it into an error (af::guarded), since it was thrown on another thread.
expected<std::vector<tensor>> execute(const graph::graph& g, const std::vector<tensor>& parameters,
                                      const graph::output_ready& on_output = {});

/// Where graphs have run in this process since it started.
struct executor_counts {
  /// By af::execute on the thread of a device actor's handler.
  uint64_t in_device_actor = 0;
  /// By af::execute through a request to a runtime's device actor (also counted there once run).
  uint64_t requested = 0;
  /// By af::execute on the calling thread because no runtime was alive.
  uint64_t without_runtime = 0;
  /// By graph::interpret on a thread outside any device actor (the above, or a direct call).
  uint64_t interpreted_outside_device_actor = 0;
};
executor_counts executor_statistics() noexcept;

}  // namespace af
