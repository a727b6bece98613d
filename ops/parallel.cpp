#include "ops/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace af {

namespace {

struct job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n;
  int64_t chunk;
  int64_t chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::mutex mtx;
  std::condition_variable all_done;

  // Claims and runs chunks until none are left; true if this call ran the last one.
  void work() {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
      int64_t begin = c * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      if (finished.fetch_add(1) + 1 == chunks) {
        std::lock_guard<std::mutex> guard{mtx};
        all_done.notify_all();
      }
    }
  }
};

class worker_pool {
 public:
  static worker_pool& instance() {
    static auto* pool = new worker_pool;  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  void run(job& j, int helpers) {
    auto shared = std::shared_ptr<job>(&j, [](job*) {});
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ensure_workers(helpers);
      for (int i = 0; i < helpers; ++i) queue_.push_back(shared);
    }
    wake_.notify_all();
    j.work();
    {
      // Released before waiting for the workers below: the worker that ran the last chunk takes
      // j.mtx to notify, possibly after we already saw `finished` complete.
      std::unique_lock<std::mutex> lock{j.mtx};
      j.all_done.wait(lock, [&] { return j.finished.load() == j.chunks; });
    }
    // Workers that popped a ticket after all chunks ran touch only `next`; drop stale tickets so
    // no worker can see `j` after we return.
    std::unique_lock<std::mutex> guard{mtx_};
    std::erase_if(queue_, [&](const std::shared_ptr<job>& p) { return p.get() == &j; });
    // Sleep rather than spin on mtx_: a spinning caller re-takes the mutex before a descheduled
    // worker gets it, which livelocked on a loaded machine.
    idle_.wait(guard, [&] { return !active_on(&j); });
  }

 private:
  bool active_on(job* j) {
    return std::count(running_.begin(), running_.end(), j) > 0;
  }
  void ensure_workers(int count) {
    while (static_cast<int>(threads_.size()) < count) {
      std::size_t slot = threads_.size();
      running_.push_back(nullptr);
      threads_.emplace_back([this, slot] { loop(slot); });
      threads_.back().detach();
    }
  }
  void loop(std::size_t slot) {
    std::unique_lock<std::mutex> lock{mtx_};
    for (;;) {
      wake_.wait(lock, [&] { return !queue_.empty(); });
      auto j = queue_.front();
      queue_.pop_front();
      running_[slot] = j.get();
      lock.unlock();
      j->work();
      lock.lock();
      running_[slot] = nullptr;
      idle_.notify_all();
    }
  }

  std::mutex mtx_;
  std::condition_variable wake_;
  std::condition_variable idle_;  // a worker finished with its job
  std::deque<std::shared_ptr<job>> queue_;
  std::vector<std::thread> threads_;
  std::vector<job*> running_;
};

std::atomic<int> budget{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};

thread_local int thread_share = 0;  // 0: no cap on this thread

}  // namespace

int thread_budget() noexcept {
  const int all = budget.load(std::memory_order_relaxed);
  return thread_share > 0 ? std::min(all, thread_share) : all;
}

scoped_thread_share::scoped_thread_share(int threads) noexcept : previous_(thread_share) { thread_share = std::max(1, threads); }

scoped_thread_share::~scoped_thread_share() { thread_share = previous_; }

int thread_share_cap() noexcept { return thread_share; }

void set_thread_budget(int threads) { budget.store(std::max(1, threads), std::memory_order_relaxed); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = std::min<int64_t>(thread_budget(), (n + grain - 1) / grain);
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  job j;
  j.fn = &fn;
  j.n = n;
  j.chunks = threads;
  j.chunk = (n + threads - 1) / threads;
  j.chunks = (n + j.chunk - 1) / j.chunk;
  worker_pool::instance().run(j, static_cast<int>(j.chunks - 1));
}

}  // namespace af
