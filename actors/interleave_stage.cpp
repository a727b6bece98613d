// An interleave stage: a source that merges child streams in the order of tf.data's interleave.
// Each child is a source stage actor of its own (on the scheduler, or on its own thread when its
// generator blocks), or a chain of stage actors when it is a whole pipeline; either prepares up
// to `child_slots` elements under the flow protocol, and this actor only routes their batches
// into the fixed output order. Children thus work concurrently, and no thread waits on another.
// With a combine function the same machinery zips: all children open at once, one element of each
// per output.
//
// Order: the cycle holds up to `cycle_length` children; the output takes `block_length` elements
// from the child at the cursor, then moves to the next cycle position. A child that ends frees its
// position (the cursor moves on); an empty position is filled from the children opened ahead, else
// by opening the next one. A child's failure surfaces when the cursor reaches it with nothing
// before it, exactly where a sequential interleave would have met it.
//
// Snapshots (interleave_snapshot.cpp) pause the routing while the children's marks come in.

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <optional>

#include "actors/interleave_stage.hpp"

namespace af::detail {

expected<child_stream> spawn_child(interleave_actor* self, child_source source, const chain_snapshot* resume) {
  auto& st = self->state;
  child_stream child;
  child.key = std::move(source.key);
  const std::string name = st.out->name + "/child " + std::to_string(st.children_opened++);
  std::optional<pipeline> chain;
  if (source.stages) chain = *source.stages;
  else if (source.source)
    chain = pipeline::from_savable_source(name, std::move(source.source),
                                          {.slots = st.options.child_slots, .detached = source.blocking});
  if (chain) {
    child.unsavable = chain->snapshot_support();
    if (resume) {
      AF_TRY_ASSIGN(*chain, chain->resumed(*resume));
    }
    child.producer = spawn_chain(self->system(), *chain, st.out->metrics().inner);
  } else {
    if (resume) return make_error(errc::invalid_argument, "stage '" + st.out->name + "': a generator child cannot be restored");
    child.unsavable = "a child of stage '" + st.out->name + "' is a generator without a position";
    stage_spec spec;
    spec.what = stage_spec::kind::generator;
    spec.name = name;
    spec.options = {.slots = st.options.child_slots, .detached = source.blocking};
    spec.make_gen = [gen = std::move(source.gen)] { return gen; };
    spec.adds_to_shared_metrics = true;
    child.producer = spawn_source(self->system(), spec, st.out->metrics().inner);
  }
  if (!child.key && child.unsavable.empty())
    child.unsavable = "a child of stage '" + st.out->name + "' has nothing to make it again from";
  child.in = flow::inbound{child.producer};
  child.in.attach(self);
  child.in.grant_up_to(self, st.options.child_slots);
  return child;
}

namespace {

// The next child's source: from the opener, or made of the outer chain's next element (which
// check_outer made sure is there, or that the chain ended); nullopt once there are no more.
expected<std::optional<child_source>> next_source(interleave_state& st) {
  if (!st.outer.producer) return guarded("interleave input", [&] { return st.inputs.open(); });
  if (st.outer.ready.empty()) return std::optional<child_source>{};
  element e = std::move(st.outer.ready.front());
  st.outer.ready.pop_front();
  element key = e;  // tensors are shared: the key costs no copy of the data
  auto made = guarded("interleave function", [&] { return st.make_child(std::move(e)); });
  if (!made) return made.error_value();
  made->key = std::move(key);
  return std::optional<child_source>{std::move(*made)};
}

// Spawns the next child as a source stage (or chain) and asks it for its first elements; nullopt
// once the input is exhausted (then outer_done), an error when opening failed.
expected<std::optional<child_stream>> open_child(interleave_actor* self) {
  auto& st = self->state;
  if (st.outer_done) return std::optional<child_stream>{};
  auto opened = next_source(st);
  if (!opened) return opened.error_value();
  if (!opened->has_value()) {
    st.outer_done = true;
    return std::optional<child_stream>{};
  }
  AF_TRY_ASSIGN(auto child, spawn_child(self, std::move(**opened), nullptr));
  return std::optional<child_stream>{std::move(child)};
}

// Whether the next child can be opened now, over an outer chain: `waiting` while the chain has
// nothing ready yet, `failed` once it failed with nothing left before the failure (the output
// then carries it, where a sequential interleave would have met it).
enum class outer_state { can_open, waiting, failed };
outer_state check_outer(interleave_state& st) {
  auto& outer = st.outer;
  if (!outer.producer || st.outer_done || !outer.ready.empty()) return outer_state::can_open;
  if (outer.failure) {
    st.out->set_terminal(std::move(outer.failure));
    return outer_state::failed;
  }
  return outer.ended ? outer_state::can_open : outer_state::waiting;
}

child_stream* find_child(interleave_state& st, const caf::actor_addr& who) {
  if (st.outer.producer && st.outer.producer.address() == who) return &st.outer;
  for (auto& c : st.cycle)
    if (c.producer && c.producer.address() == who) return &c;
  for (auto& c : st.ahead)
    if (c.producer.address() == who) return &c;
  return nullptr;
}

void stop_children(interleave_actor* self) {
  auto& st = self->state;
  for (auto& c : st.cycle)
    if (c.producer) c.in.cancel(self);
  for (auto& c : st.ahead) c.in.cancel(self);
  if (st.outer.producer && !st.outer.in.closed()) st.outer.in.cancel(self);
  st.cycle.clear();
  st.ahead.clear();
}

void finish(interleave_actor* self) {
  stop_children(self);
  self->quit();
}

void advance(interleave_state& st) {
  st.in_block = 0;
  st.cursor = (st.cursor + 1) % st.cycle.size();
}

// Zip mode: every child opened once, each output combines the next element of every child.
// Returns true when it waits for a child.
bool merge_combined(interleave_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  if (!st.outer_done) {
    for (auto& slot : st.cycle) {
      auto child = open_child(self);
      if (!child) {
        out.set_terminal(out.stage_error(child.error_value()));
        return false;
      }
      if (!*child) break;
      slot = std::move(**child);
    }
    st.outer_done = true;
  }
  while (!out.has_terminal() && out.free_slots() > 0) {
    for (auto& slot : st.cycle) {
      if (slot.producer && !slot.ready.empty()) continue;
      if (slot.failure) {
        out.set_terminal(std::move(slot.failure));
        return false;
      }
      if (!slot.producer || slot.ended) {  // the shortest child ended: so does the stream
        out.set_terminal(caf::error{});
        return false;
      }
      return true;
    }
    std::vector<element> row;
    row.reserve(st.cycle.size());
    for (auto& slot : st.cycle) {
      row.push_back(std::move(slot.ready.front()));
      slot.ready.pop_front();
    }
    auto combined = guarded(st.out->name, [&] { return st.options.combine(std::move(row)); });
    if (!combined) {
      out.set_terminal(out.stage_error(combined.error_value()));
      return false;
    }
    out.buffer.push_back(std::move(*combined));
  }
  return false;
}

// Moves elements into the output in interleave order until the output is full or the child at
// the cursor has nothing ready yet. Returns true when it waits for a child.
bool merge(interleave_actor* self) {
  auto& st = self->state;
  if (st.cut) return true;  // paused until every child's mark is in
  if (st.options.combine) return merge_combined(self);
  auto& out = *st.out;
  while (!out.has_terminal() && out.free_slots() > 0) {
    while (st.ahead.size() < st.options.open_ahead && !st.outer_done) {
      const auto outer = check_outer(st);
      if (outer == outer_state::failed) return false;
      if (outer == outer_state::waiting) break;
      auto child = open_child(self);
      if (!child) {
        out.set_terminal(out.stage_error(child.error_value()));
        return false;
      }
      if (*child) st.ahead.push_back(std::move(**child));
    }
    auto& slot = st.cycle[st.cursor];
    if (slot.producer) {
      if (!slot.ready.empty()) {
        out.buffer.push_back(std::move(slot.ready.front()));
        slot.ready.pop_front();
        if (!st.options.key_field.empty() && slot.key && !slot.key->fields.empty())
          out.buffer.back().set(st.options.key_field, slot.key->fields.front().value);
        if (++st.in_block >= st.options.block_length) advance(st);
        continue;
      }
      if (slot.failure) {
        out.set_terminal(std::move(slot.failure));
        return false;
      }
      if (!slot.ended) return true;
      if (slot.received == 0 && st.options.end_on_empty_child) st.outer_done = true;
      slot = child_stream{};  // it ended and is drained: the position is free
      advance(st);
      continue;
    }
    if (!st.ahead.empty()) {
      slot = std::move(st.ahead.front());
      st.ahead.pop_front();
      continue;
    }
    if (!st.outer_done) {
      const auto outer = check_outer(st);
      if (outer == outer_state::failed) return false;
      if (outer == outer_state::waiting) return true;
      auto child = open_child(self);
      if (!child) {
        out.set_terminal(out.stage_error(child.error_value()));
        return false;
      }
      if (*child) slot = std::move(**child);
      continue;
    }
    const bool any_open = std::any_of(st.cycle.begin(), st.cycle.end(), [](const child_stream& c) { return c.producer; });
    if (!any_open) {
      out.set_terminal(caf::error{});
      return false;
    }
    advance(st);
  }
  return false;
}

void run(interleave_actor* self) {
  auto& st = self->state;
  auto& out = *st.out;
  out.act.leave();
  // Merging stops when the output is full; sending may free it again, and then no message need
  // come (the children may hold all their credit's worth ready, the consumer may have credit
  // out): merge on while sending makes room.
  bool waiting = false;
  for (std::size_t before = 0;;) {
    waiting = merge(self);
    before = out.buffer.size();
    if (out.flush(self)) {
      finish(self);
      return;
    }
    if (waiting || out.has_terminal() || out.buffer.size() >= before) break;
  }
  std::size_t held = out.buffer.size();
  // A child whose mark is awaited keeps credit whatever it has ready: its mark waits behind the
  // elements it holds, which are finite (its slots), and the output takes none meanwhile.
  auto top_up = [&](child_stream& c) {
    held += c.ready.size();
    if (c.producer && !c.ended && c.awaiting_mark) c.in.grant_up_to(self, st.options.child_slots);
    else if (c.producer && !c.ended && c.ready.size() < st.options.child_slots)
      c.in.grant_up_to(self, st.options.child_slots - c.ready.size(), flow::demand_step(st.options.child_slots));
  };
  for (auto& c : st.cycle) top_up(c);
  for (auto& c : st.ahead) top_up(c);
  // The outer chain: as many elements as the cycle and the children opened ahead may need.
  const std::size_t outer_wanted = st.options.cycle_length + st.options.open_ahead;
  if (st.outer.producer && !st.outer.ended && st.outer.awaiting_mark)
    st.outer.in.grant_up_to(self, outer_wanted);
  else if (st.outer.producer && !st.outer.ended && st.outer.ready.size() < outer_wanted)
    st.outer.in.grant_up_to(self, outer_wanted - st.outer.ready.size());
  held += st.outer.ready.size();
  out.rest(waiting, held);
}

void on_child_batch(interleave_actor* self, std::vector<element>& items) {
  auto& st = self->state;
  child_stream* c = find_child(st, self->current_sender() ? self->current_sender()->address() : caf::actor_addr{});
  if (!c || c->in.closed()) return;  // a child we cancelled already
  if (auto err = c->in.on_batch(items, st.out->name)) {
    c->failure = std::move(err);
    c->in.cancel(self);
  } else {
    if (c != &st.outer) st.out->metrics().items_in.fetch_add(items.size(), std::memory_order_relaxed);
    c->received += items.size();
    for (auto& e : items) c->ready.push_back(std::move(e));
  }
  run(self);
}

void on_child_done(interleave_actor* self, caf::error err) {
  auto& st = self->state;
  child_stream* c = find_child(st, self->current_sender() ? self->current_sender()->address() : caf::actor_addr{});
  if (!c || c->in.closed()) return;
  c->in.close();
  c->ended = true;
  c->failure = std::move(err);
  if (c->awaiting_mark) on_child_ended_in_cut(self, *c);
  run(self);
}

void on_child_mark_message(interleave_actor* self, flow::snapshot_ptr& mark) {
  auto& st = self->state;
  child_stream* c = find_child(st, self->current_sender() ? self->current_sender()->address() : caf::actor_addr{});
  if (!c || !c->awaiting_mark) return;  // a child we cancelled, or a request we gave up on
  on_child_mark(self, *c, std::move(mark));
  run(self);
}

// The inputs of this launch; a factory that throws or makes no opener fails the stream.
child_inputs make_inputs(const stage_spec& spec) {
  std::string why;
  try {
    if (spec.make_inputs) {
      auto inputs = spec.make_inputs();
      if (inputs.open) return inputs;
    }
    why = "made nothing";
  } catch (const std::exception& ex) {
    why = std::string{"threw: "} + ex.what();
  } catch (...) {
    why = "threw a non-standard exception";
  }
  const error err = make_error(errc::invalid_argument, "interleave input factory " + why);
  return child_inputs{.open = [err]() -> expected<std::optional<child_source>> { return err; }};
}

caf::behavior interleave_stage(interleave_actor* self, stage_spec spec, std::shared_ptr<stage_metrics> metrics) {
  auto& st = self->state;
  st.options = spec.interleave;
  st.options.cycle_length = std::max<std::size_t>(1, st.options.cycle_length);
  st.options.block_length = std::max<std::size_t>(1, st.options.block_length);
  st.options.child_slots = std::max<std::size_t>(1, st.options.child_slots);
  st.cycle.resize(st.options.cycle_length);
  st.out = std::make_unique<stage_output>(spec.name, spec.options.slots, std::move(metrics));
  if (spec.restore_ended) {
    st.out->set_terminal(caf::error{});  // it had ended before the snapshot this launch resumes
    st.inputs.open = []() -> expected<std::optional<child_source>> { return std::optional<child_source>{}; };
  } else if (spec.outer) {
    st.make_child = spec.make_child;
    if (!spec.restore) {
      st.outer.producer = spawn_chain(self->system(), *spec.outer, std::make_shared<stage_metrics>(spec.name + "/input"));
      st.outer.in = flow::inbound{st.outer.producer};
      st.outer.in.attach(self);
    }
  } else {
    st.inputs = make_inputs(spec);
  }
  if (spec.restore && !spec.restore_ended) {
    if (auto restored = restore_interleave(self, spec); !restored) st.out->set_terminal(st.out->stage_error(restored.error_value()));
  }
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& s = self->state;
    if (msg.source == s.out->port.consumer().address()) {
      finish(self);  // the consumer is gone: same as its cancel
      return;
    }
    child_stream* c = find_child(s, msg.source);
    if (!c || c->in.closed()) return;  // ended normally before it went down
    c->in.close();
    c->ended = true;
    c->failure = make_caf_error(errc::peer_down, "stage '" + s.out->name + "': a child stream terminated without end (" +
                                                     to_string(msg.reason) + ")");
    if (c->awaiting_mark) on_child_ended_in_cut(self, *c);
    run(self);
  });
  schedule_step(self);
  return caf::message_handler{
      [self](flow::batch_atom, std::vector<element>& items) { on_child_batch(self, items); },
      [self](flow::end_atom) { on_child_done(self, caf::error{}); },
      [self](flow::fail_atom, caf::error& err) { on_child_done(self, std::move(err)); },
      [self](flow::cancel_atom) { finish(self); },
      [self](flow::mark_atom, flow::snapshot_ptr& mark) { on_child_mark_message(self, mark); },
      [self](flow::snapshot_atom) {
        begin_cut(self);
        run(self);
      },
  }.or_else(producer_handlers(self, [](interleave_actor* a) { run(a); }));
}

}  // namespace

caf::actor spawn_interleave(caf::actor_system& sys, const stage_spec& spec, std::shared_ptr<stage_metrics> metrics) {
  // The children's work (reading, and transformations written inside the interleave function)
  // shows in the profile as one row beside this stage's own routing.
  metrics->inner = std::make_shared<stage_metrics>(spec.name + "/children");
  metrics->inner->parallelism.store(std::max<std::size_t>(1, spec.interleave.cycle_length), std::memory_order_relaxed);
  // Opening children must not block (the pipeline layer only builds this stage over inputs that
  // generate in place): the stage stays on the scheduler.
  return sys.spawn(interleave_stage, spec, std::move(metrics));
}

}  // namespace af::detail
