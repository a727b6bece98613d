#pragma once

// Observability of a running iteration: where each stage's time goes, which stage limits the
// pipeline, and a Chrome trace (open it in Perfetto) of every stage's spans.
//
//   af::data::profiler prof{it};            // starts recording spans
//   for (auto& batch : it) train(batch);
//   std::puts(prof.report().to_string().c_str());
//   prof.write_chrome_trace("pipeline.json");

#include <cstdint>
#include <string>
#include <vector>

#include "actors/stage.hpp"
#include "ops/error.hpp"
#include "pipeline/iterator.hpp"

namespace af::data {

/// One stage over a measured window. Fractions are of the stage's capacity: wall time x workers.
struct stage_profile {
  std::string name;
  double busy = 0;     ///< running its function (workers' average for a parallel map)
  double waiting = 0;  ///< had room but no input
  double blocked = 0;  ///< had output but no credit from downstream
  double elements_per_s = 0;
  uint64_t parallelism = 1;
  uint64_t slots = 0;
};

struct pipeline_profile {
  std::vector<stage_profile> stages;  ///< source first, the reader last
  std::string bottleneck;             ///< the busiest stage: the others wait on it or block behind it
  double seconds = 0;
  /// A table (one line per stage) and a closing "bottleneck: ..." line.
  std::string to_string() const;
};

/// The profile of the window between two counters() snapshots taken `seconds` apart.
pipeline_profile profile_between(const std::vector<stage_counters>& before,
                                 const std::vector<stage_counters>& after, double seconds);

/// Records spans of every stage (and every other actor) while alive. One at a time per process:
/// span recording is global.
class profiler {
 public:
  explicit profiler(const iterator& it);
  ~profiler();
  profiler(const profiler&) = delete;
  profiler& operator=(const profiler&) = delete;

  /// Where the time went since construction (from the stages' counters).
  pipeline_profile report() const;
  /// Writes the spans recorded so far as Chrome trace JSON; io_error naming the path.
  expected<void> write_chrome_trace(const std::string& path) const;

 private:
  const iterator& it_;
  std::vector<stage_counters> start_counters_;
  int64_t start_ns_;
};

}  // namespace af::data
