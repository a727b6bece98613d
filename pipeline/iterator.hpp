#pragma once

// A running iteration of a dataset: a blocking reader over its stage actors.

#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "actors/stage.hpp"
#include "pipeline/dataset.hpp"

namespace af::data {

struct iteration_state;

/// Elements of one iteration, in order. Destroying it early cancels the pipeline and waits until
/// every stage has stopped. One reader thread.
class iterator {
 public:
  iterator(element_stream stream, std::shared_ptr<iteration_state> state);
  iterator(iterator&&) noexcept;
  iterator& operator=(iterator&&) noexcept;
  ~iterator();

  /// The next element; nullopt after the end; the pipeline's error (naming stage, file, record,
  /// offset, feature as they apply) after a failure.
  expected<std::optional<element>> next();
  /// Range access: `for (auto& e : ds.iterate(rt))`; stops at the end or at an error (see status()).
  element_stream::iterator begin() { return stream_.begin(); }
  std::default_sentinel_t end() const noexcept { return {}; }
  /// errc::none while running and after a clean end; the failure otherwise.
  const error& status() const noexcept { return stream_.status(); }
  /// Every stage's counters, source first, the reader last.
  std::vector<stage_counters> counters() const { return stream_.counters(); }
  /// Errors skipped under ignore_errors() so far.
  iteration_stats stats() const;
  /// Stops the pipeline now.
  void cancel() { stream_.cancel(); }

 private:
  element_stream stream_;
  std::shared_ptr<iteration_state> state_;
};

}  // namespace af::data
