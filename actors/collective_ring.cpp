// The ring all-reduce of actors/collectives.hpp: one rank actor per replica (a rank_endpoint,
// driven by the replica's thread), each sending to its right neighbour. A call of N ranks splits
// the tensor into N chunks and takes 2(N-1) rounds: reduce-scatter (in round k rank r sends chunk
// r-k and adds chunk r-k-1 from its left into its own buffer, so that after N-1 rounds it holds
// the sum of chunk r+1) then all-gather (the summed chunks go round once more and are copied in
// place). all_gather is that second half on every rank's slot; broadcast passes the root's chunks
// round the ring and back to the root.
//
// Chunks are views of the sender's buffer. A view is read by the receiver before the sender can
// write that chunk again: a rank writes a chunk only on receiving a message that the ring could
// send only after its right neighbour had consumed the earlier one.

#include "actors/collectives.hpp"

#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/others.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "actors/collective_link.hpp"
#include "actors/message_types.hpp"
#include "actors/runtime.hpp"
#include "actors/spin_wait.hpp"

namespace af::collectives {

namespace {

using chunk_atom = caf::atom_constant<caf::atom("af_chunk")>;
using abort_atom = caf::atom_constant<caf::atom("af_abort")>;
using expire_atom = caf::atom_constant<caf::atom("af_expire")>;
using left_atom = caf::atom_constant<caf::atom("af_left")>;

// How many calls each rank has made, for naming the ranks a timed-out call still waits for.
struct arrivals {
  std::mutex mtx;
  std::vector<uint64_t> calls;
  std::vector<uint64_t> finished;  // calls each rank of this process has finished

  void done(int rank) {
    std::lock_guard<std::mutex> guard{mtx};
    ++finished[static_cast<std::size_t>(rank)];
  }
  // The fewest calls any of [first, first + count) finished: what this process tells the others it
  // completed when it leaves.
  uint64_t fewest_finished(int first, int count) {
    std::lock_guard<std::mutex> guard{mtx};
    uint64_t out = UINT64_MAX;
    for (int r = first; r < first + count; ++r) out = std::min(out, finished[static_cast<std::size_t>(r)]);
    return out;
  }

  void arrived(int rank) {
    std::lock_guard<std::mutex> guard{mtx};
    ++calls[static_cast<std::size_t>(rank)];
  }
  // A rank in another process has started call `seq` (a chunk of it came from there).
  void heard(int rank, uint64_t seq) {
    std::lock_guard<std::mutex> guard{mtx};
    auto& c = calls[static_cast<std::size_t>(rank)];
    c = std::max(c, seq + 1);
  }
  // The ranks whose calls this process can see: its own, and those in other processes that send
  // to them (left neighbours, doubling partners). Empty: every rank (one process).
  std::vector<bool> visible;

  std::string missing(uint64_t seq) {
    std::lock_guard<std::mutex> guard{mtx};
    std::string out;
    for (std::size_t r = 0; r < calls.size(); ++r)
      if (calls[r] <= seq && (visible.empty() || visible[r])) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
  }
};

// all_reduce_doubling: a small all-reduce by recursive doubling (every rank chooses it alike from the
// call's size, so ranks that disagree on the size fail as for any other mismatch).
enum class op_kind : int32_t { all_reduce = 0, all_gather = 1, broadcast = 2, all_reduce_doubling = 3 };

// What every rank's call must agree on: the operation (and its root), the call's id, dtype and size.
struct call_spec {
  op_kind kind = op_kind::all_reduce;
  int root = 0;
  call_id id;
  dtype type = dtype::f32;
  int64_t numel = 0;  // of one rank's input

  static call_spec from(int32_t kind, int32_t root, uint64_t step, uint32_t bucket, int32_t type, int64_t numel) {
    return {static_cast<op_kind>(kind), root, {step, bucket}, static_cast<dtype>(type), numel};
  }
  bool operator==(const call_spec& o) const {
    return kind == o.kind && root == o.root && id.step == o.id.step && id.bucket == o.id.bucket && type == o.type && numel == o.numel;
  }
};

std::string describe(call_id id) { return "(step " + std::to_string(id.step) + ", bucket " + std::to_string(id.bucket) + ")"; }

std::string describe(const call_spec& c) {
  static const char* names[] = {"all_reduce", "all_gather", "broadcast", "all_reduce"};
  std::string out = names[static_cast<int>(c.kind)];
  if (c.kind == op_kind::broadcast) out += " from rank " + std::to_string(c.root);
  out += " " + describe(c.id) + " of " + std::string{to_string(c.type)} + "[" + std::to_string(c.numel) + "]";
  return c.kind == op_kind::all_reduce_doubling ? out + " by recursive doubling" : out;
}

// One chunk from the left neighbour.
struct chunk_message {
  uint64_t seq = 0;
  call_spec spec;
  int round = 0;
  tensor data;
};

// What a call came to: set once, by the rank's driver (under its mutex).
struct call_outcome {
  std::optional<expected<tensor>> value;
};

struct running_call {
  uint64_t seq = 0;
  call_spec spec;
  tensor buffer;     // 1-D, contiguous, this rank's own
  af::shape result;  // the dims the buffer is answered as
  int received = 0;  // chunks applied so far (recursive doubling: rounds done)
  std::shared_ptr<call_outcome> answer;
  std::chrono::steady_clock::time_point started;
  std::map<int, chunk_message> ahead;  // recursive doubling: partners' buffers for later rounds
};

// This process's links to the others of a ring spanning processes.
struct remote_links {
  mesh::group_shape group;
  std::vector<std::shared_ptr<mesh::link>> links;  // by process; null for this one

  mesh::link& to(int rank) const { return *links[static_cast<std::size_t>(group.process_of(rank))]; }
};

struct rank_state {
  int rank = 0, ranks = 1;
  std::shared_ptr<const remote_links> remote;  // null: every rank is in this process
  std::string name;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<arrivals> arrived;
  caf::actor me;                  // this rank's actor
  std::vector<caf::actor> peers;  // every rank of this process, by rank (others' are null)
  uint64_t next_seq = 0;                        // calls this rank has started
  std::optional<running_call> current;
  // Calls made while another runs (a replica starts a bucket's all-reduce before the previous
  // bucket's is done): they start in order as the running one finishes.
  std::deque<std::pair<running_call, tensor>> queued;
  std::map<uint64_t, std::vector<chunk_message>> early;  // chunks of calls this rank has not started
  std::optional<error> failed;                  // once failed, every later call fails alike
  // Another process left after finishing this many calls: calls from there on cannot complete.
  uint64_t others_left_after = UINT64_MAX;
  std::string who_left;
  // One timer at a time: CAF 0.17 cannot cancel a delayed message, so a timer per call would pile
  // up (a call rate times the timeout); the one timer re-arms for what the running call has left.
  bool timer_armed = false;
};

// [begin, end) of chunk c of n elements split over `parts`.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int c) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = c * base + std::min<int64_t>(c, extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

int wrap(int i, int n) { return ((i % n) + n) % n; }

template <class T>
void add_into(tensor& buffer, int64_t begin, const tensor& chunk) {
  T* out = buffer.data<T>() + begin;
  const T* in = chunk.data<T>();
  for (int64_t i = 0, n = chunk.numel(); i < n; ++i) out[i] += in[i];
}

// bfloat16 sums: each addition in f32, rounded back to bf16 (as a bf16 ring stores its partial sums).
void add_into_bf16(tensor& buffer, int64_t begin, const tensor& chunk) {
  bfloat16* out = buffer.data<bfloat16>() + begin;
  const bfloat16* in = chunk.data<bfloat16>();
  for (int64_t i = 0, n = chunk.numel(); i < n; ++i) out[i] = bfloat16{static_cast<float>(out[i]) + static_cast<float>(in[i])};
}

void add_chunk(tensor& buffer, int64_t begin, const tensor& chunk) {
  switch (buffer.type()) {
    case dtype::bf16: return add_into_bf16(buffer, begin, chunk);
    case dtype::f32: return add_into<float>(buffer, begin, chunk);
    case dtype::f64: return add_into<double>(buffer, begin, chunk);
    case dtype::i32: return add_into<int32_t>(buffer, begin, chunk);
    case dtype::i64: return add_into<int64_t>(buffer, begin, chunk);
    default: return;
  }
}

void copy_chunk(tensor& buffer, int64_t begin, const tensor& chunk) {
  if (chunk.numel() > 0)
    std::memcpy(static_cast<std::byte*>(buffer.raw_data()) + begin * static_cast<int64_t>(size_of(buffer.type())), chunk.raw_data(),
                chunk.nbytes());
}

// The chunks a call's buffer is cut into: one per rank (for all_gather, each rank's slot).
tensor chunk_view(const running_call& call, int ranks, int chunk) {
  const auto [begin, end] = chunk_range(call.buffer.numel(), ranks, chunk);
  return call.buffer.slice(0, begin, end).value();
}

bool is_local(const rank_state& s, int rank) { return !s.remote || s.remote->group.local(rank); }

void fail_all(rank_state& s, const error& why, bool tell_ring);

// A link to another process failed under this rank: every rank of this process fails alike (the
// link's reader tells them too when the peer is gone; a stalled peer only this way).
void link_failed(rank_state& s, const error& why) {
  fail_all(s, why, false);
  for (const auto& peer : s.peers)
    if (peer && peer != s.me) caf::anon_send(peer, abort_atom::value, static_cast<int32_t>(why.code), why.message);
}

// A chunk for rank `to`: a message to its actor in this process, or its bytes written into the
// link to its process, whose reader there turns them back into this message.
void send_chunk(rank_state& s, int to, const running_call& call, int round, tensor data) {
  const auto& c = call.spec;
  if (is_local(s, to)) {
    caf::anon_send(s.peers[static_cast<std::size_t>(to)], chunk_atom::value, call.seq, c.id.step, c.id.bucket, static_cast<int32_t>(c.kind),
               c.root, static_cast<int32_t>(c.type), c.numel, static_cast<int32_t>(round), std::move(data));
    return;
  }
  mesh::wire_header h;
  h.magic = mesh::wire_magic, h.version = mesh::wire_version, h.type = static_cast<uint16_t>(mesh::message_type::chunk);
  h.to_rank = to, h.from_rank = s.rank, h.seq = call.seq, h.step = c.id.step, h.bucket = c.id.bucket;
  h.kind = static_cast<int32_t>(c.kind), h.root = c.root, h.dtype = static_cast<int32_t>(c.type), h.numel = c.numel, h.round = round;
  h.payload_bytes = data.nbytes();
  if (auto sent = s.remote->to(to).write(h, data.raw_data()); !sent)
    link_failed(s, with_context(sent.error_value(), s.name + " call #" + std::to_string(call.seq) + " " + describe(c.id) + ": rank " +
                                                           std::to_string(s.rank) + " sending to rank " + std::to_string(to)));
}

void send_abort(rank_state& s, int to, const error& why) {
  if (is_local(s, to)) {
    caf::anon_send(s.peers[static_cast<std::size_t>(to)], abort_atom::value, static_cast<int32_t>(why.code), why.message);
    return;
  }
  const std::string text = why.message.substr(0, mesh::max_abort_text);
  mesh::wire_header h;
  h.magic = mesh::wire_magic, h.version = mesh::wire_version, h.type = static_cast<uint16_t>(mesh::message_type::abort);
  h.to_rank = to, h.from_rank = s.rank, h.code = static_cast<int32_t>(why.code), h.payload_bytes = text.size();
  (void)s.remote->to(to).write(h, text.data());  // a broken link: its reader tells that side
}

int right_of(const rank_state& s) { return (s.rank + 1) % s.ranks; }

void send(rank_state& s, const running_call& call, int round, tensor data) {
  send_chunk(s, right_of(s), call, round, std::move(data));
}

// Which chunk a rank sends in a round. all_reduce: reduce-scatter rounds 0..n-2 send chunk r-k,
// all-gather rounds n-1.. send chunk r+1-k'. all_gather: chunk (slot) r-k. broadcast: chunk k.
int chunk_sent(op_kind kind, int rank, int ranks, int round) {
  switch (kind) {
    case op_kind::all_reduce:
      return round < ranks - 1 ? wrap(rank - round, ranks) : wrap(rank + 1 - (round - (ranks - 1)), ranks);
    case op_kind::all_gather: return wrap(rank - round, ranks);
    case op_kind::broadcast: return round;
    case op_kind::all_reduce_doubling: return 0;  // the whole buffer (send_doubling)
  }
  return 0;
}

// Chunks a rank receives before its call is done.
int chunks_to_receive(const call_spec& c, int ranks) {
  switch (c.kind) {
    case op_kind::all_reduce: return 2 * (ranks - 1);
    case op_kind::all_gather: return ranks - 1;
    case op_kind::broadcast: return ranks;  // the root's come back round: every rank has them
    case op_kind::all_reduce_doubling: return 0;  // counted in rounds (apply_doubling)
  }
  return 0;
}

void fail_all(rank_state& s, const error& why, bool tell_ring) {
  if (s.failed) return;
  s.failed = why;
  if (s.current) {
    s.current->answer->value = expected<tensor>{why};
    s.current.reset();
  }
  for (auto& [call, value] : s.queued) call.answer->value = expected<tensor>{why};
  s.queued.clear();
  s.early.clear();
  if (tell_ring && s.ranks > 1) send_abort(s, right_of(s), why);
}

void begin_next(rank_state& s);

void finish(rank_state& s) {
  auto& call = *s.current;
  call.answer->value = call.buffer.reshape(call.result);
  s.arrived->done(s.rank);
  s.current.reset();
  begin_next(s);
}

// A call this rank cannot complete because a process it needs has left.
void fail_if_left(rank_state& s) {
  if (!s.current || s.current->seq < s.others_left_after) return;
  fail_all(s,
           error{errc::peer_down, s.name + " call #" + std::to_string(s.current->seq) + " " + describe(s.current->spec.id) + ": " +
                                      s.who_left + " left after finishing " + std::to_string(s.others_left_after) + " call(s)"},
           false);
}

void fail_mismatch(rank_state& s, const chunk_message& m, int sender) {
  const auto& call = *s.current;
  fail_all(s,
           error{errc::invalid_argument, s.name + " call #" + std::to_string(call.seq) + ": rank " + std::to_string(s.rank) +
                                             " called " + describe(call.spec) + ", rank " + std::to_string(sender) + " " +
                                             describe(m.spec) + ": every rank must make the same calls, in the same order, on the same shapes"},
           true);
}

// Recursive doubling over 2^k ranks: in round j each rank adds its partner's (rank xor 2^j) whole
// buffer into its own, so after k rounds every rank holds the sum. The partners of a round add the
// same two buffers (a + b is b + a, bit for bit), so every rank ends with the same bits. Buffers
// travel as copies: a rank adds into its own while its partner may not have read it yet.
void send_doubling(rank_state& s, const running_call& call, int round) {
  const int partner = s.rank ^ (1 << round);
  auto copy = call.buffer.clone();
  if (!copy) {  // the others would wait for this rank in vain: fail them all, naming why
    fail_all(s, with_context(copy.error_value(), s.name + " call #" + std::to_string(call.seq) + " on rank " +
                                                        std::to_string(s.rank)),
             true);
    return;
  }
  send_chunk(s, partner, call, round, std::move(*copy));
}

int doubling_rounds(int ranks) {
  int k = 0;
  while ((1 << k) < ranks) ++k;
  return k;
}

void apply_doubling(rank_state& s, chunk_message&& m) {
  auto& call = *s.current;
  if (m.round != call.received) {  // a partner of a later round is ahead of this one's
    call.ahead.emplace(m.round, std::move(m));
    return;
  }
  if (!(m.spec == call.spec)) return fail_mismatch(s, m, s.rank ^ (1 << m.round));
  add_chunk(call.buffer, 0, m.data);
  if (++call.received == doubling_rounds(s.ranks)) return finish(s);
  send_doubling(s, call, call.received);
  if (auto next = call.ahead.find(call.received); next != call.ahead.end()) {
    auto ready = std::move(next->second);
    call.ahead.erase(next);
    apply_doubling(s, std::move(ready));
  }
}

// Rounds of a call over n ranks, in which a rank receives one chunk each.
int rounds_of(op_kind kind, int n) {
  switch (kind) {
    case op_kind::all_reduce: return 2 * (n - 1);
    case op_kind::all_gather: return n - 1;
    case op_kind::broadcast: return n;
    case op_kind::all_reduce_doubling: return doubling_rounds(n);
  }
  return 0;
}

// A chunk whose round or length is not what the call's plan says (only bytes from another process
// can be: a rank here always sends what the plan says). Checked before anything is added or copied.
bool chunk_fits(const running_call& call, const chunk_message& m, int rank, int n) {
  const auto kind = call.spec.kind;
  if (m.round < 0 || m.round >= rounds_of(kind, n) || !m.data.is_contiguous()) return false;
  if (kind == op_kind::all_reduce_doubling) return m.data.numel() == call.buffer.numel();
  const int chunk = chunk_sent(kind, wrap(rank - 1, n), n, m.round);
  const auto [begin, end] = chunk_range(call.buffer.numel(), n, chunk);
  return m.data.numel() == end - begin;
}

void fail_misfit(rank_state& s, const chunk_message& m) {
  fail_all(s,
           error{errc::protocol_violation, s.name + " call #" + std::to_string(m.seq) + " " + describe(m.spec) + ": rank " + std::to_string(s.rank) +
                                               " got a chunk of " + std::to_string(m.data.numel()) + " elements for round " + std::to_string(m.round) +
                                               ", which the call's plan does not have"},
           true);
}

// Applies one chunk of the running call; a mismatch fails the whole ring.
void apply(rank_state& s, chunk_message&& m) {
  auto& call = *s.current;
  const int n = s.ranks;
  if (m.spec == call.spec && !chunk_fits(call, m, s.rank, n)) return fail_misfit(s, m);
  if (call.spec.kind == op_kind::all_reduce_doubling || m.spec.kind == op_kind::all_reduce_doubling) {
    if (m.round < 0 || m.round >= doubling_rounds(n)) return fail_misfit(s, m);  // before 1 << round
    if (call.spec.kind == m.spec.kind) return apply_doubling(s, std::move(m));
    // One rank chose doubling, its neighbour the ring: their sizes differ. Who sent it: the left
    // neighbour for a ring chunk, the round's partner for a doubling one.
    return fail_mismatch(s, m, m.spec.kind == op_kind::all_reduce_doubling ? s.rank ^ (1 << m.round) : wrap(s.rank - 1, n));
  }
  if (!(m.spec == call.spec)) {
    fail_all(s,
             error{errc::invalid_argument, s.name + " call #" + std::to_string(call.seq) + ": rank " + std::to_string(s.rank) +
                                               " called " + describe(call.spec) + ", rank " + std::to_string(wrap(s.rank - 1, n)) +
                                               " " + describe(m.spec) +
                                               ": every rank must make the same calls, in the same order, on the same shapes"},
             true);
    return;
  }
  // The chunk that arrives in round k is the one the left neighbour sent in round k.
  const int chunk = chunk_sent(call.spec.kind, wrap(s.rank - 1, n), n, m.round);
  const int64_t begin = chunk_range(call.buffer.numel(), n, chunk).first;
  const bool reducing = call.spec.kind == op_kind::all_reduce && m.round < n - 1;
  const bool own_chunk_back = call.spec.kind == op_kind::broadcast && s.rank == call.spec.root;
  if (reducing)
    add_chunk(call.buffer, begin, m.data);
  else if (!own_chunk_back)
    copy_chunk(call.buffer, begin, m.data);
  ++call.received;
  const bool last = call.received == chunks_to_receive(call.spec, n);
  switch (call.spec.kind) {
    case op_kind::all_reduce:
    case op_kind::all_gather:
      if (!last) send(s, call, m.round + 1, chunk_view(call, n, chunk_sent(call.spec.kind, s.rank, n, m.round + 1)));
      break;
    case op_kind::all_reduce_doubling: break;  // apply_doubling's
    case op_kind::broadcast:
      // Passed on as it came (a view of the root's buffer). The rank before the root passes it
      // back to the root, which is done when all have returned: it cannot run calls ahead of the
      // ring, and its result shares storage with no chunk still in flight.
      if (s.rank != call.spec.root) send(s, call, m.round, std::move(m.data));
      break;
  }
  if (last) finish(s);
}

// A rank's own buffer for a call: the caller's tensor itself when nothing else holds its storage
// (a gradient handed over with std::move), else a copy.
expected<tensor> own_buffer(tensor& value, int64_t numel) {
  if (value.is_unique() && value.is_contiguous() && value.offset() == 0) return value.reshape({numel});
  AF_TRY_ASSIGN(auto dense, value.contiguous());
  AF_TRY_ASSIGN(auto flat, dense.reshape({numel}));
  return flat.clone();
}

// Starts a call: this rank's buffer, and what it sends before it has received anything.
void start_call(rank_state& s, running_call&& call, tensor& value) {
  const int n = s.ranks;
  const auto& c = call.spec;
  error no_buffer;
  if (c.kind == op_kind::all_gather) {
    auto buffer = tensor::empty({c.numel * n}, c.type);
    auto dense = value.contiguous();
    if (buffer && dense) {
      call.buffer = std::move(*buffer);
      copy_chunk(call.buffer, c.numel * s.rank, dense->reshape({c.numel}).value());
    } else {
      no_buffer = buffer ? dense.error_value() : buffer.error_value();
    }
    af::shape dims{n};
    for (int64_t d : value.shape()) dims.push_back(d);
    call.result = dims;
  } else {
    call.result = value.shape();
    auto buffer = own_buffer(value, c.numel);
    if (buffer) call.buffer = std::move(*buffer);
    else no_buffer = buffer.error_value();
  }
  s.current = std::move(call);
  auto& running = *s.current;
  if (no_buffer)  // the others would wait for this rank in vain: fail them all, naming why
    return fail_all(s, with_context(no_buffer, s.name + " call #" + std::to_string(running.seq) + " on rank " + std::to_string(s.rank)),
                    true);
  if (n == 1) return finish(s);
  if (c.kind == op_kind::all_reduce_doubling)
    send_doubling(s, running, 0);
  else if (c.kind != op_kind::broadcast)
    send(s, running, 0, chunk_view(running, n, chunk_sent(c.kind, s.rank, n, 0)));
  else if (s.rank == c.root)
    for (int k = 0; k < n; ++k) send(s, running, k, chunk_view(running, n, k));
}

// Starts the oldest queued call, if none runs: its buffer, its first sends, its timer, and the
// chunks that came for it before it started.
void begin_next(rank_state& s) {
  auto& st = s;
  if (st.current || st.queued.empty() || st.failed) return;
  auto [call, value] = std::move(st.queued.front());
  st.queued.pop_front();
  const uint64_t seq = call.seq;
  call.started = std::chrono::steady_clock::now();
  start_call(s, std::move(call), value);  // may finish at once (one rank) and begin the next
  if (!st.current || st.current->seq != seq) return;
  if (seq >= st.others_left_after) return fail_if_left(s);
  if (!st.timer_armed) {
    st.timer_armed = true;
    caf::delayed_anon_send(st.me, st.timeout, expire_atom::value);
  }
  if (auto early = st.early.find(seq); early != st.early.end()) {
    auto chunks = std::move(early->second);
    st.early.erase(early);
    for (auto& m : chunks)
      if (st.current && st.current->seq == seq) apply(s, std::move(m));
  }
}

// A call this rank makes: queued behind the one it runs, if any; its outcome appears in the slot.
std::shared_ptr<call_outcome> contribute(rank_state& s, op_kind kind, int root, call_id id, tensor value) {
  auto answer = std::make_shared<call_outcome>();
  if (s.failed) {
    answer->value = expected<tensor>{*s.failed};
    return answer;
  }
  const uint64_t seq = s.next_seq++;
  s.arrived->arrived(s.rank);
  const auto spec = call_spec::from(static_cast<int32_t>(kind), root, id.step, id.bucket, static_cast<int32_t>(value.type()), value.numel());
  s.queued.emplace_back(running_call{seq, spec, {}, {}, 0, answer, std::chrono::steady_clock::now(), {}}, std::move(value));
  begin_next(s);
  return answer;
}

void on_chunk(rank_state& s, chunk_message&& m) {
  if (s.failed) return;
  if (s.current && s.current->seq == m.seq) return apply(s, std::move(m));
  // Every call needs every rank, so no rank gets more than a call ahead of this one's calls:
  // a chunk further ahead is a peer breaking the protocol, not one to keep.
  if (m.seq > s.next_seq + 1)
    return fail_all(s,
                    error{errc::protocol_violation, s.name + ": rank " + std::to_string(s.rank) + " got a chunk of call #" +
                                                        std::to_string(m.seq) + " after making " + std::to_string(s.next_seq) + " call(s)"},
                    true);
  if (!s.current || m.seq > s.current->seq) s.early[m.seq].push_back(std::move(m));  // a call not begun here yet
}

void on_left(rank_state& s, int32_t process, uint64_t finished) {
  if (finished < s.others_left_after) {
    s.others_left_after = finished;
    s.who_left = "process " + std::to_string(process);
  }
  fail_if_left(s);
}

void on_expire(rank_state& s) {
  s.timer_armed = false;
  if (!s.current) return;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - s.current->started);
  if (waited < s.timeout) {
    s.timer_armed = true;
    caf::delayed_anon_send(s.me, s.timeout - waited, expire_atom::value);
    return;
  }
  const uint64_t seq = s.current->seq;
  const std::string missing = s.arrived->missing(seq);
  fail_all(s,
           error{errc::timeout, s.name + " call #" + std::to_string(seq) + " " + describe(s.current->spec.id) + ": " +
                                    (missing.empty() ? std::string{s.remote ? "every rank this process hears from called; the "
                                                                              "ring stalled beyond them"
                                                                            : "every rank called, but the ring stalled"}
                                                     : "rank(s) " + missing + " did not arrive") +
                                    " within " + std::to_string(s.timeout.count()) + " ms"},
           true);
}

/// One rank of this process: an actor without a thread of its own (a caf::scoped_actor), whose
/// mailbox receives its neighbours' chunks and which the thread calling on that rank drives: a
/// call sends what it can at once, and waiting for its result handles the mailbox's messages. A
/// rank thereby runs on the replica's own thread, which would otherwise sleep while the ring
/// works: every hand-off to a rank actor on another thread cost a wake-up (20-40 us on these
/// virtual machines), several per step, which was most of what 2 replicas of a 1 ms step lost.
struct rank_endpoint {
  std::mutex mtx;  // one caller drives the rank at a time
  std::unique_ptr<caf::scoped_actor> actor;
  rank_state state;
  std::chrono::microseconds spin{0};  // polling before a wait sleeps (0: none)

  /// Handles the mailbox's messages until `done` (under mtx): polling `spin` first, then asleep.
  /// The call's timer message ends a wait for ranks that never come.
  void drive_until(const call_outcome& done) {
    auto& self = **actor;
    while (!done.value) {
      if (spin.count() > 0 && self.mailbox().empty())
        detail::spin_briefly(spin, [&] { return !self.mailbox().empty(); });
      handle_one();
    }
  }

  /// Handles what has arrived, without waiting (under mtx).
  void drive_arrived() {
    while (!(**actor).mailbox().empty()) handle_one();
  }

 private:
  // Handles the next message, waiting for one.
  void handle_one() {
    (**actor).receive(
        [&](chunk_atom, uint64_t seq, uint64_t step, uint32_t bucket, int32_t kind, int32_t root, int32_t type, int64_t numel, int32_t round,
            tensor& data) {
          on_chunk(state, chunk_message{seq, call_spec::from(kind, root, step, bucket, type, numel), round, std::move(data)});
        },
        [&](left_atom, int32_t process, uint64_t finished) { on_left(state, process, finished); },
        // The error goes once round the ring: the rank that raised it already failed.
        [&](abort_atom, int32_t code, const std::string& why) {
          fail_all(state, error{static_cast<errc>(code), why}, !state.failed.has_value());
        },
        [&](expire_atom) { on_expire(state); },
        // Nothing else is sent to a rank; anything else is dropped rather than kept forever.
        caf::others >> [](caf::message_view&) -> caf::result<caf::message> { return caf::message{}; });
  }
};

// A link's reader: every message from that process becomes the message to the rank it names
// here; a link that breaks (the process died, or sent bytes that are not a collective's) fails
// every rank here, naming the process.
void read_link(std::shared_ptr<const remote_links> remote, int process, std::vector<caf::actor> peers, std::shared_ptr<arrivals> arrived,
               std::string name, uint64_t max_message_bytes) {
  auto& link = *remote->links[static_cast<std::size_t>(process)];
  auto fail_every_rank = [&](const error& why) {
    const auto named = with_context(why, name + ": the link from process " + std::to_string(process));
    for (const auto& rank : peers)
      if (rank) caf::anon_send(rank, abort_atom::value, static_cast<int32_t>(named.code), named.message);
  };
  for (;;) {
    auto header = mesh::read_header(link, remote->group, max_message_bytes);
    if (!header) {
      if (header.error_value().code != errc::cancelled) fail_every_rank(header.error_value());
      return;
    }
    const auto& h = *header;
    const auto& to = peers[static_cast<std::size_t>(h.to_rank)];
    if (h.type == static_cast<uint16_t>(mesh::message_type::bye)) {
      // That process left in order, having finished h.seq calls: those completed here too (it had
      // sent its part of them); later ones cannot, and fail at once. Its end of file is no error.
      for (const auto& rank : peers)
        if (rank) caf::anon_send(rank, left_atom::value, static_cast<int32_t>(process), h.seq);
      return;
    }
    if (h.type == static_cast<uint16_t>(mesh::message_type::abort)) {
      std::string text(h.payload_bytes, '\0');
      if (auto got = link.read(text.data(), text.size()); !got) {
        if (got.error_value().code != errc::cancelled) fail_every_rank(got.error_value());
        return;
      }
      const bool known = h.code > 0 && h.code <= static_cast<int32_t>(errc::failed_precondition);
      caf::anon_send(to, abort_atom::value, known ? h.code : static_cast<int32_t>(errc::internal), text);
      continue;
    }
    const auto type = static_cast<dtype>(h.dtype);
    auto chunk = tensor::empty({static_cast<int64_t>(h.payload_bytes / size_of(type))}, type);
    if (!chunk) return fail_every_rank(chunk.error_value());  // its bytes cannot be skipped unread: the link is done
    if (h.payload_bytes > 0)
      if (auto got = link.read(chunk->raw_data(), h.payload_bytes); !got) {
        if (got.error_value().code != errc::cancelled) fail_every_rank(got.error_value());
        return;
      }
    arrived->heard(h.from_rank, h.seq);
    caf::anon_send(to, chunk_atom::value, h.seq, h.step, h.bucket, h.kind, h.root, h.dtype, h.numel, h.round, std::move(*chunk));
  }
}

expected<std::pair<std::string, uint16_t>> parse_address(const std::string& name, const std::string& address) {
  const auto colon = address.rfind(':');
  const std::string port_text = colon == std::string::npos ? "" : address.substr(colon + 1);
  char* end = nullptr;
  const long port = port_text.empty() ? 0 : std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 1 || port > 65535)
    return make_error(errc::invalid_argument, name + ": rendezvous '" + address + "' is not host:port with a port from 1 to 65535");
  return std::pair<std::string, uint16_t>{address.substr(0, colon), static_cast<uint16_t>(port)};
}

}  // namespace

struct ring_group::impl {
  caf::actor_system* sys = nullptr;
  int ranks = 0, first_local = 0;
  std::vector<std::shared_ptr<rank_endpoint>> local;  // this process's ranks, from first_local on
  std::shared_ptr<remote_links> remote;
  std::shared_ptr<arrivals> arrived;
  std::vector<std::thread> readers;
  std::size_t doubling_max_bytes = 0;  // 0: never (the ranks are not a power of two)

  rank_endpoint& endpoint(int rank) const { return *local[static_cast<std::size_t>(rank - first_local)]; }

  ~impl() {
    // A call still waiting on another thread fails rather than waiting for the timeout.
    for (const auto& rank : local)
      caf::anon_send(rank->state.me, abort_atom::value, static_cast<int32_t>(errc::cancelled), std::string{"the ring stopped"});
    if (!remote) return;
    // Every message this process owed the others is written. It says goodbye with the calls it
    // finished, so that the others tell a process that left from one that died (an end of file
    // without it), and fail only the calls that needed it.
    mesh::wire_header bye;
    bye.magic = mesh::wire_magic, bye.version = mesh::wire_version, bye.type = static_cast<uint16_t>(mesh::message_type::bye);
    bye.from_rank = first_local;
    bye.seq = arrived->fewest_finished(first_local, static_cast<int>(local.size()));
    for (auto& l : remote->links) {
      if (!l) continue;
      bye.to_rank = l->peer_process * remote->group.ranks_per_process();
      l->shorten_stall(std::chrono::milliseconds{1000});  // a peer that no longer reads must not hold this one up
      (void)l->write(bye, nullptr);
      l->close_writing();
      l->stop_reading();
    }
    for (auto& t : readers) t.join();
  }
};

expected<ring_group> ring_group::start(runtime& rt, ring_options options) {
  if (options.ranks < 1) return make_error(errc::invalid_argument, options.name + ": a ring needs at least one rank");
  if (options.timeout.count() <= 0) return make_error(errc::invalid_argument, options.name + ": the timeout must be positive");
  auto& across = options.across;
  if (across.processes < 1 || across.process < 0 || across.process >= across.processes || options.ranks % across.processes != 0)
    return make_error(errc::invalid_argument, options.name + ": process " + std::to_string(across.process) + " of " +
                                                  std::to_string(across.processes) + " cannot own an equal share of " + std::to_string(options.ranks) +
                                                  " ranks");
  auto state = std::make_unique<impl>();
  state->sys = &rt.system();
  state->ranks = options.ranks;
  const int per_process = options.ranks / across.processes;
  state->first_local = across.process * per_process;
  if (across.processes > 1) {
    if (across.token.empty())
      if (const char* env = std::getenv("AF_COLLECTIVE_TOKEN")) across.token = env;
    if (across.token.empty())
      return make_error(errc::invalid_argument, options.name + ": a ring across processes needs a shared token (process_options::token or AF_COLLECTIVE_TOKEN)");
    AF_TRY_ASSIGN(auto address, parse_address(options.name, across.rendezvous));
    mesh::mesh_options mesh;
    mesh.group = {options.ranks, across.processes, across.process};
    mesh.name = options.name, mesh.token = across.token;
    mesh.rendezvous_host = address.first, mesh.rendezvous_port = address.second, mesh.bind_host = across.bind_host;
    mesh.transport = static_cast<mesh::transport_choice>(across.transport);
    mesh.shared_memory_bytes = across.shared_memory_bytes;
    mesh.connect_timeout = across.connect_timeout, mesh.stall_timeout = options.timeout;
    std::atomic<bool> never{false};
    AF_TRY_ASSIGN(auto links, mesh::connect(mesh, never));
    state->remote = std::make_shared<remote_links>();
    state->remote->group = mesh.group;
    for (auto& l : links) state->remote->links.emplace_back(std::move(l));
  }
  auto arrived = std::make_shared<arrivals>();
  arrived->calls.assign(static_cast<std::size_t>(options.ranks), 0);
  arrived->finished.assign(static_cast<std::size_t>(options.ranks), 0);
  if (state->remote) {
    arrived->visible.assign(static_cast<std::size_t>(options.ranks), false);
    const bool power_of_two = (options.ranks & (options.ranks - 1)) == 0;
    for (int r = state->first_local; r < state->first_local + per_process; ++r) {
      arrived->visible[static_cast<std::size_t>(r)] = true;
      arrived->visible[static_cast<std::size_t>((r + options.ranks - 1) % options.ranks)] = true;
      for (int bit = 1; power_of_two && bit < options.ranks; bit <<= 1) arrived->visible[static_cast<std::size_t>(r ^ bit)] = true;
    }
  }
  state->arrived = arrived;
  std::vector<caf::actor> peers(static_cast<std::size_t>(options.ranks));
  // Each rank polls before it sleeps only while the ranks here are no more than the cores, so
  // that a polling rank never holds a core another rank here needs.
  const bool poll = per_process <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int r = state->first_local; r < state->first_local + per_process; ++r) {
    auto rank = std::make_shared<rank_endpoint>();
    rank->actor = std::make_unique<caf::scoped_actor>(*state->sys);
    auto& st = rank->state;
    st.me = caf::actor_cast<caf::actor>(*rank->actor);
    st.rank = r, st.ranks = options.ranks, st.name = options.name, st.timeout = options.timeout, st.arrived = arrived;
    st.remote = state->remote;
    rank->spin = poll ? std::chrono::microseconds{100} : std::chrono::microseconds{0};
    peers[static_cast<std::size_t>(r)] = st.me;
    state->local.push_back(std::move(rank));
  }
  for (const auto& rank : state->local) rank->state.peers = peers;
  if (state->remote)
    for (int p = 0; p < across.processes; ++p)
      if (p != across.process)
        state->readers.emplace_back(read_link, std::shared_ptr<const remote_links>{state->remote}, p, peers, arrived, options.name,
                                    across.max_message_bytes);
  const bool power_of_two = (options.ranks & (options.ranks - 1)) == 0;
  state->doubling_max_bytes = power_of_two && options.ranks > 1 ? options.doubling_max_bytes : 0;
  return ring_group{std::move(state)};
}

ring_group::ring_group(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
ring_group::ring_group(ring_group&&) noexcept = default;
ring_group& ring_group::operator=(ring_group&&) noexcept = default;
ring_group::~ring_group() = default;

int ring_group::ranks() const noexcept { return impl_->ranks; }
int ring_group::first_local_rank() const noexcept { return impl_->first_local; }
int ring_group::local_ranks() const noexcept { return static_cast<int>(impl_->local.size()); }

std::string ring_group::transport_to(int process) const {
  if (!impl_->remote) return process == 0 ? "in process" : "no such process";
  const auto& links = impl_->remote->links;
  if (process < 0 || process >= static_cast<int>(links.size())) return "no such process";
  return links[static_cast<std::size_t>(process)] ? links[static_cast<std::size_t>(process)]->transport() : "in process";
}

struct pending_result::impl {
  std::optional<error> refused;  // the call was not made
  std::shared_ptr<rank_endpoint> rank;
  std::shared_ptr<call_outcome> answer;  // null once taken
};

pending_result::pending_result(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
pending_result::pending_result(pending_result&&) noexcept = default;
pending_result& pending_result::operator=(pending_result&&) noexcept = default;

// The other ranks need this one's part of the call: it is driven to its end, its result dropped.
pending_result::~pending_result() {
  if (!impl_ || !impl_->answer || impl_->answer->value) return;
  std::lock_guard<std::mutex> guard{impl_->rank->mtx};
  impl_->rank->drive_until(*impl_->answer);
}

expected<tensor> pending_result::get() {
  if (impl_->refused) return *impl_->refused;
  if (!impl_->answer) return make_error(errc::invalid_argument, "collective: its result was taken already");
  {
    std::lock_guard<std::mutex> guard{impl_->rank->mtx};
    impl_->rank->drive_until(*impl_->answer);
  }
  auto out = std::move(*impl_->answer->value);
  impl_->answer.reset();
  return out;
}

namespace {

std::shared_ptr<call_outcome> start_call_on(rank_endpoint& rank, op_kind kind, int root, call_id id, tensor value) {
  std::lock_guard<std::mutex> guard{rank.mtx};
  return contribute(rank.state, kind, root, id, std::move(value));
}

expected<tensor> call_rank(rank_endpoint& rank, op_kind kind, int root, call_id id, tensor value) {
  std::lock_guard<std::mutex> guard{rank.mtx};
  auto answer = contribute(rank.state, kind, root, id, std::move(value));
  rank.drive_until(*answer);
  return std::move(*answer->value);
}

}  // namespace

error ring_group::check_rank(const char* what, int rank, const tensor& value) const {
  if (rank < 0 || rank >= ranks())
    return error{errc::invalid_argument, std::string{what} + ": rank " + std::to_string(rank) + " is outside the ring of " +
                                             std::to_string(ranks())};
  if (rank < first_local_rank() || rank >= first_local_rank() + local_ranks())
    return error{errc::invalid_argument, std::string{what} + ": rank " + std::to_string(rank) + " lives in another process (this one has ranks " +
                                             std::to_string(first_local_rank()) + " to " + std::to_string(first_local_rank() + local_ranks() - 1) + ")"};
  if (!value.defined() || value.type() == dtype::string)
    return error{errc::invalid_argument, std::string{what} + ": a defined tensor of numbers is needed"};
  return {};
}

void ring_group::progress(int rank) const {
  if (rank < first_local_rank() || rank >= first_local_rank() + local_ranks()) return;
  auto& endpoint = impl_->endpoint(rank);
  std::unique_lock<std::mutex> lock{endpoint.mtx, std::try_to_lock};
  if (lock) endpoint.drive_arrived();
}

expected<tensor> ring_group::all_reduce(int rank, call_id id, tensor value) const {
  return start_all_reduce(rank, id, std::move(value)).get();
}

pending_result ring_group::start_all_reduce(int rank, call_id id, tensor value) const {
  auto p = std::make_unique<pending_result::impl>();
  if (auto bad = check_rank("all_reduce", rank, value)) {
    p->refused = bad;
    return pending_result{std::move(p)};
  }
  const dtype t = value.type();
  if (t != dtype::f32 && t != dtype::f64 && t != dtype::bf16 && t != dtype::i32 && t != dtype::i64) {
    p->refused = error{errc::invalid_argument, "all_reduce: " + std::string{to_string(t)} + " is not summed (f32, f64, bf16, i32, i64)"};
    return pending_result{std::move(p)};
  }
  const op_kind kind =
      impl_->doubling_max_bytes > 0 && value.nbytes() <= impl_->doubling_max_bytes ? op_kind::all_reduce_doubling : op_kind::all_reduce;
  p->rank = impl_->local[static_cast<std::size_t>(rank - impl_->first_local)];
  p->answer = start_call_on(*p->rank, kind, 0, id, std::move(value));
  return pending_result{std::move(p)};
}

expected<tensor> ring_group::all_gather(int rank, call_id id, const tensor& value) const {
  if (auto bad = check_rank("all_gather", rank, value)) return bad;
  return call_rank(impl_->endpoint(rank), op_kind::all_gather, 0, id, value);
}

expected<tensor> ring_group::broadcast(int rank, int root, call_id id, tensor value) const {
  if (auto bad = check_rank("broadcast", rank, value)) return bad;
  if (root < 0 || root >= ranks())
    return make_error(errc::invalid_argument, "broadcast: root " + std::to_string(root) + " is outside the ring of " + std::to_string(ranks()));
  return call_rank(impl_->endpoint(rank), op_kind::broadcast, root, id, std::move(value));
}

}  // namespace af::collectives
