// Stage profiles from counters, and span recording for Chrome traces.

#include "pipeline/profiler.hpp"

#include <algorithm>
#include <cstdio>

#include "actors/tracing.hpp"

namespace af::data {

namespace {

// A parallel map sums its workers' busy time only; an interleave's children sum every counter.
stage_profile profile_of(const stage_counters& b, const stage_counters& a, double seconds, bool summed_children) {
  const double window_ns = std::max(seconds, 1e-9) * 1e9;
  stage_profile p;
  p.name = a.name;
  p.parallelism = std::max<uint64_t>(1, a.parallelism);
  p.slots = a.slots;
  p.busy = static_cast<double>(a.busy_ns - b.busy_ns) / (window_ns * static_cast<double>(p.parallelism));
  const double idle_window = window_ns * (summed_children ? static_cast<double>(p.parallelism) : 1.0);
  p.waiting = static_cast<double>(a.waiting_ns - b.waiting_ns) / idle_window;
  p.blocked = static_cast<double>(a.blocked_ns - b.blocked_ns) / idle_window;
  p.elements_per_s = static_cast<double>(a.items_out - b.items_out) / seconds;
  return p;
}

}  // namespace

// Stages that run inside another (an interleave's children) come right before it, in flow order.
pipeline_profile profile_between(const std::vector<stage_counters>& before, const std::vector<stage_counters>& after,
                                 double seconds) {
  pipeline_profile out;
  out.seconds = seconds;
  double busiest = -1;
  auto add = [&](stage_profile p) {
    if (p.busy > busiest) {
      busiest = p.busy;
      out.bottleneck = p.name;
    }
    out.stages.push_back(std::move(p));
  };
  const stage_counters zero{};
  for (std::size_t i = 0; i < after.size(); ++i) {
    const auto& a = after[i];
    const auto& b = i < before.size() ? before[i] : zero;
    for (std::size_t j = 0; j < a.inner.size(); ++j)
      add(profile_of(j < b.inner.size() ? b.inner[j] : zero, a.inner[j], seconds, true));
    add(profile_of(b, a, seconds, false));
  }
  return out;
}

std::string pipeline_profile::to_string() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %7s %9s %9s %12s %8s\n", "stage", "busy", "waiting", "blocked",
                "elements/s", "workers");
  out += line;
  for (const auto& s : stages) {
    std::snprintf(line, sizeof line, "%-24s %6.1f%% %8.1f%% %8.1f%% %12.1f %8llu\n", s.name.c_str(), s.busy * 100,
                  s.waiting * 100, s.blocked * 100, s.elements_per_s, static_cast<unsigned long long>(s.parallelism));
    out += line;
  }
  if (bottleneck.empty()) return out + "no stages measured\n";
  const auto limiting = std::find_if(stages.begin(), stages.end(), [&](const auto& s) { return s.name == bottleneck; });
  std::snprintf(line, sizeof line, "bottleneck: '%s' (busy %.0f%% of its capacity over %.2f s)\n", bottleneck.c_str(),
                limiting->busy * 100, seconds);
  return out + line;
}

profiler::profiler(const iterator& it) : it_(it), start_counters_(it.counters()), start_ns_(trace::now_ns()) {
  trace::start();
}

profiler::~profiler() { trace::stop(); }

pipeline_profile profiler::report() const {
  return profile_between(start_counters_, it_.counters(), static_cast<double>(trace::now_ns() - start_ns_) * 1e-9);
}

expected<void> profiler::write_chrome_trace(const std::string& path) const {
  return trace::write_chrome_trace(path, trace::collect());
}

}  // namespace af::data
