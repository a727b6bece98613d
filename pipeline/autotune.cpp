// The autotuner's rules, applied every period:
//   map parallelism: a map whose workers were busy >= 85% of the period gets one more worker while
//     all autotuned maps together stay within the CPU budget; one busy < 40% for three periods in
//     a row gives one back (never below 1). A busy map is the one the pipeline waits on.
//   prefetch depth: when the consumer waited for elements more than 5% of the period, an autotuned
//     prefetch doubles its slots while slots x element bytes stays within the RAM budget.
// Settings reach the stages as tune messages; the stages apply them without dropping anything.

#include "pipeline/autotune.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace af::data {

namespace {

std::size_t default_ram_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::size_t{1} << 30;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 2;
}

constexpr double grow_busy = 0.85;
constexpr double shrink_busy = 0.40;
constexpr int shrink_after_ticks = 3;
constexpr double consumer_wait_share = 0.05;
constexpr std::size_t max_prefetch = 1024;

}  // namespace

autotuner::autotuner(tuning_target target, std::vector<tunable_stage> knobs, autotune_options options,
                     std::shared_ptr<const consumer_signals> consumer)
    : target_(std::move(target)), options_(options), consumer_(std::move(consumer)) {
  if (options_.cpu_budget == 0) options_.cpu_budget = std::max(1u, std::thread::hardware_concurrency());
  if (options_.ram_budget_bytes == 0) options_.ram_budget_bytes = default_ram_budget();
  if (options_.period_ms <= 0) options_.period_ms = 50;
  for (const auto& k : knobs)
    knobs_.push_back({k, k.what == tunable_stage::knob::parallelism ? autotune_initial_workers
                                                                     : autotune_initial_prefetch});
  thread_ = std::thread{[this] { run(); }};
}

autotuner::~autotuner() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void autotuner::run() {
  auto last = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock{mtx_};
  while (!wake_.wait_for(lock, std::chrono::milliseconds(options_.period_ms), [this] { return stopping_; })) {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    lock.unlock();
    tick(seconds);
    lock.lock();
  }
}

void autotuner::tick(double seconds) {
  if (seconds <= 0) return;
  const auto counters = target_.counters();
  const double period_ns = seconds * 1e9;
  std::size_t workers_in_use = 0;
  for (const auto& k : knobs_)
    if (k.where.what == tunable_stage::knob::parallelism) workers_in_use += k.setting;

  for (auto& k : knobs_) {
    if (k.where.stage >= counters.size() || k.where.what != tunable_stage::knob::parallelism) continue;
    const auto& c = counters[k.where.stage];
    const int64_t busy = c.busy_ns - k.last_busy_ns;
    k.last_busy_ns = c.busy_ns;
    const double utilisation = static_cast<double>(busy) / (period_ns * static_cast<double>(k.setting));
    if (utilisation >= grow_busy && workers_in_use < options_.cpu_budget) {
      ++k.setting;
      ++workers_in_use;
      k.calm_ticks = 0;
      target_.set_parallelism(k.where.stage, k.setting);
    } else if (utilisation < shrink_busy && k.setting > 1) {
      if (++k.calm_ticks >= shrink_after_ticks) {
        --k.setting;
        --workers_in_use;
        k.calm_ticks = 0;
        target_.set_parallelism(k.where.stage, k.setting);
      }
    } else {
      k.calm_ticks = 0;
    }
  }

  const int64_t waited = consumer_->waited_ns.load(std::memory_order_relaxed);
  const double wait_share = static_cast<double>(waited - last_waited_ns_) / period_ns;
  last_waited_ns_ = waited;
  if (wait_share <= consumer_wait_share) return;
  const std::size_t element_bytes = std::max<uint64_t>(1, consumer_->element_bytes.load(std::memory_order_relaxed));
  std::size_t prefetch_bytes = 0;
  for (const auto& k : knobs_)
    if (k.where.what == tunable_stage::knob::prefetch) prefetch_bytes += k.setting * element_bytes;
  for (auto& k : knobs_) {
    if (k.where.what != tunable_stage::knob::prefetch || k.setting >= max_prefetch) continue;
    if (prefetch_bytes + k.setting * element_bytes > options_.ram_budget_bytes) continue;
    prefetch_bytes += k.setting * element_bytes;
    k.setting *= 2;
    target_.set_slots(k.where.stage, k.setting);
  }
}

}  // namespace af::data
