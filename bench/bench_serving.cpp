// bench_serving: `actorflow serve`'s REST path under an open-loop load generator (latency counted
// from each request's scheduled time), against the same model run offline in this process, and
// against Ray Serve (bench/serving_reference.py) when Ray and PyTorch are installed.
//
// For the MLP 784-512-512-10 and the digits CNN, single-row JSON requests over keep-alive
// connections (closed loops: 32 doubled while throughput grows; open loops: 128):
//   offline_rows_per_s   the loaded SavedModel called directly at batch 32 (the baseline)
//   batch32_served_threads_ms  one such batch on the kernel threads the replica gets
//   saturation_per_s     closed loop, batching on (max 32, 2 ms timeout); ratio to offline;
//                        saturation_connections: the connection count that reached it
//   grpc_saturation_per_s, grpc_rows32_rows_per_s  the same topology over gRPC's Predict with
//                        tensor_content, 1-row and 32-row calls: the server without JSON;
//                        grpc_saturation_in_flight: the 1-row calls in flight (swept as above)
//   unbatched_per_s      the same with batching off; batching_speedup = saturation / unbatched
//   p50/p90/p99/p999_ms  open loop at 50% of saturation; p99_budget_ms = timeout + 3 x batch time
//   batch sizes          mean real rows per batch at 50% load
//   server_cpu_us_per_request, grpc_server_cpu_us_per_request, rows32_server_cpu_us_per_row,
//   grpc_rows32_server_cpu_us_per_row
//                        the server's CPU (getrusage of this process while the load comes from
//                        bench_loadgen in a child) per row at each saturation point, against
//                        offline_cpu_us_per_row: the batch of 32 run directly on the replica's
//                        kernel threads (*_vs_offline: the ratios)
//   http_floor_cpu_us_per_request  the server's CPU per GET of the model's status over as many
//                        keep-alive connections: HTTP over loopback TCP with no body and no model,
//                        the part of a 1-row JSON request that no decoder or batcher can remove
// Overload (MLP): open loop at 2x saturation with a short queue, from bench_loadgen in a child
// process: the server's RSS drift (after and peak) and how fast the excess is answered 429.
// --quick shortens every phase (the overload to 3 s instead of 30 s).
//
//   build/bench/bench_serving [--quick] [--no-peer] [--replica-nice N] [--kernel-threads-all]
//                             [--idle-polls N]

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "actors/runtime.hpp"
#include "apps/serving/grpc_server.hpp"
#include "apps/serving/http_server.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "bench/bench_common.hpp"
#include "bench/grpc_load.hpp"
#include "bench/load_generator.hpp"
#include "bench/loadgen_process.hpp"
#include "ops/parallel.hpp"
#include "ops/runtime/executor.hpp"
#include "ops/train/layers.hpp"
#include "serialization/npy.hpp"
#include "serialization/saved_model.hpp"
#include "training/digits.hpp"

using namespace af;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct phase_lengths {
  std::chrono::milliseconds saturation, open_loop, overload, offline;
};

nn::model mlp_784(int64_t hidden = 512) {
  auto x = nn::input({784}, dtype::f32, "image");
  auto h = nn::dense(hidden, {.activation = "relu"})(x);
  h = nn::dense(hidden, {.activation = "relu"})(h);
  auto y = nn::dense(10, {.name = "logits"})(h);
  return nn::model::functional({x}, {y}, {.seed = 1}).value();
}

// {"instances": [[...]]} with one row of `values` numbers in [0, 1), three decimals (pixels).
std::string one_row_body(std::size_t values, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> pixel(0, 999);
  std::string body = "{\"instances\": [[";
  for (std::size_t i = 0; i < values; ++i) {
    if (i) body += ',';
    const int p = pixel(rng);
    body += p == 0 ? "0" : "0." + std::to_string(1000 + p).substr(1);
  }
  return body + "]]}";
}

// {"instances": [image]} with one 8x8x1 image of pixels in [0, 1).
std::string one_image_body(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> pixel(0, 999);
  std::string body = "{\"instances\": [[";
  for (int r = 0; r < 8; ++r) {
    body += r ? ",[" : "[";
    for (int c = 0; c < 8; ++c) body += (c ? ",[0." : "[0.") + std::to_string(1000 + pixel(rng)).substr(1) + "]";
    body += "]";
  }
  return body + "]]}";
}

void must(const expected<void>& done) {
  if (!done) {
    std::fprintf(stderr, "bench_serving: %s\n", done.error_value().message.c_str());
    std::exit(1);
  }
}

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// CPU time this process has used (user + system, every thread).
double process_cpu_seconds() {
  rusage use{};
  getrusage(RUSAGE_SELF, &use);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(use.ru_utime) + seconds(use.ru_stime);
}

struct offline_batch {
  double seconds = 0;         // one batch's median wall time
  double cpu_us_per_row = 0;  // the process's CPU over all the timed batches, per row
};

// The loaded model called directly at batch 32 on `threads` kernel threads. The caller's thread
// budget is restored afterwards.
offline_batch offline_batch_of(saved_model::loaded_model& loaded, const shape& row_dims, int threads, std::chrono::milliseconds span) {
  const int before = thread_budget();
  set_thread_budget(threads);
  shape dims{32};
  for (int64_t d : row_dims) dims.push_back(d);
  const tensor x = tensor::full(dims, 0.5, dtype::f32).value();
  // The graph runs on this thread, as inside a model worker (a device actor), rather than as a
  // request to the runtime's device actor: the baseline is the computation alone.
  const auto worker_cpu = make_cpu_backend();
  device_actor_scope as_model_worker{*worker_cpu};
  for (int i = 0; i < 5; ++i) (void)loaded.call("serving_default", {x});
  std::vector<double> times;
  const double cpu_before = process_cpu_seconds();
  const auto until = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < until)
    times.push_back(bench::seconds_of([&] { (void)loaded.call("serving_default", {x}); }));
  const double cpu = process_cpu_seconds() - cpu_before;
  set_thread_budget(before);
  return {bench::median(times), cpu * 1e6 / (32.0 * static_cast<double>(times.size()))};
}

int replica_nice = 0;  // as `actorflow serve` runs its replicas

// As `actorflow serve` sizes its REST and gRPC front ends by default: a thread per core.
std::size_t front_end_threads() { return std::max(1u, std::thread::hardware_concurrency()); }
int offline_threads = 2;

struct served {
  runtime* rt;
  std::unique_ptr<serving::model_server> models;
  std::unique_ptr<serving::http_server> rest;
  std::unique_ptr<serving::grpc_server> grpc;
  std::shared_ptr<serving::serving_metrics> metrics = std::make_shared<serving::serving_metrics>();

  served(runtime& r, const std::string& base, bool batching, std::size_t max_enqueued_batches = 64) : rt(&r) {
    serving::server_options o;
    o.enable_batching = batching;
    o.batching.max_batch_size = 32;
    o.batching.batch_timeout = 2000us;
    o.batching.max_enqueued_batches = max_enqueued_batches;
    o.batching.num_batch_threads = 1;
    o.batching.replica_nice = replica_nice;
    o.unbatched_threads = 2;
    o.poll_interval = 0ms;
    models = serving::model_server::start(r, {{.name = "m", .base_path = base}}, o, metrics).value();
    serving::http_options h;
    h.port = 0;
    h.threads = front_end_threads();
    rest = serving::http_server::start(*models, metrics, h).value();
  }

  // Closed-loop Predict calls over gRPC, `rows` rows each: rows per second answered. The gRPC
  // front end starts on the first call, so the phases that measure REST alone run without it.
  double grpc_rows_per_s(const shape& row_dims, int64_t rows, std::size_t in_flight, std::chrono::milliseconds span) {
    const uint16_t port = grpc_port();
    shape dims{rows};
    for (int64_t d : row_dims) dims.push_back(d);
    const std::string input = models->find_signature({.name = "m"}).value()->inputs.front().name;
    const auto r = bench::run_grpc_closed_loop(tensor::full(dims, 0.5, dtype::f32).value(),
                                               {.port = port, .model = "m", .input = input,
                                                .in_flight = in_flight, .duration = span});
    if (r.failed) std::fprintf(stderr, "bench_serving: %llu gRPC calls failed: %s\n", static_cast<unsigned long long>(r.failed), r.first_error.c_str());
    return r.ok_per_second * static_cast<double>(rows);
  }

  // The gRPC front end, started on first use.
  uint16_t grpc_port() {
    if (!grpc) grpc = serving::grpc_server::start(*models, "127.0.0.1:0", {.threads = front_end_threads()}).value();
    return static_cast<uint16_t>(grpc->port());
  }

  // Rows the replicas have run (padding excluded), over every queue.
  uint64_t rows_run() const {
    uint64_t rows = 0;
    for (const auto& q : metrics_queues()) rows += q.stats.rows;
    return rows;
  }

  double mean_batch_rows() const {
    uint64_t batches = 0, rows = 0;
    for (const auto& q : metrics_queues()) {
      batches += q.stats.batches;
      rows += q.stats.rows;
    }
    return batches ? static_cast<double>(rows) / static_cast<double>(batches) : 0;
  }
  std::vector<serving::queue_sample> metrics_queues() const { return metrics->queues(); }
};

// Closed-loop throughput in 2xx answers a second: an error answered fast must not count as
// served. Says so when some answers were not 2xx.
double ok_per_second(const bench::load_result& r, const char* what) {
  if (r.ok != r.completed || r.failed)
    std::fprintf(stderr, "bench_serving: %s: %llu of %llu answers were not 2xx, %llu failed\n", what,
                 static_cast<unsigned long long>(r.completed - r.ok), static_cast<unsigned long long>(r.completed),
                 static_cast<unsigned long long>(r.failed));
  return r.measured_seconds > 0 ? static_cast<double>(r.ok) / r.measured_seconds : 0;
}

bench::load_options load_at(uint16_t port, double rate, std::chrono::milliseconds span) {
  bench::load_options o;
  o.port = port;
  o.connections = 32;
  o.rate_per_second = rate;
  o.duration = span;
  o.warmup = 300ms;
  return o;
}

// Saturation: the most 2xx answers a second that a closed loop gets, doubling what it keeps in
// flight (keep-alive connections, or gRPC calls) from 32 (to 1024 at most) while that still gains
// more than 3%. One count is not enough: with 32 in flight and batches of 32 the MLP's whole load
// sat in one batch at a time, and the CPUs were 20% idle while it ran (gRPC: 32% idle).
struct saturation_point {
  double per_second = 0;
  std::size_t in_flight = 0;
};
saturation_point sweep_in_flight(const std::function<double(std::size_t in_flight)>& ok_per_second_at) {
  saturation_point best;
  for (std::size_t in_flight = 32; in_flight <= 1024; in_flight *= 2) {
    const double per_second = ok_per_second_at(in_flight);
    const bool gained = per_second > 1.03 * best.per_second;
    if (per_second > best.per_second) best = {per_second, in_flight};
    if (!gained) break;  // at the knee: more in flight only queues
  }
  return best;
}

saturation_point saturation_of(const bench::load_request& req, uint16_t port, std::chrono::milliseconds span, const char* what) {
  return sweep_in_flight([&](std::size_t connections) {
    auto options = load_at(port, 0, span);
    options.connections = connections;
    return ok_per_second(bench::run_closed_loop(req, options), what);
  });
}

// The open loop at a fixed rate: enough connections that a due request never waits in the
// generator for one. By Little's law 32 connections carry at most 32 / latency requests per
// second (about 12k/s at the ~2.5 ms a batched request takes), which is close to 50% of the
// MLP's saturation: the generator's own queue then added to the tail it reports.
bench::load_options open_loop_at(uint16_t port, double rate, std::chrono::milliseconds span) {
  auto o = load_at(port, rate, span);
  o.connections = 128;
  return o;
}

// The server's CPU per row served at saturation: this process's CPU (the server alone: the load
// comes from bench_loadgen in a child process, whose CPU is its own) over the rows the replicas
// ran meanwhile. NaN when the generator did not run.
double server_cpu_us_per_row(served& s, const std::vector<std::string>& loadgen_args) {
  const double cpu_before = process_cpu_seconds();
  const uint64_t rows_before = s.rows_run();
  const auto line = bench::run_loadgen_process(loadgen_args, [] {});
  const double cpu = process_cpu_seconds() - cpu_before;
  const uint64_t rows = s.rows_run() - rows_before;
  if (!line || rows == 0) return std::nan("");
  return cpu * 1e6 / static_cast<double>(rows);
}

// The server's CPU per request answered when a request costs it only the HTTP exchange (a GET of
// the model's status: no body, no model): the floor under the 1-row JSON figure. Every request
// counts (no warmup), as every row does above.
double server_cpu_us_per_request(const std::vector<std::string>& loadgen_args) {
  const double cpu_before = process_cpu_seconds();
  const auto line = bench::run_loadgen_process(loadgen_args, [] {});
  const double cpu = process_cpu_seconds() - cpu_before;
  const double answered = line ? bench::json_number(*line, "closed_ok") : std::nan("");
  if (!(answered > 0)) return std::nan("");
  return cpu * 1e6 / answered;
}

std::string comma_separated(const shape& dims) {
  std::string out;
  for (int64_t d : dims) {
    if (!out.empty()) out += ',';
    out += std::to_string(d);
  }
  return out;
}

struct model_figures {
  double rows32_per_s = 0;  // closed loop with 32-row requests: the topology without JSON per row dominating
  double grpc_per_s = 0, grpc_rows32_per_s = 0;  // the same over gRPC with tensor_content (no JSON at all)
  std::size_t grpc_in_flight = 0;  // the 1-row calls kept in flight that reached grpc_per_s
  std::size_t saturation_connections = 0;  // the closed loop's connections that reached it
  double offline = 0, batch_ms = 0, served_batch_ms = 0, saturation = 0, unbatched = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, mean_batch = 0;
  // CPU per row: offline (the batch of 32 on the replica's kernel threads) and the server's at
  // saturation for 1-row JSON, 1-row gRPC and 32-row JSON requests.
  double offline_cpu_us = 0, json_cpu_us = 0, grpc_cpu_us = 0, rows32_cpu_us = 0, grpc_rows32_cpu_us = 0;
  // The server's CPU per status GET at the 1-row connection count: what HTTP over TCP costs alone.
  double http_floor_cpu_us = 0;
  uint64_t open_loop_errors = 0;
  std::size_t open_loop_client_queue_max = 0;  // due requests that found every connection busy
};

model_figures measure_model(runtime& rt, const std::string& base, const shape& row_dims, const std::string& body,
                            const phase_lengths& len, const fs::path& scratch) {
  model_figures f;
  {
    auto loaded = saved_model::load(base + "/1").value();
    // The baseline at its strongest: every core for the kernels, whatever the server is given.
    const double batch_s = offline_batch_of(loaded, row_dims, offline_threads, len.offline).seconds;
    f.offline = 32.0 / batch_s;
    f.batch_ms = batch_s * 1e3;
    // What one batch costs the replica as served (kernels on one thread unless --kernel-threads-all),
    // in time and in CPU per row.
    const auto served_batch = offline_batch_of(loaded, row_dims, thread_budget(), len.offline);
    f.served_batch_ms = served_batch.seconds * 1e3;
    f.offline_cpu_us = served_batch.cpu_us_per_row;
  }
  const bench::load_request req{.method = "POST", .path = "/v1/models/m:predict", .body = body};
  {
    served s{rt, base, true};
    const auto sat = saturation_of(req, s.rest->port(), len.saturation, "saturation");
    f.saturation = sat.per_second;
    f.saturation_connections = sat.in_flight;
    auto open = bench::run_open_loop(req, open_loop_at(s.rest->port(), f.saturation * 0.5, len.open_loop));
    f.open_loop_client_queue_max = open.max_queue_depth;
    f.p50 = open.percentile_us(50) / 1e3;
    f.p90 = open.percentile_us(90) / 1e3;
    f.p99 = open.percentile_us(99) / 1e3;
    f.p999 = open.percentile_us(99.9) / 1e3;
    f.open_loop_errors = open.scheduled - open.ok;
    f.mean_batch = s.mean_batch_rows();
    // Requests of a full batch each: the server's per-request costs spread over 32 rows.
    std::string rows = body.substr(std::string{"{\"instances\": ["}.size());
    rows = rows.substr(0, rows.size() - 2);
    std::string big = "{\"instances\": [";
    for (int i = 0; i < 32; ++i) big += (i ? "," : "") + rows;
    const bench::load_request req32{.method = "POST", .path = "/v1/models/m:predict", .body = big + "]}"};
    auto options32 = load_at(s.rest->port(), 0, len.saturation);
    options32.connections = 4;
    f.rows32_per_s = 32 * ok_per_second(bench::run_closed_loop(req32, options32), "32-row requests");
    const auto grpc = sweep_in_flight([&](std::size_t calls) { return s.grpc_rows_per_s(row_dims, 1, calls, len.saturation); });
    f.grpc_per_s = grpc.per_second;
    f.grpc_in_flight = grpc.in_flight;
    f.grpc_rows32_per_s = s.grpc_rows_per_s(row_dims, 32, 4, len.saturation);
    // The server's CPU per row at each saturation point, the generator in a process of its own.
    const std::string one_row = (scratch / "cpu_one_row.json").string(), rows32 = (scratch / "cpu_rows32.json").string();
    std::ofstream(one_row, std::ios::binary) << body;
    std::ofstream(rows32, std::ios::binary) << req32.body;
    const std::string span = std::to_string(len.saturation.count());
    auto http = [&](const std::string& file, std::size_t connections) {
      return std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(s.rest->port()), "--path", "/v1/models/m:predict",
                                      "--body-file", file, "--closed", "--connections", std::to_string(connections),
                                      "--duration-ms", span, "--warmup-ms", "300"};
    };
    f.json_cpu_us = server_cpu_us_per_row(s, http(one_row, f.saturation_connections));
    f.rows32_cpu_us = server_cpu_us_per_row(s, http(rows32, 4));
    f.http_floor_cpu_us = server_cpu_us_per_request({"--host", "127.0.0.1", "--port", std::to_string(s.rest->port()), "--path",
                                                     "/v1/models/m", "--method", "GET", "--closed", "--connections",
                                                     std::to_string(f.saturation_connections), "--duration-ms", span, "--warmup-ms", "0"});
    const std::string input = s.models->find_signature({.name = "m"}).value()->inputs.front().name;
    auto grpc_calls = [&](int rows_per_call, std::size_t in_flight) {
      return std::vector<std::string>{"--grpc-input", input, "--port", std::to_string(s.grpc_port()), "--rows", std::to_string(rows_per_call),
                                      "--dims", comma_separated(row_dims), "--connections", std::to_string(in_flight),
                                      "--duration-ms", span, "--warmup-ms", "300"};
    };
    f.grpc_cpu_us = server_cpu_us_per_row(s, grpc_calls(1, f.grpc_in_flight));
    f.grpc_rows32_cpu_us = server_cpu_us_per_row(s, grpc_calls(32, 4));
  }
  {
    served s{rt, base, false};
    f.unbatched = saturation_of(req, s.rest->port(), len.saturation, "unbatched").per_second;
  }
  return f;
}

void add_model(bench::json_line& out, const std::string& name, const model_figures& f) {
  out.add(name + "_offline_rows_per_s", f.offline);
  out.add(name + "_batch32_ms", f.batch_ms);
  out.add(name + "_batch32_served_threads_ms", f.served_batch_ms);
  out.add(name + "_saturation_per_s", f.saturation);
  out.add(name + "_saturation_vs_offline", f.saturation / f.offline);
  out.add(name + "_saturation_connections", static_cast<double>(f.saturation_connections));
  out.add(name + "_rows32_requests_rows_per_s", f.rows32_per_s);
  out.add(name + "_rows32_vs_offline", f.rows32_per_s / f.offline);
  out.add(name + "_grpc_saturation_per_s", f.grpc_per_s);
  out.add(name + "_grpc_saturation_vs_offline", f.grpc_per_s / f.offline);
  out.add(name + "_grpc_saturation_in_flight", static_cast<double>(f.grpc_in_flight));
  out.add(name + "_grpc_rows32_rows_per_s", f.grpc_rows32_per_s);
  out.add(name + "_grpc_rows32_vs_offline", f.grpc_rows32_per_s / f.offline);
  out.add(name + "_unbatched_per_s", f.unbatched);
  out.add(name + "_batching_speedup", f.saturation / f.unbatched);
  out.add(name + "_p50_ms", f.p50);
  out.add(name + "_p90_ms", f.p90);
  out.add(name + "_p99_ms", f.p99);
  out.add(name + "_p999_ms", f.p999);
  out.add(name + "_p99_budget_ms", 2.0 + 3 * f.batch_ms);
  out.add(name + "_open_loop_errors", static_cast<double>(f.open_loop_errors));
  out.add(name + "_open_loop_client_queue_max", static_cast<double>(f.open_loop_client_queue_max));
  out.add(name + "_mean_batch_rows", f.mean_batch);
  out.add(name + "_offline_cpu_us_per_row", f.offline_cpu_us);
  out.add(name + "_server_cpu_us_per_request", f.json_cpu_us);
  out.add(name + "_cpu_per_request_vs_offline", f.json_cpu_us / f.offline_cpu_us);
  out.add(name + "_grpc_server_cpu_us_per_request", f.grpc_cpu_us);
  out.add(name + "_grpc_cpu_per_request_vs_offline", f.grpc_cpu_us / f.offline_cpu_us);
  out.add(name + "_rows32_server_cpu_us_per_row", f.rows32_cpu_us);
  out.add(name + "_rows32_cpu_per_row_vs_offline", f.rows32_cpu_us / f.offline_cpu_us);
  out.add(name + "_grpc_rows32_server_cpu_us_per_row", f.grpc_rows32_cpu_us);
  out.add(name + "_grpc_rows32_cpu_per_row_vs_offline", f.grpc_rows32_cpu_us / f.offline_cpu_us);
  out.add(name + "_http_floor_cpu_us_per_request", f.http_floor_cpu_us);
  out.add(name + "_http_floor_vs_offline", f.http_floor_cpu_us / f.offline_cpu_us);
  std::fprintf(stderr, "%s: server CPU per row at saturation: 1-row JSON %.1f us, 1-row gRPC %.1f us, 32-row JSON %.1f us, 32-row gRPC %.1f us; "
               "offline %.1f us (%.2fx, %.2fx, %.2fx, %.2fx); a status GET alone %.1f us (%.2fx)\n",
               name.c_str(), f.json_cpu_us, f.grpc_cpu_us, f.rows32_cpu_us, f.grpc_rows32_cpu_us, f.offline_cpu_us,
               f.json_cpu_us / f.offline_cpu_us, f.grpc_cpu_us / f.offline_cpu_us, f.rows32_cpu_us / f.offline_cpu_us,
               f.grpc_rows32_cpu_us / f.offline_cpu_us, f.http_floor_cpu_us, f.http_floor_cpu_us / f.offline_cpu_us);
  std::fprintf(stderr, "%s over gRPC (tensor_content): 1-row calls %.0f req/s at %zu in flight (%.2fx offline), 32-row calls %.0f rows/s (%.2fx)\n",
               name.c_str(), f.grpc_per_s, f.grpc_in_flight, f.grpc_per_s / f.offline, f.grpc_rows32_per_s, f.grpc_rows32_per_s / f.offline);
  std::fprintf(stderr, "%s: a batch of 32 takes %.2f ms on every core, %.2f ms on the replica's threads\n", name.c_str(), f.batch_ms,
               f.served_batch_ms);
  std::fprintf(stderr, "%s: offline %.0f rows/s, saturation %.0f req/s at %zu connections (%.2fx offline; 32-row requests %.0f rows/s, %.2fx), "
               "unbatched %.0f (batching %.1fx), 50%% load p50 %.2f p99 %.2f p99.9 %.2f ms (budget %.2f), mean batch %.1f\n",
               name.c_str(), f.offline, f.saturation, f.saturation_connections, f.saturation / f.offline, f.rows32_per_s, f.rows32_per_s / f.offline, f.unbatched,
               f.saturation / f.unbatched, f.p50, f.p99, f.p999, 2.0 + 3 * f.batch_ms, f.mean_batch);
}

// Open loop at twice `saturation` against a short queue (2 batches) over 512 connections, so that
// the excess reaches the server (32 connections would hold fewer requests than the queue): how
// much is served, how fast the rest is refused, and whether memory stays put. The generator is
// bench_loadgen in a process of its own (the same generator, one thread as in the other phases):
// the RSS sampled here is the server's alone, not the generator's backlog and latency records.
void measure_overload(runtime& rt, const std::string& name, const std::string& base, const std::string& body, double saturation,
                      const phase_lengths& len, const fs::path& scratch, bench::json_line& out) {
  served s{rt, base, true, /*max_enqueued_batches=*/2};
  const std::string body_file = (scratch / (name + "_body.json")).string();
  std::ofstream(body_file, std::ios::binary) << body;
  auto run = [&](std::chrono::milliseconds span, const std::function<void()>& tick) {
    return bench::run_loadgen_process({"--host", "127.0.0.1", "--port", std::to_string(s.rest->port()), "--path", "/v1/models/m:predict",
                                       "--body-file", body_file, "--connections", "512", "--rate", std::to_string(saturation * 2),
                                       "--duration-ms", std::to_string(span.count()), "--warmup-ms", "300"},
                                      tick);
  };
  (void)run(1000ms, [] {});  // warms the connections and the allocator up
  const double rss_before = rss_mib();
  double rss_peak = rss_before;
  const auto line = run(len.overload, [&] { rss_peak = std::max(rss_peak, rss_mib()); });
  const double rss_after = rss_mib();
  if (!line) {
    out.add(name, std::string{"failed: bench_loadgen did not run"});
    return;
  }
  auto field = [&](const std::string& key) { return bench::json_number(*line, "open_" + key); };
  auto count = [&](const std::string& key) { return std::isnan(field(key)) ? 0.0 : field(key); };
  const double refused = count("status_429");
  // Neither 2xx nor 429: another status, a connection broken under the request, or no answer by the
  // end of the drain (a request still waiting in the generator counts here).
  const double other_status = count("completed") - count("ok") - refused;
  const double other = other_status + count("failed") + count("not_answered");
  out.add(name + "_seconds", std::chrono::duration<double>(len.overload).count());
  out.add(name + "_ok_per_s", count("ok") / field("measured_seconds"));
  out.add(name + "_429_share", count("completed") > 0 ? refused / count("completed") : 0);
  out.add(name + "_429_p50_ms", field("status_429_p50_us") / 1e3);
  out.add(name + "_429_p99_ms", field("status_429_p99_us") / 1e3);
  out.add(name + "_other_errors", other);
  out.add(name + "_other_status", other_status);
  out.add(name + "_failed", count("failed"));
  out.add(name + "_not_answered", count("not_answered"));
  out.add(name + "_rss_drift", rss_after / rss_before - 1);
  out.add(name + "_rss_peak_drift", rss_peak / rss_before - 1);
  // Due requests that found every connection busy and waited in the generator (their latency runs
  // from their schedule all the same): how far the server's backlog reached back into the client.
  out.add(name + "_client_queue_max", count("max_queue_depth"));
  std::fprintf(stderr,
               "%s 2x (%.0f/s) for %.0f s: %.0f ok/s, %.0f answered 429 (p50 %.2f, p99 %.2f ms from schedule), %.0f other (%.0f other "
               "status, %.0f failed, %.0f unanswered at the drain's end), server RSS %.1f -> %.1f MiB (peak %.1f), client queue max %.0f\n",
               name.c_str(), saturation * 2, std::chrono::duration<double>(len.overload).count(), count("ok") / field("measured_seconds"),
               refused, field("status_429_p50_us") / 1e3, field("status_429_p99_us") / 1e3, other, other_status, count("failed"),
               count("not_answered"), rss_before, rss_after, rss_peak, count("max_queue_depth"));
}

// Ray's own processes (raylet, the GCS, its workers) outlive the driver by several seconds while
// they shut down, using more than a core: a run started right after this one measured its first
// phases beside them. Waits (30 s at most) until none is left.
void wait_for_ray_exit() {
  auto ray_process_left = [] {
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string pid = entry.path().filename().string();
      if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
      std::ifstream comm_file(entry.path() / "comm"), cmdline_file(entry.path() / "cmdline");
      std::string comm;
      std::getline(comm_file, comm);
      const std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), std::istreambuf_iterator<char>());
      if (comm.rfind("ray::", 0) == 0 || comm == "raylet" || comm == "gcs_server" || cmdline.find("/ray/") != std::string::npos)
        return true;
    }
    return false;
  };
  for (int i = 0; i < 300 && ray_process_left(); ++i) std::this_thread::sleep_for(100ms);
}

// Ray Serve serving the same MLP weights, measured by the same generator; false when absent.
bool measure_ray(const std::string& weights_dir, const std::string& body, const phase_lengths& len, bench::json_line& out,
                 double our_saturation, double our_p99) {
  if (std::system("python3 -c 'import ray.serve, torch' >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "ray: SKIP: ray[serve] or torch is not installed (pip install 'ray[serve]' torch)\n");
    out.add("ray", std::string{"skipped: not installed"});
    return false;
  }
  const std::string script = std::string{AF_SOURCE_DIR} + "/bench/serving_reference.py";
  const std::string log = (fs::temp_directory_path() / "af_bench_ray.log").string();
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execlp("python3", "python3", script.c_str(), "--serve", "--port", "8000", "--weights", weights_dir.c_str(), nullptr);
    _exit(127);
  }
  bool ready = false;
  for (int i = 0; i < 1200 && !ready; ++i) {
    std::this_thread::sleep_for(100ms);
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ready = text.find("READY") != std::string::npos;
  }
  if (ready) {
    const bench::load_request req{.method = "POST", .path = "/", .body = body};
    const auto sat = saturation_of(req, 8000, len.saturation, "ray");
    const double ray_saturation = sat.per_second;
    out.add("ray_saturation_connections", static_cast<double>(sat.in_flight));
    auto open = bench::run_open_loop(req, open_loop_at(8000, ray_saturation * 0.5, len.open_loop));
    out.add("ray_saturation_per_s", ray_saturation);
    out.add("ray_p99_ms", open.percentile_us(99) / 1e3);
    out.add("saturation_vs_ray", our_saturation / ray_saturation);
    out.add("p99_vs_ray", our_p99 / (open.percentile_us(99) / 1e3));
    std::fprintf(stderr, "ray: saturation %.0f req/s, p99 at 50%% %.2f ms\n", ray_saturation, open.percentile_us(99) / 1e3);
  } else {
    std::fprintf(stderr, "ray: the server did not come up in 120 s (log: %s)\n", log.c_str());
    out.add("ray", std::string{"failed to start"});
  }
  kill(-child, SIGTERM);
  waitpid(child, nullptr, 0);
  wait_for_ray_exit();
  return ready;
}

}  // namespace

int main(int argc, char** argv) {
  bench::check_flags(argc, argv,
                     "bench_serving [--quick] [--no-peer] [--replica-nice N] [--kernel-threads-all] [--idle-polls N]",
                     {"--quick", "--no-peer", "--kernel-threads-all"}, {"--replica-nice", "--idle-polls"});
  const bool quick = bench::has_flag(argc, argv, "--quick");
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string{argv[i]} == "--replica-nice") replica_nice = std::atoi(argv[i + 1]);
  const phase_lengths len = quick ? phase_lengths{1500ms, 2000ms, 3000ms, 500ms} : phase_lengths{4000ms, 6000ms, 30000ms, 2000ms};
  const fs::path root = fs::temp_directory_path() / ("af_bench_serving_" + std::to_string(getpid()));
  fs::create_directories(root);
  // Serving: by default one kernel thread, so the model's batches take one core and the HTTP
  // threads the other (a batch split over both cores stalls every connection while it runs).
  offline_threads = thread_budget();
  runtime_options ro;
  ro.kernel_threads = bench::has_flag(argc, argv, "--kernel-threads-all") ? offline_threads : 1;
  ro.idle_polls = 1;  // as `actorflow serve` runs its CAF workers; --idle-polls 500 is the library's default
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string{argv[i]} == "--idle-polls") ro.idle_polls = std::atoi(argv[i + 1]);
  runtime rt{ro};

  auto mlp = mlp_784();
  must(saved_model::save(mlp, (root / "mlp" / "1").string()));
  for (std::size_t i = 0; i < mlp.weights().size(); ++i) {
    const fs::path file = root / "mlp_weights" / (mlp.weights()[i].name + ".npy");
    fs::create_directories(file.parent_path());
    must(npy::write(file.string(), mlp.weight_values()[i]));
  }
  auto cnn = train::digits_cnn(1).value();
  must(saved_model::save(cnn, (root / "cnn" / "1").string()));

  bench::json_line out;
  out.add("quick", quick);
  const std::string mlp_body = one_row_body(784, 1);
  const auto mlp_figures = measure_model(rt, (root / "mlp").string(), {784}, mlp_body, len, root);
  add_model(out, "mlp", mlp_figures);
  const auto cnn_figures = measure_model(rt, (root / "cnn").string(), {8, 8, 1}, one_image_body(2), len, root);
  add_model(out, "cnn", cnn_figures);

  // Overload: twice the saturation rate against a short queue, for the light MLP (where parsing
  // JSON, not the model, limits the server) and for a wide one (where the model does).
  measure_overload(rt, "overload", (root / "mlp").string(), mlp_body, mlp_figures.saturation, len, root, out);
  {
    auto wide = mlp_784(4096);
    must(saved_model::save(wide, (root / "wide" / "1").string()));
    served s{rt, (root / "wide").string(), true};
    const bench::load_request req{.method = "POST", .path = "/v1/models/m:predict", .body = mlp_body};
    const double wide_saturation = saturation_of(req, s.rest->port(), len.saturation, "wide").per_second;
    out.add("wide_saturation_per_s", wide_saturation);
    measure_overload(rt, "wide_overload", (root / "wide").string(), mlp_body, wide_saturation, len, root, out);
  }

  // A new version under load at half the saturation rate: every request must be answered 200.
  {
    served s{rt, (root / "mlp").string(), true};
    const bench::load_request req{.method = "POST", .path = "/v1/models/m:predict", .body = mlp_body};
    bench::load_result during;
    std::thread load([&] { during = bench::run_open_loop(req, open_loop_at(s.rest->port(), mlp_figures.saturation * 0.5, len.open_loop)); });
    std::this_thread::sleep_for(len.open_loop / 3);
    auto next = mlp_784();
    must(saved_model::save(next, (root / "mlp" / "2").string()));
    const auto swap_started = std::chrono::steady_clock::now();
    s.models->poll_now();
    const double swap_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - swap_started).count();
    load.join();
    const auto now_serving = s.models->status("m", std::nullopt).value();
    const uint64_t failed = during.scheduled - during.ok;
    out.add("swap_requests", static_cast<double>(during.scheduled));
    out.add("swap_failed_requests", static_cast<double>(failed));
    out.add("swap_load_warmup_drain_ms", swap_ms);
    out.add("swap_p99_ms", during.percentile_us(99) / 1e3);
    std::fprintf(stderr, "swap under load: %llu requests, %llu failed, version %lld serving after a %.0f ms load+warmup+drain, p99 %.2f ms\n",
                 static_cast<unsigned long long>(during.scheduled), static_cast<unsigned long long>(failed),
                 static_cast<long long>(now_serving.front().version), swap_ms, during.percentile_us(99) / 1e3);
  }

  if (!bench::has_flag(argc, argv, "--no-peer"))
    measure_ray((root / "mlp_weights").string(), mlp_body, len, out, mlp_figures.saturation, mlp_figures.p99);
  fs::remove_all(root);
  out.print();
  return 0;
}
