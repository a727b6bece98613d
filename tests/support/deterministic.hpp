#pragma once

// Driving a runtime made with `deterministic = true`: its scheduled actors run only inside these
// calls, on the calling thread, so "the scheduler has no job left" means the topology is quiescent
// (not merely "nothing happened for a while"). Detached actors are not covered: tests that use
// these helpers keep every stage on the scheduler.

#include <caf/actor_system.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/runtime.hpp"

namespace af::testing {

inline caf::scheduler::test_coordinator& coordinator_of(runtime& rt) {
  return dynamic_cast<caf::scheduler::test_coordinator&>(rt.system().scheduler());
}

/// Runs every scheduled job, including those the jobs create, until none is left; returns how many
/// ran. Timers do not fire on their own (see fire_timers).
inline std::size_t run_until_quiet(runtime& rt) { return coordinator_of(rt).run(); }

/// Fires every pending delayed message, then runs until quiet; returns the jobs run.
inline std::size_t fire_timers(runtime& rt) {
  auto& sched = coordinator_of(rt);
  sched.trigger_timeouts();
  return sched.run();
}

}  // namespace af::testing
