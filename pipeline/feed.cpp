// A dataset feeding an actor: the topology ends in a sink actor that calls the feed's handler.

#include "pipeline/feed.hpp"

#include <condition_variable>
#include <mutex>

#include "actors/runtime.hpp"
#include "actors/tracing.hpp"
#include "ops/runtime/executor.hpp"
#include "pipeline/autotune.hpp"
#include "pipeline/node.hpp"

namespace af::data {

namespace {

// Shared by the consuming actor (which writes while the feed runs) and the waiting caller (which
// reads while the feed is paused or after it is done, under the mutex that published either).
struct feed_progress {
  std::mutex mtx;
  std::condition_variable changed;
  bool done = false;
  bool paused = false;
  error status;
  bool handler_failed = false;
  bool stopped = false;
  uint64_t handled = 0;
  int64_t idle_since_ns = 0;  // when the handler last returned (0: not called yet)
  // The answer to feed_session::snapshot()'s request.
  bool marked = false;
  chain_snapshot mark;
  std::vector<element> before_mark;
};

// The consuming actor is a device actor: graphs its handler runs (a model's steps) run on `device`
// on its own thread, without a request to another actor.
pausable_handler consume_with(feed_handler handler, std::string name, std::shared_ptr<feed_progress> progress,
                              std::shared_ptr<consumer_signals> signals, std::shared_ptr<backend> device) {
  return [handler = std::move(handler), name = std::move(name), progress = std::move(progress),
          signals = std::move(signals), device = std::move(device)](element&& e) -> expected<delivery> {
    auto& p = *progress;
    const int64_t start = trace::now_ns();
    // The autotuner grows prefetch buffers while the consumer waits for its elements.
    if (p.idle_since_ns != 0) signals->waited_ns.fetch_add(start - p.idle_since_ns, std::memory_order_relaxed);
    signals->element_bytes.store(e.nbytes(), std::memory_order_relaxed);
    auto verdict = guarded(name, [&] {
      device_actor_scope on{*device};
      return handler(std::move(e));
    });
    p.idle_since_ns = trace::now_ns();
    if (!verdict) {
      ++p.handled;
      p.handler_failed = true;
      return std::move(verdict).error_value();
    }
    switch (*verdict) {
      case feed_verdict::more: ++p.handled; return delivery::more;
      case feed_verdict::stop:
        ++p.handled;
        p.stopped = true;
        return make_error(errc::cancelled, name + " stopped the feed");
      case feed_verdict::pause:
      case feed_verdict::hold: {
        if (*verdict == feed_verdict::pause) ++p.handled;
        p.idle_since_ns = 0;  // a pause is not the pipeline keeping the consumer waiting
        std::lock_guard<std::mutex> guard{p.mtx};
        p.paused = true;
        p.changed.notify_all();
        return *verdict == feed_verdict::pause ? delivery::pause : delivery::hold;
      }
    }
    return delivery::more;
  };
}

}  // namespace

struct feed_session::impl {
  build_context ctx;
  uint64_t consumed_before = 0;  // elements the resumed position had handed out
  std::string fingerprint;
  std::string snapshot_support;
  std::shared_ptr<feed_progress> progress = std::make_shared<feed_progress>();
  topology topo;
  std::unique_ptr<autotuner> tuner;
  bool spent = false;
};

feed_session::feed_session(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
feed_session::feed_session(feed_session&&) noexcept = default;
feed_session& feed_session::operator=(feed_session&& other) noexcept {
  if (this != &other) {
    if (impl_ && !impl_->spent) finish();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
feed_session::~feed_session() {
  if (impl_ && !impl_->spent) finish();
}

bool feed_session::wait() {
  auto& p = *impl_->progress;
  std::unique_lock<std::mutex> lock{p.mtx};
  p.changed.wait(lock, [&] { return p.done || p.paused; });
  return !p.done;
}

void feed_session::resume() {
  {
    std::lock_guard<std::mutex> guard{impl_->progress->mtx};
    if (impl_->progress->done || !impl_->progress->paused) return;
    impl_->progress->paused = false;
  }
  impl_->topo.resume_delivery();
}

iterator_state feed_session::snapshot() {
  auto& s = *impl_;
  auto& p = *s.progress;
  iterator_state out{s.ctx.state->base_seed, s.consumed_before, s.fingerprint, std::nullopt, {}, {}};
  {
    std::lock_guard<std::mutex> guard{p.mtx};
    out.consumed += p.handled;
    p.marked = false;
  }
  if (!s.snapshot_support.empty()) {
    out.replay_reason = s.snapshot_support;
    return out;
  }
  s.topo.request_snapshot();
  std::unique_lock<std::mutex> lock{p.mtx};
  // The sink answers every request before it reports the end, so `done` alone means the request
  // found it gone.
  p.changed.wait(lock, [&] { return p.marked || p.done; });
  if (!p.marked) {
    out.replay_reason = "the feed had ended";
  } else if (!p.mark.unsupported.empty()) {
    out.replay_reason = std::move(p.mark.unsupported);
  } else {
    out.stages = std::move(p.mark);
    out.pending = std::move(p.before_mark);
  }
  return out;
}

feed_result feed_session::finish() {
  auto& s = *impl_;
  auto& p = *s.progress;
  bool by_caller = false;
  {
    std::lock_guard<std::mutex> guard{p.mtx};
    by_caller = !p.done;
  }
  s.tuner.reset();  // before the topology it adjusts goes away
  s.topo.shutdown();
  feed_result out;
  {
    std::unique_lock<std::mutex> lock{p.mtx};
    p.changed.wait(lock, [&] { return p.done; });
    const bool clean_stop = (p.stopped || by_caller) && p.status.code == errc::cancelled;
    out.status = clean_stop ? error{} : p.status;
    out.handler_failed = p.handler_failed;
    out.handled = p.handled;
  }
  out.counters = s.topo.counters();
  out.stats.skipped_errors = s.ctx.state->skipped.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{s.ctx.state->mtx};
  out.stats.first_skipped_error = s.ctx.state->first_skipped;
  s.spent = true;
  return out;
}

expected<feed_session> start_feed(runtime& rt, const dataset& ds, feed_handler handler, feed_options options) {
  auto state = std::make_unique<feed_session::impl>();
  state->ctx = top_level_context(rt, options.from ? options.from->base_seed : random_seed());
  state->fingerprint = ds.to_dot();
  std::vector<element> first;
  auto stages = options.from ? resumed_stages(ds, *options.from, state->ctx) : ds.root()->build(state->ctx);
  if (!stages) return stages.error_value();
  if (options.from) {
    state->consumed_before = options.from->consumed;
    if (options.from->stages) first = std::move(options.from->pending);
  }
  state->snapshot_support = stages->snapshot_support();

  auto signals = std::make_shared<consumer_signals>();
  done_handler on_done = [progress = state->progress](const error& status) {
    std::lock_guard<std::mutex> guard{progress->mtx};
    progress->status = status;
    progress->done = true;
    progress->changed.notify_all();
  };
  mark_handler on_mark = [progress = state->progress](chain_snapshot&& mark, std::vector<element>&& before_mark) {
    std::lock_guard<std::mutex> guard{progress->mtx};
    progress->mark = std::move(mark);
    progress->before_mark = std::move(before_mark);
    progress->marked = true;
    progress->changed.notify_all();
  };
  state->topo = launch_pausable(rt, *stages, {.slots = std::max<std::size_t>(options.slots, 1), .name = options.name},
                                {.on_element = consume_with(std::move(handler), options.name, state->progress, signals,
                                                            options.device ? options.device : rt.cpu_device()),
                                 .on_done = std::move(on_done),
                                 .on_mark = std::move(on_mark),
                                 .first = std::move(first)});

  std::vector<tunable_stage> knobs;
  {
    std::lock_guard<std::mutex> guard{state->ctx.tunables->mtx};
    knobs = state->ctx.tunables->stages;
  }
  if (!knobs.empty()) {
    topology* topo = &state->topo;  // the impl stays where it is when the session moves
    tuning_target target{[topo] { return topo->counters(); },
                         [topo](std::size_t stage, std::size_t slots) { topo->set_slots(stage, slots); },
                         [topo](std::size_t stage, std::size_t workers) { topo->set_parallelism(stage, workers); }};
    state->tuner = std::make_unique<autotuner>(std::move(target), std::move(knobs), options.tuning, signals);
  }
  return feed_session{std::move(state)};
}

expected<feed_result> feed(runtime& rt, const dataset& ds, feed_handler handler, feed_options options) {
  AF_TRY_ASSIGN(auto session, start_feed(rt, ds, std::move(handler), std::move(options)));
  while (session.wait()) session.resume();
  return session.finish();
}

}  // namespace af::data
