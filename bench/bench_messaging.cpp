// Messaging costs of the runtime, each against what it must approach, measured in the same run:
//   local_msgs_per_s  small tensor messages between two actors in one process (credit-windowed)
//   zero_copy         a 4 MiB tensor reaches another actor with the same storage address
//   remote_gbps       4 MiB tensors to another process through actors/remote_node (default
//                     transport: CAF control plane + plain-socket data plane), window W
//   remote_caf_gbps   the same stream with tensors inside CAF messages (why the socket is default)
//   raw_tcp_gbps      the same bytes over a plain loopback socket to the same child process
//   remote_vs_raw_tcp median over repetitions of remote / raw of the same repetition (goal >= 0.7)
// The receiving process is forked before CAF starts. Repetitions are interleaved (raw, socket,
// CAF, raw, ...) so load from other processes hits all three alike; medians are reported.
// Usage: bench_messaging [--quick]. Last line: one JSON object.

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "actors/message_types.hpp"
#include "bench_common.hpp"
#include "actors/remote_node.hpp"
#include "actors/remote_socket.hpp"
#include "actors/runtime.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t tensor_bytes = 4 << 20;
constexpr uint32_t receiver_window_cap = 64;

enum class stream_kind { raw_tcp, node_socket, node_caf };
const char* name_of(stream_kind k) {
  return k == stream_kind::raw_tcp ? "raw tcp" : k == stream_kind::node_socket ? "node (socket data plane)" : "node (caf messages)";
}

// One timed transfer of `count` 4 MiB tensors; warm-ups are run but not reported.
struct stream_plan {
  stream_kind kind;
  uint32_t window;
  int count;
  bool warmup;
};

using af::bench::median;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Both processes of the remote measurements use CAF's "sharing" scheduler: work-stealing workers
// keep polling (with 50 us sleeps) for ~25 ms after every message, and on a 2-core machine that
// takes the CPU the socket threads need (measured here: remote/raw 0.75-0.97 with stealing, 0.9-1.1
// with sharing; raw TCP itself also speeds up once idle workers stop polling). The local messaging
// numbers use the default work-stealing runtime, which is faster for actor-to-actor traffic.
af::runtime_options node_options() {
  return {.scheduler_threads = 2, .network = true, .caf_args = {"--scheduler.policy=sharing"}};
}

// --- the receiving child process ----------------------------------------------------------------

// Serves the plan in order: drains raw connections into one reused buffer (acknowledging the end
// with one byte) and consumes node streams, dropping each tensor (its block returns to the
// allocator's cache, as a real consumer's would).
int serve(int report_fd, const std::vector<stream_plan>& plan) {
  af::runtime rt{node_options()};
  uint16_t raw_port = 0;
  auto raw_listener = af::net::listen_tcp("127.0.0.1", 0, raw_port);
  if (!raw_listener) return 1;
  std::vector<af::remote_receiver> receivers;
  std::string ports = std::to_string(raw_port);
  af::remote_options options;
  options.window = receiver_window_cap;
  for (const auto& s : plan) {
    if (s.kind == stream_kind::raw_tcp) continue;
    auto rx = af::remote_receiver::listen(rt, 0, options);
    if (!rx) return std::fprintf(stderr, "child: %s\n", rx.error_value().to_string().c_str()), 1;
    ports += ' ';  // (not " " + to_string: GCC 12 warns falsely about overlapping memcpy)
    ports += std::to_string(rx->port());
    receivers.push_back(std::move(*rx));
  }
  ports += "\n";
  if (::write(report_fd, ports.data(), ports.size()) != static_cast<ssize_t>(ports.size())) return 1;
  std::vector<char> sink(tensor_bytes);
  std::atomic<bool> stop{false};
  std::size_t next_receiver = 0;
  for (const auto& s : plan) {
    if (s.kind == stream_kind::raw_tcp) {
      auto fd = af::net::accept_tcp(*raw_listener, stop);
      if (!fd) return 1;
      af::net::tune_bulk_socket(fd->get(), 4 << 20);
      for (;;) {
        ssize_t n = ::recv(fd->get(), sink.data(), sink.size(), MSG_WAITALL);
        if (n <= 0) break;
      }
      const char ack = 'k';
      if (!af::net::write_all(fd->get(), &ack, 1)) return 1;
      continue;
    }
    auto& rx = receivers[next_receiver++];
    for (;;) {
      auto t = rx.next(60s);
      if (!t) return std::fprintf(stderr, "child: %s\n", t.error_value().to_string().c_str()), 1;
      if (!*t) break;
    }
  }
  return 0;
}

// --- the measuring parent -----------------------------------------------------------------------

double raw_tcp_seconds(uint16_t port, const af::tensor& payload, int count) {
  auto fd = af::net::connect_tcp("127.0.0.1", port);
  if (!fd) return -1;
  af::net::tune_bulk_socket(fd->get(), 4 << 20);
  const auto start = clock_type::now();
  for (int i = 0; i < count; ++i)
    if (!af::net::write_all(fd->get(), payload.raw_data(), payload.nbytes())) return -1;
  ::shutdown(fd->get(), SHUT_WR);
  char ack = 0;
  if (!af::net::read_exact(fd->get(), &ack, 1)) return -1;
  return seconds_since(start);
}

double node_seconds(af::runtime& rt, uint16_t port, const af::tensor& payload, const stream_plan& s) {
  af::remote_options options;
  options.window = s.window;
  options.transport = s.kind == stream_kind::node_caf ? af::bulk_transport::caf_messages : af::bulk_transport::tcp_socket;
  auto tx = af::remote_sender::connect(rt, "127.0.0.1", port, options);
  if (!tx) return std::fprintf(stderr, "connect: %s\n", tx.error_value().to_string().c_str()), -1;
  const auto start = clock_type::now();
  for (int i = 0; i < s.count; ++i)
    if (auto ok = tx->send(payload); !ok) return std::fprintf(stderr, "send: %s\n", ok.error_value().to_string().c_str()), -1;
  if (auto ok = tx->finish(); !ok) return std::fprintf(stderr, "finish: %s\n", ok.error_value().to_string().c_str()), -1;
  return seconds_since(start);
}

using ack_atom = caf::atom_constant<caf::atom("bm_ack")>;
using go_atom = caf::atom_constant<caf::atom("bm_go")>;

// Producer and consumer of `total` small tensor messages; the consumer grants credit in batches so
// the producer's mailbox writes stay bounded (the runtime's flow-control discipline in miniature).
double local_messages_per_s(af::runtime& rt, int total) {
  static constexpr int window = 512, batch = 128;
  const af::tensor small = af::tensor::from_vector<float>(std::vector<float>(16, 1.0f));
  auto& sys = rt.system();
  caf::scoped_actor self{sys};
  auto consumer = sys.spawn([total, reporter = caf::actor{self}](caf::event_based_actor* me) -> caf::behavior {
    auto seen = std::make_shared<int>(0);
    return {[=](const af::tensor& t, caf::actor& producer) {
      if (t.numel() != 16) return;
      if (++*seen % batch == 0) me->send(producer, ack_atom::value, batch);
      if (*seen == total) me->send(reporter, ack_atom::value, total);
    }};
  });
  auto producer = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    auto sent = std::make_shared<int>(0);
    auto send_up_to = [=](int n) {
      for (int i = 0; i < n && *sent < total; ++i, ++*sent) me->send(consumer, small, caf::actor{me});
    };
    return {[=](go_atom) { send_up_to(window); }, [=](ack_atom, int n) { send_up_to(n); }};
  });
  const auto start = clock_type::now();
  self->send(producer, go_atom::value);
  double rate = -1;
  self->receive([&](ack_atom, int n) { rate = n / seconds_since(start); }, caf::after(60s) >> [] {});
  self->send_exit(producer, caf::exit_reason::user_shutdown);
  self->send_exit(consumer, caf::exit_reason::user_shutdown);
  return rate;
}

// True when a 4 MiB tensor arrives in another actor with the storage address it was sent with.
bool zero_copy_in_process(af::runtime& rt, const af::tensor& payload) {
  auto& sys = rt.system();
  auto observer = sys.spawn([]() -> caf::behavior {
    return {[](const af::tensor& t) { return reinterpret_cast<uint64_t>(t.buffer()->data()); }};
  });
  caf::scoped_actor self{sys};
  uint64_t seen = 0;
  self->request(observer, 10s, payload).receive([&](uint64_t address) { seen = address; }, [](caf::error&) {});
  self->send_exit(observer, caf::exit_reason::user_shutdown);
  return seen == reinterpret_cast<uint64_t>(payload.buffer()->data());
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_messaging [--quick]", {"--quick"});
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick = quick || std::strcmp(argv[i], "--quick") == 0;
  const int reps = quick ? 7 : 11;
  const int count = quick ? 48 : 96;  // 4 MiB tensors per timed stream
  const uint32_t window = 4;
  const std::vector<uint32_t> window_sweep = quick ? std::vector<uint32_t>{} : std::vector<uint32_t>{1, 2, 8, 16};

  std::vector<stream_plan> plan;
  for (auto k : {stream_kind::raw_tcp, stream_kind::node_socket, stream_kind::node_caf})
    plan.push_back({k, window, 8, true});
  for (int r = 0; r < reps; ++r)
    for (auto k : {stream_kind::raw_tcp, stream_kind::node_socket, stream_kind::node_caf})
      plan.push_back({k, window, count, false});
  for (uint32_t w : window_sweep)
    for (int r = 0; r < 3; ++r) plan.push_back({stream_kind::node_socket, w, count, false});

  // Fork the receiver before any CAF or other thread exists in this process.
  int report[2];
  if (::pipe(report) != 0) return 1;
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(report[0]);
    ::_exit(serve(report[1], plan));
  }
  ::close(report[1]);
  std::string line;
  for (char c; ::read(report[0], &c, 1) == 1 && c != '\n';) line += c;
  std::vector<uint16_t> ports;
  for (std::size_t pos = 0; pos < line.size();) {
    std::size_t end = line.find(' ', pos);
    ports.push_back(static_cast<uint16_t>(std::stoi(line.substr(pos, end - pos))));
    pos = end == std::string::npos ? line.size() : end + 1;
  }
  if (ports.empty()) return std::fprintf(stderr, "bench_messaging: the receiving process did not start\n"), 1;

  std::printf("bench_messaging%s: %d reps of %d x 4 MiB tensors per stream, window %u\n", quick ? " (quick)" : "",
              reps, count, window);
  const af::tensor payload = *af::tensor::full({static_cast<int64_t>(tensor_bytes / 4)}, 0.25, af::dtype::f32);
  std::vector<double> local_rates;
  bool zero_copy = false;
  {
    af::runtime local{{.scheduler_threads = 2}};
    for (int r = 0; r < (quick ? 3 : 7); ++r)
      local_rates.push_back(local_messages_per_s(local, quick ? 200000 : 1000000));
    zero_copy = zero_copy_in_process(local, payload);
  }
  const double local_rate = median(local_rates);
  std::printf("local: %.0f messages/s between two actors (median of %zu); 4 MiB tensor zero-copy: %s\n", local_rate,
              local_rates.size(), zero_copy ? "yes" : "no");

  af::runtime rt{node_options()};

  std::vector<double> raw_gbps, node_gbps, caf_gbps;
  std::vector<std::pair<uint32_t, double>> sweep;
  std::size_t next_port = 1;
  bool ok = true;
  for (const auto& s : plan) {
    const double secs = s.kind == stream_kind::raw_tcp ? raw_tcp_seconds(ports[0], payload, s.count)
                                                       : node_seconds(rt, ports[next_port++], payload, s);
    if (secs <= 0) {
      ok = false;
      break;
    }
    const double gbps = static_cast<double>(s.count) * tensor_bytes / secs / 1e9;
    if (s.warmup) continue;
    if (s.window != window) sweep.emplace_back(s.window, gbps);
    else if (s.kind == stream_kind::raw_tcp) raw_gbps.push_back(gbps);
    else if (s.kind == stream_kind::node_socket) node_gbps.push_back(gbps);
    else caf_gbps.push_back(gbps);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::fprintf(stderr, "bench_messaging: a transfer failed\n"), 1;

  const double raw = median(raw_gbps), node = median(node_gbps), caf_only = median(caf_gbps);
  // Ratios pair each repetition with the raw run just before it (same load on the machine), then
  // take the median: other processes' load drifts over seconds and would otherwise dominate.
  std::vector<double> node_ratios, caf_ratios;
  for (std::size_t r = 0; r < raw_gbps.size(); ++r) {
    node_ratios.push_back(node_gbps[r] / raw_gbps[r]);
    caf_ratios.push_back(caf_gbps[r] / raw_gbps[r]);
  }
  const double node_ratio = median(node_ratios), caf_ratio = median(caf_ratios);
  for (auto k : {stream_kind::raw_tcp, stream_kind::node_socket, stream_kind::node_caf}) {
    const auto& xs = k == stream_kind::raw_tcp ? raw_gbps : k == stream_kind::node_socket ? node_gbps : caf_gbps;
    std::printf("remote %-26s %.3f GB/s median (min %.3f, max %.3f)\n", name_of(k), median(xs),
                *std::min_element(xs.begin(), xs.end()), *std::max_element(xs.begin(), xs.end()));
  }
  for (uint32_t w : window_sweep) {
    std::vector<double> xs;
    for (auto& [sw, g] : sweep)
      if (sw == w) xs.push_back(g);
    std::printf("window %2u: node (socket data plane) %.3f GB/s median\n", w, median(xs));
  }
  std::printf("remote / raw tcp: %.2f (goal >= 0.7; ratio of medians %.2f); caf messages / raw tcp: %.2f\n",
              node_ratio, node / raw, caf_ratio);

  char json[768];
  std::snprintf(json, sizeof json,
                "{\"local_msgs_per_s\": %.0f, \"zero_copy\": %s, \"remote_gbps\": %.4f, \"raw_tcp_gbps\": %.4f, "
                "\"remote_vs_raw_tcp\": %.3f, \"remote_caf_gbps\": %.4f, \"remote_caf_vs_raw_tcp\": %.3f, "
                "\"window\": %u, \"tensor_bytes\": %zu, \"tensors_per_stream\": %d, \"reps\": %d, "
                "\"transport\": \"caf control + tcp data\", \"remote_scheduler\": \"sharing\"}",
                local_rate, zero_copy ? "true" : "false", node, raw, node_ratio, caf_only, caf_ratio, window,
                tensor_bytes, count, reps);
  std::printf("%s\n", json);
  return 0;
}
