#pragma once

// Stopping a group of actors that refer to their owner's state (a ring's ranks, a group's
// replicas): exit them and wait until each is down, so that none runs once the owner is gone.
// Include only from actor translation units (pulls in CAF).

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

#include <cstddef>

namespace af {

template <class Handles>
void stop_and_wait(caf::actor_system& sys, const Handles& actors) {
  caf::scoped_actor self{sys};
  for (const auto& a : actors) self->monitor(a);
  for (const auto& a : actors) self->send_exit(a, caf::exit_reason::user_shutdown);
  for (std::size_t i = 0; i < actors.size(); ++i) self->receive([](const caf::down_msg&) {});
}

}  // namespace af
