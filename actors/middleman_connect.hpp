#pragma once

// Connecting to an actor another process published, through CAF's middleman. Include only from
// actor translation units (it pulls in CAF's network headers).

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman.hpp>
#include <caf/sec.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace af {

// CAF 0.17's BASP broker stamps a new outgoing connection's last-seen time only when the peer's
// first bytes arrive; a heartbeat tick landing in between sees the epoch and closes it with
// connection_timeout (about once in 300 connects under ASan with a 1 s heartbeat). Such an early
// "timeout" is not the peer's silence, so connecting again is safe; a real one keeps its error.
inline caf::expected<caf::actor> connect_middleman(caf::actor_system& sys, const std::string& host, uint16_t port,
                                                   std::chrono::milliseconds connect_timeout) {
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  constexpr int max_attempts = 5;
  for (int attempt = 1;; ++attempt) {
    auto remote = sys.middleman().remote_actor(host, port);
    if (remote || remote.error() != caf::sec::connection_timeout || attempt == max_attempts ||
        std::chrono::steady_clock::now() >= deadline)
      return remote;
  }
}

}  // namespace af
