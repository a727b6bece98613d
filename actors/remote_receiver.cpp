#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/remote_node.hpp"
#include "actors/remote_protocol.hpp"
#include "actors/remote_socket.hpp"
#include "actors/resume_ordered.hpp"
#include "actors/tsan_handoff.hpp"

namespace af {

namespace {

// Shared by the control actor (handshake, CAF-borne tensors, sender liveness), the data thread
// (socket-borne tensors) and the consumer calling next(). Tensors already received stay
// deliverable after a failure; the failure is reported once they are taken.
struct receiver_shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<tensor> queue;
  bool ended = false;
  error failure;
  receiver_stats stats;
  // Set by the handshake.
  bool session = false;
  caf::actor sender;  // the sender's control actor: credit and done go there
  bulk_transport transport = bulk_transport::tcp_socket;
  uint64_t token = 0;
  std::string sender_name = "sender";

  // Accepts one arriving tensor; protocol_violation if it exceeds the credit granted.
  error push(tensor t) {
    std::lock_guard guard{mutex};
    if (!session) return {};  // a stray message before any handshake: nobody to credit or blame
    if (failure || ended) return failure;
    if (stats.received - stats.consumed >= stats.window) {
      failure = make_error(errc::protocol_violation, sender_name + " sent more than its window of " +
                                                         std::to_string(stats.window) + " tensors");
      changed.notify_all();
      return failure;
    }
    queue.push_back(std::move(t));
    ++stats.received;
    stats.max_buffered = std::max(stats.max_buffered, stats.received - stats.consumed);
    changed.notify_all();
    return {};
  }
  // End of stream announced with the sender's count; protocol_violation when tensors went missing.
  error end(uint64_t count) {
    std::lock_guard guard{mutex};
    if (failure) return failure;
    if (count != stats.received)
      failure = make_error(errc::protocol_violation, sender_name + " ended the stream after " + std::to_string(count) +
                                                         " tensors, " + std::to_string(stats.received) + " arrived");
    else
      ended = true;
    changed.notify_all();
    return failure;
  }
  void fail(error err) {
    std::lock_guard guard{mutex};
    if (!failure && !ended) failure = std::move(err);
    changed.notify_all();
  }
  caf::actor sender_handle() {
    std::lock_guard guard{mutex};
    return sender;
  }
};

// Tells the sender why the stream was rejected, so its pending calls fail with the same reason.
void report_to_sender(const caf::actor& sender, const error& err) {
  if (sender && err) caf::anon_send(sender, flow::fail_atom::value, to_caf_error(err));
}

caf::behavior receiver_control(detail::resume_ordered<caf::event_based_actor>* self, std::shared_ptr<receiver_shared> shared,
                               uint16_t data_port, uint32_t max_window) {
  self->set_down_handler([=](caf::down_msg& msg) {
    std::string who;
    {
      std::lock_guard guard{shared->mutex};
      if (msg.source != shared->sender.address()) return;
      who = shared->sender_name;
    }
    shared->fail(make_error(errc::peer_down, who + " is down (" + caf::to_string(msg.reason) +
                                                 ") before the end of the stream"));
  });
  return {
      [=](remote::hello_atom, caf::actor& sender, uint32_t transport,
          uint32_t window) -> caf::result<uint32_t, uint16_t, uint64_t> {
        std::lock_guard guard{shared->mutex};
        if (shared->session) return make_caf_error(errc::unsupported, "this receiver already serves a stream");
        if (transport > static_cast<uint32_t>(bulk_transport::caf_messages))
          return make_caf_error(errc::protocol_violation, "unknown transport " + std::to_string(transport));
        shared->session = true;
        shared->sender = sender;
        shared->transport = static_cast<bulk_transport>(transport);
        shared->stats.window = std::clamp<uint32_t>(window, 1, max_window);
        shared->token = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
        shared->sender_name = "sender on node " + caf::to_string(sender.node());
        self->monitor(sender);
        return {shared->stats.window, data_port, shared->token};
      },
      [=](remote::tensor_atom, tensor& t) {
        detail::tsan_acquire_payload(t);
        if (auto err = shared->push(std::move(t))) report_to_sender(shared->sender_handle(), err);
      },
      [=](remote::end_atom, uint64_t count) {
        auto sender = shared->sender_handle();
        if (auto err = shared->end(count)) report_to_sender(sender, err);
        else if (sender) self->send(sender, remote::done_atom::value, count);
      },
  };
}

}  // namespace

struct remote_receiver::impl {
  caf::actor_system* system = nullptr;
  remote_options options;
  uint16_t port = 0;
  caf::actor control;
  std::shared_ptr<receiver_shared> shared = std::make_shared<receiver_shared>();
  net::socket_fd listener;
  std::mutex data_mutex;  // guards `data` against the destructor's shutdown
  net::socket_fd data;
  std::atomic<bool> stop{false};
  std::thread data_thread;

  // The data plane: accept the sender's connection (checking the handshake token), then read frames
  // until the end frame or an error. Runs on its own thread because reads block.
  void serve_data() {
    while (!stop.load()) {
      auto fd = net::accept_tcp(listener, stop);
      if (!fd) return;
      net::set_io_timeout(fd->get(), options.request_timeout, options.request_timeout);
      uint64_t token = 0;
      bool ok = net::read_exact(fd->get(), &token, sizeof token).has_value();
      {
        std::lock_guard guard{shared->mutex};
        ok = ok && shared->session && shared->transport == bulk_transport::tcp_socket && token == shared->token;
        if (ok) shared->sender_name = "sender at " + net::peer_name(fd->get());
      }
      if (!ok) continue;  // a stray connection: drop it and keep waiting for the real sender
      // Between tensors the sender may pause for as long as it likes; its death is detected by the
      // socket closing or by the monitor on its control actor.
      net::set_io_timeout(fd->get(), options.request_timeout, std::chrono::milliseconds{0});
      net::tune_bulk_socket(fd->get(), options.socket_buffer_bytes);
      {
        std::lock_guard guard{data_mutex};
        if (stop.load()) return;
        data = std::move(*fd);
      }
      read_frames();
      return;
    }
  }

  void read_frames() {
    auto alloc = cpu_allocator();
    for (;;) {
      auto frame = net::read_tensor_frame(data.get(), alloc, options.max_payload_bytes);
      error err;
      if (!frame) {
        if (stop.load()) return;
        err = std::move(frame).error_value();
        std::string who;
        {
          std::lock_guard guard{shared->mutex};
          who = shared->sender_name;
        }
        err.message = who + ": " + err.message;
      } else if (frame->end) {
        auto sender = shared->sender_handle();
        if (auto bad = shared->end(frame->end_count)) report_to_sender(sender, bad);
        else if (sender) caf::anon_send(sender, remote::done_atom::value, frame->end_count);
        return;
      } else {
        err = shared->push(std::move(frame->value));
      }
      if (err) {
        shared->fail(err);
        report_to_sender(shared->sender_handle(), err);
        // Unread payload may follow; closing makes a sender blocked in a write notice at once.
        std::lock_guard guard{data_mutex};
        data.shutdown_both();
        return;
      }
    }
  }

  ~impl() {
    stop.store(true);
    {
      std::lock_guard guard{data_mutex};
      data.shutdown_both();
    }
    if (data_thread.joinable()) data_thread.join();
    if (control) {
      system->middleman().unpublish(control, port);
      caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
    }
  }
};

remote_receiver::remote_receiver(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
remote_receiver::remote_receiver(remote_receiver&&) noexcept = default;
remote_receiver& remote_receiver::operator=(remote_receiver&&) noexcept = default;
remote_receiver::~remote_receiver() = default;

expected<remote_receiver> remote_receiver::listen(runtime& rt, uint16_t port, remote_options options) {
  auto& sys = rt.system();
  const std::string where = options.bind_host + ":" + std::to_string(port);
  if (!sys.has_middleman())
    return make_error(errc::unsupported, "listen on " + where + ": the runtime was started without network = true");
  auto p = std::make_unique<impl>();
  p->system = &sys;
  p->options = options;
  uint16_t data_port = 0;
  AF_TRY_ASSIGN(p->listener, net::listen_tcp(options.bind_host, 0, data_port));
  p->control = sys.spawn(receiver_control, p->shared, data_port, std::max<uint32_t>(1, options.window));
  auto published = sys.middleman().publish(p->control, port, options.bind_host.c_str(), true);
  if (!published) {
    caf::anon_send_exit(p->control, caf::exit_reason::user_shutdown);
    p->control = nullptr;
    return make_error(errc::io_error, "cannot publish on " + where + ": " + sys.render(published.error()));
  }
  p->port = *published;
  p->data_thread = std::thread([raw = p.get()] { raw->serve_data(); });
  return remote_receiver{std::move(p)};
}

uint16_t remote_receiver::port() const noexcept { return impl_->port; }

expected<std::optional<tensor>> remote_receiver::next(std::chrono::milliseconds timeout) {
  auto& s = *impl_->shared;
  std::unique_lock lock{s.mutex};
  s.changed.wait_for(lock, timeout, [&] { return !s.queue.empty() || s.ended || s.failure; });
  if (!s.queue.empty()) {
    tensor t = std::move(s.queue.front());
    s.queue.pop_front();
    ++s.stats.consumed;
    caf::actor sender = s.sender;
    const bool failed = static_cast<bool>(s.failure);
    lock.unlock();
    if (sender && !failed) caf::anon_send(sender, flow::demand_atom::value, uint64_t{1});
    return std::optional<tensor>{std::move(t)};
  }
  if (s.failure) return s.failure;
  if (s.ended) return std::optional<tensor>{};
  return make_error(errc::timeout, "no tensor from " + s.sender_name + " within " + std::to_string(timeout.count()) + " ms");
}

receiver_stats remote_receiver::stats() const {
  std::lock_guard guard{impl_->shared->mutex};
  return impl_->shared->stats;
}

}  // namespace af
