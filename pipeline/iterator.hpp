#pragma once

// A running iteration of a dataset: a blocking reader over its stage actors, whose position can be
// saved and resumed exactly.

#include <atomic>
#include <cstdint>
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
/// saved iterator had not yet handed out, provided the pipeline is deterministic: maps in order
/// (the default), shuffles seeded or unseeded (the seed is saved), and map functions that draw
/// random numbers seed them from the element, not from a global generator. Resuming re-runs the
/// input up to the saved position (it costs the time the pipeline takes to produce it again).
struct iterator_state {
  uint64_t base_seed = 0;   ///< the seed every unseeded shuffle derived its own from
  uint64_t consumed = 0;    ///< elements handed out before the save
  std::string fingerprint;  ///< the dataset's to_dot(): resuming another pipeline is refused

  /// A self-describing text form, for checkpoints.
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
           uint64_t already_consumed);
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
  /// The position after the elements handed out so far.
  iterator_state save() const;
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
  std::shared_ptr<consumer_signals> signals_;
  std::unique_ptr<autotuner> tuner_;  // stopped before the stream shuts down
};


}  // namespace af::data
