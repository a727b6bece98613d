// A transform stage: runs a stage_operator (a function, batch, shuffle, take, ...) on each input.
// Invariant: inputs waiting + outputs buffered + credit granted upstream <= slots, so the stage
// never asks for more than it has room for (with input_slots set: inputs waiting + credit <=
// input_slots, asked for only while an output slot is free, outputs buffered <= slots). (One call that expands an element into n outputs may
// overfill the slots by n - 1 until they drain; no further input is taken meanwhile.)

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/resume_ordered.hpp"
#include "actors/stage_actor.hpp"

namespace af::detail {

namespace {

// -- state --------------------------------------------------------------------------------------

struct transform_state {
  std::unique_ptr<stage_operator> op;  // made per launch
  std::size_t input_slots = 0;         // 0: inputs share the output slots' budget
  std::vector<element> made;           // the operator's outputs of one call, reused
  std::unique_ptr<stage_output> out;
  flow::inbound in;
  std::deque<element> inputs;  // received, not yet transformed
  inbound_marks marks;
  bool upstream_done = false;
  bool op_drained = false;     // finish() appended nothing: the operator holds nothing more
  caf::error upstream_status;  // end (empty) or the upstream failure, forwarded after our outputs
  trace::name_id transform_name = trace::intern("transform");
  bool step_pending = false;
};

using transform_actor = detail::resume_ordered<caf::stateful_actor<transform_state>>;

// -- behaviour ----------------------------------------------------------------------------------

void top_up(transform_actor* self) {
  auto& st = self->state;
  if (st.upstream_done) return;
  if (st.input_slots) {
    // A separate input window: take inputs while an output slot is free.
    if (st.out->free_slots() > 0 && st.inputs.size() < st.input_slots)
      st.in.grant_up_to(self, st.input_slots - st.inputs.size(), flow::demand_step(st.input_slots));
    return;
  }
  const std::size_t held = st.out->buffer.size() + st.inputs.size();
  const std::size_t slots = st.out->slots();
  if (held < slots) st.in.grant_up_to(self, slots - held, flow::demand_step(slots));
}

std::size_t held(const transform_state& st) {
  return st.out->buffer.size() + st.inputs.size() + st.op->held();
}

// Moves one call's outputs into the output slots.
uint32_t take_made(transform_state& st) {
  const auto n = static_cast<uint32_t>(st.made.size());
  for (auto& e : st.made) st.out->buffer.push_back(std::move(e));
  st.made.clear();
  return n;
}

// Our own failure: stop upstream, drop pending inputs, fail after the outputs already made.
void fail(transform_actor* self, caf::error err) {
  auto& st = self->state;
  stop_upstream(self, st);
  st.upstream_done = true;
  st.op_drained = true;
  st.out->set_terminal(std::move(err));
}

// Marks whose inputs have all been taken pass now, with the operator's state: what it holds
// after those inputs and before any later one.
void pass_due_marks(transform_actor* self) {
  auto& st = self->state;
  while (st.marks.due()) {
    auto mark = st.marks.pop_due();
    stage_state saved{st.out->name, {}, {}, {}};
    if (st.op->save(saved)) mark->stages.push_back(std::move(saved));
    else if (mark->unsupported.empty()) mark->unsupported = "stage '" + st.out->name + "' cannot save its state";
    st.out->add_mark(std::move(mark));
  }
}

// Transforms while an input is ready and a slot is free, within one time slice; then sends.
void run(transform_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  out.act.leave();
  const int64_t start = trace::now_ns();
  uint32_t consumed = 0;
  uint32_t produced = 0;
  pass_due_marks(self);
  while (!out.has_terminal() && !st.inputs.empty() && out.free_slots() > 0 &&
         trace::now_ns() - start < time_slice_ns) {
    element input = std::move(st.inputs.front());
    st.inputs.pop_front();
    st.marks.took(1);
    ++consumed;
    auto pushed = guarded("transform", [&] { return st.op->push(std::move(input), st.made); });
    produced += take_made(st);
    if (!pushed) {
      fail(self, out.stage_error(pushed.error_value()));
      break;
    }
    if (st.op->satisfied()) {  // e.g. take(n) has its n: stop upstream, end after what we hold
      stop_upstream(self, st);
      st.upstream_done = true;
      st.upstream_status = caf::error{};
    }
    pass_due_marks(self);
  }
  pass_due_marks(self);
  // Upstream ended cleanly: let the operator hand out what it holds, as room allows.
  while (st.upstream_done && st.inputs.empty() && !st.upstream_status && !st.op_drained &&
         !out.has_terminal() && out.free_slots() > 0 && trace::now_ns() - start < time_slice_ns) {
    ++consumed;
    auto finished = guarded("transform", [&] { return st.op->finish(st.made, out.free_slots()); });
    const uint32_t n = take_made(st);
    produced += n;
    if (!finished) fail(self, out.stage_error(finished.error_value()));
    else if (n == 0) st.op_drained = true;
  }
  if (consumed) out.act.busy_since(start, st.transform_name, produced);
  if (st.upstream_done && st.inputs.empty() && (st.op_drained || st.upstream_status))
    out.set_terminal(st.upstream_status);
  if (out.flush(self)) {
    self->quit();
    return;
  }
  top_up(self);
  const bool can_work = !st.inputs.empty() || (st.upstream_done && !st.op_drained);
  if (!out.has_terminal() && can_work && out.free_slots() > 0) schedule_step(self);
  out.rest(st.inputs.empty() && !st.upstream_done, held(st));
}

// An operator whose factory failed: it fails the stream at its first input or at the end.
class failed_operator final : public stage_operator {
 public:
  explicit failed_operator(std::string why) : why_(std::move(why)) {}
  expected<void> push(element, std::vector<element>&) override { return failure(); }
  expected<void> finish(std::vector<element>&, std::size_t) override { return failure(); }

 private:
  error failure() const { return make_error(errc::invalid_argument, "operator factory " + why_); }
  std::string why_;
};

std::unique_ptr<stage_operator> make_operator(const stage_spec& spec) {
  std::string why;
  if (auto op = make_or_explain(spec.make_op, why)) return op;
  return std::make_unique<failed_operator>(std::move(why));
}

caf::behavior transform_stage(transform_actor* self, stage_spec spec, caf::actor upstream,
                              std::shared_ptr<stage_metrics> metrics) {
  auto& st = self->state;
  st.op = make_operator(spec);
  st.input_slots = spec.options.input_slots;
  st.out = std::make_unique<stage_output>(spec.name, spec.options.slots, std::move(metrics));
  st.in = flow::inbound{std::move(upstream)};
  st.in.attach(self);
  if (spec.restore) {
    auto restored = guarded("restoring the operator", [&] { return st.op->restore(*spec.restore); });
    if (!restored) fail(self, st.out->stage_error(restored.error_value()));
  }
  top_up(self);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& s = self->state;
    if (msg.source == s.out->port.consumer().address()) {
      s.in.cancel(self);  // the consumer is gone: same as its cancel
      self->quit();
    } else if (msg.source == s.in.producer().address() && !s.in.closed()) {
      s.in.close();
      s.marks.upstream_closed(make_caf_error(errc::peer_down, "upstream terminated"));
      fail(self, make_caf_error(errc::peer_down, "stage '" + s.out->name +
                                                     "': upstream terminated without end (" +
                                                     to_string(msg.reason) + ")"));
      run(self);
    }
  });
  return caf::message_handler{
      [self](flow::batch_atom, std::vector<element>& items) {
        take_upstream_batch(self, items, [](transform_actor* a) { run(a); }, [](transform_actor* a, caf::error e) { fail(a, std::move(e)); });
      },
      [self](flow::end_atom) { take_upstream_end(self, [](transform_actor* a) { run(a); }); },
      [self](flow::fail_atom, caf::error& err) { take_upstream_failure(self, err, [](transform_actor* a) { run(a); }); },
      [self](flow::cancel_atom) {
        self->state.in.cancel(self);
        self->quit();
      },
  }.or_else(snapshot_handlers(self, [](transform_actor* a) { run(a); }))
      .or_else(producer_handlers(self, [](transform_actor* a) { run(a); }));
}

}  // namespace

caf::actor spawn_transform(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                           std::shared_ptr<stage_metrics> metrics) {
  if (spec.options.detached)
    return sys.spawn<caf::detached>(transform_stage, spec, std::move(upstream), std::move(metrics));
  return sys.spawn(transform_stage, spec, std::move(upstream), std::move(metrics));
}

}  // namespace af::detail
