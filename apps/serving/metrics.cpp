#include "apps/serving/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace af::serving {

std::string prometheus_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

serving_metrics::latency_histogram& serving_metrics::series(const std::string& model, int64_t version, const std::string& signature,
                                                            const std::string& outcome) {
  std::lock_guard<std::mutex> guard{mtx_};
  return requests_[request_key{model, version, signature, outcome}];
}

void serving_metrics::observe(latency_histogram& h, double seconds) {
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(latency_buckets.begin(), latency_buckets.end(), seconds) - latency_buckets.begin());
  if (bucket < h.buckets.size()) h.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  h.sum.fetch_add(seconds, std::memory_order_relaxed);
  // Last: a scrape that sees this count sees the bucket too (the +Inf bucket never trails the rest).
  h.count.fetch_add(1, std::memory_order_release);
}

void serving_metrics::record_request(const std::string& model, int64_t version, const std::string& signature,
                                     const std::string& outcome, double seconds) {
  observe(series(model, version, signature, outcome), seconds);
}

void serving_metrics::record_load(const std::string& model, int64_t version, bool ok) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++loads_[{model, version, ok}];
}

void serving_metrics::set_queue_source(std::function<std::vector<queue_sample>()> source) {
  std::lock_guard<std::mutex> guard{mtx_};
  queues_ = std::move(source);
}

std::vector<queue_sample> serving_metrics::queues() const {
  std::function<std::vector<queue_sample>()> source;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    source = queues_;
  }
  return source ? source() : std::vector<queue_sample>{};
}

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string labels(const std::string& model, int64_t version, const std::string& signature) {
  return "model=\"" + prometheus_label(model) + "\",version=\"" + std::to_string(version) + "\",signature=\"" +
         prometheus_label(signature) + "\"";
}

// TF Serving's status name (tensorflow::error::Code) for one of our outcomes ("OK" or an errc's name).
const char* tf_status_name(const std::string& outcome) {
  static const std::map<std::string, const char*, std::less<>> names{
      {"OK", "OK"},
      {"invalid_argument", "INVALID_ARGUMENT"}, {"shape_mismatch", "INVALID_ARGUMENT"}, {"dtype_mismatch", "INVALID_ARGUMENT"},
      {"unknown_dtype", "INVALID_ARGUMENT"}, {"malformed_input", "INVALID_ARGUMENT"}, {"out_of_range", "INVALID_ARGUMENT"},
      {"not_found", "NOT_FOUND"}, {"failed_precondition", "FAILED_PRECONDITION"},
      {"resource_exhausted", "RESOURCE_EXHAUSTED"}, {"out_of_memory", "RESOURCE_EXHAUSTED"},
      {"timeout", "DEADLINE_EXCEEDED"}, {"cancelled", "CANCELLED"}, {"unsupported", "UNIMPLEMENTED"},
      {"peer_down", "UNAVAILABLE"}, {"internal", "INTERNAL"}};
  auto it = names.find(outcome);
  return it == names.end() ? "UNKNOWN" : it->second;
}

}  // namespace

// TF Serving's own names for the same requests, so that its dashboards and alerts keep working:
// the count by model and status, and the latency in microseconds by model (TF Serving's API and
// entrypoint labels are not kept apart here). Called with mtx_ held.
void serving_metrics::tf_serving_series(std::string& out) const {
  std::map<std::pair<std::string, std::string>, uint64_t> counts;  // model, TF status
  struct merged {
    std::array<uint64_t, latency_buckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::string, merged> latency;
  for (const auto& [key, h] : requests_) {
    const auto& model = std::get<0>(key);
    const uint64_t count = h.count.load(std::memory_order_acquire);
    counts[{model, tf_status_name(std::get<3>(key))}] += count;
    auto& m = latency[model];
    uint64_t seen = 0;
    for (std::size_t i = 0; i < latency_buckets.size(); ++i) {
      const uint64_t n = h.buckets[i].load(std::memory_order_relaxed);
      m.buckets[i] += n;
      seen += n;
    }
    m.count += std::max(seen, count);
    m.sum += h.sum.load(std::memory_order_relaxed);
  }
  out += "# HELP :tensorflow:serving:request_count The total number of requests.\n";
  out += "# TYPE :tensorflow:serving:request_count counter\n";
  for (const auto& [key, n] : counts)
    out += ":tensorflow:serving:request_count{model_name=\"" + prometheus_label(key.first) + "\",status=\"" + key.second + "\"} " +
           std::to_string(n) + "\n";
  out += "# HELP :tensorflow:serving:request_latency Distribution of wall time (in microseconds) for Tensorflow Serving request.\n";
  out += "# TYPE :tensorflow:serving:request_latency histogram\n";
  for (const auto& [model, m] : latency) {
    const std::string l = "model_name=\"" + prometheus_label(model) + "\"";
    uint64_t cumulative = 0;
    for (std::size_t i = 0; i < latency_buckets.size(); ++i) {
      cumulative += m.buckets[i];
      out += ":tensorflow:serving:request_latency_bucket{" + l + ",le=\"" + std::to_string(std::llround(latency_buckets[i] * 1e6)) + "\"} " +
             std::to_string(cumulative) + "\n";
    }
    out += ":tensorflow:serving:request_latency_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(m.count) + "\n";
    out += ":tensorflow:serving:request_latency_sum{" + l + "} " + number(m.sum * 1e6) + "\n";
    out += ":tensorflow:serving:request_latency_count{" + l + "} " + std::to_string(m.count) + "\n";
  }
}

std::string serving_metrics::prometheus_text() const {
  std::string out;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    out += "# HELP actorflow_serving_request_count Requests answered, by outcome.\n";
    out += "# TYPE actorflow_serving_request_count counter\n";
    for (const auto& [key, h] : requests_) {
      const auto& [model, version, signature, outcome] = key;
      out += "actorflow_serving_request_count{" + labels(model, version, signature) + ",outcome=\"" +
             prometheus_label(outcome) + "\"} " + std::to_string(h.count.load()) + "\n";
    }
    out += "# HELP actorflow_serving_request_latency_seconds Time from a request's arrival to its answer.\n";
    out += "# TYPE actorflow_serving_request_latency_seconds histogram\n";
    for (const auto& [key, h] : requests_) {
      const auto& [model, version, signature, outcome] = key;
      const std::string l = labels(model, version, signature) + ",outcome=\"" + prometheus_label(outcome) + "\"";
      // The count first: every observation it includes has its bucket in (see observe).
      const uint64_t count = h.count.load(std::memory_order_acquire);
      uint64_t cumulative = 0;
      for (std::size_t i = 0; i < latency_buckets.size(); ++i) {
        cumulative += h.buckets[i].load(std::memory_order_relaxed);
        out += "actorflow_serving_request_latency_seconds_bucket{" + l + ",le=\"" + number(latency_buckets[i]) + "\"} " +
               std::to_string(cumulative) + "\n";
      }
      cumulative = std::max(cumulative, count);  // observations landing during the scrape
      out += "actorflow_serving_request_latency_seconds_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
      out += "actorflow_serving_request_latency_seconds_sum{" + l + "} " + number(h.sum.load(std::memory_order_relaxed)) + "\n";
      out += "actorflow_serving_request_latency_seconds_count{" + l + "} " + std::to_string(cumulative) + "\n";
    }
    tf_serving_series(out);
    out += "# HELP actorflow_serving_model_load_count Version loads, by outcome.\n";
    out += "# TYPE actorflow_serving_model_load_count counter\n";
    for (const auto& [key, n] : loads_) {
      const auto& [model, version, ok] = key;
      out += "actorflow_serving_model_load_count{model=\"" + prometheus_label(model) + "\",version=\"" +
             std::to_string(version) + "\",outcome=\"" + (ok ? "loaded" : "failed") + "\"} " + std::to_string(n) + "\n";
    }
  }
  // Queues are read outside the lock: the source takes the model server's own.
  const auto queues = this->queues();
  out += "# HELP actorflow_serving_queue_rows Rows waiting in a batching queue.\n";
  out += "# TYPE actorflow_serving_queue_rows gauge\n";
  for (const auto& q : queues)
    out += "actorflow_serving_queue_rows{" + labels(q.model, q.version, q.signature) + "} " + std::to_string(q.queued_rows) + "\n";
  out += "# HELP actorflow_serving_refused_count Requests refused without running, by reason.\n";
  out += "# TYPE actorflow_serving_refused_count counter\n";
  for (const auto& q : queues) {
    const std::string l = labels(q.model, q.version, q.signature);
    out += "actorflow_serving_refused_count{" + l + ",reason=\"queue_full\"} " + std::to_string(q.stats.refused_full) + "\n";
    out += "actorflow_serving_refused_count{" + l + ",reason=\"deadline\"} " + std::to_string(q.stats.refused_deadline) + "\n";
  }
  out += "# HELP actorflow_serving_batches_sent_ahead_count Full batches handed to a replica while it ran another.\n";
  out += "# TYPE actorflow_serving_batches_sent_ahead_count counter\n";
  for (const auto& q : queues)
    out += "actorflow_serving_batches_sent_ahead_count{" + labels(q.model, q.version, q.signature) + "} " +
           std::to_string(q.stats.sent_ahead) + "\n";
  out += "# HELP actorflow_serving_batch_size Real rows per batch run (padding excluded).\n";
  out += "# TYPE actorflow_serving_batch_size histogram\n";
  for (const auto& q : queues) {
    const std::string l = labels(q.model, q.version, q.signature);
    const auto& sizes = q.stats.batch_sizes;
    uint64_t cumulative = 0;
    double sum = 0;
    std::size_t next_bound = 1;
    for (std::size_t n = 0; n < sizes.size(); ++n) {
      cumulative += sizes[n];
      sum += static_cast<double>(n) * static_cast<double>(sizes[n]);
      // Power-of-two bounds, and the largest size.
      if (n == next_bound || n + 1 == sizes.size()) {
        out += "actorflow_serving_batch_size_bucket{" + l + ",le=\"" + std::to_string(n) + "\"} " + std::to_string(cumulative) + "\n";
        while (next_bound <= n) next_bound *= 2;
      }
    }
    out += "actorflow_serving_batch_size_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    out += "actorflow_serving_batch_size_sum{" + l + "} " + number(sum) + "\n";
    out += "actorflow_serving_batch_size_count{" + l + "} " + std::to_string(cumulative) + "\n";
  }
  return out;
}

}  // namespace af::serving
