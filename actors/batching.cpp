// The batching topology: a batcher actor (queue, batch formation, padding, splitting) and replica
// actors (one thread each) that run the batch function.

#include "actors/batching.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/runtime.hpp"
#include "ops/array_ops.hpp"
#include "ops/runtime/executor.hpp"

namespace af::serving {

namespace {

using predict_atom = caf::atom_constant<caf::atom("af_pred")>;
using run_batch_atom = caf::atom_constant<caf::atom("af_runbat")>;
using look_atom = caf::atom_constant<caf::atom("af_look")>;
using flush_atom = caf::atom_constant<caf::atom("af_flush")>;
using stop_atom = caf::atom_constant<caf::atom("af_stop")>;

constexpr int64_t no_deadline = std::numeric_limits<int64_t>::max();

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count(); }

// Written by the batcher, read by stats() and queued_rows() from any thread (a front end asks
// queued_rows() on every request: no lock on that path).
struct shared_counters {
  explicit shared_counters(std::size_t max_batch_size) : batch_sizes(max_batch_size + 1) {}
  std::atomic<uint64_t> requests{0}, batches{0}, rows{0}, padded_rows{0}, refused_full{0}, refused_deadline{0}, failed{0}, sent_ahead{0},
      wakeups{0};
  std::vector<std::atomic<uint64_t>> batch_sizes;
  std::atomic<std::size_t> queued_rows{0};  // in the batcher's queue and in replicas' mailboxes
  std::atomic<std::size_t> intake_rows{0};  // handed over, not yet taken by the batcher (intake)

  static void add(std::atomic<uint64_t>& counter, uint64_t n) { counter.fetch_add(n, std::memory_order_relaxed); }
  batching_stats snapshot() const {
    batching_stats s;
    s.requests = requests.load(std::memory_order_relaxed);
    s.batches = batches.load(std::memory_order_relaxed);
    s.rows = rows.load(std::memory_order_relaxed);
    s.padded_rows = padded_rows.load(std::memory_order_relaxed);
    s.refused_full = refused_full.load(std::memory_order_relaxed);
    s.refused_deadline = refused_deadline.load(std::memory_order_relaxed);
    s.failed = failed.load(std::memory_order_relaxed);
    s.sent_ahead = sent_ahead.load(std::memory_order_relaxed);
    s.wakeups = wakeups.load(std::memory_order_relaxed);
    for (const auto& n : batch_sizes) s.batch_sizes.push_back(n.load(std::memory_order_relaxed));
    return s;
  }
};

// Where a request's answer goes: the promise of a CAF request (predict, remote callers) or the
// callback of predict_async, called on the batcher's thread.
struct reply_channel {
  caf::response_promise promise;
  std::function<void(expected<std::vector<tensor>>)> done;

  void deliver(std::vector<tensor> outputs) {
    if (done) done(std::move(outputs));
    else promise.deliver(std::move(outputs));
  }
  void deliver(const error& e) {
    if (done) done(e);
    else promise.deliver(to_caf_error(e));
  }
};

struct waiting_request {
  std::vector<tensor> inputs;
  int64_t rows = 0;
  int64_t deadline_ns = no_deadline;
  int64_t arrived_ns = 0;
  reply_channel reply;
};

// Where predict_async leaves its requests. A message per request woke a sleeping scheduler thread
// per request: at half the MLP's saturation the HTTP threads spent 3% of the CPU in that wake-up
// alone, and the switches it caused stretched the batches beside them. The batcher takes every
// request here whenever it runs for any reason (its timer, a replica's answer), and a caller
// sends it a message only when nothing else would make it look soon: the first request while it
// has neither a timer armed nor a batch running, or the request that makes a batch full (every
// request when joining is off) while a replica may take it. About two messages per batch instead
// of one per row.
struct intake {
  intake(const batching_options& o, std::vector<graph::tensor_spec> s) : options(o), specs(std::move(s)) {}
  const batching_options options;
  const std::vector<graph::tensor_spec> specs;

  std::mutex mtx;
  std::vector<waiting_request> items;
  std::size_t rows = 0;            // of `items`
  std::size_t queue_rows = 0;      // in the batcher's queue when it last looked
  bool batcher_will_look = false;  // its timer is armed or a replica owes it an answer
  bool replica_free = true;        // a replica may take a full batch now (else its answer is awaited)
  bool wake_sent = false;          // since it last took the items
  bool closed = false;             // the batcher stopped: requests are answered cancelled at once
};

// A replica and the batches sent to it. A full batch may wait in its mailbox behind the one it
// runs, so that it starts the next batch as soon as it finishes one instead of idling while its
// answer reaches the batcher and the next batch is formed and sent (two thread wake-ups: the MLP's
// replica was busy 84% of the time under 32-row calls, and served 27% fewer rows). Such a batch
// still counts as enqueued (TF Serving's max_enqueued_batches counts closed batches that no thread
// has taken), and it is sent only once a batch's run time is known, so that requests whose deadline
// it would miss are refused first. A partial batch goes only to an idle replica: it keeps growing
// while the replicas are busy.
struct replica_slot {
  caf::actor actor;
  int batches = 0;              // sent and not answered yet
  std::size_t waiting_rows = 0;  // of the batch in its mailbox behind the running one
  int64_t free_at_ns = 0;       // when it answered its last batch: the next one ran from then at the earliest
};
constexpr int max_batches_per_replica = 2;

struct batcher_state {
  std::shared_ptr<shared_counters> counters;
  std::shared_ptr<intake> in;  // also holds the options and the signature's inputs
  std::vector<waiting_request> arrived;  // swapped with the intake's, so that both keep their capacity
  std::deque<waiting_request> queue;
  std::size_t queued_rows = 0;
  std::size_t pipelined_rows = 0;  // in batches waiting in a replica's mailbox (replica_slot)
  std::vector<replica_slot> replicas;
  // Batches being run, by id: their requests, answered when the replica replies.
  std::map<uint64_t, std::vector<waiting_request>> running;
  uint64_t next_batch = 0;
  bool timer_armed = false;
  int64_t compute_ns = 0;  // a moving estimate of one batch's run time (deadlines)
  bool stopping = false;
};

using batcher_actor = caf::stateful_actor<batcher_state>;

error check_request(const intake& in, const std::vector<tensor>& inputs, int64_t& rows) {
  if (inputs.size() != in.specs.size())
    return make_error(errc::invalid_argument, "the signature takes " + std::to_string(in.specs.size()) + " inputs, the request has " +
                                                  std::to_string(inputs.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& spec = in.specs[i];
    const tensor& t = inputs[i];
    // Built only for an error: this check runs on the front end's thread for every request.
    auto where = [&spec] { return "input '" + spec.name + "'"; };
    if (!t.defined() || t.type() != spec.type.type || static_cast<std::size_t>(t.ndim()) != spec.type.dims.size() ||
        t.ndim() == 0)
      return make_error(errc::invalid_argument, where() + " must be " + to_string(spec.type) + ", got " +
                                                    (t.defined() ? to_string(graph::value_type{t.type(), t.shape()}) : "nothing"));
    for (std::size_t d = 1; d < spec.type.dims.size(); ++d)
      if (spec.type.dims[d] != -1 && spec.type.dims[d] != t.dim(static_cast<int>(d)))
        return make_error(errc::invalid_argument, where() + " must be " + to_string(spec.type) + ", got " +
                                                      to_string(graph::value_type{t.type(), t.shape()}));
    if (i == 0) rows = t.dim(0);
    if (t.dim(0) != rows)
      return make_error(errc::invalid_argument, where() + " has " + std::to_string(t.dim(0)) + " rows, the first input " +
                                                    std::to_string(rows));
  }
  if (rows < 1) return make_error(errc::invalid_argument, "a request without rows");
  // Without batching a request is its own batch, of any size (TF Serving caps none).
  if (in.options.join_requests && static_cast<std::size_t>(rows) > in.options.max_batch_size)
    return make_error(errc::invalid_argument, std::to_string(rows) + " rows exceed max_batch_size " +
                                                  std::to_string(in.options.max_batch_size));
  return {};
}

// Whether `rows` more would overflow a queue holding `waiting` of `capacity`. A request larger
// than the whole queue (possible only without batching, where requests are not capped) goes in
// when the queue is empty: memory stays bounded by the queue plus one request.
bool over_capacity(std::size_t waiting, std::size_t rows, std::size_t capacity) {
  return waiting > 0 && waiting + rows > capacity;
}

// The queue's depth, for the front ends' admission check.
void publish_depth(batcher_state& st) {
  st.counters->queued_rows.store(st.queued_rows + st.pipelined_rows, std::memory_order_relaxed);
}

std::size_t padded_size(const batching_options& o, std::size_t rows) {
  if (!o.join_requests) return rows;
  for (std::size_t allowed : o.allowed_batch_sizes)
    if (allowed >= rows) return allowed;
  return rows;
}

// Whether two requests' inputs have the same dims after the rows (they can share a batch unpadded).
bool same_row_dims(const waiting_request& a, const waiting_request& b) {
  for (std::size_t i = 0; i < a.inputs.size(); ++i)
    for (int d = 1; d < a.inputs[i].ndim(); ++d)
      if (a.inputs[i].dim(d) != b.inputs[i].dim(d)) return false;
  return true;
}

// Copies `src` into the leading corner of the contiguous `dst` (same rank, every dim at least src's).
void copy_into_corner(const tensor& src, tensor& dst) {
  const std::size_t item = size_of(src.type());
  const bool strings = is_string(src.type());  // objects: assigned, not copied as bytes
  const int rank = src.ndim();
  const int64_t inner = src.dim(rank - 1);
  const int64_t outer = src.numel() / std::max<int64_t>(inner, 1);
  const auto* from = static_cast<const std::byte*>(src.raw_data());
  auto* to = static_cast<std::byte*>(dst.raw_data());
  std::vector<int64_t> index(static_cast<std::size_t>(rank), 0);
  for (int64_t row = 0; row < outer && inner > 0; ++row) {
    int64_t at = 0;  // element offset of index[0..rank-2], 0 in the last dim, within dst
    for (int d = 0; d < rank - 1; ++d) at = (at + index[static_cast<std::size_t>(d)]) * dst.dim(d + 1);
    if (strings) {
      const auto* first = reinterpret_cast<const std::string*>(from) + row * inner;
      std::copy(first, first + inner, reinterpret_cast<std::string*>(to) + at);
    } else {
      std::memcpy(to + at * static_cast<int64_t>(item), from + row * inner * static_cast<int64_t>(item),
                  static_cast<std::size_t>(inner) * item);
    }
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < src.dim(d)) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
}

// `t` with zeros appended in every dim after the rows up to `dims` (dims[0] is ignored).
expected<tensor> pad_row_dims(const tensor& t, shape dims) {
  dims[0] = t.dim(0);
  if (dims == t.shape()) return t;
  AF_TRY_ASSIGN(auto src, t.contiguous());
  AF_TRY_ASSIGN(auto out, tensor::zeros(dims, t.type()));
  copy_into_corner(src, out);
  return out;
}

// One batch's inputs: each request's rows joined (padded to the batch's largest dims when they
// differ), then zero rows up to `size`.
expected<std::vector<tensor>> join(const std::vector<waiting_request>& requests, std::size_t inputs, std::size_t rows,
                                   std::size_t size) {
  std::vector<tensor> out;
  for (std::size_t i = 0; i < inputs; ++i) {
    shape widest = requests.front().inputs[i].shape();
    for (const auto& r : requests)
      for (int d = 1; d < r.inputs[i].ndim(); ++d) widest[d] = std::max(widest[d], r.inputs[i].dim(d));
    std::vector<tensor> parts;
    for (const auto& r : requests) {
      AF_TRY_ASSIGN(auto part, pad_row_dims(r.inputs[i], widest));
      parts.push_back(std::move(part));
    }
    if (size > rows) {
      shape pad = widest;
      pad[0] = static_cast<int64_t>(size - rows);
      AF_TRY_ASSIGN(auto zeros, tensor::zeros(pad, requests.front().inputs[i].type()));
      parts.push_back(std::move(zeros));
    }
    if (parts.size() == 1) {
      out.push_back(parts.front());
    } else {
      AF_TRY_ASSIGN(auto joined, concat(parts, 0));
      out.push_back(std::move(joined));
    }
  }
  return out;
}

void answer_error(waiting_request& r, const error& e) { r.reply.deliver(e); }

void look(batcher_actor* self);

// The replica's reply: each request gets its rows of every output.
void finish_batch(batcher_actor* self, uint64_t id, std::size_t replica, expected<std::vector<tensor>> outputs,
                  int64_t sent_ns) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end()) return;
  auto requests = std::move(it->second);
  st.running.erase(it);
  auto& slot = st.replicas[replica];
  --slot.batches;
  st.pipelined_rows -= slot.waiting_rows;  // the batch that waited behind this one runs now
  slot.waiting_rows = 0;
  const int64_t now = now_ns();
  const int64_t took = now - std::max(sent_ns, slot.free_at_ns);  // a batch sent to a busy replica waited first
  slot.free_at_ns = now;
  st.compute_ns = st.compute_ns == 0 ? took : (st.compute_ns * 7 + took) / 8;
  // A model whose output has fewer rows than its batch fails the whole batch.
  int64_t rows = 0;
  for (const auto& r : requests) rows += r.rows;
  if (outputs)
    for (const auto& out : *outputs)
      if (out.ndim() == 0 || out.dim(0) < rows) {
        outputs = make_error(errc::protocol_violation, "an output of the model has fewer rows than its batch");
        break;
      }
  // Counted before any answer goes out: a caller that has its answer finds it in stats().
  shared_counters::add(outputs ? st.counters->requests : st.counters->failed, requests.size());
  if (!outputs) {
    for (auto& r : requests) answer_error(r, outputs.error_value());
  } else {
    int64_t row = 0;
    for (auto& r : requests) {
      std::vector<tensor> mine;
      error failure;
      for (const auto& out : *outputs) {
        auto part = out.slice(0, row, row + r.rows);
        if (!part) {
          failure = part.error_value();
          break;
        }
        mine.push_back(std::move(*part));
      }
      row += r.rows;
      if (failure) answer_error(r, failure);
      else r.reply.deliver(std::move(mine));
    }
  }
  look(self);
}

void run_batch(batcher_actor* self, std::vector<waiting_request> requests, std::size_t rows, std::size_t replica) {
  auto& st = self->state;
  const std::size_t size = padded_size(st.in->options, rows);
  auto inputs = join(requests, st.in->specs.size(), rows, size);
  if (!inputs) {
    shared_counters::add(st.counters->failed, requests.size());
    for (auto& r : requests) answer_error(r, inputs.error_value());
    return;
  }
  auto& slot = st.replicas[replica];
  if (slot.batches++ > 0) {
    slot.waiting_rows = rows;
    st.pipelined_rows += rows;
    shared_counters::add(st.counters->sent_ahead, 1);
  }
  const uint64_t id = st.next_batch++;
  st.running.emplace(id, std::move(requests));
  auto& c = *st.counters;
  shared_counters::add(c.batches, 1);
  shared_counters::add(c.rows, rows);
  shared_counters::add(c.padded_rows, size - rows);
  shared_counters::add(c.batch_sizes[std::min(rows, c.batch_sizes.size() - 1)], 1);
  const int64_t started = now_ns();
  self->request(slot.actor, caf::infinite, run_batch_atom::value, std::move(*inputs))
      .then([self, id, replica, started](std::vector<tensor>& out) { finish_batch(self, id, replica, std::move(out), started); },
            [self, id, replica, started](caf::error& err) { finish_batch(self, id, replica, from_caf_error(err), started); });
}

// The replica for the next batch: an idle one, else (for a full batch, once a batch's run time is
// known) one with room in its mailbox; -1 when none may take it.
int pick_replica(const batcher_state& st, bool full) {
  int best = -1;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    const int batches = st.replicas[i].batches;
    if (batches == 0) return static_cast<int>(i);
    const bool has_room = full && st.compute_ns > 0 && batches < max_batches_per_replica;
    if (has_room && (best < 0 || batches < st.replicas[static_cast<std::size_t>(best)].batches)) best = static_cast<int>(i);
  }
  return best;
}

bool any_replica_idle(const batcher_state& st) {
  return std::any_of(st.replicas.begin(), st.replicas.end(), [](const replica_slot& r) { return r.batches == 0; });
}

// Forms and starts batches while one is due (full, or its oldest request waited batch_timeout) and
// a replica may take it (pick_replica); otherwise arms the timer for the oldest request.
void try_dispatch(batcher_actor* self) {
  auto& st = self->state;
  const int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(st.in->options.batch_timeout).count();
  while (!st.queue.empty()) {
    const bool full = !st.in->options.join_requests || st.queued_rows >= st.in->options.max_batch_size;
    const int replica = pick_replica(st, full);
    if (replica < 0) break;
    const int64_t now = now_ns();
    // Requests whose deadline the next batch cannot meet are answered now, without running: it
    // ends one batch time from now, or two behind the batch its replica is running.
    const int64_t ends = now + st.compute_ns * (1 + st.replicas[static_cast<std::size_t>(replica)].batches);
    std::size_t expired = 0;
    for (auto it = st.queue.begin(); it != st.queue.end();) {
      if (it->deadline_ns != no_deadline && ends > it->deadline_ns) {
        shared_counters::add(st.counters->refused_deadline, 1);  // before the answer, as every count here
        answer_error(*it, make_error(errc::timeout, "the request's deadline passed before a batch could run it"));
        st.queued_rows -= static_cast<std::size_t>(it->rows);
        it = st.queue.erase(it);
        ++expired;
      } else {
        ++it;
      }
    }
    // The queue is shorter: whether a batch is full, and which replica takes it, may change.
    if (expired) continue;
    const bool waited = now - st.queue.front().arrived_ns >= timeout_ns;
    if (!full && !waited) break;
    std::vector<waiting_request> batch;
    std::size_t rows = 0;
    // The first request always goes (without batching it may exceed max_batch_size); later ones
    // join while they fit.
    while (!st.queue.empty() &&
           (batch.empty() || (rows + static_cast<std::size_t>(st.queue.front().rows) <= st.in->options.max_batch_size &&
                              (st.in->options.pad_variable_length_inputs || same_row_dims(batch.front(), st.queue.front()))))) {
      rows += static_cast<std::size_t>(st.queue.front().rows);
      st.queued_rows -= static_cast<std::size_t>(st.queue.front().rows);
      batch.push_back(std::move(st.queue.front()));
      st.queue.pop_front();
      if (!st.in->options.join_requests) break;
    }
    run_batch(self, std::move(batch), rows, static_cast<std::size_t>(replica));
  }
  publish_depth(st);
  if (!st.queue.empty() && !st.timer_armed && any_replica_idle(st)) {
    const int64_t due = st.queue.front().arrived_ns + timeout_ns - now_ns();
    st.timer_armed = true;
    self->delayed_send(self, std::chrono::nanoseconds{std::max<int64_t>(due, 0)}, flush_atom::value);
  }
}

// A model worker is a device actor: the graphs of the batch function run on `device`, on its thread.
caf::behavior replica(caf::event_based_actor*, batch_function run, int nice, std::shared_ptr<backend> device) {
  // A detached actor initialises on its own thread: this lowers that thread's priority only.
  if (nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
  return {[run, device](run_batch_atom, std::vector<tensor>& inputs) -> caf::result<std::vector<tensor>> {
    device_actor_scope on{*device};
    // A model that throws is the server's failure, not the request's (500 / INTERNAL), and the
    // replica lives on to run the next batch.
    expected<std::vector<tensor>> out = make_error(errc::internal, "the batch function threw");
    try {
      out = run(inputs);
    } catch (const std::bad_alloc&) {
      out = make_error(errc::out_of_memory, "the batch function ran out of memory");
    } catch (const std::exception& e) {
      out = make_error(errc::internal, std::string{"the batch function threw: "} + e.what());
    } catch (...) {
      out = make_error(errc::internal, "the batch function threw something that is not a std::exception");
    }
    if (!out) return to_caf_error(out.error_value());
    return std::move(*out);
  }};
}

error queue_full(std::size_t waiting, std::size_t capacity) {
  return make_error(errc::resource_exhausted, "the batching queue is full (" + std::to_string(waiting) + " rows waiting, at most " +
                                                  std::to_string(capacity) + ")");
}

// A request whose deadline passed before it was queued is answered timeout at once (counted
// first, as every count here); true when it was.
bool refused_as_late(waiting_request& r, shared_counters& counters) {
  if (r.deadline_ns == no_deadline || r.arrived_ns < r.deadline_ns) return false;
  shared_counters::add(counters.refused_deadline, 1);
  answer_error(r, make_error(errc::timeout, "the request's deadline had passed when it arrived"));
  return true;
}

// A new request into the queue, or refused at once: bad inputs, shutting down, deadline passed,
// queue full. Its rows are known when it came through the intake (checked there).
void enqueue(batcher_actor* self, waiting_request r) {
  auto& s = self->state;
  if (s.stopping) return answer_error(r, make_error(errc::cancelled, "the batching queue is shutting down"));
  if (r.rows == 0)
    if (auto bad = check_request(*s.in, r.inputs, r.rows)) return answer_error(r, bad);
  if (refused_as_late(r, *s.counters)) return;
  const std::size_t capacity = s.in->options.max_enqueued_batches * s.in->options.max_batch_size;
  if (over_capacity(s.queued_rows + s.pipelined_rows, static_cast<std::size_t>(r.rows), capacity)) {
    shared_counters::add(s.counters->refused_full, 1);
    return answer_error(r, queue_full(s.queued_rows + s.pipelined_rows, capacity));
  }
  s.queued_rows += static_cast<std::size_t>(r.rows);
  s.queue.push_back(std::move(r));
}

// Whether the batcher runs again without being sent anything: its timer is armed, or a replica
// owes it an answer.
bool will_look(const batcher_state& st) {
  return st.timer_armed || std::any_of(st.replicas.begin(), st.replicas.end(), [](const replica_slot& r) { return r.batches > 0; });
}

// Queues what waits in the intake, in the order it arrived.
void take_intake(batcher_actor* self) {
  auto& st = self->state;
  {
    std::lock_guard<std::mutex> guard{st.in->mtx};
    st.arrived.swap(st.in->items);
    st.in->rows = 0;
    st.in->wake_sent = false;
    st.counters->intake_rows.store(0, std::memory_order_relaxed);
  }
  for (auto& r : st.arrived) enqueue(self, std::move(r));
  st.arrived.clear();
}

// Every activation of the batcher ends here: it takes what waits in the intake, forms and starts
// the batches that are due, and again while more arrived meanwhile; then it tells the intake how
// full its queue is and whether it will look again by itself (under the intake's lock, so that a
// caller who finds it will not is sure to wake it).
void look(batcher_actor* self) {
  auto& st = self->state;
  for (;;) {
    take_intake(self);
    try_dispatch(self);
    std::lock_guard<std::mutex> guard{st.in->mtx};
    if (st.in->items.empty()) {
      st.in->queue_rows = st.queued_rows;
      st.in->batcher_will_look = will_look(st);
      st.in->replica_free = pick_replica(st, true) >= 0;
      return;
    }
  }
}

// Stops taking requests: those in the intake, and any handed over later, are answered cancelled.
void close_intake(intake& in) {
  std::vector<waiting_request> dropped;
  {
    std::lock_guard<std::mutex> guard{in.mtx};
    in.closed = true;
    dropped.swap(in.items);
    in.rows = 0;
  }
  const error cancelled = make_error(errc::cancelled, "the batching queue was shut down");
  for (auto& r : dropped) answer_error(r, cancelled);
}

caf::behavior batcher(batcher_actor* self, std::vector<caf::actor> replicas, std::shared_ptr<shared_counters> counters,
                      std::shared_ptr<intake> in) {
  auto& st = self->state;
  for (auto& r : replicas) st.replicas.push_back({std::move(r)});
  st.counters = std::move(counters);
  st.in = in;
  // However the batcher ends, no request is left in the intake unanswered.
  self->attach_functor([in](const caf::error&) { close_intake(*in); });
  return {
      [self](predict_atom, std::vector<tensor>& inputs, int64_t deadline_ns) {
        take_intake(self);  // those came first
        enqueue(self, {std::move(inputs), 0, deadline_ns, now_ns(), {self->make_response_promise(), {}}});
        look(self);
      },
      [self](look_atom) {
        shared_counters::add(self->state.counters->wakeups, 1);
        look(self);
      },
      [self](flush_atom) {
        self->state.timer_armed = false;
        look(self);
      },
      [self](stop_atom) {
        auto& s = self->state;
        s.stopping = true;
        close_intake(*s.in);
        const error cancelled = make_error(errc::cancelled, "the batching queue was shut down");
        for (auto& r : s.queue) answer_error(r, cancelled);
        for (auto& [id, requests] : s.running)
          for (auto& r : requests) answer_error(r, cancelled);
        s.queue.clear();
        s.running.clear();
        s.queued_rows = 0;
        s.pipelined_rows = 0;
        publish_depth(s);
        self->quit();
      },
  };
}

}  // namespace

struct batching_queue::impl {
  caf::actor_system* sys = nullptr;
  caf::actor batcher;
  std::vector<caf::actor> replicas;
  std::shared_ptr<shared_counters> counters;
  std::shared_ptr<intake> in;
  std::size_t capacity_rows = 0;

  // The replicas may be running the batch function, which refers to the caller's model: wait
  // until every actor has stopped before the queue is gone.
  ~impl() {
    if (!sys || !batcher) return;
    caf::scoped_actor self{*sys};
    self->monitor(batcher);
    for (const auto& r : replicas) self->monitor(r);
    self->send(batcher, stop_atom::value);
    for (const auto& r : replicas) self->send_exit(r, caf::exit_reason::user_shutdown);
    for (std::size_t i = 0; i < replicas.size() + 1; ++i) self->receive([](const caf::down_msg&) {});
  }
};

expected<batching_queue> batching_queue::start(runtime& rt, batch_function run, batching_options options,
                                               std::vector<graph::tensor_spec> inputs) {
  if (options.max_batch_size < 1 || options.num_batch_threads < 1 || options.max_enqueued_batches < 1)
    return make_error(errc::invalid_argument, "batching: max_batch_size, num_batch_threads and max_enqueued_batches must be at least 1");
  if (inputs.empty()) return make_error(errc::invalid_argument, "batching: a signature without inputs");
  const auto& allowed = options.allowed_batch_sizes;
  if (!allowed.empty() && (!std::is_sorted(allowed.begin(), allowed.end()) || allowed.front() < 1 ||
                           allowed.back() != options.max_batch_size))
    return make_error(errc::invalid_argument,
                      "batching: allowed_batch_sizes must ascend from at least 1 to max_batch_size (" +
                          std::to_string(options.max_batch_size) + ")");
  auto state = std::make_unique<impl>();
  state->sys = &rt.system();
  state->counters = std::make_shared<shared_counters>(options.max_batch_size);
  state->capacity_rows = options.max_enqueued_batches * options.max_batch_size;
  state->in = std::make_shared<intake>(options, std::move(inputs));
  for (std::size_t i = 0; i < options.num_batch_threads; ++i)
    state->replicas.push_back(state->sys->spawn<caf::detached>(replica, run, options.replica_nice, rt.cpu_device()));
  state->batcher = state->sys->spawn(batcher, state->replicas, state->counters, state->in);
  return batching_queue{std::move(state)};
}

batching_queue::batching_queue(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
batching_queue::batching_queue(batching_queue&&) noexcept = default;
batching_queue& batching_queue::operator=(batching_queue&&) noexcept = default;

batching_queue::~batching_queue() = default;

void batching_queue::predict_async(std::vector<tensor> inputs, std::optional<clock_type::time_point> deadline,
                                   std::function<void(expected<std::vector<tensor>>)> done) const {
  const int64_t deadline_ns = deadline ? std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count()
                                       : no_deadline;
  auto& in = *impl_->in;
  auto& counters = *impl_->counters;
  waiting_request r{std::move(inputs), 0, deadline_ns, now_ns(), {{}, std::move(done)}};
  // What can be refused without the batcher is refused here, on the caller's thread.
  if (auto bad = check_request(in, r.inputs, r.rows)) return answer_error(r, bad);
  if (refused_as_late(r, counters)) return;
  bool wake = false;
  {
    std::unique_lock<std::mutex> lock{in.mtx};
    if (in.closed) {
      lock.unlock();
      return answer_error(r, make_error(errc::cancelled, "the batching queue was shut down"));
    }
    const std::size_t waiting = counters.queued_rows.load(std::memory_order_relaxed) + in.rows;
    if (over_capacity(waiting, static_cast<std::size_t>(r.rows), impl_->capacity_rows)) {
      lock.unlock();
      shared_counters::add(counters.refused_full, 1);
      return answer_error(r, queue_full(waiting, impl_->capacity_rows));
    }
    const bool first = in.items.empty();
    in.rows += static_cast<std::size_t>(r.rows);
    in.items.push_back(std::move(r));
    counters.intake_rows.store(in.rows, std::memory_order_relaxed);
    const bool batch_full = !in.options.join_requests || in.queue_rows + in.rows >= in.options.max_batch_size;
    wake = !in.wake_sent && ((first && !in.batcher_will_look) || (batch_full && in.replica_free));
    in.wake_sent = in.wake_sent || wake;
  }
  if (wake) caf::anon_send(impl_->batcher, look_atom::value);
}

expected<std::vector<tensor>> batching_queue::predict(std::vector<tensor> inputs,
                                                       std::optional<clock_type::time_point> deadline) const {
  const int64_t deadline_ns = deadline ? std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch()).count()
                                       : no_deadline;
  caf::scoped_actor self{*impl_->sys};
  expected<std::vector<tensor>> out = make_error(errc::cancelled, "no answer");
  self->request(impl_->batcher, caf::infinite, predict_atom::value, std::move(inputs), deadline_ns)
      .receive([&](std::vector<tensor>& y) { out = std::move(y); }, [&](caf::error& err) { out = from_caf_error(err); });
  return out;
}

batching_stats batching_queue::stats() const {
  return impl_->counters->snapshot();
}

std::size_t batching_queue::capacity_rows() const { return impl_->capacity_rows; }

std::size_t batching_queue::queued_rows() const {
  return impl_->counters->queued_rows.load(std::memory_order_relaxed) + impl_->counters->intake_rows.load(std::memory_order_relaxed);
}

bool batching_queue::refuse_if_full() const {
  if (queued_rows() < impl_->capacity_rows) return false;
  shared_counters::add(impl_->counters->refused_full, 1);
  return true;
}

}  // namespace af::serving
