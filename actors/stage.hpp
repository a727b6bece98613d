#pragma once

// Pipeline stages as actors speaking the credit protocol of actors/flow_protocol.hpp.
//
// A pipeline is an immutable description (a source and a chain of transforms); launching it spawns
// one actor per stage. Every stage owns a fixed number of output slots, acts only when it has an
// input and a free slot, and asks upstream for exactly as much as it has room for, so a topology
// never holds more elements than the sum of its slots (plus, transiently, the extra outputs of one
// transform call that expands an element into several).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "ops/element.hpp"
#include "ops/error.hpp"

namespace af {

class runtime;

/// Per-stage settings.
struct stage_options {
  /// Output slots: elements the stage may hold ready for its consumer (at least 1).
  std::size_t slots = 2;
  /// Runs the stage on its own thread (for generators or functions that block on I/O).
  bool detached = false;
  /// Transform stages: inputs it may hold or have asked for, while an output slot is free (0: the
  /// same as slots). More than slots for operators that take many inputs per output (batch), so
  /// that their few big output slots do not throttle the credit they grant upstream.
  std::size_t input_slots = 0;
};

/// Produces the next element; nullopt ends the stream, an error fails it.
using generator_fn = std::function<expected<std::optional<element>>()>;
/// Maps one element to zero or more. An error or an exception fails the stream (never a crash).
using transform_fn = std::function<expected<std::vector<element>>(element)>;
/// Makes a fresh generator for each launch, so a launched pipeline never shares a generator's state
/// with another launch of the same description.
using generator_factory = std::function<generator_fn()>;

struct chain_snapshot;

/// What one stage holds at a snapshot of its pipeline: enough to continue exactly where it stood.
struct stage_state {
  std::string stage;          ///< the stage's name (checked on restore)
  std::string data;           ///< the stage's own bytes: positions, counters, RNG state
  std::vector<element> held;  ///< elements it holds: a shuffle buffer, a partial batch
  /// The chains running inside the stage, cut at the same point (an interleave's input and its
  /// open children), in the stage's own order.
  std::vector<chain_snapshot> nested;
};

/// A consistent cut through a chain of stages. A mark travels downstream behind the elements sent
/// before it, and each stage adds what it holds as the mark passes: every element is then either
/// inside some stage's saved state or downstream of the chain (where the reader keeps it), never
/// both, never neither. Costs what the stages hold, not what the chain has produced so far.
struct chain_snapshot {
  std::vector<stage_state> stages;  ///< source first; only the last stages when upstream_ended
  /// The stages before `stages` had ended when the mark was made: restored, they produce nothing.
  bool upstream_ended = false;
  /// Non-empty when a stage cannot save its state (it says which and why): resume must replay.
  std::string unsupported;
};

/// A stateful per-element operator run by a stage (batch, shuffle, take, ...). Each launch gets its
/// own instance from an operator_factory; the stage calls it from one thread at a time.
class stage_operator {
 public:
  virtual ~stage_operator() = default;
  /// Consumes one input and appends the outputs it completes (none while filling a buffer).
  virtual expected<void> push(element input, std::vector<element>& out) = 0;
  /// After upstream ended cleanly: appends some of what the operator still holds (a partial batch,
  /// the shuffle buffer). Called each time the stage has room, until a call appends nothing, so an
  /// operator holding many elements may hand them out a few at a time (`room` is a hint).
  virtual expected<void> finish(std::vector<element>& /*out*/, std::size_t /*room*/) { return {}; }
  /// True once the operator wants no more input (take reached its count): the stage cancels
  /// upstream and then finishes as if upstream had ended.
  virtual bool satisfied() const noexcept { return false; }
  /// Elements held inside the operator right now (reported as buffered).
  virtual std::size_t held() const noexcept { return 0; }
  /// Writes what the operator holds into `state` (data and held elements); false when it cannot,
  /// and a resume then replays the input instead.
  virtual bool save(stage_state& /*state*/) const { return false; }
  /// Continues from what save() wrote; an error names what does not fit.
  virtual expected<void> restore(const stage_state& state) {
    return make_error(errc::invalid_argument, "stage '" + state.stage + "' cannot restore a saved state");
  }
};

/// A generator whose position can be saved and restored (a range, in-memory slices, files), so
/// that a resume seeks instead of reproducing everything before the position.
class element_source {
 public:
  virtual ~element_source() = default;
  /// The next element; nullopt ends the stream, an error fails it.
  virtual expected<std::optional<element>> next() = 0;
  /// Writes the position after the last element next() returned.
  virtual void save(stage_state& state) const = 0;
  /// Continues from a position save() wrote; an error names what does not fit.
  virtual expected<void> restore(const stage_state& state) = 0;
};
/// Makes a fresh source for each launch.
using source_factory = std::function<std::unique_ptr<element_source>()>;
using operator_factory = std::function<std::unique_ptr<stage_operator>()>;

class pipeline;

/// One input stream of an interleave stage: a generator, or a pipeline of stages of its own.
/// A generator runs in a source stage (on a thread of its own when it blocks); a pipeline is
/// launched as stage actors inside the topology, which the interleave reads through the flow
/// protocol like any child, so no thread waits on it.
struct child_source {
  generator_fn gen;
  bool blocking = false;
  std::shared_ptr<const pipeline> stages;  // when set, `gen` is unused
  source_factory source;                   // when set (and no stages), `gen` is unused
  /// What makes this child again when its interleave is restored (the input element it was made
  /// of, its pass number): without one, or with only `gen`, a snapshot of the interleave cannot
  /// hold the child's position and the resume replays instead.
  std::optional<element> key;
};
/// Opens the next child stream of an interleave: nullopt once there are no more, an error fails the
/// stream. Called on the interleave stage's thread: it must not block for long.
using child_opener = std::function<expected<std::optional<child_source>>()>;
/// Makes a fresh opener for each launch.
using child_opener_factory = std::function<child_opener()>;
/// An opener whose position can be saved, and which re-makes a child from its key, so that an
/// interleave's snapshot covers its input and every open child.
struct child_inputs {
  child_opener open;
  /// Writes the opener's position (where its next child comes from).
  std::function<void(stage_state&)> save;
  std::function<expected<void>(const stage_state&)> restore;
  /// The child that `key` (a child_source::key this opener gave) made, from its start.
  std::function<expected<child_source>(const element& key)> reopen;
};
/// Makes fresh inputs for each launch.
using child_inputs_factory = std::function<child_inputs()>;
/// The child stream for one element of an interleave's outer input (an error fails the stream).
/// Called on the interleave stage's thread: it must not block for long.
using child_maker = std::function<expected<child_source>(element)>;

/// Settings of an interleave stage.
struct interleave_options {
  /// Children read at once; the output takes `block_length` elements from each in turn.
  std::size_t cycle_length = 1;
  std::size_t block_length = 1;
  /// Children opened before the cycle needs them (their elements are prepared meanwhile).
  std::size_t open_ahead = 0;
  /// Elements each child prepares ahead of the output.
  std::size_t child_slots = 64;
  /// A child that ends without an element ends the stream (repeat: an empty pass would otherwise
  /// open passes forever).
  bool end_on_empty_child = false;
  /// When set, each output carries its child's key (the key's first field) under this name:
  /// numbered passes tag their elements with the pass number this way.
  std::string key_field;
  /// When set, the stage zips instead of interleaving: it opens `cycle_length` children at once
  /// and each output is `combine` of the next element of every child, in child order; the stream
  /// ends with the shortest child.
  std::function<expected<element>(std::vector<element>&&)> combine;
};

/// Settings of a parallel map stage.
struct parallel_options {
  /// Worker actors applying the function concurrently (at least 1).
  std::size_t parallelism = 2;
  /// Outputs leave in input order (false: as soon as a worker finishes, for more throughput).
  bool deterministic = true;
  /// Elements the stage may hold, in flight and ready (0: 2 x parallelism). Also bounds how far a
  /// slow element can hold back the ones after it in deterministic mode.
  std::size_t slots = 0;
  /// Workers on threads of their own instead of the shared scheduler: the operating system then
  /// time-slices long functions with the pipeline's other actors, which keep moving.
  bool detached = false;
};

/// What a stage did so far (for autotune and reports); a snapshot, read while the stage runs.
struct stage_counters {
  std::string name;
  uint64_t items_in = 0;   ///< elements taken from upstream (generated, for a source)
  uint64_t items_out = 0;  ///< elements sent downstream (delivered, for a sink)
  int64_t busy_ns = 0;     ///< running the user's function
  int64_t waiting_ns = 0;  ///< room to work but no input
  int64_t blocked_ns = 0;  ///< output slots full, no credit from downstream
  uint64_t buffered = 0;   ///< elements held right now
  uint64_t slots = 0;      ///< output slots now (autotune may change them)
  uint64_t parallelism = 1;  ///< workers now (parallel map stages; 1 elsewhere)
  /// Stages running inside this one, summed: an interleave's children (reading and whatever
  /// transformations run inside them), whose parallelism is the cycle length. Empty elsewhere.
  std::vector<stage_counters> inner;
};

struct stage_spec;

/// An immutable description of a linear topology: a source followed by transforms. Cheap to copy.
class pipeline {
 public:
  /// A source stage pulling from `gen`.
  static pipeline from_generator(std::string name, generator_fn gen, stage_options options = {});
  /// An existing producer actor (any actor speaking the flow protocol, local or remote) as source.
  static pipeline from_actor(std::string name, caf::actor producer);
  /// A source stage pulling from a generator made afresh for each launch.
  static pipeline from_source(std::string name, generator_factory make, stage_options options = {});
  /// A source stage whose position is saved with its pipeline's snapshots (see chain_snapshot).
  static pipeline from_savable_source(std::string name, source_factory make, stage_options options = {});
  /// A source stage that interleaves child streams in the order of tf.data's interleave: children
  /// are opened in turn, `cycle_length` at a time, and `block_length` consecutive elements are taken
  /// from each before moving to the next; a child that ends is replaced by the next one opened.
  /// Every child runs as a source stage of its own, so children prepare elements concurrently (on
  /// the scheduler, or on their own thread when blocking) while the output order stays fixed.
  static pipeline interleave(std::string name, child_opener_factory open, interleave_options interleave,
                             stage_options options = {});
  /// The same over inputs whose position is saved with the stage's snapshots: a snapshot then
  /// holds the inputs' position, the cycle's cursor and, per open child, its key, the elements it
  /// had ready and its own chain's snapshot (children that are plain generators cannot be saved).
  static pipeline interleave(std::string name, child_inputs_factory inputs, interleave_options interleave,
                             stage_options options = {});
  /// The same interleave with children made from the elements of `outer`, a pipeline the stage
  /// launches as a chain of stage actors and reads through the flow protocol: one child per outer
  /// element, asked for only as the cycle needs them.
  static pipeline interleave(std::string name, pipeline outer, child_maker make, interleave_options interleave,
                             stage_options options = {});
  /// This pipeline followed by a transform stage.
  pipeline transform(std::string name, transform_fn fn, stage_options options = {}) const;
  /// This pipeline followed by a stage running a stateful operator (one instance per launch).
  pipeline apply(std::string name, operator_factory make, stage_options options = {}) const;
  /// This pipeline followed by a stage that fans elements out to `options.parallelism` worker actors
  /// each applying `fn` (called concurrently: it must be thread-safe) and merges their outputs.
  pipeline parallel_map(std::string name, transform_fn fn, parallel_options options = {}) const;

  /// The same stages, each continuing from its state in `snapshot` (taken by
  /// element_stream::snapshot on a launch of this pipeline); an error naming the stage whose state
  /// does not fit, or when the snapshot covers another chain.
  expected<pipeline> resumed(const chain_snapshot& snapshot) const;
  /// Empty when every stage can take part in a snapshot; otherwise why not (naming the stage).
  std::string snapshot_support() const;

  /// Upper bound on the elements the stages hold at once (excluding any sink).
  std::size_t total_slots() const;
  /// Graphviz description: one node per stage labelled with its slots.
  std::string to_dot() const;
  const std::vector<std::shared_ptr<const stage_spec>>& stages() const noexcept { return stages_; }

 private:
  // A pipeline of one source stage: `spec` with its generator or source set.
  static pipeline source_pipeline(stage_spec spec, std::string name, stage_options options);
  std::vector<std::shared_ptr<const stage_spec>> stages_;
};

/// A launched pipeline: owns its stage actors. Destroying it (or shutdown()) cancels the flow and
/// waits until every stage actor has terminated. The runtime must outlive it.
class topology {
 public:
  topology();
  topology(topology&&) noexcept;
  topology& operator=(topology&&) noexcept;
  ~topology();

  /// The last producer: a consumer actor attaches by sending it (flow::demand_atom, n).
  caf::actor tail() const;
  /// One snapshot per stage, source first (then the sink, if launched with one).
  std::vector<stage_counters> counters() const;
  /// Cancels every stage and waits until all have terminated; idempotent.
  void shutdown();
  /// Number of stages counters() reports (external sources excluded).
  std::size_t stage_count() const;
  /// Changes a running stage's output slots (index as in counters(); at least 1). Takes effect
  /// when the stage next acts; a stage never drops what it holds when its slots shrink. These two
  /// may be called from any thread, also while another shuts the topology down.
  void set_slots(std::size_t stage, std::size_t slots);
  /// Changes a running parallel map stage's worker count (ignored by other stages).
  void set_parallelism(std::size_t stage, std::size_t workers);
  /// Continues a sink paused by its handler (launch_pausable); callable from any thread.
  void resume_delivery();
  /// Asks the pipeline of a launch_pausable() sink for a snapshot, answered through its
  /// on_mark; callable from any thread.
  void request_snapshot();

  struct impl;
  explicit topology(std::unique_ptr<impl> state);

 private:
  std::unique_ptr<impl> impl_;
};

/// Spawns the stages of `p`; the tail waits for a consumer's demand.
topology launch(runtime& rt, const pipeline& p);

/// Settings of a sink.
struct sink_options {
  /// Credit the sink grants: elements delivered to it but not yet consumed, at most.
  std::size_t slots = 4;
  std::string name = "sink";
};

/// Called by a sink actor for each element, on a scheduler thread. An error cancels upstream and
/// becomes the stream's result.
using element_handler = std::function<expected<void>(element&&)>;
/// Called once when the stream ends: an error with errc::none on end, else the failure.
using done_handler = std::function<void(const error&)>;

/// Spawns `p` followed by an actor-side sink that hands every element to `on_element`.
topology launch(runtime& rt, const pipeline& p, sink_options options, element_handler on_element,
                done_handler on_done);

/// What a pausable sink's handler wants after an element.
enum class delivery {
  more,   ///< the next element, please
  pause,  ///< this one is consumed; hold the next ones until topology::resume_delivery()
  hold,   ///< pause before this one: it was not consumed (the handler left it untouched) and comes
          ///< first again after resume_delivery()
};
/// Called by a pausable sink for each element, on a scheduler thread.
using pausable_handler = std::function<expected<delivery>(element&&)>;

/// Called by a pausable sink with the snapshot topology::request_snapshot() asked for (see
/// chain_snapshot) and the elements delivered before its mark and not yet consumed: the
/// iteration's position is those elements, then the restored stages.
using mark_handler = std::function<void(chain_snapshot&&, std::vector<element>&&)>;

/// What a pausable sink does with its elements.
struct pausable_delivery {
  pausable_handler on_element;
  done_handler on_done;
  mark_handler on_mark;
  /// Elements handed to on_element before the pipeline's (those a resumed iteration had pending).
  std::vector<element> first;
};

/// launch() with a handler that may pause the delivery. While paused the sink keeps what arrives
/// and the credit for it, so the stages upstream fill their slots and stall there (the topology
/// stays up, its elements prepared); the end of the stream waits behind the held elements. A
/// snapshot requested while paused gets through: until its mark arrives, held elements take no
/// credit.
topology launch_pausable(runtime& rt, const pipeline& p, sink_options options, pausable_delivery delivery);

/// An input iterator over any `Source` with `expected<std::optional<element>> next()`; it equals
/// std::default_sentinel once the source ends or fails (the source keeps the error).
template <class Source>
class pull_iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = element;
  using difference_type = std::ptrdiff_t;

  pull_iterator() = default;
  /// Positioned on the source's first element.
  explicit pull_iterator(Source* source) : source_(source) { ++*this; }
  element& operator*() noexcept { return *current_; }
  element* operator->() noexcept { return &*current_; }
  pull_iterator& operator++() {
    auto next = source_->next();
    if (next && next->has_value())
      current_ = std::move(**next);
    else
      current_.reset();
    return *this;
  }
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const noexcept { return !current_.has_value(); }

 private:
  Source* source_ = nullptr;
  std::optional<element> current_;
};

/// A blocking reader over a launched pipeline, for plain (non-actor) code. Credit is tied to what
/// the reader consumes: at most `slots` elements wait for it. Destroying the stream early cancels
/// upstream and waits until the topology has shut down. Not thread-safe: one reader thread.
class element_stream {
 public:
  using iterator = pull_iterator<element_stream>;

  element_stream(element_stream&&) noexcept;
  element_stream& operator=(element_stream&&) noexcept;
  ~element_stream();

  /// The next element; nullopt after the end; the stream's error after a failure.
  expected<std::optional<element>> next();
  /// Range access: iteration stops at the end or at an error (then see status()).
  iterator begin();
  std::default_sentinel_t end() const noexcept { return {}; }
  /// errc::none while running and after a clean end; the failure otherwise.
  const error& status() const noexcept;
  /// Cancels upstream now and waits for the topology to shut down; next() then reports cancelled.
  void cancel();
  /// Counters of every stage, the reader last.
  std::vector<stage_counters> counters() const;
  /// A consistent cut of the running pipeline (see chain_snapshot), taken while it runs: a mark
  /// goes in at the source and this call reads on until it arrives. What it read meanwhile is
  /// returned in `read_ahead` (next() will not return it again), so the stream's position is
  /// `read_ahead` followed by the restored stages. Unsupported stages are named in the snapshot.
  struct position {
    chain_snapshot chain;
    std::vector<element> read_ahead;
  };
  position snapshot();
  /// topology::set_slots / set_parallelism of the running pipeline; callable from any thread.
  void set_slots(std::size_t stage, std::size_t slots);
  void set_parallelism(std::size_t stage, std::size_t workers);

  struct impl;
  explicit element_stream(std::unique_ptr<impl> state);

 private:
  std::unique_ptr<impl> impl_;
};


/// Launches `p` and returns a blocking reader: `for (auto& e : af::iterate(rt, p)) use(e);`
element_stream iterate(runtime& rt, const pipeline& p, sink_options options = {});

}  // namespace af
