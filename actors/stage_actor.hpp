#pragma once

// Internals shared by the stage actor translation units (source_stage.cpp, transform_stage.cpp,
// sink_stage.cpp, stage.cpp). Pulls in CAF: include only from those.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/message_handler.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <string>

#include "actors/flow_protocol.hpp"
#include "actors/stage.hpp"
#include "actors/tracing.hpp"

namespace af {

/// One stage of a pipeline description.
struct stage_spec {
  enum class kind { generator, actor, transform, parallel_map, interleave };
  kind what = kind::generator;
  std::string name;
  stage_options options;
  generator_factory make_gen;  // kind::generator, or (savable):
  source_factory make_source;
  operator_factory make_op;    // kind::transform
  transform_fn fn;             // kind::parallel_map
  parallel_options parallel;   // kind::parallel_map
  caf::actor producer;         // kind::actor
  child_inputs_factory make_inputs;  // kind::interleave over generated inputs, or:
  std::shared_ptr<const pipeline> outer;  // kind::interleave over a pipeline's elements,
  child_maker make_child;                 // each made into a child by this
  interleave_options interleave;     // kind::interleave
  bool adds_to_shared_metrics = false;  // kind::generator run by an interleave: one total for all
  /// Set on a resumed launch: the state this stage continues from, or (restore_ended) nothing to
  /// continue: the stage had ended upstream of a snapshot and produces nothing.
  std::shared_ptr<const stage_state> restore;
  bool restore_ended = false;
};

namespace detail {

/// Self-scheduling tick: a stage that ran out of its time slice continues on the next one, so that
/// demand and cancel messages interleave with long runs of work.
using step_atom = caf::atom_constant<caf::atom("af_step")>;
/// Reader thread -> sink actor: k delivered elements were consumed, their credit may be regranted.
using release_atom = caf::atom_constant<caf::atom("af_release")>;
/// Topology -> stage: (tune_atom, slots, parallelism); 0 leaves a setting as it is.
using tune_atom = caf::atom_constant<caf::atom("af_tune")>;
/// Topology -> sink: a paused target continues.
using resume_atom = caf::atom_constant<caf::atom("af_resume")>;

/// Longest run of work in one message handler before the stage yields to its mailbox.
inline constexpr int64_t time_slice_ns = 1'000'000;

/// Counters shared between a stage actor (writer) and its topology (reader).
struct stage_metrics {
  explicit stage_metrics(std::string stage_name) : name(std::move(stage_name)) {}
  const std::string name;
  std::atomic<uint64_t> items_in{0};
  std::atomic<uint64_t> items_out{0};
  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> waiting_ns{0};
  std::atomic<int64_t> blocked_ns{0};
  std::atomic<uint64_t> buffered{0};
  std::atomic<uint64_t> slots{0};
  std::atomic<uint64_t> parallelism{1};
  /// The summed counters of the stages that run inside this one (an interleave's children), set
  /// before the stage is spawned; null for other stages.
  std::shared_ptr<stage_metrics> inner;

  void publish(const trace::activity& act, std::size_t held) {
    busy_ns.store(act.total_ns(trace::category::busy), std::memory_order_relaxed);
    waiting_ns.store(act.total_ns(trace::category::waiting_for_input), std::memory_order_relaxed);
    blocked_ns.store(act.total_ns(trace::category::blocked_on_output), std::memory_order_relaxed);
    buffered.store(held, std::memory_order_relaxed);
  }
  stage_counters snapshot() const {
    stage_counters out{name,
                       items_in.load(std::memory_order_relaxed),
                       items_out.load(std::memory_order_relaxed),
                       busy_ns.load(std::memory_order_relaxed),
                       waiting_ns.load(std::memory_order_relaxed),
                       blocked_ns.load(std::memory_order_relaxed),
                       buffered.load(std::memory_order_relaxed),
                       slots.load(std::memory_order_relaxed),
                       parallelism.load(std::memory_order_relaxed),
                       {}};
    if (inner) out.inner.push_back(inner->snapshot());
    return out;
  }
};

/// Where a sink actor puts what it receives.
class sink_target {
 public:
  virtual ~sink_target() = default;
  /// Takes a batch; an error cancels the flow.
  virtual expected<void> deliver(std::vector<element>&& batch) = 0;
  /// Called once: errc::none on end, else the failure (errc::cancelled on cancel).
  virtual void done(const error& status) = 0;
  /// True when delivered elements are consumed at once (a callback); false when a reader releases
  /// them later with release_atom.
  virtual bool releases_on_delivery() const noexcept = 0;
  /// A snapshot mark, behind the batches delivered before it (targets that take no snapshots
  /// ignore it).
  virtual void mark(flow::snapshot_ptr /*mark*/) {}
  /// Delivered elements a paused target keeps without having consumed them: the sink keeps their
  /// credit until they are.
  virtual std::size_t holding() const noexcept { return 0; }
  virtual bool paused() const noexcept { return false; }
  /// Continues a paused target: it consumes what it holds (and may pause again).
  virtual expected<void> resume() { return {}; }
};

/// The output half every producing stage shares: the slots, the consumer's credit, the terminal
/// message (end or error) that follows the last buffered element, and the stage's spans.
class stage_output {
 public:
  /// `adds_to_shared_metrics`: several stages (an interleave's children) share `metrics` and each
  /// adds what it did since its last report; otherwise the stage owns them and stores its totals.
  stage_output(std::string stage_name, std::size_t slots, std::shared_ptr<stage_metrics> metrics,
               bool adds_to_shared_metrics = false)
      : name(std::move(stage_name)), act(name), slots_(slots < 1 ? 1 : slots),
        metrics_(std::move(metrics)), blocked_name_(trace::intern("blocked on output")),
        waiting_name_(trace::intern("waiting for input")), adds_(adds_to_shared_metrics) {
    if (adds_) metrics_->slots.fetch_add(slots_, std::memory_order_relaxed);
    else metrics_->slots.store(slots_, std::memory_order_relaxed);
  }
  ~stage_output() {
    if (!adds_) return;
    act.leave();
    report(0);  // the last run's time, and nothing held any more
    metrics_->slots.fetch_sub(slots_, std::memory_order_relaxed);
  }
  stage_output(const stage_output&) = delete;
  stage_output& operator=(const stage_output&) = delete;

  const std::string name;
  std::deque<element> buffer;
  flow::outbound port;

  std::size_t slots() const noexcept { return slots_; }
  /// Autotune's new slot count (at least 1); held elements beyond it drain before more are made.
  void set_slots(std::size_t n) noexcept {
    slots_ = n < 1 ? 1 : n;
    metrics_->slots.store(slots_, std::memory_order_relaxed);
  }
  std::size_t free_slots() const noexcept { return buffer.size() < slots_ ? slots_ - buffer.size() : 0; }
  bool has_terminal() const noexcept { return terminal_set_; }
  /// The terminal set: none for a clean end.
  const caf::error& terminal() const noexcept { return terminal_; }
  /// The first terminal wins: later ones (a cancel racing an error) are ignored.
  void set_terminal(caf::error err) {
    if (terminal_set_) return;
    terminal_set_ = true;
    terminal_ = std::move(err);
  }
  /// An error from this stage, naming it.
  caf::error stage_error(const error& err) const {
    const error placed = with_context(err, "stage '" + name + "'");
    return make_caf_error(placed.code, placed.message);
  }

  /// Puts a snapshot mark behind the elements buffered now; it leaves right after them.
  void add_mark(flow::snapshot_ptr mark) { marks_.emplace_back(buffer.size(), std::move(mark)); }

  /// Sends what credit allows, and each mark once the elements before it have left; after the
  /// last element, the terminal message. Returns true when the stage is finished (the caller quits).
  template <class Self>
  bool flush(Self* self) {
    for (;;) {
      const std::size_t before_mark = marks_.empty() ? SIZE_MAX : marks_.front().first;
      const std::size_t sent = port.push(self, buffer, before_mark);
      if (sent) metrics_->items_out.fetch_add(sent, std::memory_order_relaxed);
      for (auto& m : marks_) m.first -= std::min(m.first, sent);
      if (marks_.empty() || marks_.front().first > 0 || !port.bound()) break;
      self->send(port.consumer(), flow::mark_atom::value, std::move(marks_.front().second));
      marks_.pop_front();
    }
    if (terminal_set_ && buffer.empty() && marks_.empty() && port.bound()) {
      port.finish(self, terminal_);
      return true;
    }
    return false;
  }
  /// Opens the span matching the state the stage rests in until its next message.
  void rest(bool waiting_for_input, std::size_t held) {
    if (free_slots() == 0 || (terminal_set_ && !buffer.empty()))
      act.enter(trace::category::blocked_on_output, blocked_name_);
    else if (waiting_for_input)
      act.enter(trace::category::waiting_for_input, waiting_name_);
    else
      act.leave();
    report(held);
  }
  stage_metrics& metrics() noexcept { return *metrics_; }

  trace::activity act;

 private:
  std::size_t slots_;
  std::shared_ptr<stage_metrics> metrics_;
  trace::name_id blocked_name_;
  trace::name_id waiting_name_;
  bool terminal_set_ = false;
  caf::error terminal_;
  bool adds_;
  std::deque<std::pair<std::size_t, flow::snapshot_ptr>> marks_;  // elements ahead of each mark
  stage_counters reported_;  // what this stage added to shared metrics so far

  void report(std::size_t held) {
    if (!adds_) {
      metrics_->publish(act, held);
      return;
    }
    auto add = [](auto& total, auto& reported, auto now) {
      total.fetch_add(now - reported, std::memory_order_relaxed);
      reported = now;
    };
    add(metrics_->busy_ns, reported_.busy_ns, act.total_ns(trace::category::busy));
    add(metrics_->waiting_ns, reported_.waiting_ns, act.total_ns(trace::category::waiting_for_input));
    add(metrics_->blocked_ns, reported_.blocked_ns, act.total_ns(trace::category::blocked_on_output));
    add(metrics_->buffered, reported_.buffered, static_cast<uint64_t>(held));
  }
};

/// The snapshot marks a consuming stage received among its inputs, each due once the inputs that
/// arrived before it have been taken, and the snapshot requests it passed upstream and still
/// awaits. A request that upstream will never answer (it ended, failed or was cancelled) gets a
/// mark started here, behind everything received: the stages before this one had ended.
class inbound_marks {
 public:
  void received(std::size_t n) noexcept { received_ += n; }
  void took(std::size_t n) noexcept { taken_ += n; }
  /// Inputs that may be taken before the next mark is due.
  std::size_t room_before_mark() const noexcept {
    return marks_.empty() ? SIZE_MAX : static_cast<std::size_t>(marks_.front().first - std::min(taken_, marks_.front().first));
  }
  bool due() const noexcept { return !marks_.empty() && marks_.front().first <= taken_; }
  flow::snapshot_ptr pop_due() {
    auto m = std::move(marks_.front().second);
    marks_.pop_front();
    return m;
  }
  /// A mark from upstream (ignored once upstream is closed: its requests were answered here).
  void on_mark(const flow::inbound& in, flow::snapshot_ptr mark) {
    if (in.closed() || awaited_ == 0 || !mark) return;
    --awaited_;
    marks_.emplace_back(received_, std::move(mark));
  }
  /// A request from downstream: passed upstream while it runs, else answered here.
  template <class Self>
  void request(Self* self, const flow::inbound& in) {
    if (in.closed()) {
      marks_.emplace_back(received_, started_here(closed_status_));
      return;
    }
    ++awaited_;
    self->send(in.producer(), flow::snapshot_atom::value);
  }
  /// Upstream closed (ended, failed, or cancelled by this stage): `status` empty when it ended.
  void upstream_closed(const caf::error& status) {
    closed_status_ = status ? to_string(status) : std::string{};
    for (; awaited_ > 0; --awaited_) marks_.emplace_back(received_, started_here(closed_status_));
  }

 private:
  static flow::snapshot_ptr started_here(const std::string& failure) {
    auto mark = std::make_shared<chain_snapshot>();
    mark->upstream_ended = true;
    if (!failure.empty()) mark->unsupported = "the stream had failed upstream (" + failure + ")";
    return mark;
  }
  uint64_t received_ = 0;
  uint64_t taken_ = 0;
  std::size_t awaited_ = 0;
  std::string closed_status_;
  std::deque<std::pair<uint64_t, flow::snapshot_ptr>> marks_;  // inputs received before each
};

/// Adds a stateless stage's (empty) state to a passing mark.
inline void add_stateless(chain_snapshot& mark, const std::string& stage) { mark.stages.push_back({stage, {}, {}, {}}); }

/// Calls a factory of user code. An exception or an empty result yields an empty value and says
/// why in `why`, so the caller can put a stand-in that fails the stream in its place.
template <class Factory>
auto make_or_explain(const Factory& make, std::string& why) -> decltype(make()) {
  try {
    if (auto made = make()) return made;
    why = "made nothing";
  } catch (const std::exception& ex) {
    why = std::string{"threw: "} + ex.what();
  } catch (...) {
    why = "threw a non-standard exception";
  }
  return {};
}

/// Queues one step message to the stage itself unless one is already pending, so a stage that
/// yields after its time slice resumes without flooding its own mailbox.
template <class Self>
void schedule_step(Self* self) {
  if (self->state.step_pending) return;
  self->state.step_pending = true;
  self->send(self, step_atom::value);
}

/// A consumer's demand: the first consumer binds the stage; any other gets protocol_violation.
/// True when the demand was accepted (the caller then runs the stage).
template <class Self>
bool accept_demand(Self* self, stage_output& out, uint64_t n) {
  if (out.port.on_demand(self, self->current_sender(), n)) return true;
  self->send(caf::actor_cast<caf::actor>(self->current_sender()), flow::fail_atom::value,
             make_caf_error(errc::protocol_violation, "stage '" + out.name + "' already serves another consumer"));
  return false;
}

/// The handlers every producing stage with plain slots answers alike: its consumer's demand, its
/// own step tick and autotune's new slot count; each then resumes the stage with `run(self)`.
/// Stages add their own handlers in front with `or_else`.
template <class Self, class Run>
caf::message_handler producer_handlers(Self* self, Run run) {
  return {
      [self, run](flow::demand_atom, uint64_t n) {
        if (accept_demand(self, *self->state.out, n)) run(self);
      },
      [self, run](step_atom) {
        self->state.step_pending = false;
        run(self);
      },
      [self, run](tune_atom, uint64_t slots, uint64_t) {
        if (slots) self->state.out->set_slots(static_cast<std::size_t>(slots));
        run(self);
      },
  };
}

/// The snapshot handlers of a consuming stage (transform, parallel map; its state has `marks` and
/// `in`): a request goes upstream, a mark waits until the inputs before it were taken; each then
/// resumes the stage with `run(self)`.
template <class Self, class Run>
caf::message_handler snapshot_handlers(Self* self, Run run) {
  return {
      [self, run](flow::snapshot_atom) {
        self->state.marks.request(self, self->state.in);
        run(self);
      },
      [self, run](flow::mark_atom, flow::snapshot_ptr& mark) {
        self->state.marks.on_mark(self->state.in, std::move(mark));
        run(self);
      },
  };
}

/// What a consuming stage (transform, parallel map) does with its upstream's batch, end and
/// failure. Its state has `in`, `out`, `inputs`, `marks`, `upstream_done` and `upstream_status`; `run`
/// resumes the stage and `fail` fails it with its own error.
template <class Self, class Run, class Fail>
void take_upstream_batch(Self* self, std::vector<element>& items, Run run, Fail fail) {
  auto& s = self->state;
  if (s.in.closed()) return;  // sent before our cancel reached the producer
  if (auto err = s.in.on_batch(items, s.out->name)) {
    fail(self, std::move(err));
  } else {
    s.out->metrics().items_in.fetch_add(items.size(), std::memory_order_relaxed);
    s.marks.received(items.size());
    for (auto& e : items) s.inputs.push_back(std::move(e));
  }
  run(self);
}

template <class Self, class Run>
void take_upstream_end(Self* self, Run run) {
  self->state.in.close();
  self->state.marks.upstream_closed({});
  self->state.upstream_done = true;
  run(self);
}

/// The failure is forwarded after the outputs of what was received before it.
template <class Self, class Run>
void take_upstream_failure(Self* self, caf::error& err, Run run) {
  auto& s = self->state;
  s.in.close();
  s.marks.upstream_closed(err);
  if (!s.upstream_done) s.upstream_status = std::move(err);
  s.upstream_done = true;
  run(self);
}

/// Stops reading upstream (this stage wants no more, or failed): what it received and had not
/// taken is dropped, and pending snapshot requests are answered here.
template <class State, class Self>
void stop_upstream(Self* self, State& s) {
  s.in.cancel(self);
  s.marks.took(s.inputs.size());
  s.inputs.clear();
  s.marks.upstream_closed({});
}

/// The stage actor `spec` describes, reading from `upstream` where it has an input.
caf::actor spawn_stage(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                       std::shared_ptr<stage_metrics> metrics);
/// Spawns the stages of `p` as one child of an interleave and returns its tail. The child's
/// source adds its counters to `shared` (the interleave's children row); the stages after it
/// count privately. The chain ends when its tail is cancelled or its consumer terminates.
caf::actor spawn_chain(caf::actor_system& sys, const pipeline& p, const std::shared_ptr<stage_metrics>& shared);

/// Spawners, one per actor kind (each in its own translation unit).
caf::actor spawn_source(caf::actor_system& sys, const stage_spec& spec,
                        std::shared_ptr<stage_metrics> metrics);
caf::actor spawn_interleave(caf::actor_system& sys, const stage_spec& spec,
                            std::shared_ptr<stage_metrics> metrics);
caf::actor spawn_transform(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                           std::shared_ptr<stage_metrics> metrics);
caf::actor spawn_parallel_map(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                              std::shared_ptr<stage_metrics> metrics);
caf::actor spawn_sink(caf::actor_system& sys, std::string name, std::size_t slots,
                      caf::actor upstream, std::shared_ptr<sink_target> target,
                      std::shared_ptr<stage_metrics> metrics);

/// Spawns the stages of `p` and a sink actor behind them that feeds `target`; stores the sink's
/// handle in `sink` when given.
topology launch_with_sink(runtime& rt, const pipeline& p, const sink_options& options,
                          std::shared_ptr<sink_target> target, caf::actor* sink = nullptr);

}  // namespace detail
}  // namespace af
