#pragma once

// What a server counts, in Prometheus' text exposition format (served at
// /monitoring/prometheus/metrics): requests and their latency per model, version, signature and
// outcome; each batching queue's depth and batch sizes; version loads.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "actors/batching.hpp"

namespace af::serving {

/// One batching queue's state, read when metrics are scraped.
struct queue_sample {
  std::string model;
  int64_t version = 0;
  std::string signature;
  std::size_t queued_rows = 0;
  batching_stats stats;
};

class serving_metrics {
 public:
  /// Upper bounds (seconds) of the request latency histogram's buckets.
  static constexpr std::array<double, 16> latency_buckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                          0.05,   0.1,     0.25,   0.5,   1,      2.5,    5,    10};

  /// The latency histogram of one model, version, signature and outcome: updated without a lock,
  /// so that the request path can keep a reference to its series (series()) and observe() into it.
  struct latency_histogram {
    std::array<std::atomic<uint64_t>, latency_buckets.size()> buckets{};  // not cumulative; summed when written
    std::atomic<uint64_t> count{0};
    std::atomic<double> sum{0};
  };

  /// The series of a model, version, signature and outcome, made on first use; it lives as long as
  /// these metrics.
  latency_histogram& series(const std::string& model, int64_t version, const std::string& signature, const std::string& outcome);
  static void observe(latency_histogram& series, double seconds);

  /// One answered request; `outcome` is "OK" or the status name it was answered with.
  void record_request(const std::string& model, int64_t version, const std::string& signature, const std::string& outcome,
                      double seconds);
  /// A version's load, successful or not.
  void record_load(const std::string& model, int64_t version, bool ok);
  /// Where queue depths and batch sizes come from at scrape time (the model server).
  void set_queue_source(std::function<std::vector<queue_sample>()> source);

  /// The queues' state now (from the queue source; empty without one).
  std::vector<queue_sample> queues() const;

  /// Everything, in the text exposition format 0.0.4.
  std::string prometheus_text() const;

 private:
  void tf_serving_series(std::string& out) const;
  using request_key = std::tuple<std::string, int64_t, std::string, std::string>;  // model, version, signature, outcome
  mutable std::mutex mtx_;
  std::map<request_key, latency_histogram> requests_;
  std::map<std::tuple<std::string, int64_t, bool>, uint64_t> loads_;
  std::function<std::vector<queue_sample>()> queues_;
};

/// A label value with Prometheus' escapes (backslash, quote, newline).
std::string prometheus_label(const std::string& value);

}  // namespace af::serving
