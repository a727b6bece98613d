#pragma once

// Plain POSIX TCP for the bulk tensor bytes between two nodes (CAF carries only the control plane;
// see remote_node.hpp for why). CAF-free, so tests can drive the frame reader over a socketpair.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/allocator.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af::net {

/// An owned file descriptor (closed on destruction; move-only).
class socket_fd {
 public:
  socket_fd() = default;
  explicit socket_fd(int fd) noexcept : fd_(fd) {}
  socket_fd(socket_fd&& other) noexcept : fd_(other.release()) {}
  socket_fd& operator=(socket_fd&& other) noexcept;
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() { close(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept { int fd = fd_; fd_ = -1; return fd; }
  void close() noexcept;
  /// Wakes a thread blocked in recv/send/accept on this socket (they fail or see end of file).
  void shutdown_both() noexcept;

 private:
  int fd_ = -1;
};

/// Listens on host:port (port 0 picks a free one; `bound` receives the actual port).
expected<socket_fd> listen_tcp(const std::string& host, uint16_t port, uint16_t& bound);
/// Waits for one connection, checking `stop` every `poll_interval`; cancelled once `stop` is set.
expected<socket_fd> accept_tcp(const socket_fd& listener, const std::atomic<bool>& stop,
                               std::chrono::milliseconds poll_interval = std::chrono::milliseconds{50});
/// Connects to host:port; io_error naming the address when nobody listens.
expected<socket_fd> connect_tcp(const std::string& host, uint16_t port);
/// Large kernel buffers (a 4 MiB tensor then crosses loopback in few wake-ups) and no Nagle delay.
void tune_bulk_socket(int fd, int buffer_bytes);
/// Send/receive timeouts (0 = block forever): a stalled peer becomes errc::timeout, not a hang.
void set_io_timeout(int fd, std::chrono::milliseconds send_timeout, std::chrono::milliseconds recv_timeout);
/// "127.0.0.1:54321" of the other end, or "unknown peer".
std::string peer_name(int fd);

/// Writes all `n` bytes (no SIGPIPE): peer_down when the peer closed, timeout when it stalled.
expected<void> write_all(int fd, const void* data, std::size_t n);
/// Reads exactly `n` bytes: peer_down on end of file, timeout when the peer stalled.
expected<void> read_exact(int fd, void* data, std::size_t n);

/// Writes the frame of the contiguous CPU tensor `t`: prefix, Cap'n Proto header and payload in one
/// writev (one contiguous write of header + payload as far as the kernel is concerned).
expected<void> write_tensor_frame(int fd, const tensor& t);
/// Writes the end-of-stream frame after `count` tensors.
expected<void> write_end_frame(int fd, uint64_t count);

/// One frame read from a stream: a tensor, or the end of the stream with the sender's count.
struct frame_read {
  bool end = false;
  uint64_t end_count = 0;
  tensor value;
};
/// Reads the next frame; the payload lands straight in a buffer from `alloc` (no staging copy).
/// malformed_input for bad bytes (including payloads over `max_payload_bytes`), peer_down when the
/// connection closes (mid-frame or between frames), unknown_dtype for an unknown element type.
expected<frame_read> read_tensor_frame(int fd, const std::shared_ptr<allocator>& alloc,
                                       uint64_t max_payload_bytes);

}  // namespace af::net
