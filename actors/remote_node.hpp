#pragma once

// Tensor streams between two actorflow processes.
//
// A receiver publishes a control actor on a port (CAF middleman); a sender connects to it with
// remote_actor. The receiver grants credit as its consumer takes tensors, and the sender never has
// more than `window` unacknowledged tensors in flight, so memory on both sides stays bounded (an
// unbounded CAF send collapses to ~100 MiB/s because the middleman buffers everything).
//
// Bulk bytes. CAF's middleman, even windowed, moves 4 MiB tensors at 0.4-0.7 of what a plain
// socket does on loopback (bench_messaging, same run: it serialises each message into a buffer,
// then copies it again into the socket), below the goal of 0.7. So by default CAF is only the
// control plane (handshake, credit, end, errors, liveness through monitors), and the tensor bytes
// travel on a separate TCP connection as a Cap'n Proto header plus the raw payload in one writev,
// read straight into an allocator buffer: 0.7-1.0 of raw TCP, median ~0.85.
// `bulk_transport::caf_messages` keeps everything inside CAF (same protocol, same window), so both
// can be measured side by side.
//
// Window. W = 1 leaves the link idle during each credit round trip; from W = 2 on a 4 MiB stream
// runs at link speed on loopback (measured W = 1, 2, 4, 8, 16), and 4 leaves slack for scheduling
// hiccups while bounding buffered memory to 4 tensors per stream.
//
// Failure. Each side monitors the other's control actor and the data socket; when the peer dies,
// every pending call fails promptly with errc::peer_down naming the peer, and every call that waits
// has a timeout, so nothing hangs. Bad bytes from the network give errc::malformed_input.
//
// The runtime must be started with `network = true` and must outlive senders and receivers.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/runtime.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {

/// How tensor bytes travel from sender to receiver.
enum class bulk_transport : uint32_t {
  tcp_socket = 0,    ///< CAF for control, a plain TCP connection for header + payload (default)
  caf_messages = 1,  ///< tensors inside CAF messages through the middleman
};

/// Settings of one tensor stream (either end).
struct remote_options {
  /// Most unacknowledged tensors in flight. The receiver grants min(sender's, receiver's) window.
  /// 4 keeps a 4 MiB stream at full speed on loopback (see bench_messaging) while bounding
  /// buffered memory to window * tensor size.
  uint32_t window = 4;
  /// Bound on every wait of a running stream: credit, flush, finish, a stalled socket.
  std::chrono::milliseconds request_timeout{10000};
  /// Bound on the sender's handshake (control reply and data connection), kept apart from
  /// request_timeout so that a short credit bound does not also make connecting fragile.
  std::chrono::milliseconds connect_timeout{10000};
  /// Chosen by the sender; the receiver accepts either.
  bulk_transport transport = bulk_transport::tcp_socket;
  /// SO_SNDBUF / SO_RCVBUF of the data connection (the kernel may cap it).
  int socket_buffer_bytes = 4 << 20;
  /// Receiver: largest payload accepted from the network (larger headers are malformed_input).
  uint64_t max_payload_bytes = uint64_t{1} << 34;
  /// Host the receiver binds to; loopback unless a test or deployment says otherwise.
  std::string bind_host = "127.0.0.1";
};

/// What a sender observed (for tests and benchmarks).
struct sender_stats {
  uint64_t sent = 0;           ///< tensors handed to the transport
  uint64_t acknowledged = 0;   ///< credits returned by the receiver's consumer
  uint64_t max_in_flight = 0;  ///< largest sent - acknowledged seen; never above window
  uint32_t window = 0;         ///< the window the receiver granted
};

/// What a receiver observed.
struct receiver_stats {
  uint64_t received = 0;      ///< tensors that arrived intact
  uint64_t consumed = 0;      ///< tensors taken by next()
  uint64_t max_buffered = 0;  ///< largest received - consumed seen; never above window
  uint32_t window = 0;
};

/// The receiving end of one tensor stream, published on a port.
///
///   af::runtime rt{{.network = true}};
///   auto rx = af::remote_receiver::listen(rt, 0);        // port 0: any free port
///   ... tell the sender rx->port() ...
///   while (auto t = rx->next(std::chrono::seconds(10))) {  // error: peer_down, timeout, ...
///     if (!*t) break;                                      // end of stream
///     use(**t);
///   }
class remote_receiver {
 public:
  /// Publishes on options.bind_host:port (0 = any free port); unsupported without a middleman.
  static expected<remote_receiver> listen(runtime& rt, uint16_t port, remote_options options = {});
  remote_receiver(remote_receiver&&) noexcept;
  remote_receiver& operator=(remote_receiver&&) noexcept;
  ~remote_receiver();

  /// The published control port (what senders connect to).
  uint16_t port() const noexcept;
  /// The next tensor in order, std::nullopt after the end of the stream; grants the sender one
  /// credit. timeout when nothing arrives in `timeout`; peer_down when the sender died;
  /// malformed_input / protocol_violation when it sent bad bytes or more than its credit.
  expected<std::optional<tensor>> next(std::chrono::milliseconds timeout);
  receiver_stats stats() const;

 private:
  struct impl;
  explicit remote_receiver(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The sending end of one tensor stream, connected to a receiver's port.
///
///   auto tx = af::remote_sender::connect(rt, "127.0.0.1", port);
///   for (auto& t : tensors) if (auto ok = tx->send(t); !ok) return ok.error_value();
///   tx->finish();  // end of stream, acknowledged by the receiver
class remote_sender {
 public:
  /// Connects and completes the handshake within options.request_timeout; io_error naming
  /// host:port when nobody listens there.
  static expected<remote_sender> connect(runtime& rt, const std::string& host, uint16_t port,
                                         remote_options options = {});
  remote_sender(remote_sender&&) noexcept;
  remote_sender& operator=(remote_sender&&) noexcept;
  ~remote_sender();

  /// Sends `t` (any CPU layout; views are made contiguous), waiting for credit when `window`
  /// tensors are unacknowledged. peer_down naming host:port if the receiver dies meanwhile.
  expected<void> send(const tensor& t);
  /// Waits until the receiver's consumer has taken every tensor sent so far.
  expected<void> flush();
  /// Ends the stream and waits until the receiver has every tensor (checked by count).
  expected<void> finish();
  sender_stats stats() const;
  /// "127.0.0.1:4242", the receiver this sender talks to.
  const std::string& peer() const noexcept;

 private:
  struct impl;
  explicit remote_sender(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace af
