#pragma once

// A dataset feeding an actor. Its elements reach, through the credit protocol, a handler that runs
// on the consuming actor (a model replica for fit, evaluate and predict), one element at a time,
// while the caller's thread only waits for the end. The consumer's mailbox holds at most `slots`
// elements, so a slow handler stalls the pipeline instead of piling elements up.
//
//   auto fed = af::data::feed(rt, ds, [&](af::element&& batch) -> af::expected<af::data::feed_verdict> {
//     AF_TRY(step(batch));
//     return af::data::feed_verdict::more;
//   }, {.name = "replica"});

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/dataset.hpp"
#include "pipeline/iterator.hpp"

namespace af {
class backend;
}  // namespace af

namespace af::data {

/// What a feed handler wants after an element.
enum class feed_verdict {
  more,   ///< the next element, please
  stop,   ///< no more: upstream is cancelled and the feed ends cleanly
  pause,  ///< this one is handled; the next ones wait until feed_session::resume()
  hold,   ///< pause before this one: it was not handled (the handler left it untouched) and
          ///< comes first again after resume()
};

/// Called on the consuming actor for each element, one call at a time. An error (or an exception)
/// ends the feed with that error and cancels upstream.
using feed_handler = std::function<expected<feed_verdict>(element&&)>;

struct feed_options {
  /// The consuming actor's name in traces, counters and errors.
  std::string name = "consumer";
  /// Elements that may wait for the consumer while its handler works (its prefetch; at least 1).
  std::size_t slots = 2;
  /// Continue where this saved position left off (iterator::save, feed_session::snapshot): its
  /// pending elements first, then the stages restored from their state; from the start otherwise.
  std::optional<iterator_state> from;
  /// Limits of the autotuner, which runs while the dataset has autotuned stages.
  autotune_options tuning;
  /// The device whose actor the consumer is: graphs the handler runs (a model's steps) run there.
  /// Null: the runtime's CPU (runtime::cpu_device()).
  std::shared_ptr<backend> device;
};

/// How a feed ended.
struct feed_result {
  /// errc::none after the end of the dataset or a stop; the failure otherwise.
  error status;
  /// True when `status` came from the handler (it names its own context); false when the pipeline
  /// failed (the error names stage, file, record and offset as they apply).
  bool handler_failed = false;
  /// Elements the handler was called with.
  uint64_t handled = 0;
  /// Errors skipped under ignore_errors().
  iteration_stats stats;
  /// Every stage's counters when the feed ended, source first, the consuming actor last.
  std::vector<stage_counters> counters;
};

/// Launches `ds` into an actor calling `handler` and blocks until the feed ends; the handler's
/// effects are visible to the caller when it returns. A pause is resumed at once. An error only
/// when `options.from` belongs to another pipeline.
expected<feed_result> feed(runtime& rt, const dataset& ds, feed_handler handler, feed_options options = {});

/// A running feed whose handler may pause it (feed_verdict::pause or hold): the caller then works
/// with the handler's effects (a trainer validates, writes checkpoints) while the topology stays
/// up, its stages filling their slots, and resumes it. Destroying a session stops the feed.
class feed_session {
 public:
  feed_session(feed_session&&) noexcept;
  feed_session& operator=(feed_session&&) noexcept;
  ~feed_session();
  /// Blocks until the handler paused the feed (true: resume() continues it) or the feed ended
  /// (false: finish() tells how). The handler's effects are visible to the caller either way.
  bool wait();
  /// Continues a paused feed.
  void resume();
  /// The position after the elements handled so far; only while paused. Takes a snapshot of the
  /// running stages as iterator::save() does: the elements produced meanwhile stay with the feed
  /// (handled after resume()) and are the position's `pending`. A pipeline with a stage that
  /// cannot save its state gives a position that replays (replay_reason says why).
  iterator_state snapshot();
  /// Stops the feed if it still runs (a stop by the caller counts as a clean end) and returns how
  /// it ended; the session is spent afterwards.
  feed_result finish();

  struct impl;
  explicit feed_session(std::unique_ptr<impl> state);

 private:
  std::unique_ptr<impl> impl_;
};

/// Launches `ds` into an actor calling `handler` and returns at once. An error only when
/// `options.from` belongs to another pipeline.
expected<feed_session> start_feed(runtime& rt, const dataset& ds, feed_handler handler, feed_options options = {});

}  // namespace af::data
