#pragma once

// TensorFlow Serving's REST API over HTTP/1.1 (Boost.Beast, kept out of this header):
//
//   GET  /v1/models/NAME[/versions/V | /labels/L]            version status
//   GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signature defs
//   POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": ...} or {"inputs": ...}
//   GET  /monitoring/prometheus/metrics                      serving_metrics
//
// Connections are kept alive; a request's body is limited; errors are {"error": "..."} with TF
// Serving's statuses (400 bad input, 404 unknown model/version/signature, 429 queue full, 504
// deadline, 500 otherwise). A predict's deadline is the server's request timeout
// (--rest_api_timeout_in_ms), or what the request asks for with `X-Request-Timeout-Ms: N`
// (clamped to a day).
//
// A request is screened from its head before any of its body is read: the bearer token (401),
// the declared Content-Length against the limit (413, and the connection closes), the route and
// method (404, 405) and the model's queue (429). A refused request's body is read and dropped
// only when it is small (64 KiB), so that the connection stays usable; otherwise the connection
// closes after the answer.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "apps/serving/tls_config.hpp"
#include "ops/error.hpp"

namespace af::serving {

class model_server;
class serving_metrics;

struct http_options {
  /// Address to listen on: loopback unless told otherwise.
  std::string address = "127.0.0.1";
  uint16_t port = 8501;  ///< 0 picks a free port (see http_server::port)
  std::size_t threads = 2;
  std::size_t max_body_bytes = 64u << 20;
  /// Connections open at once; more are closed right after accept.
  std::size_t max_connections = 4096;
  /// A connection idle (or stuck sending) this long is closed.
  std::chrono::seconds idle_timeout{60};
  /// Deadline of a predict that names none; zero: none.
  std::chrono::milliseconds request_timeout{0};
  /// When set, every request must carry `Authorization: Bearer <token>` (else 401).
  std::string bearer_token;
  /// When set, the port speaks HTTPS only (the same SSLConfig as gRPC's).
  std::optional<tls_config> tls;
  /// Where the Prometheus metrics are served (TF Serving's MonitoringConfig path); empty: nowhere.
  std::string metrics_path = "/monitoring/prometheus/metrics";
};

/// The HTTP status TF Serving answers an error with.
int http_status_for(errc code) noexcept;

class http_server {
 public:
  /// Listens and serves on its own threads until destroyed. io_error naming the address when it
  /// cannot bind; invalid_argument naming the field when options.tls does not load. `metrics` may be null (then /monitoring answers 404).
  static expected<std::unique_ptr<http_server>> start(model_server& models, std::shared_ptr<serving_metrics> metrics,
                                                      http_options options);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  uint16_t port() const;

  struct impl;

 private:
  explicit http_server(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
