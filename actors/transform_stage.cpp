// A transform stage: maps each input element to zero or more outputs with a user function.
// Invariant: inputs waiting + outputs buffered + credit granted upstream <= slots, so the stage
// never asks for more than it has room for. (One call that expands an element into n outputs may
// overfill the slots by n - 1 until they drain; no further input is taken meanwhile.)

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/stage_actor.hpp"

namespace af::detail {

namespace {

// -- state --------------------------------------------------------------------------------------

struct transform_state {
  transform_fn fn;  // a copy per launch
  std::unique_ptr<stage_output> out;
  flow::inbound in;
  std::deque<element> inputs;  // received, not yet transformed
  bool upstream_done = false;
  caf::error upstream_status;  // end (empty) or the upstream failure, forwarded after our outputs
  trace::name_id transform_name = trace::intern("transform");
  bool step_pending = false;
};

using transform_actor = caf::stateful_actor<transform_state>;

// -- behaviour ----------------------------------------------------------------------------------

void top_up(transform_actor* self) {
  auto& st = self->state;
  const std::size_t held = st.out->buffer.size() + st.inputs.size();
  const std::size_t slots = st.out->slots();
  if (held < slots) st.in.grant_up_to(self, slots - held);
}

// Our own failure: stop upstream, drop pending inputs, fail after the outputs already made.
void fail(transform_actor* self, caf::error err) {
  auto& st = self->state;
  st.in.cancel(self);
  st.inputs.clear();
  st.upstream_done = true;
  st.out->set_terminal(std::move(err));
}

// Transforms while an input is ready and a slot is free, within one time slice; then sends.
void run(transform_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  out.act.leave();
  const int64_t start = trace::now_ns();
  uint32_t consumed = 0;
  uint32_t produced = 0;
  while (!out.has_terminal() && !st.inputs.empty() && out.free_slots() > 0 &&
         trace::now_ns() - start < time_slice_ns) {
    element input = std::move(st.inputs.front());
    st.inputs.pop_front();
    ++consumed;
    auto outputs = call_guarded([&] { return st.fn(std::move(input)); }, "transform");
    if (!outputs) {
      fail(self, out.stage_error(outputs.error_value()));
      break;
    }
    for (auto& e : *outputs) out.buffer.push_back(std::move(e));
    produced += static_cast<uint32_t>(outputs->size());
  }
  if (consumed) out.act.busy_since(start, st.transform_name, produced);
  if (st.upstream_done && st.inputs.empty()) out.set_terminal(st.upstream_status);
  if (out.flush(self)) {
    self->quit();
    return;
  }
  top_up(self);
  if (!out.has_terminal() && !st.inputs.empty() && out.free_slots() > 0) schedule_step(self);
  out.rest(st.inputs.empty() && !st.upstream_done, out.buffer.size() + st.inputs.size());
}

caf::behavior transform_stage(transform_actor* self, stage_spec spec, caf::actor upstream,
                              std::shared_ptr<stage_metrics> metrics) {
  auto& st = self->state;
  st.fn = std::move(spec.fn);
  st.out = std::make_unique<stage_output>(spec.name, spec.options.slots, std::move(metrics));
  st.in = flow::inbound{std::move(upstream)};
  st.in.attach(self);
  top_up(self);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& s = self->state;
    if (msg.source == s.out->port.consumer().address()) {
      s.in.cancel(self);  // the consumer is gone: same as its cancel
      self->quit();
    } else if (msg.source == s.in.producer().address() && !s.in.closed()) {
      s.in.close();
      fail(self, make_caf_error(errc::peer_down, "stage '" + s.out->name +
                                                     "': upstream terminated without end (" +
                                                     to_string(msg.reason) + ")"));
      run(self);
    }
  });
  return {
      [self](flow::batch_atom, std::vector<element>& items) {
        auto& s = self->state;
        if (s.in.closed()) return;  // sent before our cancel reached the producer
        if (auto err = s.in.on_batch(items.size(), s.out->name)) {
          fail(self, std::move(err));
        } else {
          s.out->metrics().items_in.fetch_add(items.size(), std::memory_order_relaxed);
          for (auto& e : items) s.inputs.push_back(std::move(e));
        }
        run(self);
      },
      [self](flow::end_atom) {
        self->state.in.close();
        self->state.upstream_done = true;
        run(self);
      },
      [self](flow::fail_atom, caf::error& err) {
        auto& s = self->state;
        s.in.close();
        if (!s.upstream_done) s.upstream_status = std::move(err);
        s.upstream_done = true;
        run(self);
      },
      [self](flow::demand_atom, uint64_t n) {
        if (accept_demand(self, *self->state.out, n)) run(self);
      },
      [self](flow::cancel_atom) {
        self->state.in.cancel(self);
        self->quit();
      },
      [self](step_atom) {
        self->state.step_pending = false;
        run(self);
      },
  };
}

}  // namespace

caf::actor spawn_transform(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                           std::shared_ptr<stage_metrics> metrics) {
  if (spec.options.detached)
    return sys.spawn<caf::detached>(transform_stage, spec, std::move(upstream), std::move(metrics));
  return sys.spawn(transform_stage, spec, std::move(upstream), std::move(metrics));
}

}  // namespace af::detail
