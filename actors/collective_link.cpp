#include "actors/collective_link.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "actors/remote_socket.hpp"
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

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

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
    const auto spin_until = clock::now() + spin_for;
    while (clock::now() < spin_until)
      for (int i = 0; i < 64; ++i) {
        if (in_->head.load(std::memory_order_acquire) != tail) return {};
        cpu_relax();
      }
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
    const auto spin_until = clock::now() + spin_for;
    while (clock::now() < spin_until)
      for (int i = 0; i < 64; ++i) {
        if (head - out_->tail.load(std::memory_order_acquire) < capacity_) return {};
        cpu_relax();
      }
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

// ---- handshake ------------------------------------------------------------------------------

constexpr uint32_t hello_magic = 0x4f4c4841;  // "AHLO"
constexpr uint32_t offer_magic = 0x4d534641;  // "AFSM"
constexpr std::size_t max_hello_text = 1024;

struct hello_fixed {
  uint32_t magic = hello_magic;
  uint16_t version = wire_version;
  uint16_t mesh_port = 0;
  int32_t ranks = 0, processes = 0, process = 0;
  int32_t transport = 0;
  uint32_t name_len = 0, token_len = 0, host_len = 0;
  int32_t refused = 0;  // an answer: 1, with the reason as its name
};

struct hello {
  hello_fixed fixed;
  std::string name, token, host;
};

// This host's identity: processes that agree on it share memory.
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::getline(in, boot);
  return std::string{name} + "/" + boot;
}

expected<void> send_hello(int fd, const hello& h) {
  hello_fixed f = h.fixed;
  f.name_len = static_cast<uint32_t>(h.name.size());
  f.token_len = static_cast<uint32_t>(h.token.size());
  f.host_len = static_cast<uint32_t>(h.host.size());
  std::string bytes(reinterpret_cast<const char*>(&f), sizeof f);
  bytes += h.name + h.token + h.host;
  return net::write_all(fd, bytes.data(), bytes.size());
}

expected<hello> receive_hello(int fd, const std::string& from) {
  hello h;
  AF_TRY(net::read_exact(fd, &h.fixed, sizeof h.fixed));
  if (h.fixed.magic != hello_magic) return make_error(errc::malformed_input, "collective handshake from " + from + ": not a collective group's hello");
  if (h.fixed.version != wire_version)
    return make_error(errc::malformed_input, "collective handshake from " + from + ": wire version " + std::to_string(h.fixed.version));
  for (uint32_t len : {h.fixed.name_len, h.fixed.token_len, h.fixed.host_len})
    if (len > max_hello_text) return make_error(errc::malformed_input, "collective handshake from " + from + ": a text of " + std::to_string(len) + " bytes");
  auto text = [&](uint32_t len, std::string& out) -> expected<void> {
    out.resize(len);
    return len ? net::read_exact(fd, out.data(), len) : expected<void>{};
  };
  AF_TRY(text(h.fixed.name_len, h.name));
  AF_TRY(text(h.fixed.token_len, h.token));
  AF_TRY(text(h.fixed.host_len, h.host));
  return h;
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

hello own_hello(const mesh_options& o, uint16_t mesh_port) {
  hello h;
  h.fixed.mesh_port = mesh_port;
  h.fixed.ranks = o.group.ranks;
  h.fixed.processes = o.group.processes;
  h.fixed.process = o.group.process;
  h.fixed.transport = static_cast<int32_t>(o.transport);
  h.name = o.name;
  h.token = o.token;
  h.host = host_identity();
  return h;
}

// What is wrong with a peer's hello, or empty. `expected_process` < 0: any process above this one.
std::string hello_problem(const mesh_options& o, const hello& h, int expected_process) {
  if (!same_secret(h.token, o.token)) return "its token differs";
  if (h.name != o.name) return "it belongs to group '" + h.name + "'";
  if (h.fixed.ranks != o.group.ranks || h.fixed.processes != o.group.processes)
    return "it counts " + std::to_string(h.fixed.ranks) + " ranks in " + std::to_string(h.fixed.processes) + " processes, this one " +
           std::to_string(o.group.ranks) + " in " + std::to_string(o.group.processes);
  if (h.fixed.transport != static_cast<int32_t>(o.transport)) return "its transport option differs";
  if (expected_process >= 0 ? h.fixed.process != expected_process : (h.fixed.process <= o.group.process || h.fixed.process >= o.group.processes))
    return "it says it is process " + std::to_string(h.fixed.process);
  return {};
}

// Both ends of a pair, once hellos are exchanged: the lower (accepting) side offers a segment.
expected<std::unique_ptr<link>> make_link(net::socket_fd fd, const mesh_options& o, int peer, bool same_host, bool offering) {
  const bool want = o.transport != transport_choice::tcp && same_host;
  const std::size_t capacity = (std::max<std::size_t>(o.shared_memory_bytes, 64 << 10) + 0xffff) & ~std::size_t{0xffff};
  const std::size_t mapped = control_bytes + 2 * capacity;
  const std::string who = o.name + ": process " + std::to_string(o.group.process) + " and process " + std::to_string(peer);
  void* mapping = nullptr;
  if (offering) {
    std::string name;
    if (want) {
      std::random_device rd;
      name = "/actorflow-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
      int shm = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (shm >= 0) {
        if (::ftruncate(shm, static_cast<off_t>(mapped)) == 0) {
          mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
          if (mapping == MAP_FAILED) mapping = nullptr;
        }
        ::close(shm);
      }
      if (!mapping) {
        ::shm_unlink(name.c_str());
        name.clear();
      } else {
        new (mapping) ring_control{};
        new (static_cast<ring_control*>(mapping) + 1) ring_control{};
      }
    }
    uint32_t offer[3] = {offer_magic, static_cast<uint32_t>(name.size()), static_cast<uint32_t>(capacity >> 16)};
    AF_TRY(net::write_all(fd.get(), offer, sizeof offer));
    if (!name.empty()) AF_TRY(net::write_all(fd.get(), name.data(), name.size()));
    char accepted = 0;
    if (!name.empty()) {
      auto answer = net::read_exact(fd.get(), &accepted, 1);
      ::shm_unlink(name.c_str());
      if (!answer) {
        ::munmap(mapping, mapped);
        return answer.error_value();
      }
    }
    if (accepted != 1 && mapping) {
      ::munmap(mapping, mapped);
      mapping = nullptr;
    }
  } else {
    uint32_t offer[3] = {};
    AF_TRY(net::read_exact(fd.get(), offer, sizeof offer));
    if (offer[0] != offer_magic || offer[1] > 255) return make_error(errc::malformed_input, who + ": a bad shared-memory offer");
    if (offer[1] > 0) {
      std::string name(offer[1], '\0');
      AF_TRY(net::read_exact(fd.get(), name.data(), name.size()));
      const std::size_t offered = static_cast<std::size_t>(offer[2]) << 16;
      char accepted = 0;
      if (want && offered == capacity && name.rfind("/actorflow-", 0) == 0 && name.find('/', 1) == std::string::npos) {
        int shm = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
        struct stat st {};
        if (shm >= 0 && ::fstat(shm, &st) == 0 && static_cast<std::size_t>(st.st_size) == mapped) {
          mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
          if (mapping == MAP_FAILED) mapping = nullptr;
        }
        if (shm >= 0) ::close(shm);
        accepted = mapping ? 1 : 0;
      }
      AF_TRY(net::write_all(fd.get(), &accepted, 1));
    }
  }
  if (!mapping && o.transport == transport_choice::shared_memory)
    return make_error(errc::unsupported, who + ": shared memory was asked for, but " +
                                             (same_host ? std::string{"the segment could not be made or mapped"} : "they are on different hosts"));
  net::set_io_timeout(fd.get(), o.stall_timeout, std::chrono::milliseconds{0});
  if (mapping) return std::unique_ptr<link>{new shm_link(std::move(fd), peer, mapping, mapped, capacity, offering ? 0 : 1, o.stall_timeout)};
  return std::unique_ptr<link>{new tcp_link(std::move(fd), peer, o.stall_timeout)};
}

// Connects to host:port, retrying while the listener is not up yet, until the deadline.
expected<net::socket_fd> connect_until(const std::string& host, uint16_t port, clock::time_point deadline, const std::atomic<bool>& stop,
                                       const std::string& what) {
  for (;;) {
    auto fd = net::connect_tcp(host, port);
    if (fd) return fd;
    if (stop.load()) return make_error(errc::cancelled, what + ": stopped while connecting");
    if (clock::now() >= deadline) return with_context(fd.error_value(), what);
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
}

struct table_entry {
  uint16_t port = 0;
  uint16_t host_len = 0;
};

std::string ip_of(const std::string& peer_name) { return peer_name.substr(0, peer_name.rfind(':')); }

}  // namespace

std::unique_ptr<link> make_tcp_link(int fd, int peer_process, std::chrono::milliseconds stall_timeout) {
  return std::unique_ptr<link>{new tcp_link(net::socket_fd{fd}, peer_process, stall_timeout)};
}

expected<std::vector<std::unique_ptr<link>>> connect(const mesh_options& o, const std::atomic<bool>& stop) {
  const int me = o.group.process, n = o.group.processes;
  std::vector<std::unique_ptr<link>> links(static_cast<std::size_t>(n));
  if (n == 1) return links;
  const auto deadline = clock::now() + o.connect_timeout;
  const std::string self_host = host_identity();
  // The connecting side of a pair: send our hello, read theirs (or their refusal), then the link.
  auto join = [&](net::socket_fd fd, int peer, uint16_t mesh_port, std::vector<std::pair<std::string, uint16_t>>* table) -> expected<void> {
    net::set_io_timeout(fd.get(), o.connect_timeout, o.connect_timeout);
    AF_TRY(send_hello(fd.get(), own_hello(o, mesh_port)));
    AF_TRY_ASSIGN(hello theirs, receive_hello(fd.get(), "process " + std::to_string(peer)));
    if (theirs.fixed.refused) return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " refused process " + std::to_string(me) + ": " + theirs.name);
    if (auto problem = hello_problem(o, theirs, peer); !problem.empty())
      return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " answered, but " + problem);
    if (table) {
      for (int p = 0; p < n; ++p) {
        table_entry e;
        AF_TRY(net::read_exact(fd.get(), &e, sizeof e));
        if (e.host_len > 64) return make_error(errc::malformed_input, o.name + ": process 0's table has a host of " + std::to_string(e.host_len) + " bytes");
        std::string host(e.host_len, '\0');
        if (e.host_len) AF_TRY(net::read_exact(fd.get(), host.data(), host.size()));
        table->emplace_back(host, e.port);
      }
    }
    AF_TRY_ASSIGN(links[static_cast<std::size_t>(peer)], make_link(std::move(fd), o, peer, theirs.host == self_host, false));
    return {};
  };
  // The accepting side: read a hello, refuse it with a reason or answer with ours.
  auto admit = [&](net::socket_fd& fd, int expected_peer) -> expected<hello> {
    net::set_io_timeout(fd.get(), o.connect_timeout, o.connect_timeout);
    const std::string from = net::peer_name(fd.get());
    AF_TRY_ASSIGN(hello theirs, receive_hello(fd.get(), from));
    if (auto problem = hello_problem(o, theirs, expected_peer); !problem.empty()) {
      hello no = own_hello(o, 0);
      no.fixed.refused = 1;
      no.name = "refused by process " + std::to_string(me) + ": " + problem;
      (void)send_hello(fd.get(), no);
      return make_error(errc::failed_precondition, o.name + ": refused a peer from " + from + ": " + problem);
    }
    AF_TRY(send_hello(fd.get(), own_hello(o, 0)));
    return theirs;
  };
  auto accept_one = [&](const net::socket_fd& listener) -> expected<net::socket_fd> {
    std::atomic<bool> give_up{false};
    for (;;) {
      pollfd p{listener.get(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0 || stop.load()) return make_error(stop.load() ? errc::cancelled : errc::timeout, "");
      if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 50))) > 0) return net::accept_tcp(listener, give_up);
    }
  };
  auto missing = [&](int from, int to) {
    std::string out;
    for (int p = from; p < to; ++p)
      if (!links[static_cast<std::size_t>(p)]) out += (out.empty() ? "" : ", ") + std::to_string(p);
    return out;
  };

  if (me == 0) {
    uint16_t bound = 0;
    AF_TRY_ASSIGN(auto listener, net::listen_tcp(o.rendezvous_host, o.rendezvous_port, bound));
    std::vector<std::pair<net::socket_fd, hello>> joined(static_cast<std::size_t>(n));
    for (int got = 0; got < n - 1;) {
      auto fd = accept_one(listener);
      if (!fd) {
        std::string absent;
        for (int p = 1; p < n; ++p)
          if (!joined[static_cast<std::size_t>(p)].first.valid()) absent += (absent.empty() ? "" : ", ") + std::to_string(p);
        return make_error(fd.error_value().code, o.name + ": process(es) " + absent + " did not join at " + o.rendezvous_host + ":" +
                                                     std::to_string(o.rendezvous_port) + " within " + std::to_string(o.connect_timeout.count()) + " ms");
      }
      auto theirs = admit(*fd, -1);
      if (!theirs) continue;  // a stranger or a mistaken process: refused, keep waiting for the group
      auto& slot = joined[static_cast<std::size_t>(theirs->fixed.process)];
      if (slot.first.valid()) continue;  // a second process claiming the same index
      slot = {std::move(*fd), std::move(*theirs)};
      ++got;
    }
    for (int p = 1; p < n; ++p) {
      auto& [fd, theirs] = joined[static_cast<std::size_t>(p)];
      for (int q = 0; q < n; ++q) {
        const std::string host = q == 0 ? std::string{} : ip_of(net::peer_name(joined[static_cast<std::size_t>(q)].first.get()));
        table_entry e{q == 0 ? uint16_t{0} : joined[static_cast<std::size_t>(q)].second.fixed.mesh_port, static_cast<uint16_t>(host.size())};
        AF_TRY(net::write_all(fd.get(), &e, sizeof e));
        if (!host.empty()) AF_TRY(net::write_all(fd.get(), host.data(), host.size()));
      }
    }
    for (int p = 1; p < n; ++p) {
      auto& [fd, theirs] = joined[static_cast<std::size_t>(p)];
      AF_TRY_ASSIGN(links[static_cast<std::size_t>(p)], make_link(std::move(fd), o, p, theirs.host == self_host, true));
    }
    return links;
  }

  uint16_t mesh_port = 0;
  net::socket_fd mesh_listener;
  if (me < n - 1) {
    AF_TRY_ASSIGN(mesh_listener, net::listen_tcp(o.bind_host, 0, mesh_port));
  }
  std::vector<std::pair<std::string, uint16_t>> table;
  AF_TRY_ASSIGN(auto to_zero, connect_until(o.rendezvous_host, o.rendezvous_port, deadline, stop,
                                            o.name + ": process " + std::to_string(me) + " joining at " + o.rendezvous_host + ":" + std::to_string(o.rendezvous_port)));
  AF_TRY(join(std::move(to_zero), 0, mesh_port, &table));
  for (int p = 1; p < me; ++p) {
    AF_TRY_ASSIGN(auto fd, connect_until(table[static_cast<std::size_t>(p)].first, table[static_cast<std::size_t>(p)].second, deadline, stop,
                                         o.name + ": process " + std::to_string(me) + " connecting to process " + std::to_string(p)));
    AF_TRY(join(std::move(fd), p, 0, nullptr));
  }
  for (int got = me + 1; got < n;) {
    auto fd = accept_one(mesh_listener);
    if (!fd)
      return make_error(fd.error_value().code, o.name + ": process(es) " + missing(me + 1, n) + " did not connect to process " + std::to_string(me) +
                                                   " within " + std::to_string(o.connect_timeout.count()) + " ms");
    auto theirs = admit(*fd, -1);
    if (!theirs || links[static_cast<std::size_t>(theirs->fixed.process)]) continue;
    const int peer = theirs->fixed.process;
    AF_TRY_ASSIGN(links[static_cast<std::size_t>(peer)], make_link(std::move(*fd), o, peer, theirs->host == self_host, true));
    ++got;
  }
  return links;
}

}  // namespace af::collectives::mesh
