#pragma once

// Waiting for a condition that real threads bring about, with a deadline instead of a guess.

#include <chrono>
#include <thread>

namespace af::testing {

/// Polls until `pred` holds (true) or `limit` passes (false).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace af::testing
