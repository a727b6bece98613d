// A parallel map stage: a coordinator actor (the stage that upstream and downstream talk to) fans
// inputs out to `parallelism` worker actors, each calling its own copy of the user's function, and
// merges their results: in input order when deterministic (results that finish early wait in a
// reorder window), else in completion order.
//
// Invariant: inputs waiting + inputs at workers + results finished but not yet sent + credit
// granted upstream <= slots, so the stage never asks for more than it has room for. (An input that
// expands into n outputs may overfill the slots by n - 1 until they drain; no input is dispatched
// meanwhile.)
//
// Time accounting (stage_metrics): busy_ns is the sum of the workers' time in the user function, so
// it can exceed wall time; busy_ns / parallelism / wall time is the workers' utilisation.
// waiting_ns and blocked_ns are the coordinator's own: waiting while no worker has work and no
// input is there, blocked while finished results cannot leave for lack of downstream credit.

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <optional>

#include "actors/resume_ordered.hpp"
#include "actors/stage_actor.hpp"

namespace af::detail {

namespace {

/// Coordinator -> worker: (work_atom, first_seq, inputs): inputs carry sequence numbers first_seq,
/// first_seq + 1, ...; the worker answers each with one done_atom message, in order.
using work_atom = caf::atom_constant<caf::atom("af_pmwork")>;
/// Worker -> coordinator: (done_atom, worker id, seq, outputs, error, busy ns since last report).
/// Every input is answered, even after an error (the coordinator then drops the answers), so the
/// coordinator's count of inputs at each worker stays exact.
using done_atom = caf::atom_constant<caf::atom("af_pmdone")>;
/// Worker -> coordinator: (done_many_atom, worker id, first seq, outputs, counts, busy ns): the
/// successful results of counts.size() consecutive inputs, counts[k] outputs each, back to back.
/// One message for a run of cheap calls instead of one per input.
using done_many_atom = caf::atom_constant<caf::atom("af_pmmany")>;

/// A worker holds finished results back at most this long, to answer a run of cheap calls at once.
constexpr int64_t reply_delay_ns = 200'000;

/// Elements one worker holds at least (running + queued in its mailbox): enough to keep it busy
/// across a round trip. With more slots than workers need for that, each worker may hold an even
/// share of a quarter of the slots, so that cheap functions get work in runs and the coordinator
/// is not a round trip behind; a slow worker then hoards at most that share.
constexpr std::size_t worker_depth = 2;

// -- worker -------------------------------------------------------------------------------------

struct worker_state {
  transform_fn fn;
  std::string stage;
  std::optional<trace::activity> act;
  trace::name_id call_name = trace::intern("map");
  int64_t reported_busy_ns = 0;
};

using worker_actor = detail::resume_ordered<caf::stateful_actor<worker_state>>;

caf::behavior map_worker(worker_actor* self, transform_fn fn, std::string stage, uint32_t id) {
  auto& st = self->state;
  st.fn = std::move(fn);
  st.act.emplace(stage + "/worker" + std::to_string(id));
  st.stage = std::move(stage);
  return {
      [self, id](work_atom, uint64_t first_seq, std::vector<element>& inputs) {
        auto& s = self->state;
        tsan_acquire(inputs.data());  // pairs with the coordinator's release in dispatch
        auto reply_to = caf::actor_cast<caf::actor>(self->current_sender());
        // Successful results wait in `ready` until the run ends, an error must go out, or they
        // have waited reply_delay_ns (slow functions still stream their results one by one).
        std::vector<element> ready;
        std::vector<uint64_t> counts;
        uint64_t ready_from = first_seq;
        int64_t ready_since = 0;
        auto busy_delta = [&s] {
          const int64_t total = s.act->total_ns(trace::category::busy);
          const int64_t delta = total - s.reported_busy_ns;
          s.reported_busy_ns = total;
          return delta;
        };
        auto flush_ready = [&] {
          if (counts.empty()) return;
          tsan_release(ready.data());
          self->send(reply_to, done_many_atom::value, id, ready_from, std::move(ready), std::move(counts),
                     busy_delta());
          ready = {};
          counts = {};
        };
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          const int64_t start = trace::now_ns();
          auto made = guarded("parallel map function", [&] { return s.fn(std::move(inputs[i])); });
          s.act->busy_since(start, s.call_name, made ? static_cast<uint32_t>(made->size()) : 0);
          if (!made) {
            flush_ready();
            const error why = with_context(made.error_value(), "stage '" + s.stage + "'");
            caf::error err = make_caf_error(why.code, why.message);
            self->send(reply_to, done_atom::value, id, first_seq + i, std::vector<element>{}, std::move(err),
                       busy_delta());
            continue;
          }
          if (counts.empty()) {
            ready_from = first_seq + i;
            ready_since = start;
          }
          counts.push_back(made->size());
          for (auto& e : *made) ready.push_back(std::move(e));
          if (trace::now_ns() - ready_since >= reply_delay_ns) flush_ready();
        }
        flush_ready();
      },
  };
}

// -- coordinator state --------------------------------------------------------------------------

struct worker_slot {
  caf::actor handle;
  uint32_t id = 0;
  std::size_t in_flight = 0;  // inputs sent, results not yet back
  bool retiring = false;      // gets no more work; stopped once in_flight reaches 0
};

// One dispatched input in deterministic mode, until its results leave in order.
struct reorder_entry {
  bool done = false;
  std::vector<element> outputs;
};

struct parallel_map_state {
  transform_fn fn;
  bool deterministic = true;
  bool detached_workers = false;
  std::unique_ptr<stage_output> out;
  flow::inbound in;
  std::deque<element> inputs;  // received, not yet dispatched
  inbound_marks marks;         // a mark waits until every input before it has left as outputs
  std::vector<worker_slot> workers;
  std::size_t wanted_workers = 1;
  std::size_t in_flight = 0;        // inputs at workers
  std::deque<reorder_entry> window;  // deterministic: seq next_emit, next_emit + 1, ...
  std::size_t parked = 0;           // outputs in finished window entries
  uint64_t next_seq = 0;            // sequence number of the next dispatched input
  uint64_t next_emit = 0;           // deterministic: first sequence number not yet emitted
  std::optional<uint64_t> failed_seq;  // deterministic: our error waits for the inputs before it
  caf::error failure;
  bool upstream_done = false;
  caf::error upstream_status;  // end (empty) or the upstream failure, forwarded after our outputs
  int64_t worker_busy_ns = 0;  // sum over all workers, live and retired
  trace::name_id blocked_name = trace::intern("blocked on output");
  trace::name_id waiting_name = trace::intern("waiting for input");
  bool step_pending = false;
  int rest = 0;  // what the coordinator rests in: 0 nothing, 1 waiting for input, 2 blocked
  int64_t rest_since = 0;
};

using parallel_map_actor = detail::resume_ordered<caf::stateful_actor<parallel_map_state>>;

// -- behaviour ----------------------------------------------------------------------------------

std::size_t held(const parallel_map_state& st) {
  return st.inputs.size() + st.in_flight + st.parked + st.out->buffer.size();
}

uint32_t free_worker_id(const parallel_map_state& st) {
  for (uint32_t id = 0;; ++id)
    if (std::none_of(st.workers.begin(), st.workers.end(), [id](const worker_slot& w) { return w.id == id; }))
      return id;
}

void spawn_worker(parallel_map_actor* self) {
  auto& st = self->state;
  worker_slot w;
  w.id = free_worker_id(st);
  // Linked: a worker that dies takes the stage down with an error (see the exit handler), and
  // the coordinator stops every worker before it quits.
  if (st.detached_workers)
    w.handle = self->spawn<caf::linked + caf::detached>(map_worker, st.fn, st.out->name, w.id);
  else
    w.handle = self->spawn<caf::linked>(map_worker, st.fn, st.out->name, w.id);
  st.workers.push_back(std::move(w));
}

void stop_worker(parallel_map_actor* self, const worker_slot& w) {
  self->unlink_from(w.handle);  // its exit is ours to expect, not a failure
  self->send_exit(w.handle, caf::exit_reason::user_shutdown);
}

// Retires idle workers beyond the wanted count; spawns workers up to it.
void resize_pool(parallel_map_actor* self) {
  auto& st = self->state;
  std::size_t active = 0;
  for (auto& w : st.workers)
    if (!w.retiring) ++active;
  while (active < st.wanted_workers) {
    // Revive a retiring worker first: it still has work, so it is cheaper than a fresh one.
    auto it = std::find_if(st.workers.begin(), st.workers.end(), [](const worker_slot& w) { return w.retiring; });
    if (it != st.workers.end()) it->retiring = false;
    else spawn_worker(self);
    ++active;
  }
  // Mark the least loaded workers as retiring; never drop work they hold.
  while (active > st.wanted_workers) {
    worker_slot* pick = nullptr;
    for (auto& w : st.workers)
      if (!w.retiring && (!pick || w.in_flight < pick->in_flight)) pick = &w;
    pick->retiring = true;
    --active;
  }
  for (auto it = st.workers.begin(); it != st.workers.end();) {
    if (it->retiring && it->in_flight == 0) {
      stop_worker(self, *it);
      it = st.workers.erase(it);
    } else {
      ++it;
    }
  }
  st.out->metrics().parallelism.store(st.wanted_workers, std::memory_order_relaxed);
}

void stop_all(parallel_map_actor* self) {
  auto& st = self->state;
  for (auto& w : st.workers) stop_worker(self, w);
  st.workers.clear();
}

// Quits now: downstream is gone or the terminal message went out.
void finish(parallel_map_actor* self) {
  self->state.in.cancel(self);
  stop_all(self);
  self->quit();
}

// Our own failure (or a worker's): stop upstream, drop inputs not yet dispatched. The error itself
// leaves after the outputs of earlier inputs (deterministic) or after what is ready (otherwise).
void fail(parallel_map_actor* self, caf::error err, std::optional<uint64_t> seq = std::nullopt) {
  auto& st = self->state;
  stop_upstream(self, st);
  st.upstream_done = true;
  if (st.deterministic && seq) {
    if (st.failed_seq && *st.failed_seq <= *seq) return;  // an earlier input failed already
    st.failed_seq = seq;
    st.failure = std::move(err);
    // Results of later inputs will never be emitted.
    const auto keep = static_cast<std::size_t>(*seq - st.next_emit);
    while (st.window.size() > keep) {
      st.parked -= st.window.back().outputs.size();
      st.window.pop_back();
    }
    return;
  }
  st.out->set_terminal(std::move(err));
}

// Sends contiguous runs of inputs to workers, filling the least loaded first.
void dispatch(parallel_map_actor* self) {
  auto& st = self->state;
  if (st.inputs.empty() || st.out->has_terminal() || st.failed_seq) return;
  // Room on the output side: in flight + finished. Only an input that expanded into several
  // outputs fills it beyond the slots; nothing is dispatched then until outputs drain. (Waiting
  // inputs do not count here, so shrinking the slots never stalls the inputs already taken.)
  const std::size_t busy = st.in_flight + st.parked + st.out->buffer.size();
  if (busy >= st.out->slots()) return;
  std::vector<std::size_t> give(st.workers.size(), 0);
  std::size_t left = std::min({st.inputs.size(), st.out->slots() - busy, st.marks.room_before_mark()});
  const std::size_t depth = std::max(worker_depth, st.out->slots() / (4 * std::max<std::size_t>(1, st.workers.size())));
  for (std::size_t level = 1; level <= depth && left > 0; ++level)
    for (std::size_t i = 0; i < st.workers.size() && left > 0; ++i)
      if (!st.workers[i].retiring && st.workers[i].in_flight + give[i] < level) {
        ++give[i];
        --left;
      }
  for (std::size_t i = 0; i < st.workers.size(); ++i) {
    if (give[i] == 0) continue;
    std::vector<element> batch;
    batch.reserve(give[i]);
    for (std::size_t k = 0; k < give[i]; ++k) {
      batch.push_back(std::move(st.inputs.front()));
      st.inputs.pop_front();
      st.marks.took(1);
      if (st.deterministic) st.window.emplace_back();
    }
    st.workers[i].in_flight += give[i];
    st.in_flight += give[i];
    tsan_release(batch.data());
    self->send(st.workers[i].handle, work_atom::value, st.next_seq, std::move(batch));
    st.next_seq += give[i];
  }
}

// Moves finished results at the front of the reorder window to the output.
void drain_window(parallel_map_state& st) {
  while (!st.window.empty() && st.window.front().done) {
    auto& outputs = st.window.front().outputs;
    st.parked -= outputs.size();
    for (auto& e : outputs) st.out->buffer.push_back(std::move(e));
    st.window.pop_front();
    ++st.next_emit;
  }
  if (st.failed_seq && st.next_emit == *st.failed_seq) st.out->set_terminal(st.failure);
}

void publish(parallel_map_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  const bool blocked = !out.buffer.empty() && out.port.credit() == 0;
  const bool waiting = !blocked && st.in_flight == 0 && st.inputs.empty() && !st.upstream_done;
  const int rest = blocked ? 2 : (waiting ? 1 : 0);
  const int64_t now = trace::now_ns();
  // A span adds to the totals only when it closes: one that lasts (a consumer that grants a credit
  // at a time keeps the stage blocked for the whole run) is cut every millisecond so that the
  // counters autotune reads stay current.
  if (rest != st.rest || now - st.rest_since > 1'000'000) {
    out.act.leave();
    if (blocked) out.act.enter(trace::category::blocked_on_output, st.blocked_name);
    else if (waiting) out.act.enter(trace::category::waiting_for_input, st.waiting_name);
    st.rest = rest;
    st.rest_since = now;
  }
  auto& m = out.metrics();
  m.busy_ns.store(st.worker_busy_ns, std::memory_order_relaxed);
  m.waiting_ns.store(out.act.total_ns(trace::category::waiting_for_input), std::memory_order_relaxed);
  m.blocked_ns.store(out.act.total_ns(trace::category::blocked_on_output), std::memory_order_relaxed);
  m.buffered.store(held(st), std::memory_order_relaxed);
}

// A due mark passes once the outputs of every input before it are in the output buffer (the
// function keeps no state, so there is nothing else to save); dispatching waits for it.
void pass_due_marks(parallel_map_actor* self) {
  auto& st = self->state;
  while (st.marks.due() && st.in_flight == 0 && st.window.empty()) {
    auto mark = st.marks.pop_due();
    add_stateless(*mark, st.out->name);
    st.out->add_mark(std::move(mark));
    dispatch(self);
  }
}

// Dispatches what workers can take, sends what credit allows, asks upstream for the free room.
void run(parallel_map_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  pass_due_marks(self);
  dispatch(self);
  if (st.upstream_done && st.inputs.empty() && st.in_flight == 0 && st.window.empty() && !st.failed_seq)
    out.set_terminal(st.upstream_status);
  if (out.flush(self)) {
    publish(self);
    finish(self);
    return;
  }
  if (!st.upstream_done) {
    const std::size_t h = held(st);
    if (h < out.slots()) st.in.grant_up_to(self, out.slots() - h, flow::demand_step(out.slots()));
  }
  publish(self);
}

void on_done(parallel_map_actor* self, uint32_t id, uint64_t seq, std::vector<element>& outputs,
             caf::error& err, int64_t busy_ns) {
  auto& st = self->state;
  st.worker_busy_ns += busy_ns;
  auto w = std::find_if(st.workers.begin(), st.workers.end(), [id](const worker_slot& x) { return x.id == id; });
  if (w == st.workers.end()) return;  // stopped already
  --w->in_flight;
  --st.in_flight;
  if (w->retiring && w->in_flight == 0) {
    stop_worker(self, *w);
    st.workers.erase(w);
  }
  if (st.out->has_terminal()) return;  // failed already: later results are dropped
  if (st.deterministic) {
    if (seq < st.next_emit) return;
    const auto index = static_cast<std::size_t>(seq - st.next_emit);
    if (index >= st.window.size()) return;  // after our failure: dropped
    if (err) {
      st.window[index].done = false;
      fail(self, std::move(err), seq);
    } else {
      auto& slot = st.window[index];
      slot.done = true;
      st.parked += outputs.size();
      slot.outputs = std::move(outputs);
    }
    drain_window(st);
  } else if (err) {
    fail(self, std::move(err));
  } else {
    for (auto& e : outputs) st.out->buffer.push_back(std::move(e));
  }
}

caf::behavior parallel_map_stage(parallel_map_actor* self, stage_spec spec, caf::actor upstream,
                                 std::shared_ptr<stage_metrics> metrics) {
  auto& st = self->state;
  st.fn = std::move(spec.fn);
  st.deterministic = spec.parallel.deterministic;
  st.detached_workers = spec.options.detached;
  st.wanted_workers = std::max<std::size_t>(1, spec.parallel.parallelism);
  const std::size_t slots = spec.parallel.slots ? spec.parallel.slots : spec.options.slots;
  st.out = std::make_unique<stage_output>(spec.name, slots, std::move(metrics));
  st.in = flow::inbound{std::move(upstream)};
  st.in.attach(self);
  resize_pool(self);
  run(self);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& s = self->state;
    if (msg.source == s.out->port.consumer().address()) {
      finish(self);  // the consumer is gone: same as its cancel
    } else if (msg.source == s.in.producer().address() && !s.in.closed()) {
      // Like an upstream failure: what was received still goes out first.
      s.in.close();
      s.marks.upstream_closed(make_caf_error(errc::peer_down, "upstream terminated"));
      s.upstream_done = true;
      s.upstream_status = make_caf_error(errc::peer_down, "stage '" + s.out->name +
                                                              "': upstream terminated without end (" +
                                                              to_string(msg.reason) + ")");
      run(self);
    }
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& s = self->state;
    auto w = std::find_if(s.workers.begin(), s.workers.end(),
                          [&](const worker_slot& x) { return x.handle.address() == msg.source; });
    if (w != s.workers.end()) {
      const uint32_t id = w->id;
      s.in_flight -= w->in_flight;
      s.workers.erase(w);
      // Its inputs are lost: the stream cannot be complete any more.
      s.window.clear();
      s.parked = 0;
      s.failed_seq.reset();
      fail(self, make_caf_error(errc::peer_down, "stage '" + s.out->name + "': worker " + std::to_string(id) +
                                                     " terminated unexpectedly (" + to_string(msg.reason) + ")"));
      run(self);
      return;
    }
    if (msg.reason) {  // someone else stops us: do as CAF's default handler would, tidily
      s.in.cancel(self);
      stop_all(self);
      self->quit(msg.reason);
    }
  });
  return caf::message_handler{
      [self](flow::batch_atom, std::vector<element>& items) {
        take_upstream_batch(self, items, [](parallel_map_actor* a) { run(a); }, [](parallel_map_actor* a, caf::error e) { fail(a, std::move(e)); });
      },
      [self](flow::end_atom) { take_upstream_end(self, [](parallel_map_actor* a) { run(a); }); },
      [self](flow::fail_atom, caf::error& err) { take_upstream_failure(self, err, [](parallel_map_actor* a) { run(a); }); },
      [self](flow::demand_atom, uint64_t n) {
        if (accept_demand(self, *self->state.out, n)) run(self);
      },
      [self](flow::cancel_atom) { finish(self); },
      [self](done_atom, uint32_t id, uint64_t seq, std::vector<element>& outputs, caf::error& err,
             int64_t busy_ns) {
        tsan_acquire(outputs.data());  // pairs with the worker's release
        on_done(self, id, seq, outputs, err, busy_ns);
        // The worker gets its next input now; results leave at the step, which queues behind the
        // other results already in the mailbox, so that a burst of them goes out as one batch.
        dispatch(self);
        schedule_step(self);
      },
      [self](done_many_atom, uint32_t id, uint64_t first_seq, std::vector<element>& outputs,
             std::vector<uint64_t>& counts, int64_t busy_ns) {
        tsan_acquire(outputs.data());  // pairs with the worker's release
        caf::error none;
        std::size_t at = 0;
        for (std::size_t k = 0; k < counts.size(); ++k) {
          std::vector<element> mine;
          mine.reserve(counts[k]);
          for (uint64_t j = 0; j < counts[k] && at < outputs.size(); ++j) mine.push_back(std::move(outputs[at++]));
          on_done(self, id, first_seq + k, mine, none, k == 0 ? busy_ns : 0);
        }
        dispatch(self);
        schedule_step(self);
      },
      [self](step_atom) {
        self->state.step_pending = false;
        run(self);
      },
      [self](tune_atom, uint64_t new_slots, uint64_t parallelism) {
        auto& s = self->state;
        if (new_slots) s.out->set_slots(static_cast<std::size_t>(new_slots));
        if (parallelism) {
          s.wanted_workers = static_cast<std::size_t>(parallelism);
          resize_pool(self);
        }
        run(self);
      },
  }.or_else(snapshot_handlers(self, [](parallel_map_actor* a) { run(a); }));
}

}  // namespace

caf::actor spawn_parallel_map(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                              std::shared_ptr<stage_metrics> metrics) {
  // The coordinator only routes messages; it never blocks, so it stays a scheduled actor. Workers
  // run detached (a thread each) when the stage asks for it, for functions that block on I/O.
  return sys.spawn(parallel_map_stage, spec, std::move(upstream), std::move(metrics));
}

}  // namespace af::detail
