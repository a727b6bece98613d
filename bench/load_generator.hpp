#pragma once

// An HTTP/1.1 load generator for serving benchmarks: one thread, one epoll loop, keep-alive
// connections opened before the clock starts.
//
// Open loop (run_open_loop): request i is due at t0 + i/rate (or at Poisson arrival times from a
// seeded RNG). A due request goes out on an idle connection; when none is idle it waits in a FIFO
// queue, and its latency still runs from its scheduled time. A slow server therefore shows up as
// latency rather than as a lower send rate (no coordinated omission).
//
// Closed loop (run_closed_loop): every connection keeps `max_outstanding_per_connection` requests
// in flight and sends the next one as soon as an answer arrives; latency runs from the send.
//
// Counting: a request scheduled (open loop) or sent (closed loop) during the warm-up is sent but
// not counted. The per-request counters and latencies describe the counted requests only, and they
// add up: scheduled = completed + failed + not_answered. The connection counters (connect_errors,
// io_errors, reconnects) cover the whole run.
//
// Responses are parsed as HTTP/1.1: status line, headers, then a body delimited by Content-Length,
// by chunked transfer coding or by the close of the connection. A server's `Connection: close`
// (or an HTTP/1.0 answer without keep-alive) is honoured by reconnecting; a broken connection is
// counted and reconnected, and the requests it carried count as failed (they are not re-sent:
// a POST is not idempotent).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/http_response_parser.hpp"

namespace af::bench {

/// The one request every arrival sends; rendered to bytes once per run.
struct load_request {
  std::string method = "POST";
  std::string path;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, sent as given
};

struct load_options {
  std::string host = "127.0.0.1";  // an IPv4 address or a name getaddrinfo resolves
  uint16_t port = 0;
  std::size_t connections = 32;         // keep-alive connections, opened before the clock starts
  double rate_per_second = 1000;        // open loop: scheduled arrivals per second
  std::chrono::milliseconds duration{5000};  // measured span, after the warm-up
  std::chrono::milliseconds warmup{500};     // requests scheduled in this first span are not counted
  bool poisson = false;                 // exponential inter-arrival times instead of constant ones
  uint64_t seed = 1;                    // of the Poisson arrival RNG
  std::size_t max_outstanding_per_connection = 1;  // > 1 pipelines requests on a connection
  std::chrono::milliseconds drain_timeout{5000};   // after the last scheduled request
  std::chrono::milliseconds reconnect_backoff{10}; // after a failed connect, before the next try
};

struct load_result {
  uint64_t scheduled = 0;     // counted requests: scheduled (open loop) or sent (closed loop)
  uint64_t completed = 0;     // of those, answered with a complete response (any status)
  uint64_t ok = 0;            // of those, answered with a 2xx status
  std::map<int, uint64_t> status_counts;
  uint64_t failed = 0;        // counted requests lost with a broken connection or a garbled answer
  uint64_t not_answered = 0;  // counted requests still queued or in flight when the drain timed out
  uint64_t connect_errors = 0;  // failed connection attempts (whole run)
  uint64_t io_errors = 0;       // connections broken by a send/recv error, an unexpected close or
                                // an unparseable response (whole run)
  uint64_t reconnects = 0;      // connections re-opened after a server close or an error (whole run)
  std::size_t max_queue_depth = 0;  // open loop: most due requests waiting for a connection at once
  double measured_seconds = 0;      // end of warm-up to the later of schedule end and last answer
  double achieved_per_second = 0;   // completed / measured_seconds
  std::vector<double> latencies_us;  // of completed counted requests, from their scheduled time
  std::map<int, std::vector<double>> latencies_by_status_us;  // e.g. how fast 429s were answered

  /// The p-th percentile (p in [0, 100], nearest rank) of latencies_us; NaN when there are none.
  double percentile_us(double p) const;
};

/// Open-loop run: arrivals at `opt.rate_per_second` for warm-up + duration, then up to
/// `drain_timeout` for the answers still due. See the top of this file.
load_result run_open_loop(const load_request& req, const load_options& opt);

/// Closed-loop saturation: each connection sends its next request as soon as the previous answer
/// arrives, for warm-up + duration; achieved_per_second is the saturation throughput.
load_result run_closed_loop(const load_request& req, const load_options& opt);

/// The p-th percentile (nearest rank) of `values`; NaN when empty. Sorts a copy.
double percentile_of(std::vector<double> values, double p);

/// The bytes of `req` as sent to `host`: request line, Host, Content-Type, Content-Length,
/// Connection: keep-alive, the extra headers, the body.
std::string render_request(const load_request& req, const std::string& host, uint16_t port);

}  // namespace af::bench
