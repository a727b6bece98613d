#include "actors/collective_link.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "actors/remote_socket.hpp"
#include "actors/spin_wait.hpp"
#include "actors/tsan_handoff.hpp"
#include "ops/dtype.hpp"

namespace af::collectives::mesh {

static_assert(std::endian::native == std::endian::little, "wire_header is sent as the host lays it out");

namespace {

using clock = std::chrono::steady_clock;

// A message read from another process may have been caused by anything this process wrote to any
// link before (a ring's chunks go round through the other processes and come back). That ordering
// passes through threads ThreadSanitizer cannot see, so every write releases and every read
// acquires this one address, declaring it; outside TSan builds both compile to nothing.
const char process_edge = 0;

error malformed(int peer, const std::string& what) {
  return make_error(errc::malformed_input, "collective link from process " + std::to_string(peer) + ": " + what);
}

}  // namespace

error check_header(const wire_header& h, const group_shape& group, int peer_process, uint64_t max_payload_bytes) {
  if (h.magic != wire_magic) return malformed(peer_process, "bad magic (not a collective message)");
  if (h.version != wire_version) return malformed(peer_process, "wire version " + std::to_string(h.version) + ", expected " + std::to_string(wire_version));
  if (h.to_rank < 0 || h.to_rank >= group.ranks || !group.local(h.to_rank))
    return malformed(peer_process, "to_rank " + std::to_string(h.to_rank) + " is not a rank of this process");
  if (h.from_rank < 0 || h.from_rank >= group.ranks || group.process_of(h.from_rank) != peer_process)
    return malformed(peer_process, "from_rank " + std::to_string(h.from_rank) + " is not a rank of that process");
  if (h.type == static_cast<uint16_t>(message_type::bye)) {
    if (h.payload_bytes != 0) return malformed(peer_process, "a goodbye with a payload");
    return {};
  }
  if (h.type == static_cast<uint16_t>(message_type::abort)) {
    if (h.payload_bytes > max_abort_text) return malformed(peer_process, "abort text of " + std::to_string(h.payload_bytes) + " bytes");
    return {};
  }
  if (h.type != static_cast<uint16_t>(message_type::chunk)) return malformed(peer_process, "message type " + std::to_string(h.type));
  if (h.kind < 0 || h.kind > 3) return malformed(peer_process, "operation " + std::to_string(h.kind));
  if (h.root < 0 || h.root >= group.ranks) return malformed(peer_process, "root " + std::to_string(h.root));
  if (h.dtype < 0 || h.dtype >= static_cast<int32_t>(dtype::string))
    return malformed(peer_process, "element type " + std::to_string(h.dtype));
  if (h.numel < 0) return malformed(peer_process, "element count " + std::to_string(h.numel));
  if (h.round < 0 || h.round > 2 * group.ranks) return malformed(peer_process, "round " + std::to_string(h.round));
  const auto element = size_of(static_cast<dtype>(h.dtype));
  if (h.payload_bytes > max_payload_bytes)
    return malformed(peer_process, "payload of " + std::to_string(h.payload_bytes) + " bytes exceeds the limit of " + std::to_string(max_payload_bytes));
  if (h.payload_bytes % element != 0)
    return malformed(peer_process, "payload of " + std::to_string(h.payload_bytes) + " bytes is not whole elements");
  // A chunk is at most one rank's whole input (all_gather's slot; the ring's chunks are smaller).
  if (h.payload_bytes / element > static_cast<uint64_t>(h.numel))
    return malformed(peer_process, "payload of " + std::to_string(h.payload_bytes / element) + " elements for a call of " + std::to_string(h.numel));
  return {};
}

expected<wire_header> read_header(link& l, const group_shape& group, uint64_t max_payload_bytes) {
  wire_header h;
  AF_TRY(l.read(&h, sizeof h));
  af::detail::tsan_acquire(&process_edge);
  if (auto bad = check_header(h, group, l.peer_process, max_payload_bytes)) return bad;
  return h;
}

namespace {

// ---- TCP ------------------------------------------------------------------------------------

class tcp_link final : public link {
 public:
  tcp_link(net::socket_fd fd, int peer, std::chrono::milliseconds stall) : fd_(std::move(fd)) {
    peer_process = peer;
    net::tune_bulk_socket(fd_.get(), 4 << 20);
    net::set_io_timeout(fd_.get(), stall, std::chrono::milliseconds{0});
  }
  expected<void> write(const wire_header& h, const void* payload) override {
    std::lock_guard<std::mutex> guard{write_mutex_};
    af::detail::tsan_release(&process_edge);
    AF_TRY(net::write_all(fd_.get(), &h, sizeof h));
    if (h.payload_bytes > 0) AF_TRY(net::write_all(fd_.get(), payload, h.payload_bytes));
    return {};
  }
  expected<void> read(void* out, std::size_t n) override {
    auto done = net::read_exact(fd_.get(), out, n);
    if (stopped_.load(std::memory_order_acquire)) return make_error(errc::cancelled, "collective link: reader stopped");
    return done;
  }
  void close_writing() override { ::shutdown(fd_.get(), SHUT_WR); }
  void shorten_stall(std::chrono::milliseconds at_most) override { net::set_io_timeout(fd_.get(), at_most, std::chrono::milliseconds{0}); }
  void stop_reading() override {
    stopped_.store(true, std::memory_order_release);
    ::shutdown(fd_.get(), SHUT_RD);
  }
  const char* transport() const override { return "tcp"; }

 private:
  net::socket_fd fd_;
  std::mutex write_mutex_;
  std::atomic<bool> stopped_{false};
};

// ---- shared memory --------------------------------------------------------------------------

// One direction's ring. Both processes map it: every field is read as a peer's input.
struct ring_control {
  alignas(64) std::atomic<uint64_t> head{0};  // bytes written, by the writer
  alignas(64) std::atomic<uint64_t> tail{0};  // bytes read, by the reader
  alignas(64) std::atomic<uint32_t> data_signal{0};
  std::atomic<uint32_t> reader_sleeping{0};
  alignas(64) std::atomic<uint32_t> space_signal{0};
  std::atomic<uint32_t> writer_sleeping{0};
  alignas(64) std::atomic<uint32_t> closed{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the rings' counters are shared between processes");
constexpr std::size_t control_bytes = 2 * sizeof(ring_control);

void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::milliseconds at_most) {
  timespec ts{static_cast<time_t>(at_most.count() / 1000), static_cast<long>((at_most.count() % 1000) * 1000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Spinning a little before sleeping answers a peer on the other core within microseconds; the
// futex sleep after it keeps a waiting rank off the core when the peer is slow.
constexpr auto spin_for = std::chrono::microseconds{30};
constexpr auto sleep_slice = std::chrono::milliseconds{20};

class shm_link final : public link {
 public:
  // `mapping` holds both directions; `outgoing` is the index of the one this side writes.
  shm_link(net::socket_fd fd, int peer, void* mapping, std::size_t mapped, std::size_t capacity, int outgoing,
           std::chrono::milliseconds stall)
      : fd_(std::move(fd)), mapping_(mapping), mapped_(mapped), capacity_(capacity), stall_(stall) {
    peer_process = peer;
    auto* controls = static_cast<ring_control*>(mapping);
    auto* data = static_cast<std::byte*>(mapping) + control_bytes;
    out_ = &controls[outgoing];
    in_ = &controls[1 - outgoing];
    out_data_ = data + static_cast<std::size_t>(outgoing) * capacity;
    in_data_ = data + static_cast<std::size_t>(1 - outgoing) * capacity;
  }
  ~shm_link() override { ::munmap(mapping_, mapped_); }

  expected<void> write(const wire_header& h, const void* payload) override {
    std::lock_guard<std::mutex> guard{write_mutex_};
    af::detail::tsan_release(&process_edge);
    AF_TRY(write_bytes(&h, sizeof h));
    if (h.payload_bytes > 0) AF_TRY(write_bytes(payload, h.payload_bytes));
    return {};
  }

  expected<void> read(void* out, std::size_t n) override {
    auto* dst = static_cast<std::byte*>(out);
    while (n > 0) {
      const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
      const uint64_t head = in_->head.load(std::memory_order_acquire);
      if (head - tail > capacity_) return malformed(peer_process, "shared-memory ring counters out of range");
      if (head == tail) {
        AF_TRY(wait_for_data(tail));
        continue;
      }
      const std::size_t take = std::min<std::size_t>(n, head - tail);
      copy_out(dst, tail, take);
      in_->tail.store(tail + take, std::memory_order_seq_cst);
      if (in_->writer_sleeping.load(std::memory_order_seq_cst)) futex_wake(in_->space_signal);
      dst += take;
      n -= take;
    }
    return {};
  }

  void shorten_stall(std::chrono::milliseconds at_most) override { stall_ = at_most; }
  void close_writing() override {
    out_->closed.store(1, std::memory_order_seq_cst);
    futex_wake(out_->data_signal);
  }
  void stop_reading() override {
    stopped_.store(true, std::memory_order_seq_cst);
    futex_wake(in_->data_signal);
  }
  const char* transport() const override { return "shared memory"; }

 private:
  // The peer's TCP connection carries nothing after the handshake: readable means it is gone.
  bool peer_gone() const {
    pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN)) != 0;
  }

  expected<void> wait_for_data(uint64_t tail) {
    if (af::detail::spin_briefly(spin_for, [&] { return in_->head.load(std::memory_order_acquire) != tail; })) return {};
    for (;;) {
      if (stopped_.load(std::memory_order_acquire)) return make_error(errc::cancelled, "collective link: reader stopped");
      in_->reader_sleeping.store(1, std::memory_order_seq_cst);
      const uint32_t seen = in_->data_signal.load(std::memory_order_seq_cst);
      if (in_->head.load(std::memory_order_seq_cst) != tail) break;
      if (in_->closed.load(std::memory_order_acquire) || peer_gone()) {
        in_->reader_sleeping.store(0, std::memory_order_relaxed);
        if (in_->head.load(std::memory_order_seq_cst) != tail) return {};  // its last bytes came with the close
        return make_error(errc::peer_down, "collective link: process " + std::to_string(peer_process) +
                                               (in_->closed.load() ? " closed its link" : " died (its connection closed)"));
      }
      futex_wait(in_->data_signal, seen, sleep_slice);
      if (in_->head.load(std::memory_order_acquire) != tail) break;
    }
    in_->reader_sleeping.store(0, std::memory_order_relaxed);
    return {};
  }

  expected<void> wait_for_space(uint64_t head) {
    if (af::detail::spin_briefly(spin_for, [&] { return head - out_->tail.load(std::memory_order_acquire) < capacity_; })) return {};
    const auto give_up = clock::now() + stall_;
    for (;;) {
      out_->writer_sleeping.store(1, std::memory_order_seq_cst);
      const uint32_t seen = out_->space_signal.load(std::memory_order_seq_cst);
      if (head - out_->tail.load(std::memory_order_seq_cst) < capacity_) break;
      if (peer_gone()) {
        out_->writer_sleeping.store(0, std::memory_order_relaxed);
        return make_error(errc::peer_down, "collective link: process " + std::to_string(peer_process) + " died while this one wrote to it");
      }
      if (clock::now() >= give_up) {
        out_->writer_sleeping.store(0, std::memory_order_relaxed);
        return make_error(errc::timeout, "collective link: process " + std::to_string(peer_process) + " read nothing for " +
                                             std::to_string(stall_.count()) + " ms");
      }
      futex_wait(out_->space_signal, seen, sleep_slice);
    }
    out_->writer_sleeping.store(0, std::memory_order_relaxed);
    return {};
  }

  expected<void> write_bytes(const void* src, std::size_t n) {
    const auto* from = static_cast<const std::byte*>(src);
    // Publish in pieces (256 KB, at most a quarter ring), so the reader copies out while this side copies in.
    const std::size_t piece = std::min<std::size_t>(capacity_ / 4, 256 << 10);
    while (n > 0) {
      const uint64_t head = out_->head.load(std::memory_order_relaxed);
      const uint64_t used = head - out_->tail.load(std::memory_order_acquire);
      if (used > capacity_) return malformed(peer_process, "shared-memory ring counters out of range");
      if (used == capacity_) {
        AF_TRY(wait_for_space(head));
        continue;
      }
      const std::size_t put = std::min({n, static_cast<std::size_t>(capacity_ - used), piece});
      copy_in(head, from, put);
      out_->head.store(head + put, std::memory_order_seq_cst);
      if (out_->reader_sleeping.load(std::memory_order_seq_cst)) futex_wake(out_->data_signal);
      from += put;
      n -= put;
    }
    return {};
  }

  void copy_in(uint64_t at, const std::byte* src, std::size_t n) {
    const std::size_t offset = at % capacity_, first = std::min(n, capacity_ - offset);
    std::memcpy(out_data_ + offset, src, first);
    if (n > first) std::memcpy(out_data_, src + first, n - first);
  }
  void copy_out(std::byte* dst, uint64_t at, std::size_t n) {
    const std::size_t offset = at % capacity_, first = std::min(n, capacity_ - offset);
    std::memcpy(dst, in_data_ + offset, first);
    if (n > first) std::memcpy(dst + first, in_data_, n - first);
  }

  net::socket_fd fd_;
  void* mapping_;
  std::size_t mapped_, capacity_;
  std::chrono::milliseconds stall_;
  ring_control *out_ = nullptr, *in_ = nullptr;
  std::byte *out_data_ = nullptr, *in_data_ = nullptr;
  std::mutex write_mutex_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

std::unique_ptr<link> make_tcp_link(int fd, int peer_process, std::chrono::milliseconds stall_timeout) {
  return std::unique_ptr<link>{new tcp_link(net::socket_fd{fd}, peer_process, stall_timeout)};
}

std::size_t shared_ring_bytes(std::size_t capacity) { return control_bytes + 2 * capacity; }

void init_shared_rings(void* mapping) {
  new (mapping) ring_control{};
  new (static_cast<ring_control*>(mapping) + 1) ring_control{};
}

std::unique_ptr<link> make_shm_link(int fd, int peer_process, void* mapping, std::size_t capacity, int outgoing,
                                    std::chrono::milliseconds stall_timeout) {
  return std::unique_ptr<link>{
      new shm_link(net::socket_fd{fd}, peer_process, mapping, shared_ring_bytes(capacity), capacity, outgoing, stall_timeout)};
}

}  // namespace af::collectives::mesh
