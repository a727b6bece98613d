#pragma once

// Waiting for something a thread on another core is about to do: polling for a few microseconds
// sees it without a sleep and a wake-up (on a virtual machine, tens of microseconds together), and
// the caller sleeps as usual after that, so a slow peer costs a bounded amount of polling.

#include <chrono>

namespace af::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls `ready` for at most `limit`; whether it became true.
template <class Ready>
bool spin_briefly(std::chrono::microseconds limit, Ready ready) {
  using clock = std::chrono::steady_clock;
  const auto spin_until = clock::now() + limit;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
  } while (clock::now() < spin_until);
  return false;
}

}  // namespace af::detail
