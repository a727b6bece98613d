#pragma once

// Strategies: how a training step is spread over replicas (tf.distribute.Strategy). fit takes one
// ({.strategy = s}); without one it trains a single replica, the model itself, with its step as one
// fused graph. mirrored_strategy keeps one replica per device, splits each global batch between
// them, sums their gradients through a collective ring and applies the same update everywhere, so
// it ends where one replica given the same global batches would (up to float rounding).
//
//   auto s = af::distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value();
//   auto history = af::train::fit(rt, model, train, {.epochs = 10, .strategy = s});
//
// The dataset's batches are global batches: with 2 replicas and .batch(64), each replica steps on
// 32 rows (a batch of odd size gives the first replicas one row more), and the learning rate means
// what it means for one replica on 64 rows.
//
// Across processes on one host or several: every process runs the same program with its own
// `process`, and fit in each sees the same global batches (same files, same seeds); each process
// steps its own replicas' slices, and the loss and metrics every process reports are the global
// batch's.
//
//   auto s = af::distribute::mirrored_strategy({"cpu:0"}, {.across = {.process = p, .processes = 2,
//       .rendezvous = "127.0.0.1:29400", .token = secret}}).value();   // 2 replicas in sync

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/collectives.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af {
class runtime;
}
namespace af::nn {
class model;
struct batch_result;
}  // namespace af::nn

namespace af::distribute {

/// A strategy's replicas while they train one model (strategy::start).
class replica_set {
 public:
  virtual ~replica_set() = default;
  virtual int replicas() const = 0;
  /// One update on a global batch: the batch's loss and predictions, as model::train_on_batch.
  virtual expected<nn::batch_result> train_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                                    uint64_t seed) = 0;
  /// Something other than train_on_batch changed the model (a restored checkpoint): every replica
  /// takes its weights, optimizer slots and update count.
  virtual expected<void> reload_from_model() = 0;
  /// Before the model is read (validation, a checkpoint, the end of fit): the replicas' own state
  /// (moving statistics) aggregated into it.
  virtual expected<void> sync_into_model() = 0;
};

class strategy {
 public:
  virtual ~strategy() = default;
  /// Replicas that step in sync (tf.distribute's num_replicas_in_sync).
  virtual int replicas_in_sync() const = 0;
  /// "default", "mirrored(cpu:0, cpu:1)".
  virtual std::string describe() const = 0;
  /// The replicas that train `model` (compiled): replica 0 is `model` itself, so it holds the
  /// trained weights whenever the replicas are in sync.
  virtual expected<std::unique_ptr<replica_set>> start(runtime& rt, nn::model& model) const = 0;
};

/// One replica, the model itself (what fit uses without a strategy).
std::shared_ptr<const strategy> default_strategy();

struct mirrored_options {
  /// Kernel threads per replica; 0 splits the thread budget evenly (at least 1 each).
  int threads_per_replica = 0;
  /// Gradient bytes per all-reduce (DDP's 25 MB buckets).
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// Start each bucket's all-reduce while the backward pass computes the earlier layers' gradients.
  bool overlap = true;
  /// How long a replica waits for the others before the step fails naming them.
  std::chrono::milliseconds timeout{60000};
  /// Batches whose gradients make one update: every replica adds them up without a collective and
  /// every accumulation_steps-th batch reduces and applies their mean (DDP's no_sync, Keras'
  /// gradient_accumulation_steps); a failed batch cancels its window's update.
  int accumulation_steps = 1;
  /// Sum the gradients in bfloat16 through the ring (half the bytes; 8 significant bits).
  bool reduce_in_bf16 = false;
  /// The processes training together, each with these devices' replicas (processes = 1: this one
  /// alone). The ring joins them when fit starts.
  collectives::process_options across;
};

/// One replica per device, named "cpu:<n>". Errors: no device, a device named twice, or one that
/// is not a CPU (replicas on GPUs come with the GPU backend).
expected<std::shared_ptr<const strategy>> mirrored_strategy(std::vector<std::string> devices, mirrored_options options = {});

/// Rows of a global batch of `rows` for each of `replicas` (the first rows % replicas get one more).
std::vector<int64_t> split_rows(int64_t rows, int replicas);

}  // namespace af::distribute
