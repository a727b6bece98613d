#pragma once

// Internals of the interleave stage (interleave_stage.cpp merges, interleave_snapshot.cpp saves and
// restores). Included by those two translation units only: it carries CAF's actor headers.

#include <caf/stateful_actor.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "actors/resume_ordered.hpp"
#include "actors/stage_actor.hpp"

namespace af::detail {

struct child_stream {
  caf::actor producer;  // null: this cycle position holds no child
  flow::inbound in;
  std::deque<element> ready;
  uint64_t received = 0;
  bool ended = false;
  caf::error failure;
  // For snapshots: what makes the child again, or why nothing can.
  std::optional<element> key;
  std::string unsavable;
  // While a snapshot is being cut: its mark was asked for and has not come back yet; once it has,
  // the mark and how many of `ready` arrived before it.
  bool awaiting_mark = false;
  flow::snapshot_ptr mark;
  std::size_t ready_at_mark = 0;
};

/// A snapshot of the stage being cut: output pauses until every child and the input chain have
/// answered with their marks, so that together they describe one point of the output.
struct interleave_cut {
  std::size_t requests = 1;  // downstream requests it answers (each gets a mark of its own)
  std::size_t awaiting = 0;  // marks still to come
  std::string unsupported;   // why the cut cannot hold a position (then nothing is awaited)
};

struct interleave_state {
  child_inputs inputs;  // over generated inputs (open, and save/restore/reopen when savable)
  // An interleave over a pipeline's elements: the outer chain (read like a child) and the maker.
  child_stream outer;
  child_maker make_child;
  interleave_options options;
  std::unique_ptr<stage_output> out;
  std::vector<child_stream> cycle;
  std::deque<child_stream> ahead;
  bool outer_done = false;
  std::size_t cursor = 0;
  std::size_t in_block = 0;
  uint64_t children_opened = 0;
  bool step_pending = false;
  std::optional<interleave_cut> cut;
};

using interleave_actor = resume_ordered<caf::stateful_actor<interleave_state>>;

/// Spawns a child from its source (a chain of stages, a savable source, or a plain generator),
/// continuing from `resume` when given, and asks it for its first elements.
expected<child_stream> spawn_child(interleave_actor* self, child_source source, const chain_snapshot* resume);

/// Downstream asked for a snapshot: asks every open child and the input chain for theirs, or
/// answers at once when nothing is awaited.
void begin_cut(interleave_actor* self);
/// A child's (or the input chain's) mark arrived, or it ended before it could send one.
void on_child_mark(interleave_actor* self, child_stream& child, flow::snapshot_ptr mark);
void on_child_ended_in_cut(interleave_actor* self, child_stream& child);
/// Sets the stage up from a saved state (spec.restore): opener or input chain, open children,
/// the elements they had ready, the cycle's position. An error names what does not fit.
expected<void> restore_interleave(interleave_actor* self, const stage_spec& spec);

}  // namespace af::detail
