#include "bench/load_generator.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>

namespace af::bench {

// --- request rendering and percentiles -----------------------------------------------------------

std::string render_request(const load_request& req, const std::string& host, uint16_t port) {
  std::string out;
  out.reserve(256 + req.body.size());
  out += req.method + " " + (req.path.empty() ? "/" : req.path) + " HTTP/1.1\r\n";
  out += "Host: " + host + ":" + std::to_string(port) + "\r\n";
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT") {
    if (!req.content_type.empty()) out += "Content-Type: " + req.content_type + "\r\n";
    out += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  }
  out += "Connection: keep-alive\r\n";
  for (const auto& [name, value] : req.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  out += req.body;
  return out;
}

double percentile_of(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size()));
  const std::size_t index = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

double load_result::percentile_us(double p) const { return percentile_of(latencies_us, p); }

// --- the event loop ------------------------------------------------------------------------------

namespace {

using clock_type = std::chrono::steady_clock;
using time_point = clock_type::time_point;

enum class loop_mode { open, closed };

// One keep-alive connection. Answers come back in request order, so the scheduled times of the
// requests it carries form a FIFO.
struct connection {
  enum class state { down, connecting, open };
  state current = state::down;
  int fd = -1;
  uint32_t generation = 0;        // bumped per socket, so stale epoll events are recognised
  bool writing = false;           // EPOLLOUT is registered: `out` holds unsent bytes
  bool listed_idle = false;       // on the idle stack (checked again when taken off it)
  std::string out;                // bytes not yet accepted by the socket
  std::size_t out_sent = 0;
  std::deque<time_point> in_flight;  // scheduled times of the requests sent, oldest first
  http_response_parser parser;
  time_point retry_at{};          // while down: when to try connecting again
};

timespec to_timespec(time_point t) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, the clock the timerfd is created on.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

class load_loop {
 public:
  load_loop(const load_request& req, const load_options& opt, loop_mode mode)
      : opt_(opt), mode_(mode), request_bytes_(render_request(req, opt.host, opt.port)),
        head_request_(req.method == "HEAD"), conns_(std::max<std::size_t>(1, opt.connections)),
        max_outstanding_(std::max<std::size_t>(1, opt.max_outstanding_per_connection)),
        down_count_(conns_.size()), arrival_gap_(opt.rate_per_second > 0 ? opt.rate_per_second : 1),
        arrival_rng_(opt.seed) {}

  ~load_loop() {
    for (auto& conn : conns_)
      if (conn.fd >= 0) ::close(conn.fd);
    if (timer_fd_ >= 0) ::close(timer_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
  }

  load_result run();

 private:
  static constexpr uint64_t timer_tag = std::numeric_limits<uint64_t>::max();

  bool setup();
  void open_all();
  void start_connect(std::size_t index, time_point now);
  void finish_connect(std::size_t index, time_point now);
  void mark_down(connection& conn, time_point retry_at);
  void reconnect(std::size_t index, time_point now);
  void break_connection(std::size_t index, time_point now);
  void handle_event(const epoll_event& ev, time_point now);
  void on_readable(std::size_t index, time_point now);
  void on_answer(std::size_t index, time_point now);
  bool flush(std::size_t index, time_point now);
  void watch_writes(std::size_t index, bool on);
  void offer_idle(std::size_t index);
  void admit_due_arrivals(time_point now);
  void advance_arrival();
  void dispatch(time_point now);
  void retry_down(time_point now);
  void arm_timer(time_point wake);
  void wait_for_events(time_point now);
  bool counted(time_point scheduled) const { return scheduled >= measure_start_ && scheduled < send_end_; }
  bool sending_over(time_point now) const;
  std::size_t outstanding() const;

  const load_options& opt_;
  const loop_mode mode_;
  const std::string request_bytes_;  // rendered once, appended to a connection's `out` per send
  const bool head_request_;
  std::vector<connection> conns_;
  const std::size_t max_outstanding_;
  sockaddr_storage address_{};
  socklen_t address_len_ = 0;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  time_point armed_for_{};

  std::vector<std::size_t> idle_;   // connections that can take another request
  std::deque<time_point> pending_;  // open loop: due requests waiting for an idle connection
  std::size_t down_count_;           // connections in state::down (all of them before open_all)

  time_point start_{}, measure_start_{}, send_end_{}, drain_deadline_{}, last_answer_{};
  uint64_t arrival_index_ = 0;      // open loop: arrivals stepped to so far
  double arrival_offset_s_ = 0;     // open loop: the next arrival, seconds after start_
  time_point next_due_{};           // open loop: when the next arrival is due
  bool arrivals_over_ = false;      // open loop: no arrival is due before send_end_ any more
  std::exponential_distribution<double> arrival_gap_;
  std::mt19937_64 arrival_rng_;
  load_result result_;
};

bool load_loop::setup() {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(opt_.port);
  if (::getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return false;
  std::memcpy(&address_, found->ai_addr, found->ai_addrlen);
  address_len_ = found->ai_addrlen;
  ::freeaddrinfo(found);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || timer_fd_ < 0) return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = timer_tag;
  return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) == 0;
}

void load_loop::mark_down(connection& conn, time_point retry_at) {
  if (conn.fd >= 0) ::close(conn.fd);  // closing also leaves the epoll set
  conn.fd = -1;
  conn.current = connection::state::down;
  conn.writing = false;
  conn.out.clear();
  conn.out_sent = 0;
  conn.parser = http_response_parser{};
  conn.retry_at = retry_at;
  ++down_count_;
}

void load_loop::start_connect(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  if (conn.current == connection::state::down) --down_count_;
  conn.fd = ::socket(address_.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (conn.fd < 0) {
    ++result_.connect_errors;
    mark_down(conn, now + opt_.reconnect_backoff);
    return;
  }
  // Requests are small and latency is what is measured: no Nagle delay.
  const int one = 1;
  ::setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ++conn.generation;
  conn.parser.expect_no_body(head_request_);
  const int rc = ::connect(conn.fd, reinterpret_cast<const sockaddr*>(&address_), address_len_);
  if (rc != 0 && errno != EINPROGRESS) {
    ++result_.connect_errors;
    mark_down(conn, now + opt_.reconnect_backoff);
    return;
  }
  conn.current = rc == 0 ? connection::state::open : connection::state::connecting;
  epoll_event ev{};
  ev.events = conn.current == connection::state::open ? EPOLLIN : EPOLLOUT;
  ev.data.u64 = (static_cast<uint64_t>(conn.generation) << 32) | index;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn.fd, &ev);
  if (conn.current == connection::state::open) offer_idle(index);
}

void load_loop::finish_connect(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
    ++result_.connect_errors;
    mark_down(conn, now + opt_.reconnect_backoff);
    return;
  }
  conn.current = connection::state::open;
  watch_writes(index, false);
  offer_idle(index);
}

// The requests on a connection that is gone are lost: they are not re-sent (POST is not
// idempotent), so the counted ones fail.
void load_loop::reconnect(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  for (time_point scheduled : conn.in_flight)
    if (counted(scheduled)) ++result_.failed;
  conn.in_flight.clear();
  mark_down(conn, now);
  ++result_.reconnects;
  start_connect(index, now);
}

void load_loop::break_connection(std::size_t index, time_point now) {
  ++result_.io_errors;
  reconnect(index, now);
}

void load_loop::watch_writes(std::size_t index, bool on) {
  connection& conn = conns_[index];
  epoll_event ev{};
  ev.events = on ? EPOLLIN | EPOLLOUT : EPOLLIN;
  ev.data.u64 = (static_cast<uint64_t>(conn.generation) << 32) | index;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &ev);
  conn.writing = on;
}

void load_loop::offer_idle(std::size_t index) {
  connection& conn = conns_[index];
  if (conn.listed_idle || conn.current != connection::state::open || conn.in_flight.size() >= max_outstanding_) return;
  conn.listed_idle = true;
  idle_.push_back(index);
}

// Sends what `out` holds; false when the connection broke (it has been replaced).
bool load_loop::flush(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  while (conn.out_sent < conn.out.size()) {
    const ssize_t n = ::send(conn.fd, conn.out.data() + conn.out_sent, conn.out.size() - conn.out_sent, MSG_NOSIGNAL);
    if (n > 0) {
      conn.out_sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!conn.writing) watch_writes(index, true);
      return true;
    } else {
      break_connection(index, now);
      return false;
    }
  }
  conn.out.clear();  // keeps its capacity for the next request
  conn.out_sent = 0;
  if (conn.writing) watch_writes(index, false);
  return true;
}

void load_loop::on_answer(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  const time_point scheduled = conn.in_flight.front();
  conn.in_flight.pop_front();
  if (counted(scheduled)) {
    const int status = conn.parser.status();
    const double latency_us = std::chrono::duration<double, std::micro>(now - scheduled).count();
    ++result_.completed;
    ++result_.status_counts[status];
    if (status >= 200 && status < 300) ++result_.ok;
    result_.latencies_us.push_back(latency_us);
    result_.latencies_by_status_us[status].push_back(latency_us);
    last_answer_ = std::max(last_answer_, now);
  }
}

void load_loop::on_readable(std::size_t index, time_point now) {
  connection& conn = conns_[index];
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t n = ::recv(conn.fd, buffer, sizeof buffer, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) break_connection(index, now);
      return;
    }
    if (n == 0) {  // the server closed
      const auto tail = conn.parser.finish();
      if (tail == http_response_parser::outcome::response_done && !conn.in_flight.empty()) on_answer(index, now);
      // Closing with requests unanswered (or mid-response) is an error; between answers it is
      // an idle keep-alive timeout, and a reconnect is all it takes.
      if (tail == http_response_parser::outcome::malformed || !conn.in_flight.empty()) break_connection(index, now);
      else reconnect(index, now);
      return;
    }
    const std::string_view data(buffer, static_cast<std::size_t>(n));
    std::size_t pos = 0;
    while (pos < data.size()) {
      const auto step = conn.parser.feed(data, pos);
      if (step == http_response_parser::outcome::need_more) continue;
      if (step == http_response_parser::outcome::malformed || conn.in_flight.empty()) {
        break_connection(index, now);  // garbled, or an answer to nothing
        return;
      }
      on_answer(index, now);
      if (!conn.parser.keep_alive()) {
        reconnect(index, now);
        return;
      }
      offer_idle(index);
    }
    if (static_cast<std::size_t>(n) < sizeof buffer) return;
  }
}

void load_loop::handle_event(const epoll_event& ev, time_point now) {
  if (ev.data.u64 == timer_tag) {
    uint64_t expirations = 0;
    [[maybe_unused]] const ssize_t n = ::read(timer_fd_, &expirations, sizeof expirations);
    return;
  }
  const auto index = static_cast<std::size_t>(ev.data.u64 & 0xffffffffu);
  const auto generation = static_cast<uint32_t>(ev.data.u64 >> 32);
  connection& conn = conns_[index];
  if (conn.generation != generation || conn.current == connection::state::down) return;  // an old socket
  if (conn.current == connection::state::connecting) {
    finish_connect(index, now);
    return;
  }
  if (ev.events & EPOLLOUT) {
    if (!flush(index, now)) return;
  }
  if (ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP)) on_readable(index, now);
}

void load_loop::admit_due_arrivals(time_point now) {
  while (!arrivals_over_ && next_due_ <= now) {
    pending_.push_back(next_due_);
    if (counted(next_due_)) ++result_.scheduled;
    advance_arrival();
  }
}

// Steps to the next arrival. Constant arrivals are computed from their index, so rounding does not
// accumulate; the offset is checked against the end before it becomes a time_point, which a huge
// Poisson gap would overflow.
void load_loop::advance_arrival() {
  arrival_offset_s_ = opt_.poisson ? arrival_offset_s_ + arrival_gap_(arrival_rng_)
                                   : static_cast<double>(arrival_index_) / opt_.rate_per_second;
  ++arrival_index_;
  const double end_s = std::chrono::duration<double>(send_end_ - start_).count();
  arrivals_over_ = !(arrival_offset_s_ < end_s);
  if (!arrivals_over_)
    next_due_ = start_ + std::chrono::duration_cast<clock_type::duration>(
                             std::chrono::duration<double>(arrival_offset_s_));
}

void load_loop::dispatch(time_point now) {
  while (!idle_.empty()) {
    if (mode_ == loop_mode::open ? pending_.empty() : now >= send_end_) break;
    const std::size_t index = idle_.back();
    connection& conn = conns_[index];
    if (conn.current != connection::state::open || conn.in_flight.size() >= max_outstanding_) {
      conn.listed_idle = false;  // filled or gone since it was listed
      idle_.pop_back();
      continue;
    }
    time_point scheduled = now;
    if (mode_ == loop_mode::open) {
      scheduled = pending_.front();
      pending_.pop_front();
    } else if (counted(scheduled)) {
      ++result_.scheduled;
    }
    conn.in_flight.push_back(scheduled);
    conn.out += request_bytes_;
    flush(index, now);
  }
}

void load_loop::retry_down(time_point now) {
  if (down_count_ == 0) return;
  for (std::size_t i = 0; i < conns_.size(); ++i)
    if (conns_[i].current == connection::state::down && conns_[i].retry_at <= now) start_connect(i, now);
}

void load_loop::arm_timer(time_point wake) {
  if (wake == armed_for_) return;
  itimerspec spec{};
  spec.it_value = to_timespec(wake);
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;  // 0 disarms
  ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  armed_for_ = wake;
}

// Sleeps until a socket is ready or the next deadline: an arrival, the end of sending, the end
// of the drain, or a reconnect attempt. timerfd gives sub-millisecond wake-ups, which arrivals
// 20 us apart need; epoll_wait's own timeout counts whole milliseconds.
void load_loop::wait_for_events(time_point now) {
  time_point wake = drain_deadline_;
  if (!sending_over(now)) {
    wake = mode_ == loop_mode::closed ? send_end_ : next_due_;
  }
  if (down_count_ > 0)
    for (const auto& conn : conns_)
      if (conn.current == connection::state::down) wake = std::min(wake, conn.retry_at);
  arm_timer(wake);
  epoll_event events[256];
  const int n = ::epoll_wait(epoll_fd_, events, 256, 1000);
  const time_point after = clock_type::now();
  for (int i = 0; i < n; ++i) handle_event(events[i], after);
}

bool load_loop::sending_over(time_point now) const {
  if (mode_ == loop_mode::closed) return now >= send_end_;
  return arrivals_over_;
}

std::size_t load_loop::outstanding() const {
  std::size_t total = pending_.size();
  for (const auto& conn : conns_) total += conn.in_flight.size();
  return total;
}

// Connections are opened before the clock starts, for at most the drain timeout; the ones that
// fail keep retrying during the run.
void load_loop::open_all() {
  time_point now = clock_type::now();
  for (std::size_t i = 0; i < conns_.size(); ++i) start_connect(i, now);
  const time_point deadline = now + opt_.drain_timeout;
  while (now < deadline) {
    const bool connecting = std::any_of(conns_.begin(), conns_.end(),
                                        [](const connection& c) { return c.current == connection::state::connecting; });
    if (!connecting) break;
    epoll_event events[256];
    const int n = ::epoll_wait(epoll_fd_, events, 256, 10);
    now = clock_type::now();
    for (int i = 0; i < n; ++i) handle_event(events[i], now);
  }
}

load_result load_loop::run() {
  if (!setup()) {
    result_.connect_errors = conns_.size();
    return result_;
  }
  open_all();
  start_ = clock_type::now();
  measure_start_ = start_ + opt_.warmup;
  send_end_ = measure_start_ + opt_.duration;
  drain_deadline_ = send_end_ + opt_.drain_timeout;
  last_answer_ = send_end_;
  if (mode_ == loop_mode::open) {
    if (opt_.rate_per_second > 0) {
      const double expected = opt_.rate_per_second * std::chrono::duration<double>(opt_.duration).count();
      result_.latencies_us.reserve(static_cast<std::size_t>(std::min(expected, double{1 << 26})));
      advance_arrival();
    } else {
      arrivals_over_ = true;
    }
  }
  for (;;) {
    const time_point now = clock_type::now();
    if (mode_ == loop_mode::open) admit_due_arrivals(now);
    retry_down(now);
    dispatch(now);
    result_.max_queue_depth = std::max(result_.max_queue_depth, pending_.size());
    if (sending_over(now) && (outstanding() == 0 || now >= drain_deadline_)) break;
    wait_for_events(now);
  }
  for (time_point scheduled : pending_)
    if (counted(scheduled)) ++result_.not_answered;
  for (const auto& conn : conns_)
    for (time_point scheduled : conn.in_flight)
      if (counted(scheduled)) ++result_.not_answered;
  result_.measured_seconds = std::chrono::duration<double>(last_answer_ - measure_start_).count();
  if (result_.measured_seconds > 0)
    result_.achieved_per_second = static_cast<double>(result_.completed) / result_.measured_seconds;
  return std::move(result_);
}

}  // namespace

load_result run_open_loop(const load_request& req, const load_options& opt) {
  return load_loop{req, opt, loop_mode::open}.run();
}

load_result run_closed_loop(const load_request& req, const load_options& opt) {
  return load_loop{req, opt, loop_mode::closed}.run();
}

}  // namespace af::bench
