#pragma once

// Small helpers shared by the benchmark programs: timing, medians, flags and the JSON last line.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace af::bench {

inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

/// Exits when the command line holds what the program does not take: with its usage and status 0
/// for --help, status 2 for an unknown flag or a valued flag without its value (a typo must not
/// start a long full-length run).
inline void check_flags(int argc, char** argv, const char* usage, std::initializer_list<const char*> switches,
                        std::initializer_list<const char*> valued = {}) {
  auto among = [](const char* arg, std::initializer_list<const char*> flags) {
    return std::any_of(flags.begin(), flags.end(), [&](const char* f) { return std::strcmp(arg, f) == 0; });
  };
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s\n", usage);
      std::exit(0);
    }
    if (among(argv[i], switches)) continue;
    if (among(argv[i], valued) && i + 1 < argc) {
      ++i;
      continue;
    }
    std::fprintf(stderr, "%s: %s '%s'\nusage: %s\n", argv[0], among(argv[i], valued) ? "no value after" : "unknown argument", argv[i],
                 usage);
    std::exit(2);
  }
}

inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  const std::size_t mid = xs.size() / 2;
  return xs.size() % 2 ? xs[mid] : 0.5 * (xs[mid - 1] + xs[mid]);
}

/// Wall-clock seconds of one call of fn.
inline double seconds_of(const std::function<void()>& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Runs fn once to warm up, then `reps` timed runs; returns the median in seconds.
inline double median_seconds(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(times);
}

/// Accumulates "key": value pairs and prints them as one JSON object on one line.
class json_line {
 public:
  void add(const std::string& key, double value) {
    char buf[64];
    // Counts exactly (a million requests in six significant digits loses the last ones), other
    // figures to six.
    const bool count = std::floor(value) == value && std::fabs(value) < 1e15;
    std::snprintf(buf, sizeof buf, count ? "%.0f" : "%.6g", value);
    fields_.emplace_back(key, buf);
  }
  void add(const std::string& key, bool value) { fields_.emplace_back(key, value ? "true" : "false"); }
  void add(const std::string& key, const std::string& value) { fields_.emplace_back(key, "\"" + value + "\""); }
  void print() const {
    std::string out = "{";
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      if (i) out += ", ";
      out += "\"" + fields_[i].first + "\": " + fields_[i].second;
    }
    std::printf("%s}\n", out.c_str());
    std::fflush(stdout);
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace af::bench
