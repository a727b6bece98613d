#pragma once

// A running iteration of a dataset: a blocking reader over its stage actors, whose position can be
// saved and resumed exactly.

#include <atomic>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/stage.hpp"
#include "pipeline/dataset.hpp"

namespace af::data {

struct iteration_state;
struct consumer_signals;
struct tunable_stage;
class autotuner;

/// Where an iteration stands. Resuming from it (dataset::resume) yields exactly the elements the
/// saved iterator had not yet handed out.
///
/// Usually it holds every stage's own state, as tf.data's checkpoints do: file and record offsets,
/// positions in ranges and slices, shuffle buffers with their generator's state, partial batches,
/// counters, and the elements that were on their way to the reader. A resume seeks and refills
/// from them, so it costs what the stages hold, not what the iteration had produced.
///
/// Pipelines with a stage that cannot save its state (`replay_reason` names it: a user generator,
/// also one still running as an interleave's child, a cache, an actor source) are resumed by
/// replay instead: the input is run again
/// and the first `consumed` elements dropped. That is exact when the pipeline is deterministic:
/// maps in order (the default), shuffles seeded or unseeded (the seed is saved), and map
/// functions that seed their random numbers from the element.
struct iterator_state {
  uint64_t base_seed = 0;   ///< the seed every unseeded shuffle derived its own from
  uint64_t consumed = 0;    ///< elements handed out before the save
  std::string fingerprint;  ///< the dataset's to_dot(): resuming another pipeline is refused
  /// Every stage's state, source first; empty when the resume replays.
  std::optional<chain_snapshot> stages;
  /// Elements produced before the save and not yet handed out: a resume hands them out first.
  std::vector<element> pending;
  /// Why a resume replays (the stage that cannot save its state); empty when it restores.
  std::string replay_reason;

  /// A self-describing form for checkpoints (a text header, then the stages' state in binary).
  std::string serialize() const;
  /// The inverse of serialize(); malformed_input naming what is wrong.
  static expected<iterator_state> deserialize(std::string_view text);
};

/// Elements of one iteration, in order. Destroying it early cancels the pipeline and waits until
/// every stage has stopped. One reader thread.
class iterator {
 public:
  using range_iterator = pull_iterator<iterator>;

  iterator(element_stream stream, std::shared_ptr<iteration_state> state, std::string fingerprint,
           uint64_t already_consumed, std::vector<element> pending = {});
  iterator(iterator&&) noexcept;
  iterator& operator=(iterator&&) noexcept;
  ~iterator();

  /// The next element; nullopt after the end; the pipeline's error (naming stage, file, record,
  /// offset, feature as they apply) after a failure.
  expected<std::optional<element>> next();
  /// Range access: `for (auto& e : ds.iterate(rt))`; stops at the end or at an error (see status()).
  range_iterator begin();
  std::default_sentinel_t end() const noexcept { return {}; }
  /// errc::none while running and after a clean end; the failure otherwise.
  const error& status() const noexcept { return stream_->status(); }
  /// Every stage's counters, source first, the reader last.
  std::vector<stage_counters> counters() const { return stream_->counters(); }
  /// Errors skipped under ignore_errors() so far.
  iteration_stats stats() const;
  /// The position after the elements handed out so far. Takes a snapshot of the running stages
  /// (see iterator_state): the elements the pipeline produced meanwhile stay with this iterator
  /// and are handed out next, so saving never loses or repeats one.
  iterator_state save();
  /// Time next() spent waiting for the pipeline (the consumer's idle time), in nanoseconds.
  int64_t waited_ns() const noexcept;
  /// Stops the pipeline now.
  void cancel() { stream_->cancel(); }

  /// Starts an autotuner over this iteration's stages (dataset::iterate does, when asked to).
  void attach_tuner(std::vector<tunable_stage> knobs, autotune_options options);

 private:
  std::unique_ptr<element_stream> stream_;  // on the heap: the tuner keeps its address across moves
  std::shared_ptr<iteration_state> state_;
  std::string fingerprint_;
  uint64_t consumed_ = 0;
  std::deque<element> pending_;  // handed out before the stream's next elements
  std::shared_ptr<consumer_signals> signals_;
  std::unique_ptr<autotuner> tuner_;  // stopped before the stream shuts down
};


}  // namespace af::data
