// The HTTP load generator (bench/load_generator.hpp), measured against a minimal server of its own
// or used against an external one.
//
// Without a target it starts an epoll HTTP/1.1 server on 127.0.0.1 (one thread, keep-alive,
// answering {"ok":1}) and reports:
//   closed_rps          closed-loop saturation: every connection sends as soon as it is answered
//   open_*              open loop at 50% of that rate: p50/p90/p99/p99.9 from the scheduled time
//   overload_*          open loop at 150%: the queue grows, and so does the latency it reports
//                       (what a closed-loop client would hide)
//   pipelined_*         closed loop with 4 requests in flight per connection
//   chunked_*           the server answers with chunked bodies, head and chunks in separate writes
//   close_every_*       the server sends Connection: close on every 50th answer of a connection
//   refused_*           nothing listens: connection errors are counted and the run still ends
//   parser_self_check   canned responses parsed whole and fed one byte at a time agree
//
// Against an external server (how the Ray Serve peer is measured, see serving_reference.py):
//   bench_loadgen --host H --port P --path /x --body-file F [--connections N] [--rate R]
//                 [--duration-ms D] [--warmup-ms W] [--closed] [--poisson] [--method M] [--pipeline K]
// --closed: closed loop only; --rate R: open loop only; neither: saturation, then 50% of it.
// Closed-loop gRPC Predict calls instead (bench_serving's server-CPU phase runs them here):
//   bench_loadgen --grpc-input X --port P [--model M] [--rows R] [--dims D1,D2] [--connections N]
//
//   build/bench/bench_loadgen [--quick]          Last line: one JSON object.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/grpc_load.hpp"
#include "bench/load_generator.hpp"
#include "bench_common.hpp"

namespace {

using namespace std::chrono_literals;
using af::bench::load_options;
using af::bench::load_request;
using af::bench::load_result;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_loadgen: %s\n", why.c_str());
  std::exit(1);
}

// --- a minimal server to measure the generator against -------------------------------------------

enum class answer_style { content_length, chunked, close_every_50 };

// One epoll thread answering every request with {"ok":1}. It reads a request's head up to the
// blank line and skips a Content-Length body; requests pipelined on a connection are answered in
// order.
class tiny_http_server {
 public:
  explicit tiny_http_server(answer_style style) : style_(style) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener_, 1024) != 0)
      fail("cannot listen on 127.0.0.1");
    socklen_t len = sizeof addr;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    watch(listener_, EPOLLIN);
    watch(stop_fd_, EPOLLIN);
    thread_ = std::thread([this] { serve(); });
  }

  ~tiny_http_server() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
    for (auto& [fd, peer] : peers_) ::close(fd);
    ::close(listener_);
    ::close(stop_fd_);
    ::close(epoll_fd_);
  }

  uint16_t port() const { return port_; }

 private:
  struct peer {
    std::string in;
    std::string out;
    uint64_t answered = 0;
  };

  void watch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }

  void serve() {
    epoll_event events[256];
    for (;;) {
      const int n = ::epoll_wait(epoll_fd_, events, 256, -1);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == stop_fd_) return;
        if (fd == listener_) accept_all();
        else if (!on_ready(fd)) drop(fd);
      }
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      peers_[fd];
      watch(fd, EPOLLIN | EPOLLOUT | EPOLLET);
    }
  }

  void drop(int fd) {
    ::close(fd);
    peers_.erase(fd);
  }

  // Reads what is there, answers every complete request, writes what the socket takes; false
  // when the connection is over.
  bool on_ready(int fd) {
    peer& p = peers_[fd];
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return false;
      }
      p.in.append(buffer, static_cast<std::size_t>(n));
    }
    bool closing = false;
    while (!closing) {
      const std::size_t head_end = p.in.find("\r\n\r\n");
      if (head_end == std::string::npos) break;
      const std::size_t length = content_length(std::string_view(p.in).substr(0, head_end));
      if (p.in.size() < head_end + 4 + length) break;
      p.in.erase(0, head_end + 4 + length);
      closing = style_ == answer_style::close_every_50 && ++p.answered % 50 == 0;
      if (!answer(fd, p, closing)) return false;
    }
    if (!send_pending(fd, p)) return false;
    return !closing || !p.out.empty();  // close once the last answer is out
  }

  bool answer(int fd, peer& p, bool closing) {
    if (style_ == answer_style::chunked) {
      // Head and first chunk, then the rest in a second write: the client sees split reads.
      p.out += "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4;part=1\r\n{\"ok";
      if (!send_pending(fd, p)) return false;
      p.out += "\r\n4\r\n\":1}\r\n0\r\nX-Trailer: yes\r\n\r\n";
      return true;
    }
    p.out += "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n";
    p.out += closing ? "Connection: close\r\n\r\n{\"ok\":1}" : "\r\n{\"ok\":1}";
    return true;
  }

  static bool send_pending(int fd, peer& p) {
    std::size_t sent = 0;
    while (sent < p.out.size()) {
      const ssize_t n = ::send(fd, p.out.data() + sent, p.out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      else if (n < 0 && errno == EINTR) continue;
      else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // EPOLLET brings us back
      else return false;
    }
    p.out.erase(0, sent);
    return true;
  }

  static std::size_t content_length(std::string_view head) {
    for (std::size_t at = head.find("\r\n"); at != std::string_view::npos; at = head.find("\r\n", at + 2)) {
      std::string_view line = head.substr(at + 2, head.find("\r\n", at + 2) - (at + 2));
      if (line.size() > 15 && std::equal(line.begin(), line.begin() + 15, "content-length:",
                                         [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
        return static_cast<std::size_t>(std::strtoull(std::string(line.substr(15)).c_str(), nullptr, 10));
    }
    return 0;
  }

  answer_style style_;
  int listener_ = -1, stop_fd_ = -1, epoll_fd_ = -1;
  uint16_t port_ = 0;
  std::unordered_map<int, peer> peers_;
  std::thread thread_;
};

// --- checks and reporting -------------------------------------------------------------------------

// Canned responses, parsed whole and one byte at a time: both must see the same answers.
bool parser_self_check() {
  const std::string stream =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
      "HTTP/1.1 429 Too Many Requests\r\ntransfer-encoding: gzip, chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n"
      "HTTP/1.1 204 No Content\r\n\r\n"
      "HTTP/1.1 503 Unavailable\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
  const std::vector<std::pair<int, bool>> expected{{200, true}, {429, true}, {204, true}, {503, false}};
  for (std::size_t step : {stream.size(), std::size_t{1}, std::size_t{7}}) {
    af::bench::http_response_parser parser;
    std::vector<std::pair<int, bool>> seen;
    for (std::size_t at = 0; at < stream.size(); at += step) {
      const std::string_view piece = std::string_view(stream).substr(at, step);
      std::size_t pos = 0;
      while (pos < piece.size()) {
        const auto outcome = parser.feed(piece, pos);
        if (outcome == af::bench::http_response_parser::outcome::malformed) return false;
        if (outcome == af::bench::http_response_parser::outcome::response_done)
          seen.emplace_back(parser.status(), parser.keep_alive());
      }
    }
    if (seen != expected || parser.mid_response()) return false;
  }
  // A body delimited by the close of the connection.
  af::bench::http_response_parser parser;
  const std::string until_close = "HTTP/1.0 200 OK\r\n\r\nrest of the body";
  std::size_t pos = 0;
  return parser.feed(until_close, pos) == af::bench::http_response_parser::outcome::need_more &&
         parser.finish() == af::bench::http_response_parser::outcome::response_done && parser.status() == 200;
}

// Every field of `r` as "<prefix>_<name>" pairs.
void add_result(af::bench::json_line& json, const std::string& prefix, const load_result& r) {
  json.add(prefix + "_scheduled", static_cast<double>(r.scheduled));
  json.add(prefix + "_completed", static_cast<double>(r.completed));
  json.add(prefix + "_ok", static_cast<double>(r.ok));
  json.add(prefix + "_achieved_rps", r.achieved_per_second);
  json.add(prefix + "_measured_seconds", r.measured_seconds);
  const std::pair<double, const char*> percentiles[] = {{50, "p50"}, {90, "p90"}, {99, "p99"}, {99.9, "p999"}};
  for (const auto& [p, name] : percentiles) {
    const double value = r.percentile_us(p);
    json.add(prefix + "_" + name + "_us", std::isnan(value) ? -1.0 : value);  // -1: nothing answered
  }
  for (const auto& [status, count] : r.status_counts) {
    json.add(prefix + "_status_" + std::to_string(status), static_cast<double>(count));
    json.add(prefix + "_status_" + std::to_string(status) + "_p50_us",
             af::bench::percentile_of(r.latencies_by_status_us.at(status), 50));
    json.add(prefix + "_status_" + std::to_string(status) + "_p99_us",
             af::bench::percentile_of(r.latencies_by_status_us.at(status), 99));
  }
  json.add(prefix + "_failed", static_cast<double>(r.failed));
  json.add(prefix + "_not_answered", static_cast<double>(r.not_answered));
  json.add(prefix + "_connect_errors", static_cast<double>(r.connect_errors));
  json.add(prefix + "_io_errors", static_cast<double>(r.io_errors));
  json.add(prefix + "_reconnects", static_cast<double>(r.reconnects));
  json.add(prefix + "_max_queue_depth", static_cast<double>(r.max_queue_depth));
}

// Counted requests all accounted for: each was answered, failed or is reported unanswered.
void check_accounting(const std::string& what, const load_result& r) {
  if (r.scheduled != r.completed + r.failed + r.not_answered)
    fail(what + ": scheduled " + std::to_string(r.scheduled) + " != completed + failed + not answered");
}

const char* flag_value(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return nullptr;
}

// Closed-loop gRPC Predict calls (bench/grpc_load.hpp) against an external server, so that the
// server's CPU can be measured without the client's in its process:
//   --grpc-input X --port P --rows R --dims 28,28,1 [--model M] [--connections N (calls in flight)]
int measure_external_grpc(int argc, char** argv) {
  af::bench::grpc_load_options opt;
  opt.input = flag_value(argc, argv, "--grpc-input");
  const char* port = flag_value(argc, argv, "--port");
  if (!port) fail("--grpc-input needs --port");
  opt.port = static_cast<uint16_t>(std::atoi(port));
  if (const char* v = flag_value(argc, argv, "--model")) opt.model = v;
  if (const char* v = flag_value(argc, argv, "--connections")) opt.in_flight = std::strtoull(v, nullptr, 10);
  if (const char* v = flag_value(argc, argv, "--duration-ms")) opt.duration = std::chrono::milliseconds(std::atoll(v));
  if (const char* v = flag_value(argc, argv, "--warmup-ms")) opt.warmup = std::chrono::milliseconds(std::atoll(v));
  af::shape dims{1};
  if (const char* v = flag_value(argc, argv, "--rows")) dims[0] = std::atoll(v);
  if (const char* v = flag_value(argc, argv, "--dims")) {
    std::stringstream list{v};
    for (std::string d; std::getline(list, d, ',');) dims.push_back(std::atoll(d.c_str()));
  }
  auto rows = af::tensor::full(dims, 0.5, af::dtype::f32);
  if (!rows) fail("--rows/--dims: " + rows.error_value().message);
  const auto r = af::bench::run_grpc_closed_loop(*rows, opt);
  af::bench::json_line json;
  json.add("grpc_ok", static_cast<double>(r.ok));
  json.add("grpc_failed", static_cast<double>(r.failed));
  json.add("grpc_ok_per_s", r.ok_per_second);
  json.print();
  return r.failed > 0 && r.ok == 0 ? 1 : 0;
}

int measure_external(int argc, char** argv) {
  load_request req;
  load_options opt;
  opt.host = flag_value(argc, argv, "--host");
  const char* port = flag_value(argc, argv, "--port");
  if (!port) fail("--host needs --port");
  opt.port = static_cast<uint16_t>(std::atoi(port));
  if (const char* v = flag_value(argc, argv, "--path")) req.path = v;
  if (const char* v = flag_value(argc, argv, "--method")) req.method = v;
  if (const char* v = flag_value(argc, argv, "--body-file")) {
    std::ifstream in(v, std::ios::binary);
    if (!in) fail(std::string("cannot read ") + v);
    std::ostringstream body;
    body << in.rdbuf();
    req.body = body.str();
  }
  if (const char* v = flag_value(argc, argv, "--connections")) opt.connections = std::strtoull(v, nullptr, 10);
  if (const char* v = flag_value(argc, argv, "--duration-ms")) opt.duration = std::chrono::milliseconds(std::atoll(v));
  if (const char* v = flag_value(argc, argv, "--warmup-ms")) opt.warmup = std::chrono::milliseconds(std::atoll(v));
  if (const char* v = flag_value(argc, argv, "--pipeline"))
    opt.max_outstanding_per_connection = std::strtoull(v, nullptr, 10);
  opt.poisson = af::bench::has_flag(argc, argv, "--poisson");
  const char* rate = flag_value(argc, argv, "--rate");
  const bool closed_only = af::bench::has_flag(argc, argv, "--closed");

  af::bench::json_line json;
  json.add("target", "http://" + opt.host + ":" + std::to_string(opt.port) + (req.path.empty() ? "/" : req.path));
  json.add("connections", static_cast<double>(opt.connections));
  json.add("duration_ms", static_cast<double>(opt.duration.count()));
  json.add("body_bytes", static_cast<double>(req.body.size()));
  if (!rate) {
    const load_result closed = af::bench::run_closed_loop(req, opt);
    std::fprintf(stderr, "closed loop: %.0f answers/s (%llu ok of %llu)\n", closed.achieved_per_second,
                 static_cast<unsigned long long>(closed.ok), static_cast<unsigned long long>(closed.completed));
    json.add("closed_rps", closed.achieved_per_second);
    add_result(json, "closed", closed);
    opt.rate_per_second = 0.5 * closed.achieved_per_second;
  } else {
    opt.rate_per_second = std::atof(rate);
  }
  if (!closed_only && opt.rate_per_second > 0) {
    const load_result open = af::bench::run_open_loop(req, opt);
    std::fprintf(stderr, "open loop at %.0f/s: p50 %.0f us, p99 %.0f us\n", opt.rate_per_second,
                 open.percentile_us(50), open.percentile_us(99));
    json.add("open_rate", opt.rate_per_second);
    add_result(json, "open", open);
  }
  json.print();
  return 0;
}

int measure_self(bool quick) {
  const bool parser_ok = parser_self_check();
  if (!parser_ok) fail("the response parser failed its self-check");
  load_request req{.path = "/predict", .body = R"({"instances": [[0.5, 0.25]]})"};
  load_options opt;
  opt.connections = 32;
  opt.warmup = quick ? 300ms : 1000ms;
  af::bench::json_line json;
  json.add("parser_self_check", parser_ok);
  json.add("connections", static_cast<double>(opt.connections));

  tiny_http_server server{answer_style::content_length};
  opt.port = server.port();
  opt.duration = quick ? 2000ms : 5000ms;
  const load_result closed = af::bench::run_closed_loop(req, opt);
  check_accounting("closed loop", closed);
  const double saturation = closed.achieved_per_second;
  std::fprintf(stderr, "closed loop: %.0f answers/s\n", saturation);

  opt.duration = quick ? 3000ms : 10000ms;
  opt.rate_per_second = 0.5 * saturation;
  const load_result open = af::bench::run_open_loop(req, opt);
  check_accounting("open loop", open);
  std::fprintf(stderr, "open loop at %.0f/s: p50 %.1f us, p99 %.1f us\n", opt.rate_per_second,
               open.percentile_us(50), open.percentile_us(99));

  opt.duration = quick ? 1000ms : 3000ms;
  opt.rate_per_second = 1.5 * saturation;
  const load_result overload = af::bench::run_open_loop(req, opt);
  check_accounting("overload", overload);

  json.add("closed_rps", saturation);
  json.add("open_rate", 0.5 * saturation);
  json.add("open_achieved_rps", open.achieved_per_second);
  json.add("open_p50_us", open.percentile_us(50));
  json.add("open_p90_us", open.percentile_us(90));
  json.add("open_p99_us", open.percentile_us(99));
  json.add("open_p999_us", open.percentile_us(99.9));
  json.add("open_completed", static_cast<double>(open.completed));
  json.add("open_not_answered", static_cast<double>(open.not_answered));
  json.add("open_errors", static_cast<double>(open.failed + open.io_errors + open.connect_errors));
  json.add("overload_rate", 1.5 * saturation);
  json.add("overload_achieved_rps", overload.achieved_per_second);
  json.add("overload_p50_us", overload.percentile_us(50));
  json.add("overload_p99_us", overload.percentile_us(99));
  json.add("overload_max_queue_depth", static_cast<double>(overload.max_queue_depth));

  opt.duration = quick ? 1000ms : 3000ms;
  {
    load_options pipelined = opt;
    pipelined.max_outstanding_per_connection = 4;
    const load_result r = af::bench::run_closed_loop(req, pipelined);
    check_accounting("pipelined", r);
    json.add("pipelined_closed_rps", r.achieved_per_second);
    json.add("pipelined_errors", static_cast<double>(r.failed + r.io_errors));
  }
  {
    tiny_http_server chunked{answer_style::chunked};
    opt.port = chunked.port();
    const load_result r = af::bench::run_closed_loop(req, opt);
    check_accounting("chunked", r);
    if (r.ok == 0 || r.ok != r.completed) fail("chunked answers were not all parsed as 200");
    json.add("chunked_closed_rps", r.achieved_per_second);
    json.add("chunked_errors", static_cast<double>(r.failed + r.io_errors));
  }
  {
    tiny_http_server closing{answer_style::close_every_50};
    opt.port = closing.port();
    const load_result r = af::bench::run_closed_loop(req, opt);
    check_accounting("close every 50", r);
    if (r.reconnects == 0) fail("Connection: close did not lead to a reconnect");
    json.add("close_every_50_closed_rps", r.achieved_per_second);
    json.add("close_every_50_reconnects", static_cast<double>(r.reconnects));
    json.add("close_every_50_errors", static_cast<double>(r.failed + r.io_errors));
  }
  {
    // A port nobody listens on: the one of a server that has just gone.
    uint16_t gone_port = 0;
    { tiny_http_server gone{answer_style::content_length}; gone_port = gone.port(); }
    load_options refused = opt;
    refused.port = gone_port;
    refused.connections = 4;
    refused.rate_per_second = 1000;
    refused.warmup = 0ms;
    refused.duration = 200ms;
    refused.drain_timeout = 200ms;
    const load_result r = af::bench::run_open_loop(req, refused);
    check_accounting("refused", r);
    json.add("refused_connect_errors", static_cast<double>(r.connect_errors));
    json.add("refused_not_answered", static_cast<double>(r.not_answered));
  }
  json.add("quick", quick);
  json.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv,
                         "bench_loadgen [--quick] | --host H --port P [--path /x] [--body-file F] [--connections N] [--rate R] "
                         "[--duration-ms D] [--warmup-ms W] [--closed] [--poisson] [--method M] [--pipeline K] | "
                         "--grpc-input X --port P [--model M] [--rows R] [--dims D1,D2] [--connections N] [--duration-ms D] [--warmup-ms W]",
                         {"--quick", "--closed", "--poisson"},
                         {"--host", "--port", "--path", "--method", "--body-file", "--connections", "--rate", "--duration-ms",
                          "--warmup-ms", "--pipeline", "--grpc-input", "--model", "--rows", "--dims"});
  if (flag_value(argc, argv, "--grpc-input")) return measure_external_grpc(argc, argv);
  if (flag_value(argc, argv, "--host")) return measure_external(argc, argv);
  return measure_self(af::bench::has_flag(argc, argv, "--quick"));
}
