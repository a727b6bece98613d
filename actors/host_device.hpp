#pragma once

// The runtime's device actors for graphs asked from threads that are not a device actor's (a test's
// or a program's main thread calling model.predict_on_batch or an af::function): af::execute
// sends the graph to one and waits, and the actor runs it through the backend on its own thread
// (ops/runtime/executor.hpp). There is one per core, each taking one call at a time, so callers
// on several threads still run their graphs at once; a caller takes the least busy. The request
// carries the caller's allocator scope and thread share, so memory limits and kernel threads
// apply as if the caller had run it. Include from actor translation units and runtime.cpp only
// (CAF stays behind it).

#include <memory>

#include <caf/fwd.hpp>

namespace af {

class backend;

class host_device {
 public:
  /// Spawns `lanes` actors over `device` (detached: a caller may be a scheduler worker that blocks
  /// on the answer) and installs them as af::execute's answer for threads outside any device actor.
  host_device(caf::actor_system& sys, std::shared_ptr<backend> device, int lanes);
  /// Uninstalls them, then stops them: calls already queued still run first; a call that reaches a
  /// stopped actor is answered `cancelled`.
  ~host_device();
  host_device(const host_device&) = delete;
  host_device& operator=(const host_device&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace af
