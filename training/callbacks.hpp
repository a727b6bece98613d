#pragma once

// The callbacks of fit, as tf.keras.callbacks has them. Pass them in fit_options::callbacks.

#include <functional>
#include <memory>
#include <string>

#include "training/trainer.hpp"

namespace af::train {

/// Whether a smaller or a larger value of the monitored figure is better; auto: larger for
/// names containing "acc" or "auc", smaller otherwise.
enum class monitor_mode { auto_detect, min, max };

struct checkpoint_options {
  std::string monitor = "val_loss";
  monitor_mode mode = monitor_mode::auto_detect;
  /// Only when the monitored figure improved (a missing figure saves every epoch).
  bool save_best_only = false;
  /// Numbered checkpoints kept (0: all).
  int keep_last = 3;
  /// Write a SavedModel (serialization/saved_model.hpp) as `directory`/<epochs done>, the version
  /// directories a model server picks up, instead of a training snapshot.
  bool saved_model = false;
};
/// After each epoch: `directory`/ckpt-<epochs done>, a complete snapshot (the model's weights and
/// optimizer state, the epoch and the iterator position) written atomically; or, with
/// saved_model, the model for serving as `directory`/<epochs done>.
std::shared_ptr<callback> model_checkpoint(std::string directory, checkpoint_options options = {});

/// Fault tolerance (tf.keras.callbacks.BackupAndRestore): saves a snapshot to `directory` after
/// each epoch and, when save_every_batches > 0, every that many batches; when fit starts and a
/// backup is there, training continues from it exactly (weights, optimizer, epoch, batch and data
/// iterator position). The backup is deleted when fit completes.
std::shared_ptr<callback> backup_and_restore(std::string directory, int64_t save_every_batches = 0);

struct early_stopping_options {
  std::string monitor = "val_loss";
  monitor_mode mode = monitor_mode::auto_detect;
  double min_delta = 0;  ///< smaller changes do not count as improvement
  int patience = 0;      ///< epochs without improvement before stopping
  /// At the stop, the weights of the best epoch come back.
  bool restore_best_weights = false;
};
std::shared_ptr<callback> early_stopping(early_stopping_options options = {});

/// Sets the learning rate at the start of each epoch to schedule(epoch, current rate).
std::shared_ptr<callback> learning_rate_scheduler(std::function<double(int epoch, double learning_rate)> schedule);

/// One CSV row per epoch ("epoch,loss,accuracy,val_loss,..."), flushed each epoch. `append` keeps
/// the existing rows (and header) of a previous run.
std::shared_ptr<callback> csv_logger(std::string path, bool append = false);

/// TensorBoard scalars (tfevents records written with the TFRecord writer): every epoch figure
/// as "epoch_<name>" under `log_dir`/train (val_ figures under `log_dir`/validation, without the
/// prefix), plus "batch_loss" every `batch_every` batches when > 0.
std::shared_ptr<callback> tensorboard(std::string log_dir, int64_t batch_every = 0);

}  // namespace af::train
