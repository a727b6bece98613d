#pragma once

// Span tracing for actors and stages. CAF-free: any thread may record.
//
// Hot path: record() appends to a buffer owned by the calling thread (registered once per thread,
// bounded; spans beyond the cap are counted as dropped, never stored). The collector locks each
// thread's buffer briefly; recording threads never contend with each other.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/error.hpp"

namespace af::trace {

/// What an actor was doing during a span.
enum class category : uint8_t {
  busy,               ///< running user code or a kernel
  waiting_for_input,  ///< had room to work but nothing to work on
  blocked_on_output,  ///< had work or results but no free output slot / no downstream credit
};

/// "busy", "waiting_for_input", "blocked_on_output"
const char* to_string(category c) noexcept;

/// Steady-clock time in nanoseconds (the clock every span uses).
int64_t now_ns() noexcept;

/// A small integer naming a string; interning keeps names off the hot path.
using name_id = uint32_t;
/// Interns `name` (takes a lock; call once per actor or span kind, not per span).
name_id intern(std::string_view name);

/// One recorded interval, as collected.
struct span {
  std::string name;   ///< what happened ("generate", "transform", "wait input")
  std::string actor;  ///< the actor or stage that did it
  category cat = category::busy;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t tid = 0;     ///< dense index of the recording thread
  uint32_t items = 0;   ///< items produced during a busy span (for items/s)
};

/// True while recording is on (one relaxed atomic load).
bool enabled() noexcept;
/// Clears every buffer and starts recording.
void start();
/// Stops recording; collected spans stay until the next start() or clear().
void stop();
/// Drops every recorded span and the dropped counter.
void clear();
/// Most spans one thread keeps before it counts further spans as dropped (default 1 << 16).
void set_per_thread_capacity(std::size_t spans);

/// Records a span if recording is on. Cheap when off.
void record(name_id name, name_id actor, category cat, int64_t start_ns, int64_t end_ns,
            uint32_t items = 0) noexcept;

/// Every thread's spans, sorted by start time.
std::vector<span> collect();
/// Spans that did not fit since the last start()/clear().
std::size_t dropped();

/// Chrome trace JSON ({"traceEvents":[{"ph":"X",...}]}), loadable in Perfetto and chrome://tracing.
std::string to_chrome_json(const std::vector<span>& spans);
/// Writes to_chrome_json(spans) to `path`; io_error naming the path on failure.
expected<void> write_chrome_trace(const std::string& path, const std::vector<span>& spans);

/// Where one actor's time went over its active window (its first span's start to its last's end).
struct actor_summary {
  std::string actor;
  double busy = 0;     ///< fractions of the window, 0..1
  double waiting = 0;
  double blocked = 0;
  double items_per_second = 0;
  uint64_t items = 0;
  int64_t window_ns = 0;
};

/// Per-actor summary and the bottleneck: the actor that was busy the largest share of its time
/// (the others then wait on it or are blocked behind it).
struct report {
  std::vector<actor_summary> actors;
  std::string bottleneck;
  /// A few lines: one per actor, then "bottleneck: 'map' (busy 97%); 'sink' waited 88% for input".
  std::string to_string() const;
};

report summarize(const std::vector<span>& spans);

/// Tracks what one actor is doing now and emits a span whenever that changes. Also accumulates the
/// time per category (counters for autotune), whether or not recording is on.
class activity {
 public:
  activity(std::string_view actor);
  /// Closes the current span (if any) and opens one of `cat` named `what`.
  void enter(category cat, name_id what) noexcept;
  /// Closes the current span; time until the next enter() counts nowhere.
  void leave(uint32_t items = 0) noexcept;
  /// Records a completed busy span of [start, now) and adds its time; leaves the actor idle.
  void busy_since(int64_t start_ns, name_id what, uint32_t items) noexcept;
  int64_t total_ns(category c) const noexcept { return totals_[static_cast<int>(c)]; }
  name_id actor() const noexcept { return actor_; }

 private:
  name_id actor_;
  bool open_ = false;
  category cat_ = category::busy;
  name_id what_ = 0;
  int64_t since_ = 0;
  int64_t totals_[3] = {0, 0, 0};
};

}  // namespace af::trace
