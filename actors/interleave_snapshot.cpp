// Snapshots of an interleave stage. A cut pauses the output, asks every open child and the input
// chain for a mark, and keeps each child's elements that arrive before its mark; once all marks
// are in, the stage's state is its cycle position, the input's position (the opener's own state,
// or the input chain's snapshot), and per open child the key that makes it again, the elements it
// had ready and its chain's snapshot. Restoring makes every child again from its key and resumes
// its chain from that snapshot, so nothing is read twice and nothing is skipped.
//
// The state's data is one line of numbers: a version, cursor, in_block, children_opened,
// outer_done, the number of children, the input's ready count; then per child its place (cycle
// position, or -1 for opened ahead), received, and ready count. Held elements: per child its key
// then its ready elements, then the input's ready elements. Nested chains: the input first, then
// one per child, in the same order.

#include <caf/event_based_actor.hpp>

#include <sstream>

#include "actors/interleave_stage.hpp"

namespace af::detail {

namespace {

constexpr int state_version = 1;

// Every child a snapshot covers, in the state's order: the cycle, then those opened ahead.
template <class Fn>
void for_each_child(interleave_state& st, Fn fn) {
  for (std::size_t i = 0; i < st.cycle.size(); ++i)
    if (st.cycle[i].producer) fn(st.cycle[i], static_cast<int64_t>(i));
  for (auto& c : st.ahead) fn(c, int64_t{-1});
}

// Why `c` cannot be cut now (empty when it can).
std::string why_not(const interleave_state& st, const child_stream& c, const char* what) {
  if (c.failure) return "stage '" + st.out->name + "': " + what + " had failed (" + to_string(c.failure) + ")";
  if (!c.ended) return c.unsavable;
  return {};
}

// Asks `c` for its mark, unless it has ended (then what it has ready is all it will give).
void ask(interleave_actor* self, child_stream& c) {
  auto& cut = *self->state.cut;
  if (c.ended) {
    c.mark = std::make_shared<chain_snapshot>();
    c.mark->upstream_ended = true;
    c.ready_at_mark = c.ready.size();
    return;
  }
  c.awaiting_mark = true;
  ++cut.awaiting;
  self->send(c.producer, flow::snapshot_atom::value);
}

void answer(interleave_actor* self, const chain_snapshot& mark) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.cut->requests; ++i) st.out->add_mark(std::make_shared<chain_snapshot>(mark));
}

void forget_marks(interleave_state& st) {
  auto clear = [](child_stream& c) {
    c.awaiting_mark = false;
    c.mark.reset();
    c.ready_at_mark = 0;
  };
  for (auto& c : st.cycle) clear(c);
  for (auto& c : st.ahead) clear(c);
  clear(st.outer);
}

// Every mark is in: composes the stage's state and sends one mark per request behind the output
// buffered so far; the output resumes.
void finish_cut(interleave_actor* self) {
  auto& st = self->state;
  chain_snapshot mark;
  if (!st.cut->unsupported.empty()) {
    mark.unsupported = st.cut->unsupported;
  } else {
    stage_state own{st.out->name, {}, {}, {}};
    chain_snapshot input;
    if (st.outer.producer) {
      input = *st.outer.mark;
    } else {
      stage_state opener{"inputs", {}, {}, {}};
      st.inputs.save(opener);
      input.stages.push_back(std::move(opener));
    }
    own.nested.push_back(std::move(input));
    std::ostringstream line;
    std::size_t children = 0;
    for_each_child(st, [&](child_stream&, int64_t) { ++children; });
    line << state_version << ' ' << st.cursor << ' ' << st.in_block << ' ' << st.children_opened << ' '
         << (st.outer_done ? 1 : 0) << ' ' << children << ' ' << st.outer.ready_at_mark;
    for_each_child(st, [&](child_stream& c, int64_t place) {
      line << ' ' << place << ' ' << c.received << ' ' << c.ready_at_mark;
      own.held.push_back(*c.key);
      for (std::size_t i = 0; i < c.ready_at_mark; ++i) own.held.push_back(c.ready[i]);
      own.nested.push_back(*c.mark);
    });
    for (std::size_t i = 0; i < st.outer.ready_at_mark; ++i) own.held.push_back(st.outer.ready[i]);
    own.data = line.str();
    mark.stages.push_back(std::move(own));
  }
  answer(self, mark);
  st.cut.reset();
  forget_marks(st);
}

}  // namespace

void begin_cut(interleave_actor* self) {
  auto& st = self->state;
  if (st.cut) {
    ++st.cut->requests;  // the output is paused: the same point answers it too
    return;
  }
  if (st.out->has_terminal()) {
    // Ended (or failed) with its output buffered: after the mark there is nothing more.
    chain_snapshot mark;
    mark.upstream_ended = true;
    if (st.out->terminal()) mark.unsupported = "stage '" + st.out->name + "' had failed";
    st.out->add_mark(std::make_shared<chain_snapshot>(std::move(mark)));
    return;
  }
  st.cut.emplace();
  auto& cut = *st.cut;
  if (!st.outer.producer && !st.inputs.save)
    cut.unsupported = "stage '" + st.out->name + "' cannot save the position of its inputs";
  if (cut.unsupported.empty() && st.outer.producer) cut.unsupported = why_not(st, st.outer, "its input");
  for_each_child(st, [&](child_stream& c, int64_t) {
    if (cut.unsupported.empty()) cut.unsupported = why_not(st, c, "a child");
  });
  if (!cut.unsupported.empty()) {
    finish_cut(self);
    return;
  }
  if (st.outer.producer) ask(self, st.outer);
  for_each_child(st, [&](child_stream& c, int64_t) { ask(self, c); });
  if (cut.awaiting == 0) finish_cut(self);
}

void on_child_mark(interleave_actor* self, child_stream& child, flow::snapshot_ptr mark) {
  auto& st = self->state;
  child.awaiting_mark = false;
  child.ready_at_mark = child.ready.size();
  if (!mark) mark = std::make_shared<chain_snapshot>();
  if (!mark->unsupported.empty() && st.cut->unsupported.empty())
    st.cut->unsupported = "a child of stage '" + st.out->name + "': " + mark->unsupported;
  child.mark = std::move(mark);
  if (--st.cut->awaiting == 0) finish_cut(self);
}

void on_child_ended_in_cut(interleave_actor* self, child_stream& child) {
  auto& st = self->state;
  if (child.failure && st.cut->unsupported.empty()) st.cut->unsupported = why_not(st, child, "a child");
  auto ended = std::make_shared<chain_snapshot>();
  ended->upstream_ended = true;  // it ended before our request reached it: it had sent everything
  on_child_mark(self, child, std::move(ended));
}

expected<void> restore_interleave(interleave_actor* self, const stage_spec& spec) {
  auto& st = self->state;
  const stage_state& saved = *spec.restore;
  const std::string what = "stage '" + st.out->name + "': saved state: ";
  auto bad = [&](const std::string& why) { return make_error(errc::malformed_input, what + why); };
  std::istringstream line{saved.data};
  int version = 0;
  std::size_t children = 0, outer_ready = 0;
  int outer_done = 0;
  line >> version >> st.cursor >> st.in_block >> st.children_opened >> outer_done >> children >> outer_ready;
  if (!line || version != state_version) return bad("the header does not read as version " + std::to_string(state_version));
  if (st.cursor >= st.cycle.size() || children > st.children_opened || saved.nested.size() != children + 1)
    return bad("the cycle position or child count does not fit this interleave");
  st.outer_done = outer_done != 0;
  std::size_t next_held = 0;
  auto take_held = [&](std::size_t n, std::deque<element>& into) -> expected<void> {
    if (n > saved.held.size() - next_held) return bad("it holds fewer elements than its header counts");
    for (std::size_t i = 0; i < n; ++i) into.push_back(saved.held[next_held++]);
    return {};
  };
  if (spec.outer) {
    AF_TRY_ASSIGN(auto outer, spec.outer->resumed(saved.nested[0]));
    st.outer.producer = spawn_chain(self->system(), outer, std::make_shared<stage_metrics>(spec.name + "/input"));
    st.outer.in = flow::inbound{st.outer.producer};
    st.outer.in.attach(self);
  } else {
    if (!st.inputs.restore || !st.inputs.reopen) return bad("its inputs cannot restore a position");
    if (saved.nested[0].stages.size() != 1) return bad("the inputs' position is missing");
    AF_TRY(st.inputs.restore(saved.nested[0].stages[0]));
  }
  const uint64_t opened = st.children_opened;
  for (std::size_t k = 0; k < children; ++k) {
    int64_t place = 0;
    uint64_t received = 0;
    std::size_t ready = 0;
    line >> place >> received >> ready;
    if (!line || place < -1 || place >= static_cast<int64_t>(st.cycle.size()) ||
        (place >= 0 && st.cycle[static_cast<std::size_t>(place)].producer))
      return bad("child " + std::to_string(k) + " has no place in the cycle");
    if (next_held >= saved.held.size()) return bad("child " + std::to_string(k) + " has no key");
    const element& key = saved.held[next_held++];
    auto source = guarded("interleave function", [&]() -> expected<child_source> {
      if (spec.outer) return st.make_child(key);
      return st.inputs.reopen(key);
    });
    if (!source) return source.error_value();
    source->key = key;
    st.children_opened = opened - children + k;  // restored children keep their names
    AF_TRY_ASSIGN(auto child, spawn_child(self, std::move(*source), &saved.nested[k + 1]));
    child.received = received;
    AF_TRY(take_held(ready, child.ready));
    if (place >= 0) st.cycle[static_cast<std::size_t>(place)] = std::move(child);
    else st.ahead.push_back(std::move(child));
  }
  st.children_opened = opened;
  AF_TRY(take_held(outer_ready, st.outer.ready));
  if (next_held != saved.held.size()) return bad("it holds more elements than its header counts");
  std::string rest;
  if (line >> rest) return bad("the header has more fields than its children need");
  return {};
}

}  // namespace af::detail
