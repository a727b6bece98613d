#pragma once

#include <memory>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

namespace af {

class backend;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool default_eager_stealing = false;
#else
inline constexpr bool default_eager_stealing = true;
#endif

/// How the runtime starts CAF.
///
/// Threads. Compute shares one budget, the machine's cores: CAF's scheduler runs every stage
/// actor and the replica (fit's steps) on `scheduler_threads` workers, and a CPU kernel called
/// from an actor splits its loop over thread_budget() threads with the calling worker as one of
/// them, so a step's kernels take the cores while it runs and the pipeline's actors share them
/// between steps. Nested datasets (repeat passes, interleave children and inputs, zip inputs)
/// are stage actors on the same scheduler. Besides these, only stages that block in system calls
/// (TFRecord and cache files, user generators) run on threads of their own: they sleep on I/O
/// rather than compute.
/// The autotuner, when a pipeline asks for it, is one more thread that wakes every period.
struct runtime_options {
  /// Scheduler worker threads; 0 picks the machine's cores (CAF's default of max(4, cores) adds
  /// latency on 2-core machines).
  int scheduler_threads = 0;
  /// Threads CPU kernels may use (af::set_thread_budget); 0 leaves the current budget.
  int kernel_threads = 0;
  /// Load CAF's middleman so that this process can publish actors and reach remote nodes.
  bool network = false;
  /// Heartbeats between nodes (milliseconds, 0 = off); a peer silent for `connection_timeout_ms`
  /// is declared dead even if its socket stays open.
  int heartbeat_interval_ms = 0;
  int connection_timeout_ms = 0;
  /// Idle workers look for work every 10 us and try to steal at every look (CAF's defaults: every
  /// 50 us, stealing at every 5th), `idle_polls` times before they fall back to 10 ms naps. On 2 cores an
  /// input pipeline keeps both busy only this way: with CAF's defaults the second worker finds
  /// the first one's queued actors ~0.25 ms late, and the pipeline ran at 0.75 of a hand-written
  /// loop instead of ~0.9. Off under sanitizers, where instrumented polling takes the CPU that
  /// timed tests measure. `caf_args` override either choice.
  bool eager_stealing = default_eager_stealing;
  /// How many times an idle worker looks (every 10 us, with eager stealing) before it naps. 500
  /// (~5 ms) keeps a busy input pipeline's workers from ever napping (bench_pipeline: 0.80 of a
  /// hand-written loop; 0.71 with 50). A trainer fed by a pipeline on few cores wants 50: the
  /// pipeline hands over one batch per step, and ~5 ms of polling after each takes a core from the
  /// step's kernels (a fit epoch took 1.4-2.1x the same steps in a plain loop on 2 cores; ~1.1x
  /// with 50). A server wants 1 (`actorflow serve`): its requests arrive from threads outside the
  /// scheduler, and CAF wakes a napping worker for those at once, while ~100k polls a second take
  /// the cores its I/O threads need (bench_serving on 2 cores: 10-15% more single-row requests a
  /// second, 20% more 32-row ones).
  int idle_polls = 500;
  /// CAF's deterministic test_coordinator instead of worker threads: scheduled actors run only
  /// when the caller drives the scheduler (tests/support/deterministic.hpp), one message at a
  /// time, so a test can tell "nothing more will happen" from "nothing happened yet" without
  /// sleeping. Detached and blocking actors still run on threads of their own.
  bool deterministic = false;
  /// Further CAF options in command-line form ("--scheduler.policy=sharing").
  std::vector<std::string> caf_args;
};

/// The actorflow actor system: CAF with our message types, error category and scheduler settings.
/// Owns the caf::actor_system; destroying the runtime waits for all its actors to finish.
class runtime {
 public:
  explicit runtime(runtime_options options = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  caf::actor_system& system() noexcept;
  const runtime_options& options() const noexcept;
  /// The CPU ("cpu:0") that actors without a device of their own run graphs on: fit's replica,
  /// the feed handlers of evaluate and predict, and the device actor that runs the graphs that
  /// threads outside any actor ask for (af::execute).
  const std::shared_ptr<backend>& cpu_device() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Adds actorflow's message types and error category to a CAF configuration. af::runtime calls it;
/// tests that build their own config (the deterministic test_coordinator) call it too. Both ends of
/// a network link must be configured alike, or messages arrive empty.
void configure_actor_system(caf::actor_system_config& cfg);

}  // namespace af
