#pragma once

// The autotuner: a thread beside an iteration that measures each tunable stage and adjusts map
// parallelism and prefetch depth within a CPU and a RAM budget. Internal to pipeline/.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/stage.hpp"
#include "pipeline/dataset.hpp"

namespace af::data {

/// A stage whose setting the autotuner owns (index as in the top-level topology's counters()).
struct tunable_stage {
  enum class knob { parallelism, prefetch };
  knob what = knob::parallelism;
  std::size_t stage = 0;
};

/// Collected while a top-level pipeline is built (nested pipelines register nothing).
struct tunable_registry {
  std::mutex mtx;
  std::vector<tunable_stage> stages;
  void add(tunable_stage s) {
    std::lock_guard<std::mutex> guard{mtx};
    stages.push_back(s);
  }
};

/// What the consumer side tells the tuner: how long it waited for elements and how big they are.
struct consumer_signals {
  std::atomic<int64_t> waited_ns{0};
  std::atomic<uint64_t> element_bytes{0};
};

/// The running topology a tuner reads and adjusts, whoever consumes it (a blocking reader or an
/// actor fed by the dataset). The functions must stay callable until the tuner is destroyed.
struct tuning_target {
  std::function<std::vector<stage_counters>()> counters;
  std::function<void(std::size_t stage, std::size_t slots)> set_slots;
  std::function<void(std::size_t stage, std::size_t workers)> set_parallelism;
};

class autotuner {
 public:
  autotuner(tuning_target target, std::vector<tunable_stage> knobs, autotune_options options,
            std::shared_ptr<const consumer_signals> consumer);
  ~autotuner();  // stops and joins the thread
  autotuner(const autotuner&) = delete;
  autotuner& operator=(const autotuner&) = delete;

 private:
  struct knob_state {
    tunable_stage where;
    std::size_t setting = 1;
    int64_t last_busy_ns = 0;
    int calm_ticks = 0;  // consecutive ticks that argued for shrinking
  };
  void run();
  void tick(double seconds);

  tuning_target target_;
  std::vector<knob_state> knobs_;
  autotune_options options_;
  std::shared_ptr<const consumer_signals> consumer_;
  int64_t last_waited_ns_ = 0;
  std::mutex mtx_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Workers an autotuned map starts with when a tuner owns it.
inline constexpr std::size_t autotune_initial_workers = 1;
/// Slots an autotuned prefetch starts with.
inline constexpr std::size_t autotune_initial_prefetch = 2;

}  // namespace af::data
