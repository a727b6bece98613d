#pragma once

// Simulated work for tests and benchmarks of schedulers and pipelines: burns `d` of this thread's
// CPU time. Wall time would count the time the thread waited for a core while a neighbour ran, so
// on a busy machine every element would cost less real work than it claims.
//
// Not instrumented under TSan: a millisecond of instrumented clock reads fills a thread's
// race-detection history, and TSan then cannot show where an element crossing a mailbox came from.
// clock_gettime directly (no std::chrono call): each call of an instrumented function is recorded.

#include <chrono>
#include <cstdint>
#include <ctime>

namespace af::testing {

__attribute__((no_sanitize_thread)) inline void burn_cpu(std::chrono::microseconds d) {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  const int64_t until = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + int64_t{d.count()} * 1000;
  do {
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  } while (int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec < until);
}

}  // namespace af::testing
