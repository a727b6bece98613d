#pragma once

// A request's deadline from a client's number: the REST header X-Request-Timeout-Ms, the actor
// endpoint's timeout, gRPC's deadline. The number is the client's: clamped here so that none
// overflows the clock (now + 2^63 ms is undefined behaviour, not "never").

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "actors/batching.hpp"

namespace af::serving {

/// The longest deadline a request may set; longer ones are taken as this.
inline constexpr std::chrono::milliseconds max_request_timeout = std::chrono::hours{24};

/// now + `ms` (negative: now), at most max_request_timeout ahead.
inline clock_type::time_point deadline_after(int64_t ms) {
  return clock_type::now() + std::chrono::milliseconds{std::clamp<int64_t>(ms, 0, max_request_timeout.count())};
}

}  // namespace af::serving
