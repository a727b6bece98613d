#include "apps/serving/config_watcher.hpp"

#include "apps/serving/serving_config.hpp"

namespace af::serving {

model_config_watcher::model_config_watcher(model_server& models, std::string path, std::vector<model_config> served,
                                           std::chrono::milliseconds interval, std::function<void(const std::string&)> report)
    : models_(models), path_(std::move(path)), served_(std::move(served)), report_(std::move(report)) {
  if (interval.count() <= 0) return;
  thread_ = std::thread([this, interval] {
    std::unique_lock lock{stop_mtx_};
    while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      check_now();
      lock.lock();
    }
  });
}

model_config_watcher::~model_config_watcher() {
  {
    std::lock_guard guard{stop_mtx_};
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool model_config_watcher::check_now() {
  std::lock_guard guard{check_mtx_};
  auto refused = [&](const std::string& why) {
    if (why != last_refusal_) report_("serving: " + path_ + " not reloaded, the models served stay as they were: " + why);
    last_refusal_ = why;
    return false;
  };
  auto read = read_model_config(path_);
  if (!read) return refused(read.error_value().message);
  if (*read == served_) {
    last_refusal_.clear();
    return false;
  }
  if (auto applied = models_.reconfigure(*read); !applied) return refused(applied.error_value().message);
  std::string names;
  for (const auto& m : *read) names += (names.empty() ? "" : ", ") + m.name;
  report_("serving: " + path_ + " reloaded: serving " + names);
  served_ = std::move(*read);
  last_refusal_.clear();
  return true;
}

}  // namespace af::serving
