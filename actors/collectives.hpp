#pragma once

// Collectives as an actor topology: a ring of rank actors in one process, each owned by one
// replica, which together sum a tensor (all-reduce) by reduce-scatter then all-gather, the
// bandwidth-optimal ring of Baidu's allreduce, Horovod and NCCL; the same ring gathers every rank's
// tensor (all-gather) and passes one rank's on to all (broadcast). A small all-reduce over a power
// of two of ranks goes by recursive doubling instead (log2(ranks) rounds, each an exchange of the
// whole tensor with a partner), as MPI's and Gloo's small-message all-reduces do. Chunks travel between neighbours
// as messages that are views of the sender's buffer (no copy); each rank adds or copies what it
// receives into its own. As with every tensor passed between actors, a result may share storage
// with chunks still in flight: read it, do not write into it in place. CAF stays behind this
// header.
//
// A rank actor has no thread of its own: the thread calling on a rank (its replica's) drives it,
// sending its chunks when it calls and handling its mailbox while it waits for the result (and in
// progress(), between its kernels). A hand-off between two replicas' threads then costs no
// wake-up of a third, and a rank waiting for a peer on another core polls briefly before it
// sleeps. Every rank must therefore be called by a thread that also waits for it: one thread per
// rank, as replicas have.
//
//   auto ring = af::collectives::ring_group::start(rt, {.ranks = 2}).value();
//   // on replica r's thread, for every bucket of every step, in the same order on every rank:
//   auto summed = ring.all_reduce(r, {.step = s, .bucket = b}, gradients);   // af::expected<tensor>
//
// Every call carries its step and bucket: a rank whose calls do not line up with its neighbour's
// (another order, another shape or dtype) fails every rank's call with an error naming both ranks
// and both calls, never a hang or a wrong sum; a call that not every rank makes within the timeout
// fails naming the ranks that did not arrive.
//
// Across processes (ring_options::across) the same ring spans several processes, each owning an
// equal run of consecutive ranks: rank actors of one process pass chunks as messages, and a chunk
// for a rank in another process is written into the link to it (shared memory between processes
// on one host, TCP otherwise; actors/collective_link.hpp) and turned back into a message to that
// rank by the link's reader there. Every process makes the same ring_group::start call with its own
// `process`; start returns once all have joined.
//
//   auto ring = af::collectives::ring_group::start(rt, {.ranks = 2, .across = {.process = p,
//       .processes = 2, .rendezvous = "127.0.0.1:29400", .token = secret}}).value();
//   auto summed = ring.all_reduce(p, {.step = s, .bucket = b}, gradients);   // rank p lives here

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {
class runtime;
}

namespace af::collectives {

/// How the processes of a ring reach one another.
enum class link_transport {
  automatic,      ///< shared memory between processes on one host, TCP between hosts
  tcp,            ///< TCP always (the tensor bytes through the kernel's socket buffers)
  shared_memory,  ///< shared memory, or start fails naming the pair that cannot have it
};

/// Where a ring's ranks live when it spans processes.
struct process_options {
  /// This process's index; process p owns ranks [p * ranks / processes, (p + 1) * ranks / processes).
  int process = 0;
  /// Processes in the ring (1: all ranks here, nothing below is used); must divide the ranks.
  int processes = 1;
  /// host:port where process 0 listens and the others join (IPv4).
  std::string rendezvous = "127.0.0.1:29400";
  /// A secret every process knows; it never crosses the wire (each side proves it with an
  /// HMAC-SHA256 over fresh nonces). The links are authenticated at the handshake, not encrypted.
  /// Empty: the AF_COLLECTIVE_TOKEN environment variable; one of them is required.
  std::string token;
  /// Address the listeners of processes 1.. bind to (the others connect to it).
  std::string bind_host = "127.0.0.1";
  link_transport transport = link_transport::automatic;
  /// Each direction's ring of bytes between two processes sharing memory.
  std::size_t shared_memory_bytes = std::size_t{8} << 20;
  /// How long start waits for every process to join.
  std::chrono::milliseconds connect_timeout{30000};
  /// Largest chunk accepted from another process (its header is input: checked before allocating).
  /// A ring's chunk is a rank's share of the tensor (an all-gather's, its whole input): 2 GiB
  /// allows all-reduces of 4 GiB over 2 ranks.
  uint64_t max_message_bytes = uint64_t{1} << 31;
};

struct ring_options {
  /// Ranks in the ring, at least 1.
  int ranks = 2;
  /// How long a rank waits for the others once it has called; then every rank's call fails naming
  /// those that did not arrive.
  std::chrono::milliseconds timeout{60000};
  /// Names the group in errors.
  std::string name = "all_reduce";
  /// An all-reduce of at most this many bytes goes by recursive doubling when the ranks are a power
  /// of two: log2(ranks) exchanges of the whole tensor instead of the ring's 2(ranks - 1) chunk
  /// steps, fewer hand-offs where latency, not bandwidth, bounds the call. 0: always the ring.
  std::size_t doubling_max_bytes = std::size_t{64} << 10;
  /// The processes the ranks span.
  process_options across;
};

/// Which collective of a group a call is: every rank makes the same calls in the same order.
struct call_id {
  uint64_t step = 0;
  uint32_t bucket = 0;
};

/// A collective started without waiting (ring_group::start_all_reduce); get() waits for it.
class pending_result {
 public:
  pending_result(pending_result&&) noexcept;
  pending_result& operator=(pending_result&&) noexcept;
  /// Dropping a call unwaited drives it to its end first (the other ranks need this one's part);
  /// its result is discarded.
  ~pending_result();
  /// The result, waiting for it; once only (a second call is invalid_argument).
  expected<tensor> get();

  /// The call behind it (actors/collective_ring.cpp).
  struct impl;

 private:
  friend class ring_group;
  explicit pending_result(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

class ring_group {
 public:
  /// Makes this process's rank actors (after joining the others); invalid_argument for
  /// fewer than one rank, a timeout of 0, or processes that do not divide the ranks; the joining's
  /// error naming the process or address that failed.
  static expected<ring_group> start(runtime& rt, ring_options options);
  ring_group(ring_group&&) noexcept;
  ring_group& operator=(ring_group&&) noexcept;
  /// Stops the ring; calls still waiting fail as cancelled.
  ~ring_group();

  /// The element-wise sum over every rank's `value` (f32, f64, bf16, i32 or i64; bf16 adds in f32 and rounds each partial sum; the same shape and dtype
  /// on every rank) for rank `rank`. Blocks the calling thread until the ring is done; each rank
  /// calls from its own thread. A `value` handed over with std::move whose storage nothing else
  /// holds is summed in place and comes back as the result (a fresh gradient: no copy); any other
  /// is copied first and left as it was. An error as described above, or invalid_argument for a
  /// rank outside the ring (or not this process's) or an unsupported dtype.
  expected<tensor> all_reduce(int rank, call_id id, tensor value) const;
  /// all_reduce without waiting, for a replica that sums one bucket of gradients while it computes
  /// the next: the call is made at once (its first chunks are sent), get() waits for its result. A
  /// rank's calls run in the order it makes them, started or blocking alike.
  pending_result start_all_reduce(int rank, call_id id, tensor value) const;
  /// Handles what has arrived for `rank` without waiting: its started calls move on between a
  /// replica's kernels. Nothing when another thread is driving the rank.
  void progress(int rank) const;
  /// Every rank's `value` (the same shape and dtype on each, any numeric dtype), stacked in rank
  /// order along a new first dimension: [ranks, ...value's dims], for rank `rank`.
  expected<tensor> all_gather(int rank, call_id id, const tensor& value) const;
  /// The root's `value` on every rank (each passes a tensor of the root's shape and dtype; only the
  /// root's values are read), passed round the ring in chunks. The root returns when its chunks
  /// have come back round, so it never runs calls ahead of the others.
  expected<tensor> broadcast(int rank, int root, call_id id, tensor value) const;

  /// Every rank of the ring, in all processes.
  int ranks() const noexcept;
  /// The ranks this process owns: [first_local_rank(), first_local_rank() + local_ranks()).
  int first_local_rank() const noexcept;
  int local_ranks() const noexcept;
  /// How this process reaches process p: "shared memory", "tcp", or "in process" for itself.
  std::string transport_to(int process) const;

 private:
  error check_rank(const char* what, int rank, const tensor& value) const;
  struct impl;
  explicit ring_group(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::collectives
