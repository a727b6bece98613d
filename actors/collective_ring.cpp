// The ring all-reduce of actors/collectives.hpp: one rank actor per replica, each sending to its
// right neighbour. A call of N ranks splits the tensor into N chunks and takes 2(N-1) rounds:
// reduce-scatter (in round k rank r sends chunk r-k and adds chunk r-k-1 from its left into its
// own buffer, so that after N-1 rounds it holds the sum of chunk r+1) then all-gather (the summed
// chunks go round once more and are copied in place).
//
// Chunks are views of the sender's buffer. A view is read by the receiver before the sender can
// write that chunk again: a rank writes a chunk only on receiving a message that the ring could
// send only after its right neighbour had consumed the earlier one.

#include "actors/collectives.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/resume_ordered.hpp"
#include "actors/runtime.hpp"

namespace af::collectives {

namespace {

using contribute_atom = caf::atom_constant<caf::atom("af_contrib")>;
using neighbour_atom = caf::atom_constant<caf::atom("af_neighb")>;
using chunk_atom = caf::atom_constant<caf::atom("af_chunk")>;
using abort_atom = caf::atom_constant<caf::atom("af_abort")>;
using expire_atom = caf::atom_constant<caf::atom("af_expire")>;

// How many calls each rank has made, for naming the ranks a timed-out call still waits for.
struct arrivals {
  std::mutex mtx;
  std::vector<uint64_t> calls;

  void arrived(int rank) {
    std::lock_guard<std::mutex> guard{mtx};
    ++calls[static_cast<std::size_t>(rank)];
  }
  std::string missing(uint64_t seq) {
    std::lock_guard<std::mutex> guard{mtx};
    std::string out;
    for (std::size_t r = 0; r < calls.size(); ++r)
      if (calls[r] <= seq) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
  }
};

std::string describe(call_id id) { return "(step " + std::to_string(id.step) + ", bucket " + std::to_string(id.bucket) + ")"; }

// One chunk from the left neighbour: which call, which round and chunk, what the call is.
struct chunk_message {
  uint64_t seq = 0;
  call_id id;
  dtype type = dtype::f32;
  int64_t numel = 0;
  int round = 0;
  tensor data;
};

struct running_call {
  uint64_t seq = 0;
  call_id id;
  tensor buffer;  // 1-D, contiguous, this rank's own
  int round = 0;  // the next round whose chunk this rank expects
  caf::response_promise answer;
};

struct rank_state {
  int rank = 0, ranks = 1;
  std::string name;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<arrivals> arrived;
  caf::actor right;
  uint64_t next_seq = 0;                        // calls this rank has started
  std::optional<running_call> current;
  std::map<uint64_t, std::vector<chunk_message>> early;  // chunks of calls this rank has not started
  std::optional<error> failed;                  // once failed, every later call fails alike
};

using rank_actor = detail::resume_ordered<caf::stateful_actor<rank_state>>;

// [begin, end) of chunk c of n elements split over `ranks`.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int ranks, int c) {
  const int64_t base = n / ranks, extra = n % ranks;
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

void add_chunk(tensor& buffer, int64_t begin, const tensor& chunk) {
  switch (buffer.type()) {
    case dtype::f32: return add_into<float>(buffer, begin, chunk);
    case dtype::f64: return add_into<double>(buffer, begin, chunk);
    case dtype::i32: return add_into<int32_t>(buffer, begin, chunk);
    case dtype::i64: return add_into<int64_t>(buffer, begin, chunk);
    default: return;
  }
}

void send_chunk(rank_actor* self, int round) {
  auto& s = self->state;
  auto& call = *s.current;
  const int n = s.ranks;
  // Reduce-scatter rounds 0..n-2 send chunk r-k; all-gather rounds send chunk r+1-k'.
  const int chunk = round < n - 1 ? wrap(s.rank - round, n) : wrap(s.rank + 1 - (round - (n - 1)), n);
  const auto [begin, end] = chunk_range(call.buffer.numel(), n, chunk);
  tensor view = call.buffer.slice(0, begin, end).value();
  self->send(s.right, chunk_atom::value, call.seq, call.id.step, call.id.bucket, static_cast<int32_t>(call.buffer.type()),
             call.buffer.numel(), static_cast<int32_t>(round), std::move(view));
}

void fail_all(rank_actor* self, const error& why, bool tell_ring) {
  auto& s = self->state;
  if (s.failed) return;
  s.failed = why;
  if (s.current) {
    s.current->answer.deliver(to_caf_error(why));
    s.current.reset();
  }
  s.early.clear();
  if (tell_ring) self->send(s.right, abort_atom::value, static_cast<int32_t>(why.code), why.message);
}

void finish(rank_actor* self) {
  auto& s = self->state;
  auto& call = *s.current;
  call.answer.deliver(call.buffer);
  s.current.reset();
}

// Applies one chunk of the running call; a mismatch fails the whole ring.
void apply(rank_actor* self, chunk_message&& m) {
  auto& s = self->state;
  auto& call = *s.current;
  const int n = s.ranks, left = wrap(s.rank - 1, n);
  if (m.id.step != call.id.step || m.id.bucket != call.id.bucket || m.type != call.buffer.type() ||
      m.numel != call.buffer.numel()) {
    fail_all(self,
             error{errc::invalid_argument,
                   s.name + " call #" + std::to_string(call.seq) + ": rank " + std::to_string(s.rank) + " called " +
                       describe(call.id) + " on " + std::string{to_string(call.buffer.type())} + "[" +
                       std::to_string(call.buffer.numel()) + "], rank " + std::to_string(left) + " " + describe(m.id) +
                       " on " + std::string{to_string(m.type)} + "[" + std::to_string(m.numel) +
                       "]: every rank must make the same calls, in the same order, on the same shapes"},
             true);
    return;
  }
  const int chunk = m.round < n - 1 ? wrap(s.rank - m.round - 1, n) : wrap(s.rank - (m.round - (n - 1)), n);
  const int64_t begin = chunk_range(call.buffer.numel(), n, chunk).first;
  if (m.round < n - 1)
    add_chunk(call.buffer, begin, m.data);
  else if (m.data.numel() > 0)
    std::memcpy(static_cast<std::byte*>(call.buffer.raw_data()) + begin * static_cast<int64_t>(size_of(call.buffer.type())),
                m.data.raw_data(), m.data.nbytes());
  call.round = m.round + 1;
  if (call.round == 2 * (n - 1)) return finish(self);
  send_chunk(self, call.round);
}

caf::behavior rank_behaviour(rank_actor* self, int rank, int ranks, std::string name, std::chrono::milliseconds timeout,
                             std::shared_ptr<arrivals> arrived) {
  auto& s = self->state;
  s.rank = rank, s.ranks = ranks, s.name = std::move(name), s.timeout = timeout, s.arrived = std::move(arrived);
  return {
      [=](neighbour_atom, caf::actor right) { self->state.right = std::move(right); },
      [=](contribute_atom, uint64_t step, uint32_t bucket, tensor value) {
        auto& st = self->state;
        auto answer = self->make_response_promise();
        if (st.failed) return answer.deliver(to_caf_error(*st.failed));
        const uint64_t seq = st.next_seq++;
        st.arrived->arrived(st.rank);
        auto flat = value.contiguous().value().reshape({value.numel()}).value().clone().value();
        if (st.ranks == 1) return answer.deliver(std::move(flat));
        st.current = running_call{seq, {step, bucket}, std::move(flat), 0, answer};
        self->delayed_send(self, st.timeout, expire_atom::value, seq);
        send_chunk(self, 0);
        // Chunks that came before this rank called.
        if (auto early = st.early.find(seq); early != st.early.end()) {
          auto chunks = std::move(early->second);
          st.early.erase(early);
          for (auto& m : chunks)
            if (st.current && st.current->seq == seq) apply(self, std::move(m));
        }
      },
      [=](chunk_atom, uint64_t seq, uint64_t step, uint32_t bucket, int32_t type, int64_t numel, int32_t round, tensor data) {
        auto& st = self->state;
        if (st.failed) return;
        chunk_message m{seq, {step, static_cast<uint32_t>(bucket)}, static_cast<dtype>(type), numel, round, std::move(data)};
        if (st.current && st.current->seq == seq) return apply(self, std::move(m));
        if (seq >= st.next_seq) st.early[seq].push_back(std::move(m));
      },
      [=](abort_atom, int32_t code, const std::string& why) {
        // The error goes once round the ring: the rank that raised it already failed.
        fail_all(self, error{static_cast<errc>(code), why}, !self->state.failed.has_value());
      },
      [=](expire_atom, uint64_t seq) {
        auto& st = self->state;
        if (!st.current || st.current->seq != seq) return;
        const std::string missing = st.arrived->missing(seq);
        fail_all(self,
                 error{errc::timeout, st.name + " call #" + std::to_string(seq) + " " + describe(st.current->id) +
                                          ": " + (missing.empty() ? std::string{"every rank called, but the ring stalled"}
                                                                  : "rank(s) " + missing + " did not arrive") +
                                          " within " + std::to_string(st.timeout.count()) + " ms"},
                 true);
      },
  };
}

}  // namespace

struct ring_group::impl {
  caf::actor_system* sys = nullptr;
  std::vector<caf::actor> ranks;

  ~impl() {
    if (!sys) return;
    caf::scoped_actor self{*sys};
    for (const auto& r : ranks) self->monitor(r);
    for (const auto& r : ranks) self->send_exit(r, caf::exit_reason::user_shutdown);
    for (std::size_t i = 0; i < ranks.size(); ++i) self->receive([](const caf::down_msg&) {});
  }
};

expected<ring_group> ring_group::start(runtime& rt, ring_options options) {
  if (options.ranks < 1) return make_error(errc::invalid_argument, options.name + ": a ring needs at least one rank");
  if (options.timeout.count() <= 0) return make_error(errc::invalid_argument, options.name + ": the timeout must be positive");
  auto state = std::make_unique<impl>();
  state->sys = &rt.system();
  auto arrived = std::make_shared<arrivals>();
  arrived->calls.assign(static_cast<std::size_t>(options.ranks), 0);
  for (int r = 0; r < options.ranks; ++r)
    state->ranks.push_back(state->sys->spawn(rank_behaviour, r, options.ranks, options.name, options.timeout, arrived));
  for (int r = 0; r < options.ranks; ++r)
    caf::anon_send(state->ranks[static_cast<std::size_t>(r)], neighbour_atom::value,
                   state->ranks[static_cast<std::size_t>((r + 1) % options.ranks)]);
  return ring_group{std::move(state)};
}

ring_group::ring_group(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
ring_group::ring_group(ring_group&&) noexcept = default;
ring_group& ring_group::operator=(ring_group&&) noexcept = default;
ring_group::~ring_group() = default;

int ring_group::ranks() const noexcept { return static_cast<int>(impl_->ranks.size()); }

expected<tensor> ring_group::all_reduce(int rank, call_id id, const tensor& value) const {
  if (rank < 0 || rank >= ranks())
    return make_error(errc::invalid_argument, "all_reduce: rank " + std::to_string(rank) + " is outside the ring of " +
                                                  std::to_string(ranks()));
  const dtype t = value.type();
  if (t != dtype::f32 && t != dtype::f64 && t != dtype::i32 && t != dtype::i64)
    return make_error(errc::invalid_argument, "all_reduce: " + std::string{to_string(t)} + " is not summed (f32, f64, i32, i64)");
  caf::scoped_actor self{*impl_->sys};
  expected<tensor> out = make_error(errc::cancelled, "all_reduce: no answer");
  self->request(impl_->ranks[static_cast<std::size_t>(rank)], caf::infinite, contribute_atom::value, id.step, id.bucket, value)
      .receive([&](tensor& y) { out = std::move(y); }, [&](caf::error& err) { out = from_caf_error(err); });
  return out;
}

}  // namespace af::collectives
