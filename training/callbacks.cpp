#include "training/callbacks.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "serialization/checkpoint.hpp"
#include "serialization/saved_model.hpp"
#include "serialization/tfevents.hpp"

namespace af::train {

namespace {

namespace fs = std::filesystem;

/// Tracks the best value of a monitored figure.
class monitor {
 public:
  monitor(std::string key, monitor_mode mode, double min_delta = 0) : key_(std::move(key)), min_delta_(min_delta) {
    const bool larger = key_.find("acc") != std::string::npos || key_.find("auc") != std::string::npos;
    maximize_ = mode == monitor_mode::max || (mode == monitor_mode::auto_detect && larger);
    best_ = maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  const std::string& key() const noexcept { return key_; }
  /// The figure in `l`, or nullopt when the epoch did not log it.
  std::optional<double> value(const logs& l) const { return find_log(l, key_); }
  /// Whether `v` beats the best so far by more than min_delta; if so it becomes the best.
  bool improved(double v) {
    const bool better = maximize_ ? v - min_delta_ > best_ : v + min_delta_ < best_;
    if (better) best_ = v;
    return better;
  }

 private:
  std::string key_;
  double min_delta_;
  bool maximize_ = false;
  double best_;
};

expected<void> io_failure(const std::string& what, const std::string& path) {
  return make_error(errc::io_error, what + " '" + path + "'");
}

class checkpoint_callback final : public callback {
 public:
  checkpoint_callback(std::string dir, checkpoint_options o)
      : dir_(std::move(dir)), options_(o), monitor_(o.monitor, o.mode) {}
  expected<void> on_epoch_end(fit_context& ctx, const logs& l) override {
    if (options_.save_best_only) {
      auto v = monitor_.value(l);
      if (v && !monitor_.improved(*v)) return {};
    }
    if (options_.saved_model) return export_version(ctx);
    AF_TRY(ckpt::save_numbered(dir_, ctx.epoch, ctx.snapshot(), options_.keep_last));
    return {};
  }

 private:
  // `dir_`/<epochs done> as a SavedModel; then only the newest keep_last versions stay.
  expected<void> export_version(const fit_context& ctx) {
    const std::string version = (fs::path(dir_) / std::to_string(ctx.epoch)).string();
    AF_TRY(saved_model::save(*ctx.model, version, {.overwrite = true}));
    if (options_.keep_last <= 0) return {};
    std::error_code ec;
    std::vector<int64_t> versions;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.empty() && name.size() < 18 && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
        versions.push_back(std::stoll(name));
    }
    std::sort(versions.begin(), versions.end(), std::greater<>());
    for (std::size_t i = static_cast<std::size_t>(options_.keep_last); i < versions.size(); ++i)
      fs::remove_all(fs::path(dir_) / std::to_string(versions[i]), ec);
    return {};
  }

  std::string dir_;
  checkpoint_options options_;
  monitor monitor_;
};

class backup_callback final : public callback {
 public:
  backup_callback(std::string dir, int64_t every) : dir_(std::move(dir)), every_(every) {}
  expected<void> on_train_begin(fit_context& ctx) override {
    AF_TRY_ASSIGN(auto newest, ckpt::latest(dir_));
    if (!newest) return {};
    AF_TRY_ASSIGN(auto saved, ckpt::load(*newest));
    if (auto ok = ctx.restore(saved); !ok)
      return with_context(ok.error_value(), "backup_and_restore: restoring '" + *newest + "'");
    return {};
  }
  bool needs_position(const fit_context& ctx) const override { return due(ctx); }
  expected<void> on_batch_end(fit_context& ctx, const logs&) override {
    if (due(ctx)) return save(ctx);
    return {};
  }
  expected<void> on_epoch_end(fit_context& ctx, const logs&) override { return save(ctx); }
  expected<void> on_train_end(fit_context&) override {
    std::error_code ec;
    fs::remove_all(dir_, ec);  // training finished: a later fit starts afresh, as Keras does
    return {};
  }

 private:
  expected<void> save(const fit_context& ctx) {
    // Numbered by updates so the newest is always the latest; the previous one stays until the
    // new one is complete.
    AF_TRY(ckpt::save_numbered(dir_, ctx.model->updates_done(), ctx.snapshot(), 2));
    return {};
  }
  bool due(const fit_context& ctx) const { return every_ > 0 && ctx.batch_in_epoch % every_ == 0; }
  std::string dir_;
  int64_t every_;
};

class early_stopping_callback final : public callback {
 public:
  explicit early_stopping_callback(early_stopping_options o) : options_(o), monitor_(o.monitor, o.mode, o.min_delta) {}
  expected<void> on_epoch_end(fit_context& ctx, const logs& l) override {
    auto v = monitor_.value(l);
    if (!v) return {};  // Keras warns and carries on when the figure is absent
    if (monitor_.improved(*v)) {
      waited_ = 0;
      if (options_.restore_best_weights) best_ = ctx.model->weight_values();
      return {};
    }
    if (++waited_ >= std::max(options_.patience, 1)) {
      ctx.stop_training = true;
      if (options_.restore_best_weights && !best_.empty()) AF_TRY(ctx.model->set_weight_values(best_));
    }
    return {};
  }

 private:
  early_stopping_options options_;
  monitor monitor_;
  int waited_ = 0;
  std::vector<tensor> best_;
};

class scheduler_callback final : public callback {
 public:
  explicit scheduler_callback(std::function<double(int, double)> s) : schedule_(std::move(s)) {}
  expected<void> on_epoch_begin(fit_context& ctx) override {
    const double rate = schedule_(ctx.epoch, ctx.model->learning_rate());
    if (!std::isfinite(rate) || rate < 0)
      return make_error(errc::invalid_argument, "learning_rate_scheduler: epoch " + std::to_string(ctx.epoch + 1) + " got rate " + std::to_string(rate));
    ctx.model->set_learning_rate(rate);
    return {};
  }

 private:
  std::function<double(int, double)> schedule_;
};

class csv_callback final : public callback {
 public:
  csv_callback(std::string path, bool append) : path_(std::move(path)), append_(append) {}
  expected<void> on_train_begin(fit_context&) override {
    wrote_header_ = append_ && fs::exists(path_) && fs::file_size(path_) > 0;
    file_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!file_) return io_failure("csv_logger: cannot open", path_);
    return {};
  }
  expected<void> on_epoch_end(fit_context& ctx, const logs& l) override {
    if (!wrote_header_) {
      file_ << "epoch";
      for (const auto& [k, v] : l) file_ << ',' << k;
      file_ << '\n';
      wrote_header_ = true;
    }
    file_ << ctx.epoch - 1;
    char buf[40];
    for (const auto& [k, v] : l) {
      std::snprintf(buf, sizeof buf, ",%.9g", v);
      file_ << buf;
    }
    file_ << '\n';
    file_.flush();
    if (!file_) return io_failure("csv_logger: cannot write", path_);
    return {};
  }
  expected<void> on_train_end(fit_context&) override {
    file_.close();
    return {};
  }

 private:
  std::string path_;
  bool append_;
  bool wrote_header_ = false;
  std::ofstream file_;
};

class tensorboard_callback final : public callback {
 public:
  tensorboard_callback(std::string dir, int64_t every) : dir_(std::move(dir)), every_(every) {}
  expected<void> on_train_begin(fit_context&) override {
    AF_TRY_ASSIGN(auto t, tfevents::event_writer::open((fs::path{dir_} / "train").string()));
    AF_TRY_ASSIGN(auto v, tfevents::event_writer::open((fs::path{dir_} / "validation").string()));
    train_.emplace(std::move(t));
    validation_.emplace(std::move(v));
    return {};
  }
  expected<void> on_batch_end(fit_context& ctx, const logs& l) override {
    if (every_ <= 0 || ctx.model->updates_done() % every_ != 0) return {};
    if (auto loss = find_log(l, "loss")) AF_TRY(train_->scalar("batch_loss", *loss, ctx.model->updates_done()));
    return {};
  }
  expected<void> on_epoch_end(fit_context& ctx, const logs& l) override {
    const int64_t epoch = ctx.epoch - 1;
    for (const auto& [k, v] : l) {
      if (k.starts_with("val_")) AF_TRY(validation_->scalar("epoch_" + k.substr(4), v, epoch));
      else AF_TRY(train_->scalar("epoch_" + k, v, epoch));
    }
    AF_TRY(train_->flush());
    AF_TRY(validation_->flush());
    return {};
  }
  expected<void> on_train_end(fit_context&) override {
    AF_TRY(train_->close());
    AF_TRY(validation_->close());
    return {};
  }

 private:
  std::string dir_;
  int64_t every_;
  std::optional<tfevents::event_writer> train_, validation_;
};

}  // namespace

std::shared_ptr<callback> model_checkpoint(std::string directory, checkpoint_options options) {
  return std::make_shared<checkpoint_callback>(std::move(directory), std::move(options));
}
std::shared_ptr<callback> backup_and_restore(std::string directory, int64_t save_every_batches) {
  return std::make_shared<backup_callback>(std::move(directory), save_every_batches);
}
std::shared_ptr<callback> early_stopping(early_stopping_options options) {
  return std::make_shared<early_stopping_callback>(std::move(options));
}
std::shared_ptr<callback> learning_rate_scheduler(std::function<double(int, double)> schedule) {
  return std::make_shared<scheduler_callback>(std::move(schedule));
}
std::shared_ptr<callback> csv_logger(std::string path, bool append) { return std::make_shared<csv_callback>(std::move(path), append); }
std::shared_ptr<callback> tensorboard(std::string log_dir, int64_t batch_every) {
  return std::make_shared<tensorboard_callback>(std::move(log_dir), batch_every);
}

}  // namespace af::train
