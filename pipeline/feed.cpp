// A dataset feeding an actor: the topology ends in a sink actor that calls the feed's handler.

#include "pipeline/feed.hpp"

#include <condition_variable>
#include <mutex>

#include "actors/tracing.hpp"
#include "pipeline/autotune.hpp"
#include "pipeline/node.hpp"

namespace af::data {

namespace {

// Shared by the consuming actor (which writes while the feed runs) and the waiting caller (which
// reads after `done`, under the mutex that published it).
struct feed_progress {
  std::mutex mtx;
  std::condition_variable finished;
  bool done = false;
  error status;
  bool handler_failed = false;
  bool stopped = false;
  uint64_t handled = 0;
  int64_t idle_since_ns = 0;  // when the handler last returned (0: not called yet)
};

element_handler consume_with(feed_handler handler, std::string name, std::shared_ptr<feed_progress> progress,
                             std::shared_ptr<consumer_signals> signals) {
  return [handler = std::move(handler), name = std::move(name), progress = std::move(progress),
          signals = std::move(signals)](element&& e) -> expected<void> {
    auto& p = *progress;
    const int64_t start = trace::now_ns();
    // The autotuner grows prefetch buffers while the consumer waits for its elements.
    if (p.idle_since_ns != 0) signals->waited_ns.fetch_add(start - p.idle_since_ns, std::memory_order_relaxed);
    signals->element_bytes.store(e.nbytes(), std::memory_order_relaxed);
    auto verdict = guarded(name, [&] { return handler(std::move(e)); });
    p.idle_since_ns = trace::now_ns();
    ++p.handled;
    if (!verdict) {
      p.handler_failed = true;
      return std::move(verdict).error_value();
    }
    if (*verdict == feed_verdict::stop) {
      p.stopped = true;
      return make_error(errc::cancelled, name + " stopped the feed");
    }
    return {};
  };
}

}  // namespace

expected<feed_result> feed(runtime& rt, const dataset& ds, feed_handler handler, feed_options options) {
  uint64_t base_seed = 0, consumed = 0;
  if (options.from) {
    AF_TRY(check_resumable(ds, *options.from));
    base_seed = options.from->base_seed;
    consumed = options.from->consumed;
  } else {
    base_seed = random_seed();
  }
  auto ctx = top_level_context(rt, base_seed);
  const pipeline stages = positioned_at(ds, consumed).root()->build(ctx);

  auto progress = std::make_shared<feed_progress>();
  auto signals = std::make_shared<consumer_signals>();
  done_handler on_done = [progress](const error& status) {
    std::lock_guard<std::mutex> guard{progress->mtx};
    progress->status = status;
    progress->done = true;
    progress->finished.notify_all();
  };
  topology topo = launch(rt, stages, {.slots = std::max<std::size_t>(options.slots, 1), .name = options.name},
                         consume_with(std::move(handler), options.name, progress, signals), std::move(on_done));

  std::vector<tunable_stage> knobs;
  {
    std::lock_guard<std::mutex> guard{ctx.tunables->mtx};
    knobs = ctx.tunables->stages;
  }
  std::unique_ptr<autotuner> tuner;
  if (!knobs.empty()) {
    tuning_target target{[&topo] { return topo.counters(); },
                         [&topo](std::size_t stage, std::size_t slots) { topo.set_slots(stage, slots); },
                         [&topo](std::size_t stage, std::size_t workers) { topo.set_parallelism(stage, workers); }};
    tuner = std::make_unique<autotuner>(std::move(target), std::move(knobs), options.tuning, signals);
  }

  feed_result out;
  {
    std::unique_lock<std::mutex> lock{progress->mtx};
    progress->finished.wait(lock, [&] { return progress->done; });
    const bool clean_stop = progress->stopped && progress->status.code == errc::cancelled;
    out.status = clean_stop ? error{} : progress->status;
    out.handler_failed = progress->handler_failed;
    out.handled = progress->handled;
  }
  tuner.reset();  // before the topology it adjusts goes away
  topo.shutdown();
  out.counters = topo.counters();
  out.stats.skipped_errors = ctx.state->skipped.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{ctx.state->mtx};
  out.stats.first_skipped_error = ctx.state->first_skipped;
  return out;
}

}  // namespace af::data
