#pragma once

// fit, evaluate and predict: a compiled af::nn::model fed batch by batch by a dataset pipeline
// (tf.keras' Model.fit on a tf.data.Dataset). The training step is traced once per batch shape and
// reused. The steps run on the replica, an actor at the end of the pipeline's topology that the
// pipeline feeds through the credit protocol (data::feed), so the stage actors prepare the next
// batches while a step runs and at most two wait for it; the calling thread only waits, and
// runs the validation between epochs. Per-batch callbacks (on_batch_end) run on the replica
// between its steps (after a batch whose position a callback needs, on the calling thread while
// the replica waits), epoch and train callbacks on the calling thread.
//
//   af::runtime rt;
//   auto train = af::data::dataset::from_tfrecord({"data/digits/train.tfrecord"})
//                    .map(af::data::parse_example_fn(spec)).shuffle(2048).batch(64).prefetch();
//   auto history = af::train::fit(rt, model, train, {.epochs = 10, .validation_data = test});
//
// The elements' fields named like the model's inputs feed them; `targets` name the fields the
// losses compare the outputs with. A batch the model cannot take (wrong shape or dtype, a class id
// out of range) or a non-finite loss stops fit with an error naming the epoch, the batch and the
// problem; the weights are those after the last good batch.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/train/model.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/iterator.hpp"
#include "serialization/checkpoint.hpp"

namespace af {
class runtime;
}
namespace af::distribute {
class strategy;
}

namespace af::train {

/// Named figures in a fixed order: "loss", "accuracy", ..., then "val_loss", "val_accuracy", ...
using logs = std::vector<std::pair<std::string, double>>;
/// The value of `key` in `l`, or nullopt.
std::optional<double> find_log(const logs& l, const std::string& key);

class callback;

/// Where fit stands, for callbacks.
struct fit_context {
  nn::model* model = nullptr;
  int epoch = 0;               ///< the current epoch (0-based)
  int epochs = 0;              ///< how many fit runs in all
  int64_t batch_in_epoch = 0;  ///< batches finished in this epoch
  uint64_t seed = 0;           ///< fit's seed (shuffle order per epoch, dropout masks)
  bool stop_training = false;  ///< set by a callback: fit ends after this epoch
  /// The training iterator's position now (after batch_in_epoch batches).
  data::iterator_state position;

  /// Everything needed to continue exactly from here: the model's state, the epoch, the batch in
  /// the epoch and the iterator's position.
  ckpt::checkpoint snapshot() const;
  /// Makes fit continue from `saved` (a snapshot): loads the model's state and positions the
  /// epoch and the iterator. Only from on_train_begin.
  expected<void> restore(const ckpt::checkpoint& saved);

  // -- set by restore, read by fit ------------------------------------------------------------
  std::optional<data::iterator_state> resume_position;
};

class callback {
 public:
  virtual ~callback() = default;
  virtual expected<void> on_train_begin(fit_context&) { return {}; }
  virtual expected<void> on_epoch_begin(fit_context&) { return {}; }
  /// True when on_batch_end, after the batch ctx.batch_in_epoch counts, will save ctx.position.
  /// fit then pauses the feed and takes a snapshot of the pipeline's stages for it, so that a
  /// restore continues from their state instead of replaying the epoch so far; that batch's
  /// on_batch_end calls run on the calling thread while the replica waits.
  virtual bool needs_position(const fit_context&) const { return false; }
  virtual expected<void> on_batch_end(fit_context&, const logs&) { return {}; }
  /// `epoch_logs` hold the training figures and, with validation data, the val_ ones.
  virtual expected<void> on_epoch_end(fit_context&, const logs& epoch_logs) { (void)epoch_logs; return {}; }
  virtual expected<void> on_train_end(fit_context&) { return {}; }
};

enum class verbosity {
  silent,
  auto_detect,  ///< a progress bar when the output is a terminal, a line per epoch otherwise
  per_epoch,    ///< a line per epoch
};

struct fit_options {
  int epochs = 1;
  std::optional<data::dataset> validation_data;
  std::vector<std::shared_ptr<callback>> callbacks;
  /// The element fields holding the targets, one per model output.
  std::vector<std::string> targets{"label"};
  /// Batches per epoch; 0: until the dataset ends.
  int64_t steps_per_epoch = 0;
  verbosity verbose = verbosity::auto_detect;
  /// Seeds the dropout masks and the base seed of each epoch's unseeded shuffles, so that a fit
  /// is reproducible and a restored one continues exactly.
  uint64_t seed = 0;
  std::FILE* out = stdout;
  /// How the steps are spread over replicas (strategies/strategy.hpp); null: one replica, the
  /// model itself. Batches are global batches; callbacks see the model, which is replica 0 (its
  /// moving statistics become the replicas' mean before validation, at a paused batch's callbacks
  /// and at the end of each epoch and of fit).
  std::shared_ptr<const distribute::strategy> strategy;
};

struct history {
  std::vector<logs> epochs;  ///< one per epoch run (restored epochs are not repeated)
  /// The figure `key` per epoch (empty when never logged).
  std::vector<double> of(const std::string& key) const;
};

/// Trains on `train`, one pass per epoch. The epochs run through one topology (train.passes):
/// between epochs the feed pauses, and the pipeline prepares the next epoch while validation and
/// the callbacks run. With steps_per_epoch, each epoch is a feed of its own that stops after its
/// steps.
expected<history> fit(runtime& rt, nn::model& model, const data::dataset& train, fit_options options = {});

struct evaluate_options {
  std::vector<std::string> targets{"label"};
  verbosity verbose = verbosity::silent;
  std::FILE* out = stdout;
};
/// Loss and metrics over the whole dataset (the loss weighted by batch size).
expected<logs> evaluate(runtime& rt, nn::model& model, const data::dataset& data, evaluate_options options = {});

/// The model's outputs for every element, batches joined along the first axis.
expected<std::vector<tensor>> predict(runtime& rt, nn::model& model, const data::dataset& data);

}  // namespace af::train
