#pragma once

// Replicas as actors: the synchronous data parallelism of tf.distribute's MirroredStrategy and
// PyTorch's DDP. Each replica holds the model's weights and optimizer slots, computes the gradients
// of its slice of the global batch, sums them with the other replicas' through a collective ring
// (actors/collectives.hpp), and applies the same update, so the replicas stay identical and end
// where one replica given the global batch would (up to float rounding).
//
//   auto group = af::replicas::replica_group::start(rt, model, {.replicas = 2}).value();
//   auto r = group.train_step({{x0, y0}, {x1, y1}}, seed);   // the global batch's loss and predictions
//
// Replica 0 steps `model` itself on the thread that calls train_step (fit's replica actor, which
// the pipeline feeds); replicas 1.. are actors on threads of their own, each with a clone of the
// model. Gradients travel in buckets (a flat tensor of several weights' gradients, in reverse
// weight order, as DDP's and Horovod's fusion buffers), one all-reduce each, started as soon as the
// backward pass has produced the bucket's gradients, while it goes on with the earlier layers. A replica whose slice
// fails (a bad batch, a non-finite loss) still takes part with zeros and a flag, so no replica
// waits for it: every replica then skips the update, and the step fails naming the replica and
// its error. Moving statistics (non-trainable weights) stay per replica, as tf.distribute's
// on-read variables, and are averaged into the model when it is read (aggregate_into_model).
//
// Across processes (group_options::across) each process runs this group with its own replicas,
// ranks of one ring spanning them all: train_step then takes the global batch's slices for every
// replica of every process, steps this process's, and answers the global batch's loss and
// predictions (gathered from the other processes), so fit's loss and metrics are the same in every
// process and equal to one process's. CAF stays behind this header.

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

namespace af::replicas {

struct group_options {
  /// Replicas stepping in sync in this process, at least 1 (the same in every process).
  int replicas = 2;
  /// Kernel threads each replica's step may use; 0: the thread budget split evenly (at least 1).
  int threads_per_replica = 0;
  /// The most gradient bytes one all-reduce carries (25 MB, DDP's default bucket).
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// Start a bucket's all-reduce as soon as the backward pass has produced its gradients, while the
  /// rest of the pass computes (DDP's overlap); false: after the whole pass.
  bool overlap = true;
  /// Batches whose gradients make one update (DDP's no_sync, Keras' gradient_accumulation_steps):
  /// each replica adds its gradients up locally, without a collective, and every
  /// accumulation_steps-th batch reduces the sum and applies their mean, which equals one update
  /// on the window's batches together when they have equal rows. Moving statistics follow every
  /// batch; a batch that fails anywhere in the window cancels the window's update.
  int accumulation_steps = 1;
  /// Sum the gradient buckets in bfloat16 (half the bytes through the ring, 8 significant bits per
  /// addition), converting back before the update.
  bool reduce_in_bf16 = false;
  /// How long a replica waits for the others in a collective before the step fails naming them.
  std::chrono::milliseconds timeout{60000};
  /// Names the group in errors.
  std::string name = "mirrored";
  /// The processes whose replicas step together (processes = 1: this one's alone). Every process
  /// starts its group with the same options but its own `process`; replicas of process p are the
  /// ranks [p * replicas, (p + 1) * replicas) of the ring.
  collectives::process_options across;
};

/// One replica's part of the global batch: the model's inputs and the losses' targets.
struct batch_slice {
  std::vector<tensor> inputs;
  std::vector<tensor> targets;
};

class replica_group {
 public:
  /// Clones `model` (compiled) into replicas 1.. and starts their actors and the ring. `model` must
  /// outlive the group, and only train_step may change it while the group lives.
  static expected<replica_group> start(runtime& rt, nn::model& model, group_options options = {});
  replica_group(replica_group&&) noexcept;
  replica_group& operator=(replica_group&&) noexcept;
  /// Stops the replicas' actors and the ring.
  ~replica_group();

  /// One synchronous update over a global batch given as one slice per replica of every process
  /// (replicas x processes slices, in rank order; rows may differ,
  /// the gradients are weighted by them; a slice without rows adds nothing). The result is the global batch's: the
  /// loss weighted by rows, predictions joined in slice order. `seed` draws replica 0's dropout
  /// masks; the others draw from seeds mixed with their rank.
  expected<nn::batch_result> train_step(std::vector<batch_slice> slices, uint64_t seed);

  /// Copies the model's weights, optimizer slots and update count into the other replicas: after
  /// something other than train_step changed the model (a restored checkpoint, a callback).
  expected<void> reload_from_model();
  /// The model's non-trainable weights become their mean over the replicas (each keeps its own
  /// moving statistics while training).
  expected<void> aggregate_into_model();

  /// Replicas in this process.
  int size() const noexcept;
  /// Replicas in every process together (tf.distribute's num_replicas_in_sync).
  int replicas_in_sync() const noexcept;

 private:
  expected<void> aggregate_across_processes();
  struct impl;
  explicit replica_group(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::replicas
