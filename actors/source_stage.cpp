// A source stage: pulls elements from a C++ generator into its output slots and sends them as the
// consumer's credit allows. It fills its slots ahead of demand (that is what prefetching is) but
// never beyond them, and sends nothing without credit.

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/resume_ordered.hpp"
#include "actors/stage_actor.hpp"

namespace af::detail {

namespace {

// -- state --------------------------------------------------------------------------------------

struct source_state {
  generator_fn gen;  // made per launch, so generators with state do not share it
  std::unique_ptr<element_source> savable;  // instead of gen, when the source can save its position
  std::unique_ptr<stage_output> out;
  trace::name_id generate_name = trace::intern("generate");
  bool step_pending = false;
};

using source_actor = detail::resume_ordered<caf::stateful_actor<source_state>>;

// -- behaviour ----------------------------------------------------------------------------------

// Generates until the slots are full, the stream ends, or the time slice is used up.
void run(source_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  out.act.leave();
  const int64_t start = trace::now_ns();
  uint32_t produced = 0;
  bool worked = false;
  while (!out.has_terminal() && out.free_slots() > 0 && trace::now_ns() - start < time_slice_ns) {
    worked = true;
    auto next = guarded("generator", [&] { return st.savable ? st.savable->next() : st.gen(); });
    if (!next) {
      out.set_terminal(out.stage_error(next.error_value()));
    } else if (!next->has_value()) {
      out.set_terminal(caf::error{});
    } else {
      out.buffer.push_back(std::move(**next));
      ++produced;
    }
  }
  if (worked) out.act.busy_since(start, st.generate_name, produced);
  out.metrics().items_in.fetch_add(produced, std::memory_order_relaxed);
  if (out.flush(self)) {
    self->quit();
    return;
  }
  if (!out.has_terminal() && out.free_slots() > 0) schedule_step(self);
  out.rest(false, out.buffer.size());
}

// A factory that throws or returns an empty generator yields a generator that fails the stream.
generator_fn call_make(const stage_spec& spec) {
  std::string why;
  if (auto gen = make_or_explain(spec.make_gen, why)) return gen;
  return [why]() -> expected<std::optional<element>> {
    return make_error(errc::invalid_argument, "generator factory " + why);
  };
}

// A snapshot starts here: the position after the last element generated goes behind them.
void start_mark(source_actor* self) {
  auto& st = self->state;
  auto mark = std::make_shared<chain_snapshot>();
  stage_state saved{st.out->name, {}, {}, {}};
  if (!st.savable && !st.gen) {
    mark->upstream_ended = true;  // restored as ended: nothing to save
  } else if (st.savable) {
    st.savable->save(saved);
    mark->stages.push_back(std::move(saved));
  } else {
    mark->unsupported = "source '" + st.out->name + "' cannot save its position (a generator)";
  }
  st.out->add_mark(std::move(mark));
}

// The savable source, restored where the spec says; a failure to make or restore it fails the
// stream at its first element.
void make_savable(source_actor* self, const stage_spec& spec) {
  auto& st = self->state;
  std::string why;
  st.savable = make_or_explain(spec.make_source, why);
  if (!st.savable) {
    st.out->set_terminal(st.out->stage_error(make_error(errc::invalid_argument, "source factory " + why)));
  } else if (spec.restore) {
    auto restored = guarded("restoring the source", [&] { return st.savable->restore(*spec.restore); });
    if (!restored) st.out->set_terminal(st.out->stage_error(restored.error_value()));
  }
}

caf::behavior source_stage(source_actor* self, stage_spec spec,
                           std::shared_ptr<stage_metrics> metrics) {
  self->state.out =
      std::make_unique<stage_output>(spec.name, spec.options.slots, std::move(metrics), spec.adds_to_shared_metrics);
  if (spec.restore_ended) self->state.out->set_terminal(caf::error{});  // it had ended before the snapshot
  else if (spec.make_source) make_savable(self, spec);
  else self->state.gen = call_make(spec);
  self->set_down_handler([self](const caf::down_msg& msg) {
    // Only the consumer is monitored: its death is a cancel.
    if (msg.source == self->state.out->port.consumer().address()) self->quit();
  });
  schedule_step(self);
  return caf::message_handler{
      [self](flow::cancel_atom) { self->quit(); },
      [self](flow::snapshot_atom) {
        start_mark(self);
        run(self);
      },
  }.or_else(producer_handlers(self, [](source_actor* a) { run(a); }));
}

}  // namespace

caf::actor spawn_source(caf::actor_system& sys, const stage_spec& spec,
                        std::shared_ptr<stage_metrics> metrics) {
  if (spec.options.detached)
    return sys.spawn<caf::detached>(source_stage, spec, std::move(metrics));
  return sys.spawn(source_stage, spec, std::move(metrics));
}

}  // namespace af::detail
