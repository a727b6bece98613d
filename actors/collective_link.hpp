#pragma once

// The links between the processes of a collective group (actors/collectives.hpp, across processes):
// how they find each other, authenticate, choose a transport, and frame what they send. CAF-free,
// so the tests can drive a link and the hostile-input checks can feed its reader bytes directly.
//
// Rendezvous (actors/collective_mesh.cpp). Process 0 listens on the rendezvous address; every other
// process connects to it and says who it is (a hello: group name, ranks, processes, its index, the
// address it listens on for the rest of the mesh, its host's identity and a fresh nonce). The token
// never crosses the wire: each side proves it knows it with an HMAC-SHA256 over both nonces, the
// accepting side first. Process 0 answers each with the table of every process's address; then
// each process i connects to every process 0 < j < i. One TCP connection per pair of processes,
// as Gloo's full mesh. A handshake that is not done within a few seconds is dropped, so a silent
// stranger on the port delays the group by that much at most.
//
// Transport. Two processes whose hosts are the same machine (hostname and kernel boot id agree) map a
// shared-memory segment for the bulk bytes: one single-producer ring of bytes per direction, woken
// through a futex in the mapping, which spares every byte two trips through the kernel's socket
// buffers (loopback TCP, what Gloo uses on one host). The lower process creates the segment
// (shm_open, 0600, its pages reserved up front so that a full /dev/shm is a refusal, not a SIGBUS
// later) and names it over the TCP link; the other maps it and answers, and the name is unlinked
// then or on any failure before, so no segment outlives the handshake. The TCP connection stays open beside it: its
// end of file is how a dead peer is noticed. Other pairs send everything over the TCP connection.
//
// Frames. Every message is a fixed 72-byte little-endian header (wire_header) and its payload.
// read_message checks every field against the group before it allocates: a peer's bytes are input.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/error.hpp"

namespace af::collectives::mesh {

/// bye: the sender leaves in order, having finished `seq` calls on each of its ranks.
enum class message_type : uint16_t { chunk = 1, abort = 2, bye = 3 };

struct wire_header {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t type = 0;  // message_type
  int32_t to_rank = 0, from_rank = 0;
  uint64_t seq = 0, step = 0;
  uint32_t bucket = 0;
  int32_t kind = 0, root = 0, dtype = 0;  // chunk: op_kind, broadcast root, element type
  int64_t numel = 0;                      // chunk: elements of one rank's input to the call
  int32_t round = 0;
  int32_t code = 0;                       // abort: errc
  uint64_t payload_bytes = 0;             // chunk: the elements; abort: the message text
};
static_assert(sizeof(wire_header) == 72, "the header's layout is the wire format");

inline constexpr uint32_t wire_magic = 0x4c434641;  // "AFCL"
inline constexpr uint16_t wire_version = 1;
/// Longest abort text accepted from a peer.
inline constexpr uint64_t max_abort_text = 4096;

/// What a process knows of the group, to check a peer's header against.
struct group_shape {
  int ranks = 1, processes = 1, process = 0;
  int ranks_per_process() const { return ranks / processes; }
  int process_of(int rank) const { return rank / ranks_per_process(); }
  bool local(int rank) const { return process_of(rank) == process; }
};

/// The header's fields that come from the network, checked: malformed_input naming the field.
error check_header(const wire_header& h, const group_shape& group, int peer_process, uint64_t max_payload_bytes);

/// One connection between two processes; write is safe from several threads, read from one.
class link {
 public:
  virtual ~link() = default;
  /// The whole message (header then payload), or the error that broke the link; never blocks
  /// longer than the stall limit the link was made with when the peer stops reading.
  virtual expected<void> write(const wire_header& header, const void* payload) = 0;
  /// Exactly n bytes of the peer's messages; peer_down once the peer has closed or died and every
  /// byte it sent has been read.
  virtual expected<void> read(void* out, std::size_t n) = 0;
  /// This side sends nothing more: the peer's reader sees the end after the bytes before it.
  virtual void close_writing() = 0;
  /// A write from now on waits at most this long for a peer that does not read (a goodbye).
  virtual void shorten_stall(std::chrono::milliseconds at_most) = 0;
  /// Unblocks read (it fails as cancelled) for a reader being stopped.
  virtual void stop_reading() = 0;
  /// "shared memory" or "tcp".
  virtual const char* transport() const = 0;
  /// The process at the other end.
  int peer_process = 0;
};

enum class transport_choice { automatic, tcp, shared_memory };

struct mesh_options {
  group_shape group;
  std::string name;
  std::string token;
  std::string rendezvous_host;
  uint16_t rendezvous_port = 0;
  std::string bind_host;
  transport_choice transport = transport_choice::automatic;
  std::size_t shared_memory_bytes = std::size_t{8} << 20;  // each direction's ring
  std::chrono::milliseconds connect_timeout{30000};
  std::chrono::milliseconds stall_timeout{60000};
};

/// Connects this process to every other of the group: links[p] for p != process (nullptr at its
/// own index). Errors name the process and address that failed, or what a peer's hello got wrong.
expected<std::vector<std::unique_ptr<link>>> connect(const mesh_options& options, const std::atomic<bool>& stop);

/// A link over a connected socket (tests: a socketpair).
std::unique_ptr<link> make_tcp_link(int fd, int peer_process, std::chrono::milliseconds stall_timeout);

/// The shared-memory rings of a pair, for the handshake (actors/collective_mesh.cpp): the bytes to
/// map for rings of `capacity` bytes each way, their control blocks set up in a fresh mapping, and
/// the link over them (`outgoing`: 0 for the side that made the segment, 1 for the other; the
/// socket stays open beside it, its end of file telling that the peer is gone).
std::size_t shared_ring_bytes(std::size_t capacity);
void init_shared_rings(void* mapping);
std::unique_ptr<link> make_shm_link(int fd, int peer_process, void* mapping, std::size_t capacity, int outgoing,
                                    std::chrono::milliseconds stall_timeout);

/// Reads one message: its header (checked) and payload size; the caller reads the payload.
expected<wire_header> read_header(link& l, const group_shape& group, uint64_t max_payload_bytes);

}  // namespace af::collectives::mesh
