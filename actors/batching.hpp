#pragma once

// Dynamic batching as an actor topology (TensorFlow Serving's batching, as actors): callers'
// requests go to a batcher actor, which joins the rows of several requests into one batch (up to
// max_batch_size rows, or whatever has arrived when the oldest request has waited batch_timeout),
// pads it to the next allowed batch size, and hands it to an idle replica actor (one per
// num_batch_threads, each on its own thread) that runs the model; the batcher splits the outputs
// back into each request's rows. The queue is bounded: a request that does not fit is refused at
// once (resource_exhausted); a request whose deadline cannot be met is refused without running
// (timeout). Nothing waits without bound.
//
//   auto q = af::serving::batching_queue::start(rt, [&](const std::vector<af::tensor>& x) {
//     return loaded.call("serving_default", x);                      // rows in, rows out
//   }, {.max_batch_size = 32, .batch_timeout = 1ms}, signature.inputs).value();
//   auto y = q.predict({one_row});                                   // from any thread

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/graph/module.hpp"
#include "ops/tensor.hpp"

namespace af {
class runtime;
}

namespace af::serving {

/// TensorFlow Serving's batching parameters (its batching_parameters_file keys).
struct batching_options {
  std::size_t max_batch_size = 32;
  std::chrono::microseconds batch_timeout{1000};
  /// Requests wait for at most this many full batches' worth of rows; more is resource_exhausted.
  std::size_t max_enqueued_batches = 16;
  /// Replica actors running batches at once.
  std::size_t num_batch_threads = 1;
  /// Ascending; a batch is padded with zero rows to the first that holds it (the last must equal
  /// max_batch_size). Empty: batches run at their own size.
  std::vector<std::size_t> allowed_batch_sizes;
  /// false: every request runs as its own batch, at once, of any number of rows (batching off; the
  /// queue, its bound and the replicas stay; a request larger than the queue goes in when it is
  /// empty).
  bool join_requests = true;
  /// Requests whose inputs differ in a dimension the signature leaves open (-1 after the rows)
  /// join one batch, each padded with zeros at the end to the batch's largest. Without it, a
  /// batch holds only requests of the same dims.
  bool pad_variable_length_inputs = false;
  /// The niceness of the replicas' threads (Linux, 0..19; 0 leaves theirs as it is): when the
  /// CPU is short, the I/O threads win it from the model's batches. That reads and refuses the
  /// excess of an overload sooner, but it stretches every batch the replica runs beside them, and
  /// so the latency of the requests served. `actorflow serve` leaves it at 0: on 2 cores, 5 made
  /// the MLP's p99 at half load 1.5x longer and cut the requests served under a 2x overload by a
  /// third, while the refusals there still waited on the CPU either way (bench_serving
  /// --replica-nice).
  int replica_nice = 0;
};

/// The model on a batch: every input with the batch's rows first; every output with the same rows
/// first. Called from the replica actors' threads, several at once when num_batch_threads > 1.
using batch_function = std::function<expected<std::vector<tensor>>(const std::vector<tensor>&)>;

/// Counters of a queue (since it started).
struct batching_stats {
  uint64_t requests = 0;           ///< answered with outputs
  uint64_t batches = 0;            ///< run by the replicas
  uint64_t rows = 0;               ///< real rows in those batches (padding excluded)
  uint64_t padded_rows = 0;        ///< zero rows added to reach an allowed size
  uint64_t refused_full = 0;       ///< resource_exhausted
  uint64_t refused_deadline = 0;   ///< timeout before running
  uint64_t failed = 0;             ///< the batch function's errors, per request
  uint64_t sent_ahead = 0;         ///< full batches handed to a replica while it ran another
  uint64_t wakeups = 0;            ///< messages predict_async sent the batcher (it found the other requests waiting)
  /// [n]: batches of n real rows (size max_batch_size + 1; without batching, the last also counts
  /// requests of more rows, which are not capped then).
  std::vector<uint64_t> batch_sizes;
};

using clock_type = std::chrono::steady_clock;

class batching_queue {
 public:
  /// Spawns the batcher and its replicas. `inputs` are the signature's inputs: a request must
  /// bring each, with its dtype and its dims after the first (the rows). invalid_argument for
  /// options that do not fit together.
  static expected<batching_queue> start(runtime& rt, batch_function run, batching_options options,
                                        std::vector<graph::tensor_spec> inputs);
  batching_queue(batching_queue&&) noexcept;
  batching_queue& operator=(batching_queue&&) noexcept;
  /// Stops the topology: requests still waiting are answered cancelled.
  ~batching_queue();

  /// The outputs for `inputs` (one or more rows each), or: invalid_argument (inputs that do not fit
  /// the signature or more rows than max_batch_size), resource_exhausted (the queue is full),
  /// timeout (the deadline passed, or would pass before the batch ran), cancelled (shut down), or
  /// the batch function's error. Blocks the calling thread; callable from many threads at once.
  expected<std::vector<tensor>> predict(std::vector<tensor> inputs,
                                        std::optional<clock_type::time_point> deadline = std::nullopt) const;
  /// The same without blocking, and without a message or an actor per request: the request waits
  /// in the batcher's intake, and the batcher is woken only when it would not look soon by itself.
  /// `done` is called once: on the batcher's thread with the answer (keep it short: hand heavy
  /// work elsewhere), or at once on the calling thread when the request is refused before it is
  /// queued (bad inputs, queue full, deadline passed, queue shut down).
  void predict_async(std::vector<tensor> inputs, std::optional<clock_type::time_point> deadline,
                     std::function<void(expected<std::vector<tensor>>)> done) const;

  batching_stats stats() const;
  /// Rows waiting in the queue now, and the most that may wait (max_enqueued_batches full batches).
  std::size_t queued_rows() const;
  std::size_t capacity_rows() const;
  /// True, counting a refusal (batching_stats::refused_full), when no row fits in the queue now:
  /// for a front end that refuses a request before it decodes it.
  bool refuse_if_full() const;

  struct impl;

 private:
  explicit batching_queue(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
