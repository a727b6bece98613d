#pragma once

#include <cstdint>
#include <functional>

namespace af {

/// Threads that CPU kernels may use at once (default: the machine's cores). The runtime lowers it
/// when actors already occupy the cores, so kernels and the scheduler do not oversubscribe.
int thread_budget() noexcept;
void set_thread_budget(int threads);

/// Caps thread_budget() on the calling thread while it lives: the share of the cores one replica's
/// kernels may take when several replicas step at once (two replicas on two cores take one each,
/// rather than each splitting its loops over both). Nests; the innermost cap holds.
class scoped_thread_share {
 public:
  explicit scoped_thread_share(int threads) noexcept;
  ~scoped_thread_share();
  scoped_thread_share(const scoped_thread_share&) = delete;
  scoped_thread_share& operator=(const scoped_thread_share&) = delete;

 private:
  int previous_;
};

/// The cap the innermost scoped_thread_share puts on this thread; 0 when none.
int thread_share_cap() noexcept;

/// Runs fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` long, on up to
/// thread_budget() threads. The calling thread takes part, so nested and concurrent calls from
/// several actors cannot deadlock. Returns when every chunk has run.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace af
