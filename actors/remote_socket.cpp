#include "actors/remote_socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "serialization/tensor_codec.hpp"
#include "serialization/tensor_frame.hpp"

namespace af::net {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

bool is_timeout(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

error io_failure(const char* what, int err) {
  if (is_timeout(err)) return make_error(errc::timeout, std::string(what) + ": peer stalled past the socket timeout");
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ESHUTDOWN)
    return make_error(errc::peer_down, std::string(what) + ": connection closed by peer (" + errno_text(err) + ")");
  return make_error(errc::io_error, std::string(what) + ": " + errno_text(err));
}

expected<sockaddr_in> resolve(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  const std::string numeric = host == "localhost" ? "127.0.0.1" : host;
  if (inet_pton(AF_INET, numeric.c_str(), &addr.sin_addr) != 1)
    return make_error(errc::invalid_argument, "'" + host + "' is not an IPv4 address");
  return addr;
}

// Writes the iovecs completely, advancing through partial writes.
expected<void> writev_all(int fd, iovec* iov, int count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_failure("send", errno);
    }
    auto left = static_cast<std::size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return {};
}

}  // namespace

socket_fd& socket_fd::operator=(socket_fd&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void socket_fd::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void socket_fd::shutdown_both() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

expected<socket_fd> listen_tcp(const std::string& host, uint16_t port, uint16_t& bound) {
  AF_TRY_ASSIGN(sockaddr_in addr, resolve(host, port));
  socket_fd fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!fd.valid()) return io_failure("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return make_error(errc::io_error, "bind " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  if (::listen(fd.get(), 4) != 0) return io_failure("listen", errno);
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  bound = ntohs(addr.sin_port);
  return fd;
}

expected<socket_fd> accept_tcp(const socket_fd& listener, const std::atomic<bool>& stop,
                               std::chrono::milliseconds poll_interval) {
  while (!stop.load(std::memory_order_acquire)) {
    pollfd p{listener.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(poll_interval.count()));
    if (ready < 0 && errno != EINTR) return io_failure("poll", errno);
    if (ready <= 0) continue;
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return socket_fd{fd};
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return io_failure("accept", errno);
  }
  return make_error(errc::cancelled, "accept: listener stopped");
}

expected<socket_fd> connect_tcp(const std::string& host, uint16_t port) {
  AF_TRY_ASSIGN(sockaddr_in addr, resolve(host, port));
  socket_fd fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!fd.valid()) return io_failure("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return make_error(errc::io_error, "connect to " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  return fd;
}

void tune_bulk_socket(int fd, int buffer_bytes) {
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_io_timeout(int fd, std::chrono::milliseconds send_timeout, std::chrono::milliseconds recv_timeout) {
  auto to_tv = [](std::chrono::milliseconds ms) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
    return tv;
  };
  timeval snd = to_tv(send_timeout), rcv = to_tv(recv_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
}

std::string peer_name(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET)
    return "unknown peer";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

expected<void> write_all(int fd, const void* data, std::size_t n) {
  iovec iov{const_cast<void*>(data), n};
  return writev_all(fd, &iov, 1);
}

expected<void> read_exact(int fd, void* data, std::size_t n) {
  auto* out = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < n) {
    ssize_t got = ::recv(fd, out + done, n - done, MSG_WAITALL);
    if (got == 0)
      return make_error(errc::peer_down, done == 0 ? "connection closed by peer"
                                                   : "connection closed by peer after " + std::to_string(done) +
                                                         " of " + std::to_string(n) + " bytes");
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_failure("recv", errno);
    }
    done += static_cast<std::size_t>(got);
  }
  return {};
}

expected<void> write_tensor_frame(int fd, const tensor& t) {
  if (is_string(t.type())) return make_error(errc::unsupported, "tensor frame: string tensors do not cross processes yet");
  std::string head = encode_tensor_frame_head(t);
  iovec iov[2] = {{head.data(), head.size()}, {t.raw_data(), t.nbytes()}};
  return writev_all(fd, iov, t.nbytes() > 0 ? 2 : 1);
}

expected<void> write_end_frame(int fd, uint64_t count) {
  auto frame = encode_end_frame(count);
  return write_all(fd, frame.data(), frame.size());
}

expected<frame_read> read_tensor_frame(int fd, const std::shared_ptr<allocator>& alloc,
                                       uint64_t max_payload_bytes) {
  unsigned char prefix_bytes[frame_prefix_bytes];
  AF_TRY(read_exact(fd, prefix_bytes, sizeof prefix_bytes));
  AF_TRY_ASSIGN(frame_prefix prefix, decode_frame_prefix(prefix_bytes));
  frame_read out;
  if (prefix.kind == frame_kind::end) {
    out.end = true;
    out.end_count = prefix.value;
    return out;
  }
  std::vector<char> header_bytes(prefix.value);
  AF_TRY(read_exact(fd, header_bytes.data(), header_bytes.size()));
  AF_TRY_ASSIGN(tensor_header header, decode_tensor_header(header_bytes.data(), header_bytes.size()));
  if (header.payload_bytes > max_payload_bytes)
    return make_error(errc::malformed_input, "tensor frame: payload of " + std::to_string(header.payload_bytes) +
                                                 " bytes exceeds the limit of " + std::to_string(max_payload_bytes));
  AF_TRY_ASSIGN(out.value, tensor::empty(header.dims, header.type, alloc));
  if (header.payload_bytes > 0) AF_TRY(read_exact(fd, out.value.raw_data(), header.payload_bytes));
  return out;
}

}  // namespace af::net
