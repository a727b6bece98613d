#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include <condition_variable>
#include <mutex>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/middleman_connect.hpp"
#include "actors/remote_node.hpp"
#include "actors/remote_protocol.hpp"
#include "actors/remote_socket.hpp"
#include "actors/resume_ordered.hpp"
#include "actors/tsan_handoff.hpp"

namespace af {

namespace {

using clock_type = std::chrono::steady_clock;

// Shared between the sender's control actor (credit, done, failures) and the calling thread, which
// blocks here. The first error wins and is sticky: after the peer died, every call reports it.
struct sender_gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool ready = false;
  error failure;
  uint32_t window = 0;
  uint16_t data_port = 0;
  uint64_t token = 0;
  uint64_t credit = 0;
  sender_stats stats;
  bool done = false;
  uint64_t done_count = 0;

  void open(uint32_t w, uint16_t port, uint64_t tok) {
    std::lock_guard guard{mutex};
    ready = true;
    window = w;
    stats.window = w;
    credit = w;
    data_port = port;
    token = tok;
    changed.notify_all();
  }
  void add_credit(uint64_t n) {
    std::lock_guard guard{mutex};
    credit += n;
    stats.acknowledged += n;
    changed.notify_all();
  }
  void finished(uint64_t count) {
    std::lock_guard guard{mutex};
    done = true;
    done_count = count;
    changed.notify_all();
  }
  void fail(error err) {
    std::lock_guard guard{mutex};
    // Once the receiver confirmed the end, the stream is complete: the receiver's exit right after
    // (a down message that may arrive before finish() wakes up) is no failure of this stream.
    if (!failure && !done) failure = std::move(err);
    changed.notify_all();
  }
  // Waits until `pred` holds or the gate failed or the deadline passed (then timeout: `what`).
  template <class Pred>
  expected<void> wait(std::unique_lock<std::mutex>& lock, clock_type::time_point deadline, Pred pred,
                      const std::string& what) {
    changed.wait_until(lock, deadline, [&] { return failure || pred(); });
    if (failure) return failure;
    if (!pred()) return make_error(errc::timeout, what);
    return {};
  }
};

caf::behavior sender_control(detail::resume_ordered<caf::event_based_actor>* self, caf::actor receiver,
                             std::shared_ptr<sender_gate> gate, std::string peer, uint32_t transport,
                             uint32_t window, caf::timespan timeout) {
  self->monitor(receiver);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source != receiver.address()) return;
    gate->fail(make_error(errc::peer_down, "receiver " + peer + " is down (" + caf::to_string(msg.reason) + ")"));
    self->quit();
  });
  self->request(receiver, timeout, remote::hello_atom::value, caf::actor_cast<caf::actor>(self), transport, window)
      .then([=](uint32_t granted, uint16_t data_port, uint64_t token) { gate->open(granted, data_port, token); },
            [=](caf::error& err) {
              auto e = from_caf_error(err);
              gate->fail(make_error(e.code, "handshake with " + peer + ": " + e.message));
            });
  return {
      [=](flow::demand_atom, uint64_t n) { gate->add_credit(n); },
      [=](remote::done_atom, uint64_t count) { gate->finished(count); },
      [=](flow::fail_atom, const caf::error& reason) {
        auto e = from_caf_error(reason);
        gate->fail(make_error(e.code, "receiver " + peer + " rejected the stream: " + e.message));
      },
  };
}

}  // namespace

struct remote_sender::impl {
  caf::actor_system* system = nullptr;
  remote_options options;
  std::string peer;
  caf::actor receiver;  // R, the remote control actor
  caf::actor control;   // S, ours
  std::shared_ptr<sender_gate> gate = std::make_shared<sender_gate>();
  net::socket_fd data;  // tcp_socket transport only
  bool finished = false;

  clock_type::time_point deadline() const { return clock_type::now() + options.request_timeout; }

  // A socket error after the receiver died is reported as the monitor saw it (peer_down naming the
  // receiver), not as whatever errno the half-closed socket produced first.
  error socket_error(error err) {
    if (err.code == errc::peer_down || err.code == errc::io_error) {
      // A receiver that rejects the stream says why on the control plane and then closes the data
      // connection; give that explanation a moment to arrive before calling the peer dead.
      std::unique_lock lock{gate->mutex};
      gate->changed.wait_for(lock, std::chrono::milliseconds{200}, [&] { return static_cast<bool>(gate->failure); });
      if (gate->failure) return gate->failure;
      err = make_error(errc::peer_down, "receiver " + peer + ": data connection: " + err.message);
      lock.unlock();
      gate->fail(err);
      return err;
    }
    gate->fail(err);
    return err;
  }

  ~impl() {
    data.shutdown_both();
    if (control) caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
  }
};

remote_sender::remote_sender(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
remote_sender::remote_sender(remote_sender&&) noexcept = default;
remote_sender& remote_sender::operator=(remote_sender&&) noexcept = default;
remote_sender::~remote_sender() = default;

expected<remote_sender> remote_sender::connect(runtime& rt, const std::string& host, uint16_t port,
                                               remote_options options) {
  auto& sys = rt.system();
  const std::string peer = host + ":" + std::to_string(port);
  if (!sys.has_middleman())
    return make_error(errc::unsupported, "connect to " + peer + ": the runtime was started without network = true");
  auto p = std::make_unique<impl>();
  p->system = &sys;
  p->options = options;
  p->peer = peer;
  auto remote = connect_middleman(sys, host, port, options.connect_timeout);
  if (!remote)
    return make_error(errc::io_error, "cannot connect to " + peer + ": " + sys.render(remote.error()));
  p->receiver = *remote;
  p->control = sys.spawn(sender_control, p->receiver, p->gate, peer, static_cast<uint32_t>(options.transport),
                         std::max<uint32_t>(1, options.window), caf::timespan{options.connect_timeout});
  {
    std::unique_lock lock{p->gate->mutex};
    AF_TRY(p->gate->wait(lock, clock_type::now() + options.connect_timeout, [&] { return p->gate->ready; },
                         "no handshake reply from " + peer + " within " +
                             std::to_string(options.connect_timeout.count()) + " ms"));
  }
  if (options.transport == bulk_transport::tcp_socket) {
    auto fd = net::connect_tcp(host, p->gate->data_port);
    if (!fd) return make_error(errc::peer_down, "receiver " + peer + ": data connection: " + fd.error_value().message);
    p->data = std::move(*fd);
    net::tune_bulk_socket(p->data.get(), options.socket_buffer_bytes);
    net::set_io_timeout(p->data.get(), options.request_timeout, options.request_timeout);
    const uint64_t token = p->gate->token;
    if (auto ok = net::write_all(p->data.get(), &token, sizeof token); !ok)
      return p->socket_error(std::move(ok).error_value());
  }
  return remote_sender{std::move(p)};
}

expected<void> remote_sender::send(const tensor& t) {
  auto& p = *impl_;
  if (p.finished) return make_error(errc::invalid_argument, "send to " + p.peer + ": the stream is finished");
  if (!t.defined()) return make_error(errc::invalid_argument, "send to " + p.peer + ": undefined tensor");
  if (!t.dev().is_cpu())
    return make_error(errc::unsupported, "send to " + p.peer + ": tensor on " + to_string(t.dev()) + " (copy it to the CPU)");
  // An empty tensor has no payload to lay out (and contiguous() of a zero-size shape such as
  // [4,0] is refused by ops/ as of this writing).
  tensor dense = t;
  if (t.nbytes() > 0 && !t.is_contiguous()) {
    AF_TRY_ASSIGN(dense, t.contiguous());
  }
  {
    std::unique_lock lock{p.gate->mutex};
    auto& g = *p.gate;
    AF_TRY(g.wait(lock, p.deadline(), [&] { return g.credit > 0; },
                  "no credit from receiver " + p.peer + " within " + std::to_string(p.options.request_timeout.count()) +
                      " ms (window " + std::to_string(g.window) + " full)"));
    --g.credit;
    ++g.stats.sent;
    g.stats.max_in_flight = std::max(g.stats.max_in_flight, g.stats.sent - g.stats.acknowledged);
  }
  if (p.options.transport == bulk_transport::caf_messages) {
    detail::tsan_release_payload(dense);
    caf::anon_send(p.receiver, remote::tensor_atom::value, std::move(dense));
    return {};
  }
  if (auto ok = net::write_tensor_frame(p.data.get(), dense); !ok) return p.socket_error(std::move(ok).error_value());
  return {};
}

expected<void> remote_sender::flush() {
  auto& p = *impl_;
  std::unique_lock lock{p.gate->mutex};
  auto& g = *p.gate;
  return g.wait(lock, p.deadline(), [&] { return g.stats.acknowledged >= g.stats.sent; },
                "receiver " + p.peer + " did not consume " + std::to_string(g.stats.sent - g.stats.acknowledged) +
                    " tensors within " + std::to_string(p.options.request_timeout.count()) + " ms");
}

expected<void> remote_sender::finish() {
  auto& p = *impl_;
  if (p.finished) return {};
  p.finished = true;
  uint64_t count = 0;
  {
    std::lock_guard guard{p.gate->mutex};
    if (p.gate->failure) return p.gate->failure;
    count = p.gate->stats.sent;
  }
  if (p.options.transport == bulk_transport::caf_messages) {
    caf::anon_send(p.receiver, remote::end_atom::value, count);
  } else if (auto ok = net::write_end_frame(p.data.get(), count); !ok) {
    return p.socket_error(std::move(ok).error_value());
  }
  std::unique_lock lock{p.gate->mutex};
  auto& g = *p.gate;
  AF_TRY(g.wait(lock, p.deadline(), [&] { return g.done; },
                "receiver " + p.peer + " did not confirm the end of the stream within " +
                    std::to_string(p.options.request_timeout.count()) + " ms"));
  if (g.done_count != count)
    return make_error(errc::protocol_violation, "receiver " + p.peer + " confirmed " + std::to_string(g.done_count) +
                                                    " tensors, " + std::to_string(count) + " were sent");
  return {};
}

sender_stats remote_sender::stats() const {
  std::lock_guard guard{impl_->gate->mutex};
  return impl_->gate->stats;
}

const std::string& remote_sender::peer() const noexcept { return impl_->peer; }

}  // namespace af
