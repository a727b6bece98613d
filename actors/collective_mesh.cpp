// How the processes of a collective group find and authenticate each other, and which link each
// pair gets (actors/collective_link.hpp says what and why). Everything read here comes from
// whoever connects to the rendezvous port: every read has a deadline and every length a bound.

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "actors/collective_link.hpp"
#include "actors/remote_socket.hpp"

namespace af::collectives::mesh {

namespace {

using clock = std::chrono::steady_clock;

constexpr uint32_t hello_magic = 0x4f4c4841;  // "AHLO"
constexpr uint32_t offer_magic = 0x4d534641;  // "AFSM"
constexpr std::size_t max_hello_text = 1024;
// A handshake's every read is done within this, so a silent or trickling stranger on the
// rendezvous port holds process 0 this long at most.
constexpr auto handshake_limit = std::chrono::seconds{5};

using proof_bytes = std::array<unsigned char, 32>;

struct hello_fixed {
  uint32_t magic = hello_magic;
  uint16_t version = wire_version;
  uint16_t mesh_port = 0;
  int32_t ranks = 0, processes = 0, process = 0;
  int32_t transport = 0;
  uint32_t name_len = 0, host_len = 0, listen_len = 0;
  int32_t refused = 0;  // an answer: 1, with the reason as its name
  unsigned char nonce[16] = {};
  proof_bytes proof{};  // an answer: HMAC(token, "accept" | their nonce | this nonce | name)
};

struct hello {
  hello_fixed fixed;
  std::string name, host, listen;  // listen: the address its mesh listener is bound to
};

// Reads exactly n bytes before `deadline`: timeout otherwise, however the bytes trickle in.
expected<void> read_by(int fd, void* out, std::size_t n, clock::time_point deadline, const std::string& from) {
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return make_error(errc::timeout, "collective handshake with " + from + ": no answer in time");
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) return make_error(errc::io_error, "collective handshake with " + from + ": poll failed");
    if (ready <= 0) continue;
    const ssize_t got = ::recv(fd, dst, n, MSG_DONTWAIT);
    if (got == 0) return make_error(errc::peer_down, "collective handshake with " + from + ": connection closed");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return make_error(errc::io_error, "collective handshake with " + from + ": " + std::strerror(errno));
    }
    dst += got;
    n -= static_cast<std::size_t>(got);
  }
  return {};
}

// This host's identity: processes that agree on it share memory.
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::getline(in, boot);
  return std::string{name} + "/" + boot;
}

proof_bytes prove(const std::string& token, const char* role, const unsigned char* first, const unsigned char* second,
                  const std::string& name) {
  std::string message = role;
  message.append(reinterpret_cast<const char*>(first), 16);
  message.append(reinterpret_cast<const char*>(second), 16);
  message += name;
  proof_bytes out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       out.data(), &length);
  return out;
}

bool same_proof(const proof_bytes& a, const proof_bytes& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

expected<void> send_hello(int fd, const hello& h) {
  hello_fixed f = h.fixed;
  f.name_len = static_cast<uint32_t>(h.name.size());
  f.host_len = static_cast<uint32_t>(h.host.size());
  f.listen_len = static_cast<uint32_t>(h.listen.size());
  std::string bytes(reinterpret_cast<const char*>(&f), sizeof f);
  bytes += h.name + h.host + h.listen;
  return net::write_all(fd, bytes.data(), bytes.size());
}

expected<hello> receive_hello(int fd, const std::string& from, clock::time_point deadline) {
  hello h;
  AF_TRY(read_by(fd, &h.fixed, sizeof h.fixed, deadline, from));
  if (h.fixed.magic != hello_magic) return make_error(errc::malformed_input, "collective handshake from " + from + ": not a collective group's hello");
  if (h.fixed.version != wire_version)
    return make_error(errc::malformed_input, "collective handshake from " + from + ": wire version " + std::to_string(h.fixed.version));
  for (uint32_t len : {h.fixed.name_len, h.fixed.host_len, h.fixed.listen_len})
    if (len > max_hello_text) return make_error(errc::malformed_input, "collective handshake from " + from + ": a text of " + std::to_string(len) + " bytes");
  for (auto [len, out] : {std::pair{h.fixed.name_len, &h.name}, std::pair{h.fixed.host_len, &h.host}, std::pair{h.fixed.listen_len, &h.listen}}) {
    out->resize(len);
    if (len) AF_TRY(read_by(fd, out->data(), len, deadline, from));
  }
  return h;
}

hello own_hello(const mesh_options& o, uint16_t mesh_port) {
  hello h;
  h.fixed.mesh_port = mesh_port;
  h.fixed.ranks = o.group.ranks;
  h.fixed.processes = o.group.processes;
  h.fixed.process = o.group.process;
  h.fixed.transport = static_cast<int32_t>(o.transport);
  if (RAND_bytes(h.fixed.nonce, sizeof h.fixed.nonce) != 1) {
    std::random_device rd;  // never on Linux; still a nonce that differs per hello
    for (auto& b : h.fixed.nonce) b = static_cast<unsigned char>(rd());
  }
  h.name = o.name;
  h.host = host_identity();
  h.listen = o.bind_host;
  return h;
}

// What is wrong with a peer's hello, or empty. `expected_process` < 0: any process above this one.
std::string hello_problem(const mesh_options& o, const hello& h, int expected_process) {
  if (h.name != o.name) return "it belongs to group '" + h.name + "'";
  if (h.fixed.ranks != o.group.ranks || h.fixed.processes != o.group.processes)
    return "it counts " + std::to_string(h.fixed.ranks) + " ranks in " + std::to_string(h.fixed.processes) + " processes, this one " +
           std::to_string(o.group.ranks) + " in " + std::to_string(o.group.processes);
  if (h.fixed.transport != static_cast<int32_t>(o.transport)) return "its transport option differs";
  if (expected_process >= 0 ? h.fixed.process != expected_process : (h.fixed.process <= o.group.process || h.fixed.process >= o.group.processes))
    return "it says it is process " + std::to_string(h.fixed.process);
  return {};
}

// The verdict on a joiner's proof, with the reason when refused.
expected<void> send_verdict(int fd, const std::string& refusal) {
  const uint32_t head[2] = {refusal.empty() ? 1u : 0u, static_cast<uint32_t>(refusal.size())};
  AF_TRY(net::write_all(fd, head, sizeof head));
  return refusal.empty() ? expected<void>{} : net::write_all(fd, refusal.data(), refusal.size());
}

// Both ends of a pair, once authenticated: the lower (accepting) side offers a segment.
expected<std::unique_ptr<link>> make_link(net::socket_fd fd, const mesh_options& o, int peer, bool same_host, bool offering) {
  const bool want = o.transport != transport_choice::tcp && same_host;
  const std::size_t capacity = (std::max<std::size_t>(o.shared_memory_bytes, 64 << 10) + 0xffff) & ~std::size_t{0xffff};
  const std::size_t mapped = shared_ring_bytes(capacity);
  const std::string who = o.name + ": process " + std::to_string(o.group.process) + " and process " + std::to_string(peer);
  const auto deadline = clock::now() + handshake_limit;
  void* mapping = nullptr;
  if (offering) {
    std::string name;
    if (want) {
      std::random_device rd;
      name = "/actorflow-" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
      const int shm = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      // Reserving the pages now turns a /dev/shm too small for the rings into TCP here, not a
      // SIGBUS when a write first touches them.
      if (shm >= 0 && ::posix_fallocate(shm, 0, static_cast<off_t>(mapped)) == 0) {
        mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
        if (mapping == MAP_FAILED) mapping = nullptr;
      }
      if (shm >= 0) ::close(shm);
      if (mapping) init_shared_rings(mapping);
      else ::shm_unlink(name.c_str()), name.clear();
    }
    // From here the name is unlinked and the mapping dropped on every way out but success.
    char accepted = 0;
    auto negotiated = [&]() -> expected<void> {
      const uint32_t offer[3] = {offer_magic, static_cast<uint32_t>(name.size()), static_cast<uint32_t>(capacity >> 16)};
      AF_TRY(net::write_all(fd.get(), offer, sizeof offer));
      if (name.empty()) return {};
      AF_TRY(net::write_all(fd.get(), name.data(), name.size()));
      return read_by(fd.get(), &accepted, 1, deadline, "process " + std::to_string(peer));
    }();
    if (!name.empty()) ::shm_unlink(name.c_str());
    if (mapping && (!negotiated || accepted != 1)) ::munmap(mapping, mapped), mapping = nullptr;
    if (!negotiated) return with_context(negotiated.error_value(), who);
  } else {
    const std::string from = "process " + std::to_string(peer);
    uint32_t offer[3] = {};
    AF_TRY(read_by(fd.get(), offer, sizeof offer, deadline, from));
    if (offer[0] != offer_magic || offer[1] > 255) return make_error(errc::malformed_input, who + ": a bad shared-memory offer");
    if (offer[1] > 0) {
      std::string name(offer[1], '\0');
      AF_TRY(read_by(fd.get(), name.data(), name.size(), deadline, from));
      const std::size_t offered = static_cast<std::size_t>(offer[2]) << 16;
      char accepted = 0;
      if (want && offered == capacity && name.rfind("/actorflow-", 0) == 0 && name.find('/', 1) == std::string::npos) {
        const int shm = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
        struct stat st {};
        if (shm >= 0 && ::fstat(shm, &st) == 0 && static_cast<std::size_t>(st.st_size) == mapped) {
          mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, shm, 0);
          if (mapping == MAP_FAILED) mapping = nullptr;
        }
        if (shm >= 0) ::close(shm);
        accepted = mapping ? 1 : 0;
      }
      if (auto sent = net::write_all(fd.get(), &accepted, 1); !sent) {
        if (mapping) ::munmap(mapping, mapped);
        return with_context(sent.error_value(), who);
      }
    }
  }
  if (!mapping && o.transport == transport_choice::shared_memory)
    return make_error(errc::unsupported, who + ": shared memory was asked for, but " +
                                             (same_host ? std::string{"the segment could not be made or mapped"} : "they are on different hosts"));
  if (mapping) return make_shm_link(fd.release(), peer, mapping, capacity, offering ? 0 : 1, o.stall_timeout);
  return make_tcp_link(fd.release(), peer, o.stall_timeout);
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

expected<std::vector<std::unique_ptr<link>>> connect(const mesh_options& o, const std::atomic<bool>& stop) {
  const int me = o.group.process, n = o.group.processes;
  std::vector<std::unique_ptr<link>> links(static_cast<std::size_t>(n));
  if (n == 1) return links;
  const auto deadline = clock::now() + o.connect_timeout;
  const std::string self_host = host_identity();
  auto handshake_deadline = [&] { return std::min(deadline, clock::now() + std::chrono::duration_cast<clock::duration>(handshake_limit)); };

  // The joining side of a pair: our hello, theirs with its proof (or a refusal), our proof, the
  // verdict, then (from process 0) the table, then the link.
  auto join = [&](net::socket_fd fd, int peer, uint16_t mesh_port, std::vector<std::pair<std::string, uint16_t>>* table) -> expected<void> {
    const std::string from = "process " + std::to_string(peer);
    // A joiner waits as long as joining may take: the other side may be busy turning a stranger away.
    const auto by = deadline;
    const hello mine = own_hello(o, mesh_port);
    AF_TRY(send_hello(fd.get(), mine));
    AF_TRY_ASSIGN(hello theirs, receive_hello(fd.get(), from, by));
    if (theirs.fixed.refused)
      return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " refused process " + std::to_string(me) + ": " + theirs.name);
    if (auto problem = hello_problem(o, theirs, peer); !problem.empty())
      return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " answered, but " + problem);
    if (!same_proof(theirs.fixed.proof, prove(o.token, "accept", mine.fixed.nonce, theirs.fixed.nonce, o.name)))
      return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " answered without knowing the token");
    const auto proof = prove(o.token, "join", theirs.fixed.nonce, mine.fixed.nonce, o.name);
    AF_TRY(net::write_all(fd.get(), proof.data(), proof.size()));
    uint32_t verdict[2] = {};
    AF_TRY(read_by(fd.get(), verdict, sizeof verdict, by, from));
    if (verdict[0] != 1) {
      std::string why(std::min<uint32_t>(verdict[1], max_hello_text), '\0');
      if (!why.empty()) (void)read_by(fd.get(), why.data(), why.size(), by, from);
      return make_error(errc::failed_precondition, o.name + ": process " + std::to_string(peer) + " refused process " + std::to_string(me) + ": " + why);
    }
    if (table) {
      for (int p = 0; p < n; ++p) {
        table_entry e;
        AF_TRY(read_by(fd.get(), &e, sizeof e, by, from));
        if (e.host_len > 64) return make_error(errc::malformed_input, o.name + ": process 0's table has a host of " + std::to_string(e.host_len) + " bytes");
        std::string host(e.host_len, '\0');
        if (e.host_len) AF_TRY(read_by(fd.get(), host.data(), host.size(), by, from));
        table->emplace_back(host, e.port);
      }
    }
    AF_TRY_ASSIGN(links[static_cast<std::size_t>(peer)], make_link(std::move(fd), o, peer, theirs.host == self_host, false));
    return {};
  };
  // The accepting side: a hello, refused with a reason (and no secret) or answered with ours and
  // our proof; then the joiner's proof, and the verdict.
  auto admit = [&](net::socket_fd& fd, int expected_peer) -> expected<hello> {
    const std::string from = net::peer_name(fd.get());
    const auto by = handshake_deadline();
    AF_TRY_ASSIGN(hello theirs, receive_hello(fd.get(), from, by));
    hello mine = own_hello(o, 0);
    if (auto problem = hello_problem(o, theirs, expected_peer); !problem.empty()) {
      mine.fixed.refused = 1;
      mine.name = "refused by process " + std::to_string(me) + ": " + problem;
      (void)send_hello(fd.get(), mine);
      return make_error(errc::failed_precondition, o.name + ": refused a peer from " + from + ": " + problem);
    }
    mine.fixed.proof = prove(o.token, "accept", theirs.fixed.nonce, mine.fixed.nonce, o.name);
    AF_TRY(send_hello(fd.get(), mine));
    proof_bytes proof{};
    AF_TRY(read_by(fd.get(), proof.data(), proof.size(), by, from));
    if (!same_proof(proof, prove(o.token, "join", mine.fixed.nonce, theirs.fixed.nonce, o.name))) {
      (void)send_verdict(fd.get(), "refused by process " + std::to_string(me) + ": its token differs");
      return make_error(errc::failed_precondition, o.name + ": refused a peer from " + from + ": its token differs");
    }
    AF_TRY(send_verdict(fd.get(), ""));
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
  auto absent = [&](int from, int to, auto&& present) {
    std::string out;
    for (int p = from; p < to; ++p)
      if (!present(p)) out += (out.empty() ? "" : ", ") + std::to_string(p);
    return out;
  };

  if (me == 0) {
    uint16_t bound = 0;
    AF_TRY_ASSIGN(auto listener, net::listen_tcp(o.rendezvous_host, o.rendezvous_port, bound));
    std::vector<std::pair<net::socket_fd, hello>> joined(static_cast<std::size_t>(n));
    for (int got = 0; got < n - 1;) {
      auto fd = accept_one(listener);
      if (!fd)
        return make_error(fd.error_value().code, o.name + ": process(es) " +
                                                     absent(1, n, [&](int p) { return joined[static_cast<std::size_t>(p)].first.valid(); }) +
                                                     " did not join at " + o.rendezvous_host + ":" + std::to_string(o.rendezvous_port) +
                                                     " within " + std::to_string(o.connect_timeout.count()) + " ms");
      auto theirs = admit(*fd, -1);
      if (!theirs) continue;  // a stranger or a mistaken process: refused, keep waiting for the group
      auto& slot = joined[static_cast<std::size_t>(theirs->fixed.process)];
      if (slot.first.valid()) continue;  // a second process claiming the same index
      slot = {std::move(*fd), std::move(*theirs)};
      ++got;
    }
    for (int p = 1; p < n; ++p) {
      auto& fd = joined[static_cast<std::size_t>(p)].first;
      for (int q = 0; q < n; ++q) {
        // Where process q's mesh listener can be reached: the address it bound, or, for a wildcard,
        // the address its connection came from.
        std::string host;
        if (q > 0) {
          const auto& theirs = joined[static_cast<std::size_t>(q)];
          host = theirs.second.listen.empty() || theirs.second.listen == "0.0.0.0" ? ip_of(net::peer_name(theirs.first.get()))
                                                                                   : theirs.second.listen;
        }
        table_entry e{q == 0 ? uint16_t{0} : joined[static_cast<std::size_t>(q)].second.fixed.mesh_port,
                      static_cast<uint16_t>(std::min<std::size_t>(host.size(), 64))};
        AF_TRY(net::write_all(fd.get(), &e, sizeof e));
        if (e.host_len) AF_TRY(net::write_all(fd.get(), host.data(), e.host_len));
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
      return make_error(fd.error_value().code, o.name + ": process(es) " +
                                                   absent(me + 1, n, [&](int p) { return links[static_cast<std::size_t>(p)] != nullptr; }) +
                                                   " did not connect to process " + std::to_string(me) + " within " +
                                                   std::to_string(o.connect_timeout.count()) + " ms");
    auto theirs = admit(*fd, -1);
    if (!theirs || links[static_cast<std::size_t>(theirs->fixed.process)]) continue;
    const int peer = theirs->fixed.process;
    AF_TRY_ASSIGN(links[static_cast<std::size_t>(peer)], make_link(std::move(*fd), o, peer, theirs->host == self_host, true));
    ++got;
  }
  return links;
}

}  // namespace af::collectives::mesh
